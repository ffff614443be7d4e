fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/authapi/auth.proto",
        "proto/versionapi/version.proto",
        "proto/cloudevents/cloudevent.proto",
        "proto/eventstreamapi/eventstream.proto",
        "proto/logstreamapi/logstream.proto",
        "proto/terminalstreamapi/terminalstream.proto",
        // the peer's cross-cluster HA APIs, verbatim (principal/apis/{replication,haadmin})
        "proto/replicationapi/replication.proto",
        "proto/haadminapi/haadmin.proto",
        // ours, between active/active replicas
        "proto/argocdpull/redisrelay.proto",
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    grpc_methods(&fds)?;
    tonic_prost_build::configure()
        // sorted attribute keys: the same bytes as Go's deterministic marshal (sdk-go fixtures)
        .btree_map(".io.cloudevents.v1.CloudEvent.attributes")
        // the payload shared, not copied: a queued event's bytes go to the encoder as they are
        .bytes(".io.cloudevents.v1.CloudEvent.binary_data")
        // small per-RPC buffers (src/proto.rs `codec`): an idle stream keeps them for its life
        .codec_path("crate::proto::codec::SmallBufferCodec")
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}

/// `grpc_methods.rs`: every method of the .proto files with its go-grpc-middleware `grpc_type`
/// (the `grpc_server_*` / `grpc_client_*` metrics label calls with it).
fn grpc_methods(fds: &prost_types::FileDescriptorSet) -> std::io::Result<()> {
    let mut out = String::from("pub const METHODS: &[(&str, &str, &str)] = &[\n");
    for f in &fds.file {
        for s in &f.service {
            let service = match f.package() {
                "" => s.name().to_string(),
                p => format!("{p}.{}", s.name()),
            };
            for m in &s.method {
                let typ = match (m.client_streaming(), m.server_streaming()) {
                    (false, false) => "unary",
                    (true, false) => "client_stream",
                    (false, true) => "server_stream",
                    (true, true) => "bidi_stream",
                };
                out.push_str(&format!("    ({service:?}, {:?}, {typ:?}),\n", m.name()));
            }
        }
    }
    out.push_str("];\n");
    let dir = std::env::var("OUT_DIR").map_err(std::io::Error::other)?;
    std::fs::write(std::path::Path::new(&dir).join("grpc_methods.rs"), out)
}
