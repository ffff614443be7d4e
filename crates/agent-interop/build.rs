//! Compiles the peer's .proto files verbatim (copied into proto/, see proto/README.md).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "principal/apis/auth/auth.proto",
        "principal/apis/version/version.proto",
        "principal/apis/eventstream/eventstream.proto",
        "principal/apis/replication/replication.proto",
        "principal/apis/haadmin/haadmin.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Go's proto.MarshalOptions{Deterministic: true} writes map entries sorted by key
        .btree_map(".")
        .compile_fds(fds)?;
    Ok(())
}
