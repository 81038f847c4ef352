//! The sandbox seam: where a step of an iteration (the checker, the verifier, the edit step) runs.
//!
//! `reconcile` describes a [`Job`] and asks a [`Sandbox`] to run it; it never knows which backend
//! does the work. Backends: [`none`] (local processes, for an already-isolated CI job) and `docker`
//! (ephemeral containers on any Engine API: local, remote, Podman). A third backend (Kubernetes
//! Pods, designed in `docs/kubernetes.md`) is one more variant here and one more module; nothing in
//! the loop changes. This module does not interpret output:
//! judging it is the caller's business (`checker`, `verify`).

pub mod build_cache;
pub mod deps;
pub mod devcontainer;
pub mod docker;
pub mod none;
pub mod state_stdio;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use build_cache::{BuildCache, BuildHost, JobBuild};

/// Which backend runs the steps (`sandbox.kind`, `--sandbox`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxKind {
    /// Local processes: for a CI job that is already isolated.
    None,
    /// An ephemeral Docker container per step.
    Docker,
}

impl SandboxKind {
    /// The name as written in configuration and reports.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxKind::None => "none",
            SandboxKind::Docker => "docker",
        }
    }
}

/// The file in an edit step's state directory that holds its result: what comes back from
/// the container over the `copy` transport.
pub const STATE_OUTPUT: &str = "output.json";

/// What a job is, which decides how locked down its environment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobKind {
    /// The correctness checker: runs code the model just wrote; repo read-only, no secrets.
    Checker,
    /// One verifier pipeline step (a shell command); same profile as the checker.
    Verify,
    /// The edit step (pack, call the LLM, parse, apply) in the runner image: working tree
    /// read-write without `.git`, the state directory at `/state`, host networking, the LLM key.
    EditStep,
    /// The setup commands (`sandbox.setup`): the judge's image and profile, on the approved
    /// revision as each round starts, with `sandbox.setup-network`, writing the dependency
    /// cache of the round's key.
    Setup,
}

impl JobKind {
    /// The name used in labels and logs (`checker`, `verify`, `edit-step`).
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Checker => "checker",
            JobKind::Verify => "verify",
            JobKind::EditStep => "edit-step",
            JobKind::Setup => "setup",
        }
    }
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
    /// Checker, verify and setup jobs: the job's artifact directory on the host (mounted at
    /// `/artifacts`); `None` gives the job a fresh one (see [`SharedDirs::job_dirs`]). The build
    /// and dependency caches are the sandbox's (see [`SharedDirs`]).
    pub artifacts: Option<PathBuf>,
    /// Edit step: the host directory holding the loop state, mounted read-write at `/state`.
    pub state_dir: Option<PathBuf>,
    /// Edit step: the state goes in on stdin and the result comes back on stdout
    /// ([`state_stdio`]) instead of through a mount or a volume (see
    /// [`EditStepMode::state_over_stdio`]).
    pub state_over_stdio: bool,
    /// Pass the job's stderr on to bork-ci's own stderr line by line as it arrives (redacted and
    /// made safe, see `LiveRelay`), besides keeping it: the edit step's progress during a long
    /// model answer.
    pub live_stderr: bool,
    /// Judges: which build cache the job works in (see [`build_cache`]).
    pub build: BuildCache,
}

impl Job {
    /// A job with no extra variables, no secret names, no artifact or state directory.
    pub fn new(kind: JobKind, argv: Vec<String>, timeout: Duration, output_cap: usize) -> Job {
        Job {
            kind,
            argv,
            env: Vec::new(),
            secret_env: Vec::new(),
            timeout,
            output_cap,
            artifacts: None,
            state_dir: None,
            state_over_stdio: false,
            live_stderr: false,
            build: BuildCache::Run,
        }
    }
}

/// Passes a job's stderr on to this process's stderr as it arrives, whole lines at a time, each
/// redacted and written as one safe line ([`bork_ci_core::untrusted::relay`]).
#[derive(Debug, Default)]
pub(crate) struct LiveRelay {
    partial: Vec<u8>,
}

impl LiveRelay {
    /// A line longer than this is passed on in parts.
    const MAX_LINE: usize = 64 * 1024;

