//! The sandbox seam: where a step of an iteration (the checker, the verifier, the edit step) runs.
//!
//! `reconcile` describes a [`Job`] and asks a [`Sandbox`] to run it; it never knows which backend
//! does the work. Backends: [`none`] (local processes, for an already-isolated CI job) and `docker`
//! (ephemeral containers). A third backend (Kubernetes jobs, a remote engine) is one more variant
//! here and one more module; nothing in the loop changes. This module does not interpret output:
//! judging it is the caller's business (`checker`, `verify`).

pub mod none;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Which backend runs the steps (`sandbox.kind`, `--sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxKind {
    /// Local processes: for a CI job that is already isolated.
    None,
    /// An ephemeral Docker container per step.
    Docker,
}

/// What a job is, which decides how locked down its environment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    /// The correctness checker: runs code the model just wrote; repo read-only, no secrets.
    Checker,
    /// One verifier pipeline step (a shell command); same profile as the checker.
    Verify,
}

/// One command to run with the repository root as its working directory.
#[derive(Debug, Clone)]
pub struct Job {
    pub kind: JobKind,
    /// `argv[0]` is either a path relative to the repository root (`./checks/run`) or a program
    /// looked up on `PATH` (`sh`).
    pub argv: Vec<String>,
    /// Variables to set on top of the backend's base environment.
    pub env: Vec<(String, String)>,
    /// Names that must never reach the job (the LLM key variable, GitHub tokens, ...).
    pub secret_env: Vec<String>,
    /// Wall-clock limit; past it the job is killed and the outcome is [`Outcome::TimedOut`].
    pub timeout: Duration,
    /// At most this many bytes of stdout and of stderr are kept; the rest is drained and dropped.
    pub output_cap: usize,
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum Outcome {
    Exited(i32),
    Signaled(i32),
    TimedOut,
    OomKilled,
}

/// What a job printed and how it ended.
#[derive(Debug, Clone)]
pub struct JobOutput {
    pub outcome: Outcome,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration: Duration,
}

/// Failures of the sandbox itself (not of the job it ran).
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("starting `{program}` in {repo}: {source}")]
    Spawn {
        program: String,
        repo: PathBuf,
        source: std::io::Error,
    },
    #[error("reading the output of `{program}`: {source}")]
    Io { program: String, source: std::io::Error },
    #[error("{0}")]
    Backend(String),
}

/// The backend chosen for this run.
#[derive(Debug)]
pub enum Sandbox {
    None(none::Local),
}

impl Sandbox {
    /// Runs `job` with `repo` as its working directory.
    pub async fn run(&self, repo: &std::path::Path, job: &Job) -> Result<JobOutput, SandboxError> {
        match self {
            Sandbox::None(local) => local.run(repo, job).await,
        }
    }

    /// Removes whatever the backend created for this run (containers, volumes); idempotent.
    pub async fn cleanup(&self) {
        match self {
            Sandbox::None(_) => {}
        }
    }

    /// The backend's name, for reports.
    pub fn kind(&self) -> SandboxKind {
        match self {
            Sandbox::None(_) => SandboxKind::None,
        }
    }
}
