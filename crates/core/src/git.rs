//! Running git: the one place bork-ci starts it (`tests/it/architecture.rs` keeps it so).
//!
//! Every invocation carries one hardening set, whatever it is for (listing the tree to pack or
//! copy, the reviewer's diff, the Verifier's manifest, delivery's commits and pushes):
//! - never through a shell; `--no-pager`, the C locale, literal pathspecs, no terminal prompt
//!   and no askpass program;
//! - nothing of the repository's or the caller's configuration runs a program: no fsmonitor,
//!   no hooks (`core.hooksPath=/dev/null`), no pager, no external diff, no signing program;
//! - none of the caller's `GIT_*` location or configuration overrides (`GIT_DIR`,
//!   `GIT_WORK_TREE`, `GIT_INDEX_FILE`, `GIT_CONFIG_PARAMETERS`, …) and no tracing that could
//!   print a header;
//! - `safe.directory=*`: the repository is the one the user pointed bork-ci at, often checked
//!   out by another user (a container's root, a CI runner's account), and the settings above
//!   leave its configuration nothing to run.
//!
//! Git runs on a blocking thread (`crate::blocking`), its stdin is empty, and its output is
//! bytes: callers parse `-z` lists and decode what they show.

use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Variables of the caller that would point git elsewhere, add configuration, or print what it
/// sends.
const REMOVED_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_DISCOVERY_ACROSS_FILESYSTEM",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_PROXY_COMMAND",
    "GIT_TRACE",
    "GIT_TRACE_CURL",
    "GIT_TRACE_PACKET",
    "GIT_TRACE_PACK_ACCESS",
    "GIT_TRACE_PERFORMANCE",
    "GIT_TRACE_SETUP",
    "GIT_TRACE2",
    "GIT_TRACE2_EVENT",
    "GIT_TRACE2_PERF",
    "GIT_TRACE_REDACT",
    "GIT_CURL_VERBOSE",
    "GIT_REDACT_COOKIES",
];

/// Configuration given on every command line (it wins over the repository's and the user's).
const CONFIG: &[&str] = &[
    "core.quotepath=off",
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.pager=cat",
    "color.ui=false",
    "commit.gpgsign=false",
    "tag.gpgsign=false",
    "safe.directory=*",
];

/// Git could not be started, or ended with an exit code the caller did not accept.
#[derive(Debug, thiserror::Error)]
#[error("git {action}: {detail}")]
pub struct GitError {
    /// The subcommand, or what the caller was doing.
    pub action: String,
    /// Git's stderr (trimmed), or why it could not be started.
    pub detail: String,
    /// Whether git ran at all (`false`: it could not be started, fed or waited for).
    pub ran: bool,
}

impl GitError {
    /// Git ran and ended with an exit code the caller did not accept; `stderr` is what it said.
    fn exited(action: &str, stderr: &[u8]) -> Self {
        Self {
            action: action.to_owned(),
            detail: String::from_utf8_lossy(stderr).trim().to_owned(),
            ran: true,
        }
    }

    /// Git could not be run to its end (started, fed its input, waited for).
    fn not_run(action: &str, detail: String) -> Self {
        Self {
            action: action.to_owned(),
            detail,
            ran: false,
        }
    }

    /// Whether git said the folder is not a repository.
    pub fn is_not_a_repository(&self) -> bool {
        self.ran && self.detail.contains("not a git repository")
    }
}

/// `git` in `repo` with the hardening set; arguments are the caller's. Only for callers that
/// need more than [`run`] (environment of their own, a piped stdin); run it with [`output`].
#[expect(clippy::disallowed_methods, reason = "the one place git is started")]
pub fn command(repo: &Path) -> Command {
    let mut command = Command::new("git");
    command.current_dir(repo).arg("--no-pager");
    for setting in CONFIG {
        command.args(["-c", setting]);
    }
    for name in REMOVED_ENV {
        command.env_remove(name);
    }
    command
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "")
        .env("GIT_LITERAL_PATHSPECS", "1")
        .env("LC_ALL", "C")
        .stdin(Stdio::null());
    command
}

/// Runs `command` (from [`command`]) to its end on a blocking thread; any exit code is `Ok`.
pub fn output(mut command: Command, action: &str) -> Result<Output, GitError> {
    crate::blocking::run(|| command.output())
        .map_err(|error| GitError::not_run(action, format!("could not start git: {error}")))
}