    /// Reads `bytes` and passes on every line they complete.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        if let Some(end) = memchr::memrchr(b'\n', &self.partial) {
            let lines: Vec<u8> = self.partial.drain(..=end).collect();
            Self::write(&lines);
        }
        if self.partial.len() > Self::MAX_LINE {
            let long = std::mem::take(&mut self.partial);
            Self::write(&long);
        }
    }

    /// Passes on what is left (a last line without its end).
    pub(crate) fn finish(&mut self) {
        if !self.partial.is_empty() {
            let rest = std::mem::take(&mut self.partial);
            Self::write(&rest);
        }
    }

    fn write(bytes: &[u8]) {
        let redacted = bork_ci_core::secrets::redact_bytes(bytes);
        let mut out = std::io::stderr().lock();
        let _ = bork_ci_core::untrusted::relay(&mut out, &redacted);
    }
}

/// Where the judges' files live on the host, besides the tree: the job's own artifact directory,
/// the run's build cache, and the dependency cache of the repository and base branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactDirs {
    /// The job's own directory (`/artifacts`): written by the job, read by bork-ci and people,
    /// never by a later judge.
    pub run: PathBuf,
    /// The run's build cache (`/cache`): written by the judges of this run, kept across its
    /// iterations, removed at its end.
    pub build: PathBuf,
    /// The dependency cache (`/deps`) of the round's key (see [`deps`]): written only by the
    /// setup commands on the approved revision, read-only to every judge.
    pub deps: PathBuf,
    /// The job's own `TMPDIR`, fresh for each job: `runs/<run id>/tmp/<n>-<kind>` (the
    /// Verifier's contract lays out test temporaries under `runs/{run_id}/tmp/`). Kept with the
    /// run's artifacts; no later job is given it.
    pub tmp: PathBuf,
}

impl ArtifactDirs {
    /// The layout under an artifact root: `runs/<run_dir>` (with its `tmp/`), `build/<run_id>`
    /// and `deps/<deps_key>`.
    pub fn under(root: &Path, run_dir: &str, shared: &SharedDirs) -> ArtifactDirs {
        let run = root.join("runs").join(run_dir);
        ArtifactDirs {
            tmp: run.join("tmp"),
            run,
            build: shared.build.clone(),
            deps: shared.deps(),
        }
    }

    /// Creates the job's directories, the build cache and the dependency cache with their tool
    /// folders. Those a job writes to (`build/`, `db/`, the caches) are writable by any user
    /// (sticky, like `/tmp`) so that a container running as another uid can use them; the job's
    /// directory itself and `logs/` are not, so a job cannot plant the files the runner writes
    /// there afterwards (the manifest, the logs). Anything that is not a directory in their
    /// place (a planted symlink) is removed first.
    pub fn prepare(&self) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        // (folder, mode, whether an existing folder keeps its mode): a build cache that exists
        // (the run's, the warm cache, a judge's copy of it) keeps the modes it was made with.
        let mut dirs = vec![
            (self.run.clone(), 0o755, false),
            (self.build.clone(), 0o1777, true),
            (self.deps.clone(), 0o1777, false),
        ];
        dirs.extend(RUN_SUBDIRS.iter().map(|name| {
            let mode = if *name == "logs" { 0o755 } else { 0o1777 };
            (self.run.join(name), mode, false)
        }));
        dirs.extend(
            BUILD_SUBDIRS
                .iter()
                .map(|name| (self.build.join(name), 0o1777, true)),
        );
        dirs.extend(
            DEPS_SUBDIRS
                .iter()
                .map(|name| (self.deps.join(name), 0o1777, false)),
        );
        for (dir, mode, keep) in dirs {
            let existed = match std::fs::symlink_metadata(&dir) {
                Ok(meta) if meta.is_dir() => true,
                Ok(_) => {
                    std::fs::remove_file(&dir)?;
                    false
                }
                Err(_) => false,
            };
            std::fs::create_dir_all(&dir)?;
            if !(keep && existed) {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode))?;
            }
        }
        // The job's `TMPDIR` starts empty: whatever is in its place (a leftover of a job of an
        // earlier process of the same run, a planted link) goes first.
        match std::fs::symlink_metadata(&self.tmp) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&self.tmp)?,
            Ok(_) => std::fs::remove_file(&self.tmp)?,
            Err(_) => {}
        }
        std::fs::create_dir_all(&self.tmp)?;
        std::fs::set_permissions(&self.tmp, std::fs::Permissions::from_mode(0o1777))?;
        Ok(())
    }
}

