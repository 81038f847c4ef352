//! The `none` backend: each job is a local child process, for a CI job that is already isolated.
//!
//! It inherits the runner's environment minus the secret names the job lists, kills the whole
//! process group at the timeout, and keeps a bounded amount of output. A judge job (checker,
//! verifier, setup) gets a fresh, private `HOME`, removed when it ends, a fresh `TMPDIR` of
//! its own under the run's `runs/<run id>/tmp/`, its own artifact directory, the run's build
//! and dependency caches (see [`super::SharedDirs`]), and bork-ci itself first on its `PATH` (a
//! link to this executable) for `bork-ci check`.
//! It does not confine anything: that is what the `docker` backend is for.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::{Job, JobKind, JobOutput, Outcome, SandboxError, SharedDirs};

/// Runs jobs as local processes.
#[derive(Debug)]
pub struct Local {
    shared: SharedDirs,
    /// Variables that keep toolchain managers finding their toolchains under the runner's own
    /// home once a judge's `HOME` is fresh (`RUSTUP_HOME`, `PYENV_ROOT`; see
    /// `config::Resolved::toolchain_homes`).
    toolchain_env: Vec<(String, String)>,
}

/// A judge job's own environment: its fresh home (removed on drop) and
/// the variables that point there.
struct JudgeEnv {
    _fresh: tempfile::TempDir,
    _build: super::JobBuild,
    env: Vec<(String, String)>,
}

impl Local {
    /// Local processes for run `shared.run_id`.
    pub fn new(shared: SharedDirs, toolchain_env: Vec<(String, String)>) -> Local {
        Local {
            shared,
            toolchain_env,
        }
    }

    /// The run's shared directories.
    pub fn shared(&self) -> &SharedDirs {
        &self.shared
    }

    /// For a judge job: a fresh private `HOME` and `TMPDIR` (see [`super::ArtifactDirs::tmp`]), the job's artifact directory and
    /// the caches. Toolchain managers that find their toolchains under the runner's home
    /// (rustup, pyenv) are pointed there explicitly, so a fresh `HOME` does not lose them.
    fn judge_env(&self, job: &Job) -> Result<Option<JudgeEnv>, SandboxError> {
        if job.kind == JobKind::EditStep {
            return Ok(None);
        }
        let prepare_error = |what: &str| {
            let what = what.to_owned();
            move |source| SandboxError::Prepare { what, source }
        };
        let fresh = tempfile::Builder::new()
            .prefix("bork-ci-judge-")
            .tempdir()
            .map_err(prepare_error("the job's home"))?;
        let home = fresh.path().join("home");
        std::fs::create_dir(&home).map_err(prepare_error("the job's home"))?;
        let (dirs, held) = self.shared.for_job(job, super::BuildHost::Process);
        dirs.prepare()
            .map_err(prepare_error("the artifact directories"))?;
        let tmp = dirs.tmp.clone();
        let text = |path: &std::path::Path| path.to_string_lossy().into_owned();
        let (run, build, deps, home_text, tmp_text) = (
            text(&dirs.run),
            text(&dirs.build),
            text(&dirs.deps),
            text(&home),
            text(&tmp),
        );
        let mut env = super::artifact_env(&super::JudgePaths {
            run: &run,
            build: &build,
            deps: &deps,
            home: &home_text,
            tmp: &tmp_text,
        });
        env.extend(self.toolchain_env.iter().cloned());
        env.extend(own_executable_env(fresh.path()));
        Ok(Some(JudgeEnv {
            _fresh: fresh,
            _build: held,
            env,
        }))
    }

