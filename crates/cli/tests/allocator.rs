//! The binary's allocator is mimalloc with the two defaults `.cargo/config.toml` compiles in
//! (docs/performance.md, "Allocator of the binary"). Without them the controller's peak RSS at
//! 1,000 Applications rises from ~27 MiB to 40-45 MiB and `cmp generate`'s from ~52 to ~63 MiB,
//! and nothing else would say so: a build whose CFLAGS lost the defines fails here.

use std::process::Command;

#[test]
fn the_binary_runs_on_mimalloc_with_the_compiled_in_defaults() {
    let out = Command::new(env!("CARGO_BIN_EXE_argocd-pull"))
        .arg("version")
        .env("MIMALLOC_VERBOSE", "1")
        .env_remove("MIMALLOC_ARENA_EAGER_COMMIT")
        .env_remove("MIMALLOC_ARENA_RESERVE")
        .output()
        .expect("run argocd-pull version");
    assert!(out.status.success(), "argocd-pull version failed: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let option = |name: &str| {
        stderr
            .lines()
            .find_map(|l| l.trim().strip_prefix(&format!("option '{name}': ")))
            .map(str::trim)
            .unwrap_or_else(|| {
                panic!(
                    "mimalloc printed no option '{name}' (is it the global allocator?):\n{stderr}"
                )
            })
            .to_owned()
    };
    let cflags = option_env!("CFLAGS").unwrap_or("<unset>");
    assert_eq!(
        option("arena_eager_commit"),
        "0",
        "mimalloc was built without -DMI_DEFAULT_ARENA_EAGER_COMMIT=0 (CFLAGS at build time: \
         {cflags}); a CFLAGS of your own replaces the one in .cargo/config.toml: add its defines"
    );
    assert_eq!(
        option("arena_reserve"),
        "32768 KiB",
        "mimalloc was built without -DMI_DEFAULT_ARENA_RESERVE=32768L (CFLAGS at build time: \
         {cflags}); a CFLAGS of your own replaces the one in .cargo/config.toml: add its defines"
    );
}