/// What the judges of one run share on the host: the run's build cache and the dependency
/// cache of the round's key (see [`ArtifactDirs`] and [`deps`]).
#[derive(Debug, Clone)]
pub struct SharedDirs {
    pub root: PathBuf,
    pub run_id: String,
    /// `<root>/build/<run id>`.
    pub build: PathBuf,
    /// The dependency cache in use: its key and `<root>/deps/<key>`. Shared by every clone, so
    /// that the key a round sets ([`SharedDirs::use_deps_key`]) is the one its jobs mount.
    deps: std::sync::Arc<std::sync::RwLock<(String, PathBuf)>>,
}

impl SharedDirs {
    /// The shared directories of run `run_id` under the artifact root `root`; `identity` names
    /// the repository (its remote, else its path) and `base` the base branch. The dependency
    /// cache starts keyed by those alone, until a round sets the key of what it approved
    /// ([`deps::key`]).
    pub fn new(root: &Path, run_id: &str, identity: &str, base: &str) -> SharedDirs {
        use sha2::Digest as _;
        let deps_key =
            hex::encode(sha2::Sha256::digest(format!("{identity}\n{base}").as_bytes()))[..24].to_owned();
        SharedDirs {
            root: root.to_owned(),
            run_id: run_id.to_owned(),
            build: root.join("build").join(run_id),
            deps: std::sync::Arc::new(std::sync::RwLock::new((
                deps_key.clone(),
                root.join("deps").join(&deps_key),
            ))),
        }
    }

    /// The dependency cache's key.
    pub fn deps_key(&self) -> String {
        self.deps.read().unwrap_or_else(|p| p.into_inner()).0.clone()
    }

    /// The dependency cache on the host: `<root>/deps/<key>`.
    pub fn deps(&self) -> PathBuf {
        self.deps.read().unwrap_or_else(|p| p.into_inner()).1.clone()
    }

    /// Makes `key` the dependency cache of the jobs from now on, and stamps its folder as used
    /// now (what `bork-ci gc` goes by). A key never used before starts empty.
    pub fn use_deps_key(&self, key: &str) {
        let path = self.root.join("deps").join(key);
        *self.deps.write().unwrap_or_else(|p| p.into_inner()) = (key.to_owned(), path.clone());
        if std::fs::create_dir_all(&path).is_ok() {
            bork_ci_core::safe_fs::touch_folder(&path);
        }
    }

    /// A fresh artifact directory for one job of kind `kind` (`runs/<run id>/jobs/<n>-<kind>`)
    /// and its `TMPDIR` (`runs/<run id>/tmp/<n>-<kind>`).
    pub fn job_dirs(&self, kind: JobKind) -> ArtifactDirs {
        let label = job_label(kind);
        let mut dirs = ArtifactDirs::under(&self.root, &format!("{}/jobs/{label}", self.run_id), self);
        dirs.tmp = unused(&self.root.join("runs").join(&self.run_id).join("tmp"), &label);
        dirs
    }

    /// The directories of `job`: its own artifact directory (given, or a fresh one), the
    /// dependency cache, and the build cache [`Job::build`] names (a folder of the job's own is
    /// `build/<run id>-<n>`, removed with the returned [`JobBuild`]); `host` says where the build
    /// cache lives and who writes it.
    pub fn for_job(&self, job: &Job, host: BuildHost) -> (ArtifactDirs, JobBuild) {
        let mut dirs = match &job.artifacts {
            Some(run) => ArtifactDirs {
                run: run.clone(),
                build: self.build.clone(),
                deps: self.deps(),
                tmp: unused(&run.join("tmp"), &job_label(job.kind)),
            },
            None => self.job_dirs(job.kind),
        };
        let own = self
            .root
            .join("build")
            .join(format!("{}-{:04}", self.run_id, next_job_number()));
        let (build, held) = build_cache::for_job(job.build, host, &self.warm(), own);
        if let Some(build) = build {
            dirs.build = build;
        }
        (dirs, held)
    }