/// Runs `command` (from [`command`]) with `input` on its stdin, to its end, on a blocking thread;
/// any exit code is `Ok`.
pub fn output_with_input(mut command: Command, input: &[u8], action: &str) -> Result<Output, GitError> {
    use std::io::Write as _;
    let failed = |detail: String| GitError::not_run(action, detail);
    crate::blocking::run(|| {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|error| failed(format!("could not start git: {error}")))?;
        // Written while git's output is read (`wait_with_output`), so neither side can block
        // on a full pipe.
        let writer = child.stdin.take().map(|mut stdin| {
            let input = input.to_vec();
            std::thread::spawn(move || stdin.write_all(&input))
        });
        let output = child
            .wait_with_output()
            .map_err(|error| failed(format!("waiting for it: {error}")))?;
        if let Some(Ok(Err(error))) = writer.map(std::thread::JoinHandle::join)
            && output.status.success()
        {
            return Err(failed(format!("writing its input: {error}")));
        }
        Ok(output)
    })
}

/// Runs `git args` in `repo`; stdout when it exits 0, else an error carrying its stderr.
pub fn run(repo: &Path, args: &[&str]) -> Result<Vec<u8>, GitError> {
    let mut git = command(repo);
    git.args(args);
    let action = args.first().copied().unwrap_or("git");
    let done = output(git, action)?;
    if done.status.success() {
        Ok(done.stdout)
    } else {
        Err(GitError::exited(action, &done.stderr))
    }
}

/// Like [`run`], but a failing exit is `Ok(None)` (for `rev-parse --verify`, `merge-base`).
/// A folder that is not a repository is still an error.
pub fn run_optional(repo: &Path, args: &[&str]) -> Result<Option<Vec<u8>>, GitError> {
    match run(repo, args) {
        Ok(stdout) => Ok(Some(stdout)),
        Err(error) if !error.ran || error.is_not_a_repository() => Err(error),
        Err(_) => Ok(None),
    }
}

/// What [`run_bounded`] returns: git's exit, at most `max` bytes of stdout, and whether stdout
/// was cut there (git is then stopped).
pub struct Bounded {
    pub output: Output,
    pub cut: bool,
}

/// Runs `git args` in `repo` keeping at most `max` bytes of stdout (past that git is stopped
/// and the cut output returned) and 64 KiB of stderr; exit codes outside `ok_codes` are errors.
pub fn run_bounded(repo: &Path, args: &[&str], max: u64, ok_codes: &[i32]) -> Result<Bounded, GitError> {
    crate::blocking::run(|| run_bounded_now(repo, args, max, ok_codes))
}

fn run_bounded_now(repo: &Path, args: &[&str], max: u64, ok_codes: &[i32]) -> Result<Bounded, GitError> {
    let action = args.first().copied().unwrap_or("git");
    let failed = |detail: String| GitError::not_run(action, detail);
    let mut git = command(repo);
    let mut child = git
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| failed(format!("could not start git: {error}")))?;
    // Stderr is drained on its own thread so a chatty git cannot block on a full pipe.
    let stderr_reader = child.stderr.take().map(|stderr| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stderr.take(64 * 1024).read_to_end(&mut bytes);
            bytes
        })
    });
    let mut stdout = Vec::new();
    if let Some(pipe) = child.stdout.take() {
        pipe.take(max)
            .read_to_end(&mut stdout)
            .map_err(|error| failed(format!("reading its output: {error}")))?;
    }
    let cut = stdout.len() as u64 >= max;
    if cut {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|error| failed(format!("waiting for it: {error}")))?;
    let stderr = stderr_reader
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    match status.code() {
        _ if cut => {}
        Some(code) if ok_codes.contains(&code) => {}
        _ => {
            return Err(GitError {
                detail: format!("failed ({status}): {}", String::from_utf8_lossy(&stderr).trim()),
                ..GitError::exited(action, b"")
            });
        }
    }
    Ok(Bounded {
        output: Output {
            status,
            stdout,
            stderr,
        },
        cut,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hardening_set_is_on_every_command() {
        let command = command(Path::new("/"));
        let args: Vec<String> = command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        for setting in [
            "core.hooksPath=/dev/null",
            "core.fsmonitor=false",
            "safe.directory=*",
        ] {
            assert!(args.iter().any(|arg| arg == setting), "{args:?}");
        }
        let envs: Vec<(String, Option<String>)> = command
            .get_envs()
            .map(|(key, value)| {
                (
                    key.to_string_lossy().into_owned(),
                    value.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        assert!(envs.contains(&("GIT_DIR".into(), None)));
        assert!(envs.contains(&("GIT_CONFIG_PARAMETERS".into(), None)));
        assert!(envs.contains(&("GIT_TERMINAL_PROMPT".into(), Some("0".into()))));
    }

    #[test]
    fn outside_a_repository_is_an_error_that_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        let error = run(dir.path(), &["rev-parse", "HEAD"]).expect_err("not a repository");
        assert!(error.is_not_a_repository(), "{error}");
        assert!(run_optional(dir.path(), &["rev-parse", "HEAD"]).is_err());
    }
}
