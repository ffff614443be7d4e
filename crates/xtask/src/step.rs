//! A command a task runs, printed the way a shell would take it, and the runner that prints and
//! runs (or only prints) a task's commands.

use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

/// One command: run from the repository root, with extra environment variables and, optionally,
/// its standard output written to a file (relative to the root).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub env: Vec<(String, String)>,
    pub program: String,
    pub args: Vec<String>,
    pub stdout: Option<PathBuf>,
}

impl Step {
    pub fn new(program: impl Into<String>) -> Self {
        Self {
            env: Vec::new(),
            program: program.into(),
            args: Vec::new(),
            stdout: None,
        }
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn stdout_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.stdout = Some(path.into());
        self
    }
}

impl fmt::Display for Step {
    /// `KEY=value program arg… > file`, each word quoted when a shell would need it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut words = self
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", quote(v)))
            .chain(std::iter::once(quote(&self.program)))
            .chain(self.args.iter().map(|a| quote(a)));
        if let Some(first) = words.next() {
            f.write_str(&first)?;
        }
        for w in words {
            write!(f, " {w}")?;
        }
        if let Some(out) = &self.stdout {
            write!(f, " > {}", quote(&out.to_string_lossy()))?;
        }
        Ok(())
    }
}

/// A word as a POSIX shell reads it back: unchanged when it holds only safe characters, else in
/// single quotes.
pub fn quote(word: &str) -> String {
    let safe = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./:=@%+,^".contains(c));
    if safe {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// What a task runs: its commands in order. `keep_going`: a failed command does not stop the
/// ones after it (each bench of `bench run --all`, each chart), and the task fails at the end.
#[derive(Debug, Default)]
pub struct Plan {
    pub steps: Vec<Step>,
    pub keep_going: bool,
}

/// Prints every step as `+ <command>`; runs each unless `dry_run`.
pub fn execute(plan: &Plan, root: &Path, dry_run: bool) -> anyhow::Result<()> {
    let mut failed = Vec::new();
    for step in &plan.steps {
        println!("+ {step}");
        if dry_run {
            continue;
        }
        std::io::stdout().flush().ok();
        match run(step, root) {
            Ok(()) => {}
            Err(e) if plan.keep_going => {
                eprintln!("xtask: {e:#}");
                failed.push(step.to_string());
            }
            Err(e) => return Err(e),
        }
    }
    if !failed.is_empty() {
        bail!(
            "{} of {} commands failed:\n  {}",
            failed.len(),
            plan.steps.len(),
            failed.join("\n  ")
        );
    }
    Ok(())
}

fn run(step: &Step, root: &Path) -> anyhow::Result<()> {
    let mut cmd = Command::new(&step.program);
    cmd.args(&step.args).current_dir(root);
    for (k, v) in &step.env {
        cmd.env(k, v);
    }
    if let Some(out) = &step.stdout {
        let path = root.join(out);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let file =
            File::create(&path).with_context(|| format!("cannot write {}", path.display()))?;
        cmd.stdout(Stdio::from(file));
    }
    let status = cmd.status().with_context(|| {
        format!(
            "cannot run `{}` (is it installed and on PATH?): {step}",
            step.program
        )
    })?;
    if !status.success() {
        bail!("`{step}` failed ({status})");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_prints_as_a_shell_would_read_it() {
        let step = Step::new("cargo")
            .env("TARGETS", "a b")
            .args(["bench", "-p", "x"])
            .arg("it's")
            .stdout_to("target/out.yaml");
        assert_eq!(
            step.to_string(),
            r"TARGETS='a b' cargo bench -p x 'it'\''s' > target/out.yaml"
        );
        assert_eq!(quote(""), "''");
        assert_eq!(quote("--test=ctl"), "--test=ctl");
    }

    #[test]
    fn keep_going_runs_every_step_and_fails_at_the_end() {
        let root = std::env::temp_dir();
        let plan = Plan {
            steps: vec![Step::new("false"), Step::new("true")],
            keep_going: true,
        };
        let err = execute(&plan, &root, false).unwrap_err().to_string();
        assert!(err.contains("1 of 2 commands failed"), "{err}");
        let plan = Plan {
            steps: vec![Step::new("false"), Step::new("no-such-program-xtask")],
            keep_going: false,
        };
        let err = execute(&plan, &root, false).unwrap_err().to_string();
        assert!(err.contains("`false` failed"), "{err}");
    }

    #[test]
    fn a_missing_program_is_named_in_the_error() {
        let plan = Plan {
            steps: vec![Step::new("no-such-program-xtask")],
            keep_going: false,
        };
        let err = format!(
            "{:#}",
            execute(&plan, &std::env::temp_dir(), false).unwrap_err()
        );
        assert!(
            err.contains("cannot run `no-such-program-xtask` (is it installed and on PATH?)"),
            "{err}"
        );
    }
}
