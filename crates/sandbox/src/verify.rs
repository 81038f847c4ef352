//! The Verifier (seed 003): an ordered pipeline of shell steps run in one fresh sandbox, the
//! artifact directory with its exact layout, the run manifest and the output contract JSON.
//!
//! It owns loading the steps (`verification.steps` or `agent.yaml`), running them through
//! [`Sandbox::run_sequence`] (one container for `docker`, local processes for `none`), writing
//! `runs/{run_id}/manifest.json` and `logs/`, and turning a failure into `command` findings.
//! It does not decide what the loop does with the result (`reconcile` does), nor print anything.
//!
//! Artifact layout under the artifact root (`AGENT_ARTIFACT_DIR`, default `~/.agent-artifacts/`):
//!
//! ```text
//! runs/{run_id}/manifest.json
//! runs/{run_id}/logs/combined.log
//! runs/{run_id}/logs/step-NN-<name>.log
//! runs/{run_id}/build/
//! runs/{run_id}/db/
//! build/{bork-ci run id}/   (the run's build cache, `/cache`, removed at the run's end)
//! deps/{key}/              (the dependency cache, `/deps`, read-only to the steps)
//! ```

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use crate::sandbox::{ArtifactDirs, Job, JobKind, JobOutput, Outcome, Sandbox, SandboxError};
use bork_ci_core::findings::{Finding, Findings, decode_output};

/// The most lines `tail_log` holds.
pub const TAIL_LINES: usize = 200;
/// The file read at the repository root when no steps are configured.
pub const AGENT_YAML: &str = "agent.yaml";
/// `agent.yaml` larger than this is refused.
const AGENT_YAML_MAX: u64 = 1 << 20;
/// At most this many bytes of a step's stdout or stderr go into a finding.
const FINDING_OUTPUT_MAX: usize = 64 * 1024;
/// Exit code recorded for a step killed at the timeout (as `timeout(1)` reports it).
pub const TIMEOUT_EXIT_CODE: i64 = 124;
/// Exit code recorded for a step killed for using too much memory (128 + SIGKILL).
pub const OOM_EXIT_CODE: i64 = 137;

/// One pipeline step: a name (for logs) and a shell command run with `sh -c`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    pub name: String,
    pub command: String,
}

/// How to run the pipeline.
#[derive(Debug, Clone)]
pub struct VerifyOptions {
    /// The artifact root (`sandbox.artifact-dir` / `AGENT_ARTIFACT_DIR`).
    pub artifact_dir: PathBuf,
    /// `verification.timeout-secs`: for the whole pipeline; past it the run is FAIL, no retry.
    pub timeout: Duration,
    /// The run id; `None` generates a fresh one (UTC timestamp and random suffix).
    pub run_id: Option<String>,
    /// Variables given to every step (never secrets).
    pub env: Vec<(String, String)>,
    /// Names that must never reach the steps (the `none` backend inherits the runner's env).
    pub secret_env: Vec<String>,
    /// Bytes of stdout and of stderr kept per step.
    pub output_cap: usize,
    /// The build cache the steps work in.
    pub build: crate::sandbox::BuildCache,
}

impl VerifyOptions {
    /// Defaults: 30 minutes, 4 MiB per stream, a fresh run id.
    pub fn new(artifact_dir: PathBuf) -> VerifyOptions {
        VerifyOptions {
            artifact_dir,
            timeout: Duration::from_secs(30 * 60),
            run_id: None,
            env: Vec::new(),
            secret_env: Vec::new(),
            output_cap: 4 << 20,
            build: crate::sandbox::BuildCache::Run,
        }
    }
}

/// `AGENT_ARTIFACT_DIR` in `env` when set, else `~/.agent-artifacts/` (for the config layer's
/// default).
pub fn default_artifact_dir(env: &std::collections::BTreeMap<String, String>) -> PathBuf {
    if let Some(dir) = env.get("AGENT_ARTIFACT_DIR").filter(|dir| !dir.is_empty()) {
        return PathBuf::from(dir);
    }
    let home = env.get("HOME").map(PathBuf::from).unwrap_or_default();
    home.join(".agent-artifacts")
}