    /// The warm cache of approved builds for the dependency cache's key (see [`build_cache`]).
    pub fn warm(&self) -> build_cache::Warm {
        build_cache::Warm::new(&self.root, &self.deps_key())
    }

    /// Removes the run's build cache (best effort: files a container wrote under another uid
    /// may stay for `bork-ci gc`).
    pub fn remove_build(&self) {
        if let Err(error) = std::fs::remove_dir_all(&self.build)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::debug!("removing the build cache {}: {error}", self.build.display());
        }
    }
}

/// `parent/name`, or when that is taken (a job of an earlier process of the same run, whose
/// files may belong to a container's user) `parent/name-<random>`.
fn unused(parent: &Path, name: &str) -> PathBuf {
    let path = parent.join(name);
    if std::fs::symlink_metadata(&path).is_err() {
        return path;
    }
    parent.join(format!(
        "{name}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ))
}

/// A job's name among the run's jobs: `<n>-<kind>`, `n` counting the jobs of this process.
fn job_label(kind: JobKind) -> String {
    format!("{:04}-{}", next_job_number(), kind.as_str())
}

fn next_job_number() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Subdirectories of a job's artifact directory.
pub const RUN_SUBDIRS: &[&str] = &["logs", "build", "build/snapshots", "db"];
/// Subdirectories of the run's build cache, one per tool.
pub const BUILD_SUBDIRS: &[&str] = &["xdg", "cargo-target"];
/// Subdirectories of the dependency cache, one per tool.
pub const DEPS_SUBDIRS: &[&str] = &["cargo-home", "npm", "pip", "xdg"];

/// Paths of a judge's environment as the job sees them (in a container, or on the host for the
/// `none` backend).
#[derive(Debug, Clone)]
pub struct JudgePaths<'a> {
    /// The job's artifact directory.
    pub run: &'a str,
    /// The build cache.
    pub build: &'a str,
    /// The dependency cache.
    pub deps: &'a str,
    /// The job's own empty `HOME`.
    pub home: &'a str,
    /// The job's own empty `TMPDIR`.
    pub tmp: &'a str,
}

/// The variables that point a judge's home, temporary files, test and build output and tool
/// caches at its own directories: a fresh `HOME` and `TMPDIR` per job, the job's artifacts, the
/// run's build cache, the repository's dependency cache.
pub fn artifact_env(paths: &JudgePaths<'_>) -> Vec<(String, String)> {
    let JudgePaths {
        run,
        build,
        deps,
        home,
        tmp,
    } = paths;
    [
        ("HOME", home.to_string()),
        ("TMPDIR", tmp.to_string()),
        // Python's bytecode goes to the build cache (the judge's own copy of the warm cache of
        // approved builds), never read from or written into the tree: a `__pycache__` left there
        // cannot stand in for the source. The warm cache keeps the bytecode of the standard
        // library and the test tools, which Python would otherwise compile on every job (a
        // cache prefix hides the `__pycache__` folders next to them).
        ("PYTHONPYCACHEPREFIX", format!("{build}/pycache")),
        // An image's `ENV PYTHONDONTWRITEBYTECODE=1` (common, to keep images small) would keep
        // that cache empty: empty is unset to Python.
        ("PYTHONDONTWRITEBYTECODE", String::new()),
        ("TEST_DB_PATH", format!("{run}/db")),
        ("SNAPSHOT_DIR", format!("{run}/build/snapshots")),
        ("AGENT_BUILD_DIR", format!("{run}/build")),
        ("AGENT_ARTIFACT_DIR", run.to_string()),
        ("XDG_CACHE_HOME", format!("{build}/xdg")),
        ("CARGO_TARGET_DIR", format!("{build}/cargo-target")),
        ("BORK_BUILD_CACHE", build.to_string()),
        ("CARGO_HOME", format!("{deps}/cargo-home")),
        ("npm_config_cache", format!("{deps}/npm")),
        ("PIP_CACHE_DIR", format!("{deps}/pip")),
        ("BORK_DEPS_DIR", deps.to_string()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect()
}

/// Variables of the runner's own environment that would point a judge back at shared state
/// (configuration and data under the runner's home); a judge's are under its own `HOME`.
pub const SHARED_STATE_ENV: &[&str] = &[
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "PYTHONUSERBASE",
    "PYTHONSTARTUP",
    "NPM_CONFIG_USERCONFIG",
    "npm_config_userconfig",
    "GIT_CONFIG_GLOBAL",
    "PIP_CONFIG_FILE",
    "CARGO_BUILD_TARGET_DIR",
];

/// The setup commands' way out, when the runner has one: proxy variables, and the CA bundle the
/// runner trusts (the file `SSL_CERT_FILE` names), which the setup job gets at `ca_path` with the
/// variables the usual tools read it from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetupNetwork {
    /// `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY` (either case) as the runner has them.
    pub proxy_env: Vec<(String, String)>,
    /// The runner's CA bundle (`SSL_CERT_FILE`), if set.
    pub ca_file: Option<PathBuf>,
}

/// The variables that point the usual tools at a CA bundle at `ca_path`.
pub fn ca_env(ca_path: &str) -> Vec<(String, String)> {
    [
        "SSL_CERT_FILE",
        "CARGO_HTTP_CAINFO",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "REQUESTS_CA_BUNDLE",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
    ]
    .into_iter()
    .map(|name| (name.to_owned(), ca_path.to_owned()))
    .collect()
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

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Exited(code) => write!(f, "exit code {code}"),
            Outcome::Signaled(signal) => write!(f, "killed by signal {signal}"),
            Outcome::TimedOut => f.write_str("timed out"),
            Outcome::OomKilled => f.write_str("out of memory"),
        }
    }
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
    /// The Docker engine could not be reached; the integrator maps this to exit 2.
    #[error(
        "cannot reach the Docker engine at {host} ({reason}); start Docker or set DOCKER_HOST, \
         or use `--sandbox none` inside a CI job that is already isolated"
    )]
    Unreachable { host: String, reason: String },
    /// The image is not available locally and could not (or may not) be pulled.
    #[error(
        "image `{image}` is not available: {reason}; pull or build it on the engine, or change \
         sandbox.pull (ci/build-images.sh builds the test images bork-ci-test/busybox:latest and \
         debian:bookworm-slim offline)"
    )]
    ImageMissing { image: String, reason: String },
    /// The edit step's image could not be built from bork-ci's own executable.
    #[error(
        "building the edit step's image {image} through the Docker engine failed: {reason}; \
         set `sandbox.runner-image` to an image that has bork-ci on its PATH, or use the static \
         release binary (README, Install), or `--sandbox none` inside an isolated CI job"
    )]
    RunnerImage { image: String, reason: String },
    /// One Docker operation failed.
    #[error("docker {operation}: {reason}")]
    Docker { operation: &'static str, reason: String },
    /// Preparing host-side files for a job (artifact directories, the stripped git config).
    #[error("preparing {what}: {source}")]
    Prepare { what: String, source: std::io::Error },
}

