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

/// An integer status feedback value of a manifest in a ManifestWork's status.
pub fn feedback(
    work: &kube::api::DynamicObject,
    kind: &str,
    name: &str,
    field: &str,
) -> Option<i64> {
    let manifests = work
        .data
        .pointer("/status/resourceStatus/manifests")?
        .as_array()?;
    let m = manifests
        .iter()
        .find(|m| m["resourceMeta"]["kind"] == kind && m["resourceMeta"]["name"] == name)?;
    m.pointer("/statusFeedback/values")?
        .as_array()?
        .iter()
        .find(|v| v["name"] == field)?
        .pointer("/fieldValue/integer")?
        .as_i64()
}

/// True when the object has condition `t` with status True.
pub fn condition_true(work: &kube::api::DynamicObject, t: &str) -> bool {
    work.data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .is_some_and(|c| c.iter().any(|c| c["type"] == t && c["status"] == "True"))
}

/// Runs an Argo CD resource health check the way Argo CD does: Lua 5.1 (Argo CD embeds
/// gopher-lua, a Lua 5.1), the live object as the global `obj` with JSON nulls as `nil`, and the
/// returned table's `status` and `message`.
pub fn argocd_health(script: &str, obj: &serde_json::Value) -> (String, String) {
    use mlua::LuaSerdeExt;
    let lua = mlua::Lua::new();
    let options = mlua::serde::SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false);
    let obj = lua
        .to_value_with(obj, options)
        .expect("object converts to Lua");
    lua.globals().set("obj", obj).expect("set obj");
    let hs: mlua::Table = lua
        .load(script)
        .eval()
        .unwrap_or_else(|e| panic!("health script fails: {e}"));
    let status: String = hs.get("status").expect("health status");
    let message: Option<String> = hs.get("message").expect("health message");
    (status, message.unwrap_or_default())
}