    /// Runs `commands` one after another as separate processes, sharing `job`'s time limit,
    /// stopping after the first that does not exit 0.
    pub async fn run_sequence(
        &self,
        repo: &Path,
        job: &Job,
        commands: &[Vec<String>],
    ) -> Result<Vec<JobOutput>, SandboxError> {
        let deadline = Instant::now() + job.timeout;
        let judge = self.judge_env(job)?;
        let seal = self.seal(job)?;
        let mut outputs = Vec::new();
        for argv in commands {
            let mut step = job.clone();
            step.argv = argv.clone();
            step.timeout = deadline.saturating_duration_since(Instant::now());
            let output = if step.timeout.is_zero() {
                JobOutput {
                    outcome: Outcome::TimedOut,
                    stdout: Vec::new(),
                    stderr: Vec::new(),
                    stdout_truncated: false,
                    stderr_truncated: false,
                    duration: std::time::Duration::ZERO,
                }
            } else {
                self.run_with(repo, &step, judge.as_ref()).await?
            };
            let passed = output.outcome == Outcome::Exited(0);
            outputs.push(output);
            if !passed {
                break;
            }
        }
        self.check_seal(seal)?;
        Ok(outputs)
    }

    /// Runs `job` in `repo` and waits for it, up to its timeout.
    pub async fn run(&self, repo: &Path, job: &Job) -> Result<JobOutput, SandboxError> {
        let judge = self.judge_env(job)?;
        let seal = self.seal(job)?;
        let output = self.run_with(repo, job, judge.as_ref()).await;
        self.check_seal(seal)?;
        output
    }

    /// A local judge runs as the runner's user and could write the dependency cache, which
    /// only the setup commands may: it is sealed before a judge job (every entry's inode, size,
    /// mode and change time; a change time cannot be set back) and checked afterwards.
    fn seal(&self, job: &Job) -> Result<Option<Seal>, SandboxError> {
        if matches!(job.kind, JobKind::EditStep | JobKind::Setup) {
            return Ok(None);
        }
        bork_ci_core::blocking::run(|| Seal::of(&self.shared.deps()))
            .map(Some)
            .map_err(|source| SandboxError::Prepare {
                what: "a seal of the dependency cache".to_owned(),
                source,
            })
    }

    /// A broken seal: the cache is removed, so that nothing a judge wrote there reaches a later
    /// judge or run, and the job is an error of the sandbox.
    fn check_seal(&self, seal: Option<Seal>) -> Result<(), SandboxError> {
        let Some(seal) = seal else {
            return Ok(());
        };
        let deps = self.shared.deps();
        let now = bork_ci_core::blocking::run(|| Seal::of(&deps));
        if now.as_ref().is_ok_and(|now| *now == seal) {
            return Ok(());
        }
        let _ = bork_ci_core::blocking::run(|| std::fs::remove_dir_all(&deps));
        Err(SandboxError::Backend(format!(
            "a judge wrote into the dependency cache {}, which only the setup commands may write; the cache was removed so that nothing it holds reaches a later judge or run",
            deps.display()
        )))
    }

    #[expect(clippy::disallowed_methods, reason = "the sandbox starts the job's process")]
    async fn run_with(
        &self,
        repo: &Path,
        job: &Job,
        judge: Option<&JudgeEnv>,
    ) -> Result<JobOutput, SandboxError> {
        let program = job.argv.first().cloned().unwrap_or_default();
        let mut command = Command::new(&program);
        command
            .args(job.argv.iter().skip(1))
            .current_dir(repo)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .process_group(0);
        for name in &job.secret_env {
            command.env_remove(name);
        }
        // Whatever variable holds a registered secret, under whatever name, is withheld too.
        // The live environment, not the configuration's snapshot: the child inherits the live
        // one, so that is what must be searched (non-UTF-8 variables included).
        for (name, value) in std::env::vars_os() {
            if bork_ci_core::secrets::find(&value.to_string_lossy()).is_some() {
                command.env_remove(name);
            }
        }
        if let Some(judge) = judge {
            for name in super::SHARED_STATE_ENV {
                command.env_remove(name);
            }
            command.envs(judge.env.iter().map(|(k, v)| (k, v)));
        }
        command.envs(job.env.iter().map(|(k, v)| (k, v)));
        let started = Instant::now();
        let mut child = command.spawn().map_err(|source| SandboxError::Spawn {
            program: program.clone(),
            repo: repo.to_owned(),
            source,
        })?;
        let pid = child.id();
        let _live = LiveGroup::new(pid);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let cap = job.output_cap;
        let out_task = tokio::spawn(read_capped(stdout, cap, false));
        let err_task = tokio::spawn(read_capped(stderr, cap, job.live_stderr));

        let outcome = match tokio::time::timeout(job.timeout, child.wait()).await {
            Ok(status) => {
                let status = status.map_err(|source| SandboxError::Io {
                    program: program.clone(),
                    source,
                })?;
                match (status.code(), status.signal()) {
                    (Some(code), _) => Outcome::Exited(code),
                    (None, Some(signal)) => Outcome::Signaled(signal),
                    (None, None) => Outcome::Signaled(0),
                }
            }
            Err(_) => {
                kill_group(pid);
                let _ = child.wait().await;
                Outcome::TimedOut
            }
        };
        // Children that outlive the checker would keep the pipes open forever.
        kill_group(pid);
        let io_error = |source| SandboxError::Io {
            program: program.clone(),
            source,
        };
        let (stdout, stdout_truncated) = join_output(out_task).await.map_err(io_error)?;
        let (stderr, stderr_truncated) = join_output(err_task).await.map_err(io_error)?;
        Ok(JobOutput {
            outcome,
            stdout,
            stderr,
            stdout_truncated,
            stderr_truncated,
            duration: started.elapsed(),
        })
    }
}