/// How the edit step treats the working tree (see [`Sandbox::edit_step_mode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EditStepMode {
    pub apply_in_step: bool,
    pub umask: Option<u32>,
    /// The step takes its state on stdin and writes its result to stdout
    /// (`bork-ci edit-step --stdio`, [`state_stdio`]): over `copy` with the runner image this
    /// executable made, which saves a volume and two archive calls per step. A configured
    /// `sandbox.runner-image` may hold an older bork-ci, so it gets the state volume.
    pub state_over_stdio: bool,
}

/// The backend chosen for this run.
#[derive(Debug)]
pub enum Sandbox {
    None(none::Local),
    Docker(Box<docker::DockerSandbox>),
}

impl Sandbox {
    /// Whether no judge job can change the working tree: the Docker sandbox mounts it read-only
    /// into every checker and Verifier job (bind or copy), so what one judge saw the next sees;
    /// a local process (`none`) can write it.
    pub fn judges_leave_the_tree_as_it_is(&self) -> bool {
        matches!(self, Sandbox::Docker(_))
    }

    /// Runs `job` with `repo` as its working directory.
    pub async fn run(&self, repo: &std::path::Path, job: &Job) -> Result<JobOutput, SandboxError> {
        let output = match self {
            Sandbox::None(local) => local.run(repo, job).await,
            Sandbox::Docker(docker) => docker.run(repo, job).await,
        };
        output.map(redact_output)
    }

