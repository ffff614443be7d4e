use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn corpus(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(rel)
}

/// Runs the standalone binary with a clean environment plus `env`, in `dir`, feeding `stdin`.
pub fn run_cmp(dir: &Path, args: &[&str], env: &[(&str, &str)], stdin: Option<&str>) -> Output {
    use std::io::Write;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_argocd-pull-cmp"));
    cmd.args(args).current_dir(dir).env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().expect("spawn argocd-pull-cmp");
    {
        let mut pipe = child.stdin.take().expect("stdin");
        if let Some(text) = stdin {
            pipe.write_all(text.as_bytes()).expect("write stdin");
        }
    }
    child.wait_with_output().expect("wait")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf-8 stdout")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf-8 stderr")
}

/// Splits the output into parsed JSON documents.
pub fn documents(text: &str) -> Vec<serde_json::Value> {
    text.split("\n---\n")
        .map(|d| {
            serde_json::from_str(d).unwrap_or_else(|e| panic!("document is not JSON ({e}):\n{d}"))
        })
        .collect()
}

/// Asserts success and returns stdout.
pub fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "expected success, stderr:\n{}",
        stderr(o)
    );
    assert!(o.stderr.is_empty(), "unexpected stderr:\n{}", stderr(o));
    stdout(o)
}

/// Asserts failure with nothing on stdout; returns stderr.
pub fn fails(o: &Output) -> String {
    assert!(
        !o.status.success(),
        "expected failure, stdout:\n{}",
        stdout(o)
    );
    assert!(
        o.stdout.is_empty(),
        "stdout must be empty on error, got:\n{}",
        stdout(o)
    );
    stderr(o)
}