/// PASS or FAIL, spelled as the contract spells them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Status {
    #[serde(rename = "PASS")]
    Pass,
    #[serde(rename = "FAIL")]
    Fail,
}

/// One executed command in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    pub name: String,
    pub command: String,
    pub exit_code: i64,
    pub duration_ms: u64,
}

/// Where the pipeline ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    pub arch: String,
    /// The image, or `none` for local processes.
    pub container_image: String,
}

/// The run manifest (`runs/{run_id}/manifest.json` and the contract's `manifest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub run_id: String,
    pub timestamp_start: String,
    pub timestamp_end: String,
    pub commit_sha: String,
    pub commands_executed: Vec<CommandRecord>,
    pub platform: Platform,
}

/// A step as it ran, with what it printed (kept for findings; not part of the contract JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepReport {
    pub name: String,
    pub command: String,
    pub outcome: Outcome,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// The output contract: what `bork-ci verify` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifyResult {
    pub status: Status,
    pub run_id: String,
    pub tail_log: String,
    pub artifact_paths: Vec<String>,
    pub manifest: Manifest,
    #[serde(skip)]
    pub steps: Vec<StepReport>,
}

impl VerifyResult {
    /// The contract JSON, pretty-printed.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// Why the Verifier could not run (a failing step is not an error: it is a FAIL result).
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("reading {path}: {reason}")]
    AgentYaml { path: PathBuf, reason: String },
    #[error("verification step {index}: {reason}")]
    InvalidStep { index: usize, reason: String },
    #[error("run id `{0}` may only contain letters, digits, `.`, `_` and `-`")]
    InvalidRunId(String),
    #[error("writing artifacts in {path}: {source}")]
    Artifacts { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

#[derive(Deserialize)]
struct AgentYamlFile {
    #[serde(default)]
    verification: Option<VerificationSection>,
}

#[derive(Deserialize)]
struct VerificationSection {
    #[serde(default)]
    steps: Vec<Step>,
}

/// The steps to run: `configured` (`verification.steps`) when not empty, else those of
/// `agent.yaml` at the repository root (`verification: steps: [{name, command}]`) when it is a
/// regular file, else none. `agent.yaml` is never read through a symlink.
pub fn load_steps(repo: &Path, configured: &[Step]) -> Result<Vec<Step>, VerifyError> {
    let steps = if configured.is_empty() {
        read_agent_yaml(repo)?
    } else {
        configured.to_vec()
    };
    for (index, step) in steps.iter().enumerate() {
        if step.name.trim().is_empty() {
            return Err(VerifyError::InvalidStep {
                index: index + 1,
                reason: "the name is empty".to_owned(),
            });
        }
        if step.command.trim().is_empty() {
            return Err(VerifyError::InvalidStep {
                index: index + 1,
                reason: format!("step `{}` has an empty command", step.name),
            });
        }
    }
    Ok(steps)
}

fn read_agent_yaml(repo: &Path) -> Result<Vec<Step>, VerifyError> {
    let path = repo.join(AGENT_YAML);
    let error = |reason: String| VerifyError::AgentYaml {
        path: path.clone(),
        reason,
    };
    let dir = cap_std::fs::Dir::open_ambient_dir(repo, cap_std::ambient_authority())
        .map_err(|e| error(e.to_string()))?;
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No);
    let file = match dir.open_with(AGENT_YAML, &options) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(error(format!("{e} (symlinks are not followed)"))),
    };
    let meta = file.metadata().map_err(|e| error(e.to_string()))?;
    if !meta.is_file() {
        return Err(error("not a regular file".to_owned()));
    }
    if meta.len() > AGENT_YAML_MAX {
        return Err(error(format!("larger than {AGENT_YAML_MAX} bytes")));
    }
    let mut text = String::new();
    std::io::Read::read_to_string(&mut file.into_std(), &mut text).map_err(|e| error(e.to_string()))?;
    let parsed: AgentYamlFile = serde_norway::from_str(&text).map_err(|e| error(e.to_string()))?;
    Ok(parsed.verification.map(|v| v.steps).unwrap_or_default())
}

/// A fresh run id: UTC time and a random suffix, e.g. `20260522T101500Z-3f9a1c2b`.
pub fn new_run_id() -> String {
    let now = OffsetDateTime::now_utc();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..8];
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z-{suffix}",
        now.year(),
        u8::from(now.month()),
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

