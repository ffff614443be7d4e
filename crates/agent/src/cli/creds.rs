//! `--redis-creds-dir-path` / `REDIS_CREDS_DIR_PATH` (peer: cmd/argocd-agent/agent.go
//! `redisCreds`, Argo CD's file-based Redis credentials): the Redis password from `<dir>/auth`
//! and the username from `<dir>/auth_username` (optional), surrounding whitespace trimmed.

use std::path::Path;

use anyhow::{Context, bail};

/// `(username, password)`: from `dir` when given (then `username` and `password` must be empty),
/// else the flags' values.
pub fn redis_creds(
    dir: Option<&Path>,
    username: &str,
    password: &str,
) -> anyhow::Result<(String, String)> {
    let Some(dir) = dir.filter(|d| !d.as_os_str().is_empty()) else {
        return Ok((username.to_string(), password.to_string()));
    };
    let run = || -> anyhow::Result<(String, String)> {
        if !username.is_empty() || !password.is_empty() {
            bail!(
                "dir path cannot be combined with username / password: unset --redis-username / --redis-password (REDIS_USERNAME / REDIS_PASSWORD) or --redis-creds-dir-path (REDIS_CREDS_DIR_PATH)"
            );
        }
        let user_file = dir.join("auth_username");
        let user = match std::fs::read_to_string(&user_file) {
            Ok(s) => s.trim().to_string(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("failed reading username from '{}'", user_file.display())
                });
            }
        };
        let pass_file = dir.join("auth");
        let pass = std::fs::read_to_string(&pass_file)
            .with_context(|| format!("failed reading password from '{}'", pass_file.display()))?
            .trim()
            .to_string();
        Ok((user, pass))
    };
    run().context("Failed loading Redis credentials")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_argo_cd_creds_directory() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            redis_creds(None, "u", "p").unwrap(),
            ("u".to_string(), "p".to_string())
        );
        let e = format!("{:#}", redis_creds(Some(d.path()), "", "").unwrap_err());
        assert!(e.contains("failed reading password from"), "{e}");
        assert!(e.contains("/auth'"), "{e}");
        std::fs::write(d.path().join("auth"), "s3cret\n").unwrap();
        assert_eq!(
            redis_creds(Some(d.path()), "", "").unwrap(),
            (String::new(), "s3cret".to_string()),
            "the username file is optional"
        );
        std::fs::write(d.path().join("auth_username"), " default \n").unwrap();
        assert_eq!(
            redis_creds(Some(d.path()), "", "").unwrap(),
            ("default".to_string(), "s3cret".to_string())
        );
        let e = format!("{:#}", redis_creds(Some(d.path()), "", "p").unwrap_err());
        assert!(e.contains("cannot be combined"), "{e}");
    }
}