    /// Runs `commands` one after another in one environment (one container for `docker`),
    /// stopping after the first that does not exit 0. `job` gives the kind, variables, artifact
    /// directories, output cap and the wall-clock limit for the whole sequence; its `argv` is not
    /// used. Returns one output per command that ran.
    pub async fn run_sequence(
        &self,
        repo: &Path,
        job: &Job,
        commands: &[Vec<String>],
    ) -> Result<Vec<JobOutput>, SandboxError> {
        let outputs = match self {
            Sandbox::None(local) => local.run_sequence(repo, job, commands).await,
            Sandbox::Docker(docker) => docker.run_sequence(repo, job, commands).await,
        };
        outputs.map(|outputs| outputs.into_iter().map(redact_output).collect())
    }

    /// Whether the setup commands already filled the dependency cache in use: the record
    /// [`Sandbox::mark_setup_done`] left in it names its key and this very cache (see
    /// [`Sandbox::deps_cache_stamp`]). The key covers everything setup reads (its commands, the
    /// judges' image, every file that is not code), so the same key is the same inputs. A
    /// cache removed (`bork-ci gc`, a volume removed, a judge under `none` that wrote into it)
    /// takes its record along; anything that cannot be read counts as not done.
    pub async fn setup_done(&self, repo: &Path) -> bool {
        let Some(stamp) = self.deps_cache_stamp(repo).await else {
            return false;
        };
        let record = self.shared().deps().join(SETUP_RECORD);
        let expected = setup_record(&self.shared().deps_key(), &stamp);
        bork_ci_core::blocking::run(move || {
            bork_ci_core::safe_fs::read_regular(&record, 4096).is_ok_and(|bytes| bytes == expected.as_bytes())
        })
    }

    /// Records in the dependency cache in use that the setup commands filled it (after every
    /// command exited 0). A record that cannot be written only means setup runs again.
    pub async fn mark_setup_done(&self, repo: &Path) {
        let Some(stamp) = self.deps_cache_stamp(repo).await else {
            return;
        };
        let deps = self.shared().deps();
        let text = setup_record(&self.shared().deps_key(), &stamp);
        let written = bork_ci_core::blocking::run(move || {
            let record = deps.join(SETUP_RECORD);
            if let Some(folder) = record.parent() {
                std::fs::create_dir_all(folder)?;
            }
            bork_ci_core::safe_fs::write_atomic(&record, text.as_bytes())
        });
        if let Err(error) = written {
            tracing::debug!("recording that setup filled the dependency cache: {error}");
        }
    }

    /// What names the dependency cache in use as this backend holds it: a host folder (`none`,
    /// Docker over `bind`), whose record goes with it, or over `copy` the engine's volume and
    /// when the engine created it (a volume removed and made again is another cache). `None`
    /// when it cannot be told.
    pub async fn deps_cache_stamp(&self, repo: &Path) -> Option<String> {
        match self {
            Sandbox::None(_) => Some("host folder".to_owned()),
            Sandbox::Docker(docker) => docker.deps_cache_stamp(repo).await,
        }
    }

    /// The program that runs `bork-ci edit-step` in this backend: this very executable for
    /// local processes, `bork-ci` on the runner image's `PATH` for containers.
    pub fn edit_step_program(&self) -> Result<String, SandboxError> {
        match self {
            Sandbox::None(_) => std::env::current_exe()
                .map(|path| path.display().to_string())
                .map_err(|source| SandboxError::Prepare {
                    what: "the path of the bork-ci executable".into(),
                    source,
                }),
            Sandbox::Docker(_) => Ok("bork-ci".into()),
        }
    }