fn valid_run_id(run_id: &str) -> bool {
    !run_id.is_empty()
        && run_id.len() <= 128
        && run_id != "."
        && run_id != ".."
        && run_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn timestamp(at: OffsetDateTime) -> String {
    at.format(&Rfc3339).unwrap_or_default()
}

/// Runs the pipeline once: every step in order in one fresh sandbox, stopping at the first
/// failure; writes the logs and the manifest; returns the contract. A step that fails, times
/// out or is killed makes the result FAIL; only a failure of the sandbox itself is an error.
pub async fn run(
    sandbox: &Sandbox,
    repo: &Path,
    steps: &[Step],
    options: &VerifyOptions,
) -> Result<VerifyResult, VerifyError> {
    let run_id = options.run_id.clone().unwrap_or_else(new_run_id);
    if !valid_run_id(&run_id) {
        return Err(VerifyError::InvalidRunId(run_id));
    }
    let dirs = ArtifactDirs::under(&options.artifact_dir, &run_id, sandbox.shared());
    let artifacts_error = |path: &Path| {
        let path = path.to_owned();
        move |source| VerifyError::Artifacts { path, source }
    };
    dirs.prepare().map_err(artifacts_error(&dirs.run))?;
    let started = OffsetDateTime::now_utc();
    let commit_sha = commit_sha(repo);

    let mut job = Job::new(JobKind::Verify, Vec::new(), options.timeout, options.output_cap);
    job.artifacts = Some(dirs.run.clone());
    job.secret_env = options.secret_env.clone();
    job.build = options.build;
    job.env.extend(options.env.iter().cloned());
    let commands: Vec<Vec<String>> = steps
        .iter()
        .map(|step| vec!["sh".to_owned(), "-c".to_owned(), step.command.clone()])
        .collect();
    let outputs = sandbox.run_sequence(repo, &job, &commands).await?;
    let ended = OffsetDateTime::now_utc();

    let reports: Vec<StepReport> = steps
        .iter()
        .zip(outputs.iter())
        .map(|(step, output)| StepReport {
            name: step.name.clone(),
            command: step.command.clone(),
            outcome: output.outcome,
            stdout: output.stdout.clone(),
            stderr: output.stderr.clone(),
        })
        .collect();
    let passed = outputs.len() == steps.len() && outputs.iter().all(|o| o.outcome == Outcome::Exited(0));
    let manifest = Manifest {
        run_id: run_id.clone(),
        timestamp_start: timestamp(started),
        timestamp_end: timestamp(ended),
        commit_sha,
        commands_executed: steps
            .iter()
            .zip(outputs.iter())
            .map(|(step, output)| CommandRecord {
                name: step.name.clone(),
                command: step.command.clone(),
                exit_code: exit_code(output.outcome),
                duration_ms: u64::try_from(output.duration.as_millis()).unwrap_or(u64::MAX),
            })
            .collect(),
        platform: Platform {
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
            container_image: sandbox
                .image(JobKind::Verify)
                .unwrap_or_else(|| "none".to_owned()),
        },
    };

    let combined = write_artifacts(&dirs.run, steps, &outputs, &manifest, options.timeout)
        .map_err(artifacts_error(&dirs.run))?;
    Ok(VerifyResult {
        status: if passed { Status::Pass } else { Status::Fail },
        run_id,
        tail_log: tail_lines(&combined, TAIL_LINES),
        artifact_paths: artifact_paths(&dirs.run),
        manifest,
        steps: reports,
    })
}

/// Each failed step becomes one `command` finding with the tails of its output and its exit code.
pub fn to_findings(result: &VerifyResult) -> Findings {
    let mut findings = Findings::default();
    for step in &result.steps {
        if step.outcome == Outcome::Exited(0) {
            continue;
        }
        let mut stderr = tail_bytes(&step.stderr, FINDING_OUTPUT_MAX);
        match step.outcome {
            Outcome::TimedOut => stderr.push_str("\n[bork-ci: verification timed out]"),
            Outcome::OomKilled => stderr.push_str("\n[bork-ci: killed: out of memory]"),
            Outcome::Signaled(signal) => {
                stderr.push_str(&format!("\n[bork-ci: killed by signal {signal}]"));
            }
            Outcome::Exited(_) => {}
        }
        findings.overall_findings.push(Finding::Command {
            command: step.command.clone(),
            stdout: tail_bytes(&step.stdout, FINDING_OUTPUT_MAX),
            stderr,
            exit_code: exit_code(step.outcome),
        });
    }
    if result.status == Status::Fail && findings.is_empty() {
        findings.overall_findings.push(Finding::CodeReview {
            file: None,
            finding: format!(
                "The verification pipeline failed (run {}); see its logs.",
                result.run_id
            ),
        });
    }
    findings
}

fn exit_code(outcome: Outcome) -> i64 {
    match outcome {
        Outcome::Exited(code) => i64::from(code),
        Outcome::Signaled(signal) => 128 + i64::from(signal),
        Outcome::TimedOut => TIMEOUT_EXIT_CODE,
        Outcome::OomKilled => OOM_EXIT_CODE,
    }
}

fn tail_bytes(bytes: &[u8], max: usize) -> String {
    let start = bytes.len().saturating_sub(max);
    let mut slice = bytes.get(start..).unwrap_or_default();
    // Do not start in the middle of a UTF-8 sequence.
    while let Some((first, rest)) = slice.split_first() {
        if start == 0 || (first & 0xC0) != 0x80 {
            break;
        }
        slice = rest;
    }
    decode_output(slice)
}

fn tail_lines(text: &str, lines: usize) -> String {
    let trimmed = text.strip_suffix('\n').unwrap_or(text);
    let all: Vec<&str> = trimmed.split('\n').collect();
    let start = all.len().saturating_sub(lines);
    all.get(start..).unwrap_or_default().join("\n")
}

/// The commit checked out in `repo` (`git rev-parse HEAD`), or empty when there is none.
pub fn commit_sha(repo: &Path) -> String {
    bork_ci_core::git::run(repo, &["rev-parse", "HEAD"])
        .map(|stdout| String::from_utf8_lossy(&stdout).trim().to_owned())
        .unwrap_or_default()
}

/// `install` → `install`; anything but letters, digits, `.`, `_` and `-` becomes `-`.
fn file_safe(name: &str) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let safe = safe.trim_start_matches('.').to_owned();
    if safe.is_empty() { "step".to_owned() } else { safe }
}