/// bork-ci itself for a judge: a folder in the judge's own fresh folder holding a link named
/// `bork-ci` to this executable, put first on `PATH`, and `BORK_CI` naming the link, so that a
/// checker can run `bork-ci check`. Nothing when the executable cannot be found or linked
/// (a checker that does not call `bork-ci` needs nothing of it).
#[expect(
    clippy::disallowed_methods,
    reason = "the sandbox: the job's documented PATH, which a judge inherits"
)]
fn own_executable_env(fresh: &Path) -> Vec<(String, String)> {
    let Ok(executable) = std::env::current_exe() else {
        return Vec::new();
    };
    let bin = fresh.join("bin");
    let link = bin.join("bork-ci");
    if std::fs::create_dir(&bin)
        .and_then(|()| std::os::unix::fs::symlink(&executable, &link))
        .is_err()
    {
        return Vec::new();
    }
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let mut path = bin.clone().into_os_string();
    if !inherited.is_empty() {
        path.push(":");
        path.push(inherited);
    }
    vec![
        ("PATH".to_owned(), path.to_string_lossy().into_owned()),
        ("BORK_CI".to_owned(), link.to_string_lossy().into_owned()),
    ]
}

/// What the dependency cache holds, by path: inode, size, mode, owner, and for entries that are
/// not folders their modification and change times. A folder's own times only say that an entry
/// came or went, which its entries say already (and the tools' bookkeeping below moves them).
#[derive(Debug, PartialEq, Eq)]
struct Seal(std::collections::BTreeMap<std::path::PathBuf, Stamp>);

/// One entry's inode, size, mode, owner and group, modification and change times (seconds,
/// nanoseconds; zero for folders).
type Stamp = (u64, u64, u32, u32, u32, i64, i64, i64, i64);

/// Files the tools rewrite on their own while a judge builds or tests, whatever the judge does:
/// their bookkeeping, never read as code. Paths relative to the dependency cache; a folder
/// stands for everything below it. Cargo keeps the last use of each downloaded crate in the
/// SQLite database `.global-cache` (with its journal) and refreshes those stamps when they are
/// more than a few minutes old, under the locks `.package-cache` and `.package-cache-mutate`;
/// npm writes a debug log per command into `_logs` of its cache and its update check's stamp;
/// pip its version check's state under `selfcheck`.
const BOOKKEEPING: &[&str] = &[
    "cargo-home/.global-cache",
    "cargo-home/.global-cache-journal",
    "cargo-home/.global-cache-wal",
    "cargo-home/.global-cache-shm",
    "cargo-home/.package-cache",
    "cargo-home/.package-cache-mutate",
    "npm/_logs",
    "npm/_update-notifier-last-checked",
    "pip/selfcheck",
];

/// Whether the entry at `relative` (to the dependency cache) is a tool's bookkeeping.
fn bookkeeping(relative: &Path) -> bool {
    BOOKKEEPING.iter().any(|entry| relative.starts_with(entry))
}

