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
    ];
    for f in &files {
        println!("cargo:rerun-if-changed={f}");
    }
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        // sorted attribute keys: the same bytes as Go's deterministic marshal (sdk-go fixtures)
        .btree_map(".io.cloudevents.v1.CloudEvent.attributes")
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