fn step_log(index: usize, step: &Step, output: &JobOutput, timeout: Duration) -> Vec<u8> {
    let mut log = Vec::new();
    let _ = writeln!(log, "==> step {:02} {}: {}", index + 1, step.name, step.command);
    log.extend_from_slice(&output.stdout);
    if output.stdout_truncated {
        log.extend_from_slice(b"\n[stdout truncated]\n");
    }
    if !output.stderr.is_empty() {
        if !log.ends_with(b"\n") {
            log.push(b'\n');
        }
        log.extend_from_slice(&output.stderr);
    }
    if output.stderr_truncated {
        log.extend_from_slice(b"\n[stderr truncated]\n");
    }
    if !log.ends_with(b"\n") {
        log.push(b'\n');
    }
    let ending = match output.outcome {
        Outcome::Exited(code) => format!("exit code {code}"),
        Outcome::Signaled(signal) => format!("killed by signal {signal}"),
        Outcome::TimedOut => format!("timed out (verification.timeout-secs = {})", timeout.as_secs()),
        Outcome::OomKilled => "killed: out of memory".to_owned(),
    };
    let _ = writeln!(
        log,
        "==> step {:02} {}: {ending} after {} ms",
        index + 1,
        step.name,
        output.duration.as_millis()
    );
    log
}

