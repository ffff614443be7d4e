use super::*;

#[test]
fn codes_are_named_as_grpc_go_names_them() {
    assert_eq!(go_code_name(0), "OK");
    assert_eq!(go_code_name(1), "Canceled", "Go's spelling, one l");
    assert_eq!(go_code_name(14), "Unavailable");
    assert_eq!(go_code_name(16), "Unauthenticated");
    assert_eq!(go_code_name(17), "Unknown");
    assert_eq!(go_code_name(-1), "Unknown");
    // the same order as tonic's codes
    for (i, name) in GO_CODE_NAMES.iter().enumerate() {
        let tonic = format!("{:?}", tonic::Code::from_i32(i as i32));
        assert_eq!(
            match tonic.as_str() {
                "Ok" => "OK",
                "Cancelled" => "Canceled",
                t => t,
            },
            *name,
            "code {i}"
        );
    }
    let mut h = HeaderMap::new();
    assert_eq!(status_of(&h), None);
    h.insert("grpc-status", "7".parse().unwrap());
    assert_eq!(status_of(&h), Some("PermissionDenied"));
}

#[test]
fn methods_carry_the_peers_service_names_and_kinds() {
    let c = call_of("/eventstreamapi.EventStream/Subscribe").unwrap();
    assert_eq!(
        (c.grpc_service, c.grpc_method, c.grpc_type),
        ("eventstreamapi.EventStream", "Subscribe", "bidi_stream")
    );
    assert_eq!(
        call_of("/authapi.Authentication/Authenticate")
            .unwrap()
            .grpc_type,
        "unary"
    );
    assert!(call_of("/eventstreamapi.EventStream/Nope").is_none());
    assert!(call_of("garbage").is_none());
}

#[test]
fn messages_are_counted_across_chunk_boundaries() {
    let msg = |len: u32| {
        let mut v = vec![0u8];
        v.extend_from_slice(&len.to_be_bytes());
        v.extend(std::iter::repeat_n(7u8, len as usize));
        v
    };
    let mut stream = msg(3);
    stream.extend(msg(0));
    stream.extend(msg(300));
    for chunk in [1, 2, 5, 7, 1000] {
        let mut f = MessageFrames::default();
        let n: u64 = stream.chunks(chunk).map(|c| f.feed(c)).sum();
        assert_eq!(n, 3, "chunks of {chunk}");
    }
    // half a message is not one
    let mut f = MessageFrames::default();
    assert_eq!(f.feed(&msg(10)[..9]), 0);
}

#[test]
fn server_series_exist_from_start_for_every_method_and_code() {
    let mut reg = Registry::default();
    let m = GrpcMetrics::server(&mut reg);
    m.initialize("eventstreamapi.EventStream");
    let text = argocd_pull_ops::metrics::render(&reg);
    assert!(text.contains(
        "grpc_server_started_total{grpc_method=\"Subscribe\",grpc_service=\"eventstreamapi.EventStream\",grpc_type=\"bidi_stream\"} 0"
    ), "{text}");
    assert!(text.contains(
        "grpc_server_handled_total{grpc_code=\"Unauthenticated\",grpc_method=\"Ping\",grpc_service=\"eventstreamapi.EventStream\",grpc_type=\"unary\"} 0"
    ), "{text}");
    let mut reg = Registry::default();
    let _ = GrpcMetrics::client(&mut reg);
    let text = argocd_pull_ops::metrics::render(&reg);
    // no series before the first call: the family is absent, as a Go vector without series
    assert!(!text.contains("grpc_client"), "{text}");
}