impl Seal {
    fn of(root: &Path) -> std::io::Result<Seal> {
        use std::os::unix::fs::MetadataExt;
        let mut entries = std::collections::BTreeMap::new();
        let mut stack = vec![root.to_owned()];
        while let Some(dir) = stack.pop() {
            let items = match std::fs::read_dir(&dir) {
                Ok(items) => items,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            for item in items {
                let item = item?;
                let meta = item.path().symlink_metadata()?;
                if meta.is_dir() {
                    stack.push(item.path());
                }
                // Bookkeeping may come, go and change as long as it is a plain file or folder;
                // a link or anything else in its place still breaks the seal.
                let plain = meta.is_file() || meta.is_dir();
                if plain && item.path().strip_prefix(root).is_ok_and(bookkeeping) {
                    continue;
                }
                let times = if meta.is_dir() {
                    (0, 0, 0, 0)
                } else {
                    (meta.mtime(), meta.mtime_nsec(), meta.ctime(), meta.ctime_nsec())
                };
                entries.insert(
                    item.path(),
                    (
                        meta.ino(),
                        if meta.is_dir() { 0 } else { meta.size() },
                        meta.mode(),
                        meta.uid(),
                        meta.gid(),
                        times.0,
                        times.1,
                        times.2,
                        times.3,
                    ),
                );
            }
        }
        Ok(Seal(entries))
    }
}

/// Process groups of the jobs running now, so that a signal to bork-ci ends them whole.
static LIVE_GROUPS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Registers a job's process group for as long as the job runs.
struct LiveGroup(Option<u32>);

impl LiveGroup {
    fn new(pid: Option<u32>) -> Self {
        if let Some(pid) = pid {
            LIVE_GROUPS.lock().unwrap_or_else(|p| p.into_inner()).push(pid);
        }
        Self(pid)
    }
}

impl Drop for LiveGroup {
    /// A job dropped before it finished (the run was interrupted or timed out around it) takes
    /// its whole process group with it, not only its first process.
    fn drop(&mut self) {
        kill_group(self.0);
        if let Some(pid) = self.0 {
            LIVE_GROUPS
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|live| *live != pid);
        }
    }
}

/// Ends the whole process group of every job still running (on SIGINT or SIGTERM).
pub fn kill_live_groups() {
    let groups = LIVE_GROUPS.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for pid in groups {
        kill_group(Some(pid));
    }
}

fn kill_group(pid: Option<u32>) {
    if let Some(group) = pid
        .and_then(|pid| i32::try_from(pid).ok())
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    }
}

async fn join_output(
    task: tokio::task::JoinHandle<std::io::Result<(Vec<u8>, bool)>>,
) -> std::io::Result<(Vec<u8>, bool)> {
    // Descendants may hold the pipe open after the group kill (a new session); bound the wait.
    match tokio::time::timeout(std::time::Duration::from_secs(5), task).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(std::io::Error::other(join)),
        Err(_) => Ok((Vec::new(), true)),
    }
}