/// Writes the step logs, `combined.log` and `manifest.json`; returns the combined log as text.
fn write_artifacts(
    run_dir: &Path,
    steps: &[Step],
    outputs: &[JobOutput],
    manifest: &Manifest,
    timeout: Duration,
) -> std::io::Result<String> {
    let run = cap_std::fs::Dir::open_ambient_dir(run_dir, cap_std::ambient_authority())?;
    replace_with_dir(&run, "logs")?;
    let logs = run.open_dir_nofollow("logs")?;
    let mut combined = Vec::new();
    for (index, (step, output)) in steps.iter().zip(outputs).enumerate() {
        let log = step_log(index, step, output, timeout);
        let name = format!("step-{:02}-{}.log", index + 1, file_safe(&step.name));
        write_new(&logs, &name, &log)?;
        combined.extend_from_slice(&log);
    }
    write_new(&logs, "combined.log", &combined)?;
    let mut json = serde_json::to_vec_pretty(manifest).map_err(std::io::Error::other)?;
    json.push(b'\n');
    write_new(&run, "manifest.json", &json)?;
    Ok(String::from_utf8_lossy(&combined).into_owned())
}

/// Makes `name` a real directory in `dir`, removing whatever else (a planted symlink) is there.
fn replace_with_dir(dir: &cap_std::fs::Dir, name: &str) -> std::io::Result<()> {
    match dir.symlink_metadata(name) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => {
            dir.remove_file_or_symlink(name)?;
            dir.create_dir(name)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => dir.create_dir(name),
        Err(e) => Err(e),
    }
}

