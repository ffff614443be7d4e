//! The image recipe: Containerfile (Docker users) and hack/image.sh (buildah) describe one image.

use crate::helm::root;

fn read(p: &str) -> String {
    std::fs::read_to_string(root().join(p)).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[test]
fn containerfile_is_a_static_scratch_image_run_as_non_root() {
    let cf = read("Containerfile");
    let stages: Vec<&str> = cf.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(
        stages.last(),
        Some(&"FROM scratch"),
        "the final stage is scratch: {stages:?}"
    );
    let final_stage = &cf[cf.rfind("FROM scratch").unwrap()..];
    assert!(final_stage.contains("ENTRYPOINT [\"/argocd-pull\"]"));
    let user = final_stage
        .lines()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER");
    let uid = user.split(':').next().unwrap();
    assert!(
        uid.parse::<u32>().is_ok_and(|u| u != 0),
        "numeric non-root USER, got {user}"
    );
    for label in ["source", "version", "revision"] {
        assert!(
            final_stage.contains(&format!("org.opencontainers.image.{label}=")),
            "{label}"
        );
    }
    assert!(
        final_stage.contains("ca-certificates.crt"),
        "CA certificates"
    );
}

#[test]
fn image_sh_builds_the_same_image() {
    let cf = read("Containerfile");
    let sh = read("hack/image.sh");
    assert!(sh.contains("buildah from --arch \"$arch\" scratch"));
    assert!(sh.contains("--entrypoint '[\"/argocd-pull\"]'"));
    let user = cf.lines().find_map(|l| l.strip_prefix("USER ")).unwrap();
    assert!(sh.contains(&format!("--user {user}")), "same USER {user}");
    for label in ["source", "version", "revision", "title", "licenses"] {
        let l = format!("org.opencontainers.image.{label}=");
        assert!(cf.contains(&l) && sh.contains(&l), "label {label} in both");
    }
    assert!(
        sh.contains("--env PATH=/") && cf.contains("ENV PATH=/"),
        "binary on PATH for cmp"
    );
    assert!(sh.contains("oci-archive:"), "writes an OCI archive");
}

/// The shipped binary is built with the tuned release profile.
#[test]
fn release_profile_is_tuned_for_shipping() {
    let toml = read("Cargo.toml");
    let release = &toml[toml.find("[profile.release]").expect("a release profile")..];
    let release = &release[..release[1..].find("\n[").map_or(release.len(), |i| i + 1)];
    for setting in ["lto = \"fat\"", "codegen-units = 1", "strip = \"symbols\""] {
        assert!(release.contains(setting), "{setting} in {release}");
    }
}