async fn read_capped<R: AsyncRead + Unpin>(
    reader: Option<R>,
    cap: usize,
    live: bool,
) -> std::io::Result<(Vec<u8>, bool)> {
    let Some(mut reader) = reader else {
        return Ok((Vec::new(), false));
    };
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buffer = vec![0u8; 64 * 1024];
    let mut relay = live.then(super::LiveRelay::default);
    loop {
        let read = reader.read(&mut buffer).await?;
        if read == 0 {
            if let Some(relay) = &mut relay {
                relay.finish();
            }
            break;
        }
        if let Some(relay) = &mut relay {
            relay.push(&buffer[..read]);
        }
        let room = cap.saturating_sub(kept.len());
        if read > room {
            truncated = true;
        }
        kept.extend_from_slice(&buffer[..read.min(room)]);
    }
    Ok((kept, truncated))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::JobKind;
    use std::time::Duration;

    fn local(root: &Path) -> Local {
        Local::new(SharedDirs::new(root, "run-test", "repo", "main"), Vec::new())
    }

    fn job(script: &str, timeout: Duration) -> Job {
        Job {
            kind: JobKind::Checker,
            argv: vec!["sh".into(), "-c".into(), script.into()],
            env: vec![],
            secret_env: vec!["BORK_TEST_SECRET".into()],
            timeout,
            output_cap: 16,
            artifacts: None,
            state_dir: None,
            state_over_stdio: false,
            live_stderr: false,
            build: crate::sandbox::BuildCache::Run,
        }
    }

    #[tokio::test]
    async fn exit_code_output_and_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = local(dir.path())
            .run(
                dir.path(),
                &job(
                    "printf '0123456789abcdefXYZ'; echo err >&2; exit 3",
                    Duration::from_secs(10),
                ),
            )
            .await
            .expect("runs");
        assert_eq!(out.outcome, Outcome::Exited(3));
        assert_eq!(out.stdout, b"0123456789abcdef");
        assert!(out.stdout_truncated);
        assert_eq!(out.stderr, b"err\n");
    }

    #[tokio::test]
    async fn timeout_kills_the_group() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = Instant::now();
        let out = local(dir.path())
            .run(
                dir.path(),
                &job("sleep 30 & sleep 30", Duration::from_millis(300)),
            )
            .await
            .expect("runs");
        assert_eq!(out.outcome, Outcome::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "the test plants files in the cache")]
    fn the_tools_bookkeeping_keeps_the_seal_and_nothing_else_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let deps = dir.path();
        for folder in ["cargo-home/registry/src/x-1", "npm", "pip/http"] {
            std::fs::create_dir_all(deps.join(folder)).expect("mkdir");
        }
        std::fs::write(deps.join("cargo-home/.global-cache"), b"v1").expect("write");
        std::fs::write(deps.join("cargo-home/registry/src/x-1/lib.rs"), b"pub fn x() {}").expect("write");
        let sealed = Seal::of(deps).expect("seal");
        // What cargo, npm and pip write on their own during a build or a test.
        std::fs::remove_file(deps.join("cargo-home/.global-cache")).expect("rm");
        std::fs::write(deps.join("cargo-home/.global-cache"), b"v2 with newer stamps").expect("write");
        std::fs::write(deps.join("cargo-home/.global-cache-journal"), b"j").expect("write");
        std::fs::write(deps.join("cargo-home/.package-cache"), b"").expect("write");
        std::fs::create_dir_all(deps.join("npm/_logs")).expect("mkdir");
        std::fs::write(deps.join("npm/_logs/2026-debug-0.log"), b"log").expect("write");
        std::fs::create_dir_all(deps.join("pip/selfcheck")).expect("mkdir");
        std::fs::write(deps.join("pip/selfcheck/abc.json"), b"{}").expect("write");
        assert_eq!(Seal::of(deps).expect("seal"), sealed);
        // Anything else breaks it: a changed source, a new file, a link in a bookkeeping name.
        let plants: [&dyn Fn(); 3] = [
            &|| {
                std::fs::write(deps.join("cargo-home/registry/src/x-1/lib.rs"), b"pub fn y() {}")
                    .expect("write")
            },
            &|| std::fs::write(deps.join("pip/evil.pth"), b"import os").expect("write"),
            &|| {
                std::fs::remove_file(deps.join("cargo-home/.package-cache")).expect("rm");
                std::os::unix::fs::symlink("/etc/passwd", deps.join("cargo-home/.package-cache"))
                    .expect("link");
            },
        ];
        for plant in plants {
            let before = Seal::of(deps).expect("seal");
            plant();
            assert_ne!(Seal::of(deps).expect("seal"), before);
        }
    }

    #[tokio::test]
    async fn secret_names_are_removed() {
        // SAFETY: the variable is only read by the child this test starts.
        unsafe { std::env::set_var("BORK_TEST_SECRET", "canary-123") };
        let dir = tempfile::tempdir().expect("tempdir");
        let mut job = job("env", Duration::from_secs(10));
        job.output_cap = 1 << 20;
        let out = local(dir.path()).run(dir.path(), &job).await.expect("runs");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("canary-123"));
    }
}