/// Writes a new regular file: whatever had the name (a symlink, a FIFO, a file left by a step)
/// is removed first and the file is created exclusively, so no link is ever followed.
fn write_new(dir: &cap_std::fs::Dir, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    match dir.symlink_metadata(name) {
        Ok(meta) if meta.is_dir() => dir.remove_dir_all(name)?,
        Ok(_) => dir.remove_file_or_symlink(name)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let mut options = cap_std::fs::OpenOptions::new();
    options.write(true).create_new(true).follow(FollowSymlinks::No);
    let mut file = dir.open_with(name, &options)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Regular files under the run directory (links and special files skipped), sorted: the
/// manifest, the logs, and what the steps left in `build/` and `tmp/` (at most 1000).
pub fn artifact_paths(run_dir: &Path) -> Vec<String> {
    const MAX: usize = 1000;
    let mut found = Vec::new();
    let mut pending = vec![(run_dir.to_owned(), 0usize)];
    while let Some((dir, depth)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() && depth < 16 {
                pending.push((entry.path(), depth + 1));
            } else if kind.is_file() && found.len() < MAX {
                found.push(entry.path().to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// Reads an artifact the steps may have written: `relative` inside `run_dir`, without following
/// any symlink, and only when it is a regular file of at most `max` bytes.
pub fn read_artifact(run_dir: &Path, relative: &Path, max: u64) -> std::io::Result<Vec<u8>> {
    let dir = cap_std::fs::Dir::open_ambient_dir(run_dir, cap_std::ambient_authority())?;
    let mut current = dir;
    let components: Vec<_> = relative.components().collect();
    let Some((last, parents)) = components.split_last() else {
        return Err(std::io::Error::other("empty artifact path"));
    };
    for component in parents {
        let std::path::Component::Normal(name) = component else {
            return Err(std::io::Error::other("artifact paths must be plain and relative"));
        };
        current = current.open_dir_nofollow(name)?;
    }
    let std::path::Component::Normal(name) = last else {
        return Err(std::io::Error::other("artifact paths must be plain and relative"));
    };
    let mut options = cap_std::fs::OpenOptions::new();
    options.read(true).follow(FollowSymlinks::No);
    let file = current.open_with(name, &options)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Err(std::io::Error::other(format!("larger than {max} bytes")));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file.into_std(), max), &mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
#[expect(clippy::disallowed_methods, reason = "tests lay out their fixtures directly")]
mod tests {
    use super::*;

    #[test]
    fn tails() {
        let text: String = (1..=250).map(|i| format!("line {i}\n")).collect();
        let tail = tail_lines(&text, 200);
        assert_eq!(tail.lines().count(), 200);
        assert!(tail.starts_with("line 51\n") && tail.ends_with("line 250"));
        assert_eq!(tail_lines("a\nb\n", 200), "a\nb");
        assert_eq!(tail_bytes("héllo".as_bytes(), 4), "llo");
    }

    #[test]
    fn file_names_and_run_ids() {
        assert_eq!(file_safe("type check/../x"), "type-check-..-x");
        assert_eq!(file_safe("..."), "step");
        assert!(valid_run_id(&new_run_id()));
        for bad in ["", "..", "a/b", "a b", "x\n"] {
            assert!(!valid_run_id(bad), "{bad:?}");
        }
    }

    #[test]
    fn agent_yaml_steps_and_precedence() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(load_steps(dir.path(), &[]).expect("no file").is_empty());
        std::fs::write(
            dir.path().join("agent.yaml"),
            "other: 1\nverification:\n  steps:\n    - name: install\n      command: npm ci\n    - name: test\n      command: npm test\n",
        )
        .expect("write");
        let steps = load_steps(dir.path(), &[]).expect("parses");
        assert_eq!(
            steps,
            vec![
                Step {
                    name: "install".into(),
                    command: "npm ci".into()
                },
                Step {
                    name: "test".into(),
                    command: "npm test".into()
                },
            ]
        );
        let configured = [Step {
            name: "c".into(),
            command: "true".into(),
        }];
        assert_eq!(
            load_steps(dir.path(), &configured).expect("configured"),
            configured
        );
        std::fs::write(
            dir.path().join("agent.yaml"),
            "verification:\n  steps:\n    - name: x\n",
        )
        .expect("write");
        assert!(load_steps(dir.path(), &[]).is_err());
    }

    #[test]
    fn agent_yaml_symlink_is_not_followed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            outside.path().join("agent.yaml"),
            "verification:\n  steps:\n    - name: x\n      command: evil\n",
        )
        .expect("write");
        std::os::unix::fs::symlink(outside.path().join("agent.yaml"), dir.path().join("agent.yaml"))
            .expect("symlink");
        assert!(load_steps(dir.path(), &[]).is_err());
    }

    #[test]
    fn writes_replace_planted_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        let canary = outside.path().join("canary");
        std::fs::write(&canary, "untouched").expect("write");
        std::os::unix::fs::symlink(&canary, dir.path().join("manifest.json")).expect("symlink");
        std::os::unix::fs::symlink(outside.path(), dir.path().join("logs")).expect("symlink");
        let run = cap_std::fs::Dir::open_ambient_dir(dir.path(), cap_std::ambient_authority()).expect("dir");
        write_new(&run, "manifest.json", b"{}").expect("writes");
        replace_with_dir(&run, "logs").expect("replaces");
        assert_eq!(std::fs::read_to_string(&canary).expect("read"), "untouched");
        assert_eq!(
            std::fs::read(dir.path().join("manifest.json")).expect("read"),
            b"{}"
        );
        assert!(
            std::fs::symlink_metadata(dir.path().join("logs"))
                .expect("meta")
                .is_dir()
        );
        assert!(read_artifact(dir.path(), Path::new("manifest.json"), 10).is_ok());
        std::os::unix::fs::symlink(&canary, dir.path().join("link")).expect("symlink");
        assert!(read_artifact(dir.path(), Path::new("link"), 100).is_err());
        assert!(read_artifact(dir.path(), Path::new("../x"), 100).is_err());
    }

    #[test]
    fn failed_steps_become_command_findings() {
        let manifest = Manifest {
            run_id: "r".into(),
            timestamp_start: String::new(),
            timestamp_end: String::new(),
            commit_sha: String::new(),
            commands_executed: Vec::new(),
            platform: Platform {
                os: "linux".into(),
                arch: "x86_64".into(),
                container_image: "none".into(),
            },
        };
        let step = |outcome, out: &str| StepReport {
            name: "n".into(),
            command: "make test".into(),
            outcome,
            stdout: out.as_bytes().to_vec(),
            stderr: b"boom".to_vec(),
        };
        let result = VerifyResult {
            status: Status::Fail,
            run_id: "r".into(),
            tail_log: String::new(),
            artifact_paths: Vec::new(),
            manifest,
            steps: vec![step(Outcome::Exited(0), "fine"), step(Outcome::Exited(2), "bad")],
        };
        let findings = to_findings(&result);
        assert_eq!(
            findings.overall_findings,
            vec![Finding::Command {
                command: "make test".into(),
                stdout: "bad".into(),
                stderr: "boom".into(),
                exit_code: 2,
            }]
        );
        let json: serde_json::Value = serde_json::from_str(&result.to_json()).expect("json");
        assert_eq!(json["status"], "FAIL");
        assert!(json.get("steps").is_none());
    }
}