    /// How the edit step reaches the working tree: whether it applies the edits itself (the
    /// tree is mounted) and with which umask. Over the `copy` transport it returns the plan and
    /// the runner applies it. Decides the `auto` transport if nothing has yet.
    pub async fn edit_step_mode(&self, repo: &Path) -> Result<EditStepMode, SandboxError> {
        match self {
            Sandbox::None(_) => Ok(EditStepMode {
                apply_in_step: true,
                umask: None,
                state_over_stdio: false,
            }),
            Sandbox::Docker(docker) => {
                let transport = docker.edit_step_transport(repo).await?;
                Ok(EditStepMode {
                    apply_in_step: transport == docker::transport::Transport::Bind,
                    umask: Some(0o022),
                    state_over_stdio: docker.step_state_over_stdio(),
                })
            }
        }
    }

    /// Where a job sees the state directory `host` (see [`Job::state_dir`]).
    pub fn state_path(&self, host: &Path) -> String {
        match self {
            Sandbox::None(_) => host.display().to_string(),
            Sandbox::Docker(docker) => docker.state_path().to_owned(),
        }
    }

    /// The image a job of this kind runs in, or `None` for local processes.
    pub fn image(&self, kind: JobKind) -> Option<String> {
        match self {
            Sandbox::None(_) => None,
            Sandbox::Docker(docker) => Some(docker.image_for(kind)),
        }
    }

    /// The id of the image the judges run in (`local` for local processes), made available
    /// first: part of the dependency cache's key ([`deps::key`]).
    pub async fn judge_image_id(&self, repo: &Path) -> Result<String, SandboxError> {
        match self {
            Sandbox::None(_) => Ok("local".to_owned()),
            Sandbox::Docker(docker) => docker.judge_image_id(repo).await,
        }
    }

    /// Removes whatever the backend created for this run (containers, volumes, the build
    /// cache); idempotent.
    pub async fn cleanup(&self) {
        match self {
            Sandbox::None(_) => none::kill_live_groups(),
            Sandbox::Docker(docker) => {
                if let Err(error) = docker.cleanup_all().await {
                    tracing::warn!("removing this run's containers: {error}");
                }
            }
        }
        let shared = self.shared().clone();
        bork_ci_core::blocking::run(move || shared.remove_build());
    }

    /// The run's build cache and the repository's dependency cache on the host.
    pub fn shared(&self) -> &SharedDirs {
        match self {
            Sandbox::None(local) => local.shared(),
            Sandbox::Docker(docker) => docker.shared(),
        }
    }

    /// The backend's name, for reports.
    pub fn kind(&self) -> SandboxKind {
        match self {
            Sandbox::None(_) => SandboxKind::None,
            Sandbox::Docker(_) => SandboxKind::Docker,
        }
    }
}

/// The record, in the dependency cache, that the setup commands filled it.
const SETUP_RECORD: &str = ".bork-ci/setup-done";

/// The record's text for the cache of `key` held as `stamp`.
fn setup_record(key: &str, stamp: &str) -> String {
    format!("bork-ci setup 1\nkey {key}\ncache {stamp}\n")
}

/// Job output with every registered secret redacted, before anything cuts or prints it.
fn redact_output(mut output: JobOutput) -> JobOutput {
    output.stdout = bork_ci_core::secrets::redact_bytes(&output.stdout).into_owned();
    output.stderr = bork_ci_core::secrets::redact_bytes(&output.stderr).into_owned();
    output
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each job's `TMPDIR` is a folder of its own under `runs/<run id>/tmp/`, empty, and never
    /// one an earlier process of the same run left there.
    #[test]
    fn each_job_gets_an_empty_tmp_folder_of_its_own() {
        let root = tempfile::tempdir().expect("tempdir");
        let shared = SharedDirs::new(root.path(), "run-1", "repo", "main");
        let first = shared.job_dirs(JobKind::Checker);
        let second = shared.job_dirs(JobKind::Checker);
        assert_ne!(first.tmp, second.tmp);
        assert!(
            first.tmp.starts_with(root.path().join("runs/run-1/tmp")),
            "{first:?}"
        );
        first.prepare().expect("prepare");
        bork_ci_core::safe_fs::write_atomic(&first.tmp.join("left"), b"x").expect("write");
        let name = first
            .tmp
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let again = unused(first.tmp.parent().expect("parent"), &name);
        assert_ne!(again, first.tmp, "a taken folder is never reused");
        assert_eq!(unused(root.path(), "free"), root.path().join("free"));
    }
}
