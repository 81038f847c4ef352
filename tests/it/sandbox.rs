//! The `docker` backend against the real engine: the checker profile's confinement, limits,
//! timeouts, the edit-step profile, removal on every path and `gc` of a killed run's leftovers.
//! Images are built offline by `ci/build-images.sh` (once per test binary).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub use crate::support::git;
use bork_ci::sandbox::docker::{self, DockerSandbox, DockerSettings, PullPolicy, Transport};
use bork_ci::sandbox::{Job, JobKind, Outcome, Sandbox, SandboxError};

/// The checker test image (busybox, a non-root user), built by `ci/build-images.sh busybox`.
pub const TEST_IMAGE: &str = "bork-ci-test/busybox:latest";

/// Builds the busybox test image once; panics with the script's output when it cannot.
pub fn ensure_test_image() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let result = BUILT.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/build-images.sh");
        let output = Command::new(script)
            .arg("busybox")
            .output()
            .map_err(|e| format!("running ci/build-images.sh: {e}"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!(
                "ci/build-images.sh busybox failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    });
    if let Err(message) = result {
        panic!("{message}");
    }
}

/// The files named `name` in the artifact directories of run `run_id`'s jobs.
pub fn job_files(artifacts: &Path, run_id: &str, name: &str) -> Vec<std::path::PathBuf> {
    let jobs = artifacts.join("runs").join(run_id).join("jobs");
    let mut found: Vec<_> = std::fs::read_dir(&jobs)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.path().join(name))
                .filter(|path| path.is_file())
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// Settings for tests: the busybox image for every kind, artifacts under `artifacts`.
pub fn settings(artifacts: &Path) -> DockerSettings {
    let mut settings = bork_ci::config::SandboxConfig::default()
        .docker_settings(artifacts.to_owned())
        .expect("the default settings convert");
    // The engine under test, as a run's configuration takes it from the environment.
    settings.host = std::env::var("DOCKER_HOST").ok().filter(|host| !host.is_empty());
    settings.image = TEST_IMAGE.to_owned();
    settings.runner_image = Some(TEST_IMAGE.to_owned());
    settings.pull = PullPolicy::Never;
    settings.memory = Some(256 << 20);
    settings.pids_limit = Some(128);
    settings.cpus = Some(1.0);
    settings
}

/// The engine under test as `ci/engines.sh` names it (`BORK_TEST_ENGINE`): `docker` (the
/// default: the local socket), `podman`, `tcp` (a dockerd whose filesystem this host cannot
/// see) or `dood` (these tests in a container with the host's socket).
pub fn engine() -> String {
    std::env::var("BORK_TEST_ENGINE")
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "docker".to_owned())
}

/// Whether the engine sees this host's paths, so that bind mounts work.
pub fn engine_sees_host_paths() -> bool {
    match engine().as_str() {
        "docker" | "podman" => true,
        "tcp" | "dood" => false,
        other => panic!("BORK_TEST_ENGINE must be docker, podman, tcp or dood, not {other}"),
    }
}

/// The transports the Docker tests run under: `BORK_TEST_TRANSPORT=bind` or `copy`, else both
/// (only `copy` on an engine that cannot see this host's paths).
pub fn transports() -> Vec<Transport> {
    let all = match std::env::var("BORK_TEST_TRANSPORT").as_deref() {
        Ok("bind") => vec![Transport::Bind],
        Ok("copy") => vec![Transport::Copy],
        Ok("") | Err(_) => vec![Transport::Bind, Transport::Copy],
        Ok(other) => panic!("BORK_TEST_TRANSPORT must be bind or copy, not {other}"),
    };
    if engine_sees_host_paths() {
        return all;
    }
    assert!(
        all.contains(&Transport::Copy),
        "the {} engine cannot see this host's paths: BORK_TEST_TRANSPORT=bind cannot work there",
        engine()
    );
    vec![Transport::Copy]
}

/// The transport of tests about something else: the first of [`transports`].
pub fn any_transport() -> Transport {
    transports()[0]
}

/// A sandbox with the test settings over `transport`.
pub async fn sandbox_over(artifacts: &Path, label: &str, transport: Transport) -> DockerSandbox {
    ensure_test_image();
    let mut settings = settings(artifacts);
    settings.transport = transport;
    if transport == Transport::Copy {
        // The tree is unpacked by bork-ci in a helper container of its own image.
        settings.runner_image = None;
        settings.runner_binary = Some(env!("CARGO_BIN_EXE_bork-ci").into());
    }
    DockerSandbox::connect(settings, &run_id(&format!("{label}-{}", transport.as_str())))
        .await
        .expect("the Docker engine answers")
}

/// Volumes carrying `label`.
pub fn volumes_with(label: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", &format!("label={label}")])
        .output()
        .expect("docker volume ls runs");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Removes the cache volume the `copy` transport keeps for `repo` (tests' repositories are
/// temporary; a later run's gc would remove it too).
pub fn drop_cache(repo: &Path) {
    let repo = std::fs::canonicalize(repo).unwrap_or_else(|_| repo.to_owned());
    let volumes = volumes_with(&format!("bork-ci.repo={}", repo.display()));
    if !volumes.is_empty() {
        let _ = Command::new("docker")
            .args(["volume", "rm"])
            .args(&volumes)
            .output();
    }
}

pub fn run_id(label: &str) -> String {
    format!("test-{label}-{}", uuid::Uuid::new_v4().simple())
}

pub async fn sandbox(artifacts: &Path, label: &str) -> DockerSandbox {
    ensure_test_image();
    DockerSandbox::connect(settings(artifacts), &run_id(label))
        .await
        .expect("the Docker engine answers")
}

/// A git repository with one commit and a README.
pub fn repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("README.md"), "hello\n").expect("write README");
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "."]);
    git(
        dir.path(),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-qm",
            "init",
        ],
    );
    dir
}

pub fn sh(kind: JobKind, script: &str) -> Job {
    Job::new(
        kind,
        vec!["sh".into(), "-c".into(), script.into()],
        Duration::from_secs(60),
        1 << 20,
    )
}

/// Containers carrying `label` (as `docker ps -a --filter label=...` lists them).
pub fn containers_with(label: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={label}")])
        .output()
        .expect("docker ps runs");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// The containers of run `run_id` other than those it holds, never started, until its cleanup:
/// the anchors (of the cache volumes, the judges' bork-ci) and the tree's holder.
pub fn job_containers_of(run_id: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args(["ps", "-a", "--format", "{{.ID}} {{.Names}}", "--filter"])
        .arg(format!("label=bork-ci.run={run_id}"))
        .output()
        .expect("docker ps runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        // What a run holds until its end (never started): the caches' anchors, the tree's holder,
        // the claim on the repository's kept tree.
        .filter(|line| {
            !line.contains("bork-ci-anchor-")
                && !line.contains("bork-ci-tree-holder-")
                && !line.contains("bork-ci-kept-")
        })
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Running containers carrying `label`.
pub fn running_with(label: &str) -> Vec<String> {
    let output = Command::new("docker")
        .args(["ps", "-q", "--filter", &format!("label={label}")])
        .output()
        .expect("docker ps runs");
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

fn tree_listing(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut entries = Vec::new();
    for entry in ignore::WalkBuilder::new(dir)
        .hidden(false)
        .ignore(false)
        .git_ignore(false)
        .build()
        .flatten()
    {
        let content = std::fs::read(entry.path()).unwrap_or_default();
        entries.push((entry.path().to_owned(), content));
    }
    entries.sort();
    entries
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A judge over `copy` returns its result before its artifacts are back (`settle` waits for
/// them); a job that names its artifact folder (a Verifier pipeline reads it at once) has it
/// filled, and its container gone, when it returns.
#[tokio::test]
async fn a_job_that_names_its_artifact_folder_has_it_filled_when_it_returns() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let sandbox = sandbox_over(artifacts.path(), "named-artifacts", Transport::Copy).await;
    let folder = tempfile::tempdir().expect("tempdir");
    let mut job = sh(JobKind::Checker, "echo named > /artifacts/db/report.txt");
    job.artifacts = Some(folder.path().to_owned());
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    assert_eq!(out.outcome, Outcome::Exited(0), "{}", text(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(folder.path().join("db/report.txt")).expect("there at once"),
        "named\n"
    );
    assert!(job_containers_of(sandbox.run_id()).is_empty());

    let fresh = sh(JobKind::Checker, "echo fresh > /artifacts/db/report.txt");
    let out = sandbox.run(repo.path(), &fresh).await.expect("runs");
    assert_eq!(out.outcome, Outcome::Exited(0), "{}", text(&out.stderr));
    sandbox.settle().await;
    let reports = job_files(artifacts.path(), sandbox.run_id(), "db/report.txt");
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(std::fs::read_to_string(&reports[0]).expect("settled"), "fresh\n");
    assert!(job_containers_of(sandbox.run_id()).is_empty());
    sandbox.cleanup_all().await.expect("cleanup");
    drop_cache(repo.path());
}

#[tokio::test]
async fn repo_is_read_only_and_artifacts_are_writable() {
    for transport in transports() {
        repo_is_read_only_and_artifacts_are_writable_over(transport).await;
    }
}

async fn repo_is_read_only_and_artifacts_are_writable_over(transport: Transport) {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let before = tree_listing(repo.path());
    let sandbox = sandbox_over(artifacts.path(), "ro", transport).await;
    let job = sh(
        JobKind::Checker,
        "pwd; touch /repo/x && echo WROTE; rm /repo/README.md && echo REMOVED; \
         chmod -R 777 /repo && echo CHMOD; touch /usr/bin/x && echo ROOTFS; \
         touch /repo/.git/x && echo GITWRITE; cat /repo/README.md; \
         echo artifact > \"$AGENT_BUILD_DIR/out.txt\" && echo ARTIFACT; \
         echo cached > \"$XDG_CACHE_HOME/c.txt\" && echo CACHED; exit 1",
    );
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    sandbox.settle().await;
    let stdout = text(&out.stdout);
    assert_eq!(
        out.outcome,
        Outcome::Exited(1),
        "{transport:?}: {}",
        text(&out.stderr)
    );
    assert!(stdout.starts_with("/repo\n"), "{stdout}");
    assert!(
        stdout.contains("hello\n"),
        "{transport:?}: the tree is there: {stdout}"
    );
    for forbidden in ["WROTE", "REMOVED", "CHMOD", "ROOTFS", "GITWRITE"] {
        assert!(
            !stdout.contains(forbidden),
            "{transport:?}: {forbidden} in {stdout}"
        );
    }
    assert!(
        text(&out.stderr).contains("Read-only file system"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains("ARTIFACT") && stdout.contains("CACHED"),
        "{transport:?}: {stdout}{}",
        text(&out.stderr)
    );
    assert_eq!(tree_listing(repo.path()), before, "repo changed");
    let out_txt = job_files(artifacts.path(), sandbox.run_id(), "build/out.txt");
    assert_eq!(out_txt.len(), 1, "one job, one artifact directory: {out_txt:?}");
    assert_eq!(
        std::fs::read_to_string(&out_txt[0]).expect("artifact on host"),
        "artifact\n"
    );
    if transport == Transport::Bind {
        assert!(sandbox.shared().build.join("xdg/c.txt").is_file());
    }
    assert!(job_containers_of(sandbox.run_id()).is_empty());
    sandbox.cleanup_all().await.expect("cleanup");
    assert!(volumes_with(&format!("bork-ci.run={}", sandbox.run_id())).is_empty());
    drop_cache(repo.path());
}

#[tokio::test]
async fn confinement_user_capabilities_network_and_secrets() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    git(
        repo.path(),
        &[
            "config",
            "http.https://github.com/.extraheader",
            "AUTHORIZATION: basic CANARY-TOKEN-1",
        ],
    );
    git(
        repo.path(),
        &[
            "remote",
            "add",
            "origin",
            "https://x-access-token:CANARY-TOKEN-2@github.com/o/r.git",
        ],
    );
    // SAFETY: only containers started by this test could read it; none may.
    unsafe { std::env::set_var("BORK_TEST_HOST_CANARY", "CANARY-HOST-ENV") };
    for transport in transports() {
        confinement_over(artifacts.path(), &repo, transport).await;
    }
}

async fn confinement_over(artifacts: &Path, repo: &tempfile::TempDir, transport: Transport) {
    let sandbox = sandbox_over(artifacts, "confine", transport).await;
    let mut job = sh(
        JobKind::Checker,
        "echo uid=$(id -u); grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; \
         echo ifaces; tail -n +3 /proc/net/dev | cut -d: -f1; echo env; env; cat /proc/1/environ; \
         echo gitconfig; cat /repo/.git/config; cat /repo/.git/HEAD; \
         echo > /repo/.git/config && echo GITWRITE; ls /var/run/docker.sock && echo SOCKET; \
         echo nofile=$(ulimit -n) nproc=$(ulimit -u); true",
    );
    job.env = vec![
        ("VISIBLE".into(), "yes".into()),
        ("OPENAI_API_KEY".into(), "CANARY-LLM-KEY".into()),
    ];
    job.secret_env = vec!["OPENAI_API_KEY".into(), "GITHUB_TOKEN".into()];
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    let stdout = text(&out.stdout);
    assert_eq!(out.outcome, Outcome::Exited(0), "{stdout} {}", text(&out.stderr));
    assert!(stdout.contains("uid=65534"), "{stdout}");
    assert!(stdout.contains("CapEff:\t0000000000000000"), "{stdout}");
    assert!(stdout.contains("NoNewPrivs:\t1"), "{stdout}");
    let ifaces: Vec<&str> = stdout
        .split("ifaces\n")
        .nth(1)
        .and_then(|rest| rest.split("env\n").next())
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .collect();
    assert_eq!(ifaces, ["lo"], "{stdout}");
    assert!(stdout.contains("VISIBLE=yes"));
    // The job's own folder under the run's `runs/<run id>/tmp/`: mounted at `/tmp` over `bind`,
    // a folder of its artifacts volume over `copy` (seed 003's `TMPDIR=/artifacts/tmp`).
    let tmpdir = match transport {
        Transport::Bind | Transport::Auto => "TMPDIR=/tmp\n",
        Transport::Copy => "TMPDIR=/artifacts/tmp\n",
    };
    assert!(stdout.contains(tmpdir), "{stdout}");
    assert!(stdout.contains("HOME=/home/judge"), "{stdout}");
    assert!(!stdout.contains("CANARY"), "{stdout}");
    assert!(stdout.contains("ref: refs/heads/main"), "{stdout}");
    assert!(stdout.contains("url = https://github.com/o/r.git"), "{stdout}");
    assert!(!stdout.contains("GITWRITE") && !stdout.contains("SOCKET"));
    assert!(stdout.contains("nofile=1024 nproc=4096"), "{stdout}");
    // The host's own config keeps its token: only the container's copy is stripped.
    assert!(git(repo.path(), &["config", "--list"]).contains("CANARY-TOKEN-1"));
    sandbox.cleanup_all().await.expect("cleanup");
    drop_cache(repo.path());
}

#[tokio::test]
async fn timeout_kills_and_removes_the_container() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    for transport in transports() {
        timeout_over(artifacts.path(), &repo, transport).await;
    }
}

async fn timeout_over(artifacts: &Path, repo: &tempfile::TempDir, transport: Transport) {
    let sandbox = sandbox_over(artifacts, "timeout", transport).await;
    let mut job = sh(JobKind::Checker, "trap '' TERM; echo started; sleep 300");
    job.timeout = Duration::from_secs(2);
    // The runner image (built on first use over `copy`) is not part of the timing.
    sandbox
        .ready_image(JobKind::EditStep)
        .await
        .expect("runner image");
    let started = Instant::now();
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    sandbox.settle().await;
    assert_eq!(out.outcome, Outcome::TimedOut);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(text(&out.stdout), "started\n");
    assert!(job_containers_of(sandbox.run_id()).is_empty());
    sandbox.cleanup_all().await.expect("cleanup");
    drop_cache(repo.path());
}

#[tokio::test]
async fn fork_bomb_is_bounded_by_the_pids_limit() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let mut settings = settings(artifacts.path());
    settings.pids_limit = Some(32);
    ensure_test_image();
    let sandbox = DockerSandbox::connect(settings, &run_id("forkbomb"))
        .await
        .expect("connects");
    let mut job = sh(
        JobKind::Checker,
        // Busybox sh gives up at the first failed fork; the outer shell counts without forking.
        "(for i in $(seq 200); do sleep 30 & done); set -- /proc/[0-9]*; echo running=$#",
    );
    job.timeout = Duration::from_secs(20);
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    sandbox.settle().await;
    let stderr = text(&out.stderr);
    assert!(stderr.contains("fork"), "stderr: {stderr}");
    let running: usize = text(&out.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("running="))
        .and_then(|n| n.trim().parse().ok())
        .expect("the shell reports");
    assert!(running <= 32, "{running} processes");
    assert!(job_containers_of(sandbox.run_id()).is_empty());
}

#[tokio::test]
async fn memory_bomb_is_reported_as_oom() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let mut settings = settings(artifacts.path());
    settings.memory = Some(32 << 20);
    ensure_test_image();
    let sandbox = DockerSandbox::connect(settings, &run_id("oom"))
        .await
        .expect("connects");
    let job = sh(
        JobKind::Checker,
        "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo ${#x}",
    );
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    assert_eq!(out.outcome, Outcome::OomKilled, "{}", text(&out.stderr));
}

#[tokio::test]
async fn output_is_demultiplexed_and_capped() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let sandbox = sandbox(artifacts.path(), "cap").await;
    let mut job = sh(
        JobKind::Checker,
        "echo '{\"overall_findings\":[]}'; head -c 100000 /dev/zero | tr '\\0' e >&2; \
         head -c 3000000 /dev/zero",
    );
    job.output_cap = 4096;
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    assert_eq!(out.outcome, Outcome::Exited(0));
    assert!(out.stdout.starts_with(b"{\"overall_findings\":[]}\n"));
    assert_eq!(out.stdout.len(), 4096);
    assert!(out.stdout_truncated && out.stderr_truncated);
    assert!(out.stderr.iter().all(|b| *b == b'e'));
}

#[tokio::test]
async fn edit_step_profile() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let artifacts = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("tempdir");
    std::fs::write(state.path().join("input.json"), "{}").expect("state file");
    let repo = repo();
    let sandbox = sandbox_over(artifacts.path(), "edit", Transport::Bind).await;
    let mut job = sh(
        JobKind::EditStep,
        "echo git=$(ls -A /repo/.git | wc -l); touch /repo/.git/hooks-x && echo GITWRITE; \
         echo new > /repo/new.txt; cat /state/input.json; echo out > /state/output.json; \
         echo key=$LLM_KEY; echo ifaces=$(tail -n +3 /proc/net/dev | wc -l); \
         echo uid=$(id -u); umask",
    );
    job.env = vec![
        ("LLM_KEY".into(), "the-llm-key".into()),
        ("GITHUB_TOKEN".into(), "CANARY-GH".into()),
    ];
    job.secret_env = vec!["GITHUB_TOKEN".into()];
    job.state_dir = Some(state.path().to_owned());
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    let stdout = text(&out.stdout);
    assert_eq!(out.outcome, Outcome::Exited(0), "{stdout} {}", text(&out.stderr));
    assert!(stdout.contains("git=0\n"), "{stdout}");
    assert!(!stdout.contains("GITWRITE") && !stdout.contains("CANARY"));
    assert!(stdout.contains("key=the-llm-key"));
    assert!(stdout.contains("{}"));
    assert!(stdout.contains("0022"), "{stdout}");
    let owner = std::fs::metadata(repo.path()).expect("repo");
    assert!(stdout.contains(&format!("uid={}", owner.uid())), "{stdout}");
    let ifaces: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ifaces="))
        .and_then(|n| n.parse().ok())
        .expect("ifaces");
    assert!(
        ifaces > 1,
        "host networking shows the host's interfaces: {stdout}"
    );
    let written = std::fs::metadata(repo.path().join("new.txt")).expect("written on host");
    assert_eq!(written.permissions().mode() & 0o777, 0o644);
    assert_eq!((written.uid(), written.gid()), (owner.uid(), owner.gid()));
    assert!(state.path().join("output.json").is_file());
    assert!(
        repo.path().join(".git/HEAD").is_file(),
        ".git untouched on the host"
    );
    assert!(!repo.path().join(".git/hooks-x").exists());
}

#[tokio::test]
async fn missing_image_and_unreachable_engine_are_clear_errors() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    for pull in [PullPolicy::Never, PullPolicy::Missing] {
        let mut settings = settings(artifacts.path());
        settings.image = "bork-ci-test/absent:nope".to_owned();
        settings.pull = pull;
        let sandbox = DockerSandbox::connect(settings, &run_id("missing"))
            .await
            .expect("connects");
        let error = sandbox
            .run(repo.path(), &sh(JobKind::Checker, "true"))
            .await
            .expect_err("no such image");
        assert!(matches!(error, SandboxError::ImageMissing { .. }), "{error}");
        let message = error.to_string();
        assert!(message.contains("bork-ci-test/absent:nope"), "{message}");
        assert!(message.contains("build-images.sh"), "{message}");
    }
    let mut settings = settings(artifacts.path());
    settings.host = Some("unix:///nonexistent/docker.sock".to_owned());
    let error = DockerSandbox::connect(settings, "x")
        .await
        .expect_err("nothing listens");
    let message = error.to_string();
    assert!(matches!(error, SandboxError::Unreachable { .. }));
    assert!(message.contains("unix:///nonexistent/docker.sock"), "{message}");
    assert!(message.contains("--sandbox none"), "{message}");
}

#[tokio::test]
async fn sequence_runs_in_one_container_and_stops_at_first_failure() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    for transport in transports() {
        sequence_over(artifacts.path(), &repo, transport).await;
    }
}

async fn sequence_over(artifacts: &Path, repo: &tempfile::TempDir, transport: Transport) {
    let sandbox = Sandbox::Docker(Box::new(sandbox_over(artifacts, "seq", transport).await));
    let job = sh(JobKind::Verify, "");
    let commands: Vec<Vec<String>> = ["hostname > /tmp/h; echo one", "cat /tmp/h; exit 3", "echo never"]
        .iter()
        .map(|c| vec!["sh".into(), "-c".into(), (*c).into()])
        .collect();
    let outputs = sandbox
        .run_sequence(repo.path(), &job, &commands)
        .await
        .expect("runs");
    assert_eq!(
        outputs.len(),
        2,
        "{transport:?}: {:?}",
        outputs
            .iter()
            .map(|out| (out.outcome, text(&out.stdout), text(&out.stderr)))
            .collect::<Vec<_>>()
    );
    assert_eq!(outputs[0].outcome, Outcome::Exited(0));
    assert_eq!(outputs[1].outcome, Outcome::Exited(3));
    assert!(!outputs[1].stdout.is_empty(), "same container: /tmp/h survives");
    sandbox.cleanup().await;
    drop_cache(repo.path());
}

/// Child mode of the signal tests: start a long checker, and on SIGTERM remove this run's
/// containers and exit 143 (what the CLI's handler does). `BORK_TEST_CHILD_RUN` is the run id.
/// The lease of a child run's objects (see `bork_ci::sandbox::docker::labels::LEASE`).
const CHILD_LEASE: Duration = Duration::from_secs(3);

async fn child_run(run_id: &str, artifacts: &Path) {
    let repo = repo();
    ensure_test_image();
    let mut settings = settings(artifacts);
    // No probe container first: the parent waits for the checker's.
    settings.transport = any_transport();
    // A short lease: once the parent kills this process, what it left is soon expired.
    settings.lease = CHILD_LEASE;
    let sandbox = DockerSandbox::connect(settings, run_id).await.expect("connects");
    let mut term =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("signal handler");
    let mut job = sh(JobKind::Checker, "echo ready > $AGENT_BUILD_DIR/ready; sleep 300");
    job.timeout = Duration::from_secs(300);
    tokio::select! {
        _ = sandbox.run(repo.path(), &job) => std::process::exit(0),
        _ = term.recv() => {
            let _ = sandbox.cleanup_all().await;
            std::process::exit(143);
        }
    }
}

fn spawn_child(test_name: &str, run_id: &str, artifacts: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env("BORK_TEST_CHILD_RUN", run_id)
        .env("BORK_TEST_CHILD_ARTIFACTS", artifacts)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("child starts")
}

/// Waits (at most a minute) for the checker container of the run `label` names; not the
/// containers `copy` creates only to fill volumes.
fn wait_for_container(label: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let output = Command::new("docker")
            .args(["ps", "-aq", "--filter", &format!("label={label}")])
            .args(["--filter", "label=bork-ci.step=checker"])
            .output()
            .expect("docker ps runs");
        let found: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if !found.is_empty() || Instant::now() > deadline {
            return found;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

async fn child_mode() -> bool {
    match (
        std::env::var("BORK_TEST_CHILD_RUN"),
        std::env::var("BORK_TEST_CHILD_ARTIFACTS"),
    ) {
        (Ok(run_id), Ok(artifacts)) => {
            child_run(&run_id, Path::new(&artifacts)).await;
            true
        }
        _ => false,
    }
}

#[tokio::test]
async fn sigterm_mid_check_leaves_no_container() {
    if child_mode().await {
        return;
    }
    ensure_test_image();
    let artifacts = tempfile::tempdir().expect("tempdir");
    let run_id = run_id("sigterm");
    let label = format!("bork-ci.run={run_id}");
    let mut child = spawn_child(
        "sandbox::sigterm_mid_check_leaves_no_container",
        &run_id,
        artifacts.path(),
    );
    assert_eq!(
        wait_for_container(&label).len(),
        1,
        "the checker container starts"
    );
    // The checker has started: its marker is in the artifacts (bind), or it runs (copy: the
    // artifacts come back when it ends).
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        let started = match any_transport() {
            Transport::Copy => !running_with(&label).is_empty(),
            _ => !job_files(artifacts.path(), &run_id, "build/ready").is_empty(),
        };
        if started {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let pid = i32::try_from(child.id()).expect("pid");
    let sent = Instant::now();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).expect("pid"),
        rustix::process::Signal::TERM,
    )
    .expect("SIGTERM sent");
    let status = child.wait().expect("child exits");
    assert_eq!(status.code(), Some(143));
    assert!(
        sent.elapsed() < Duration::from_millis(2500),
        "{:?}",
        sent.elapsed()
    );
    assert!(containers_with(&label).is_empty(), "container left behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_reaps_a_dead_runs_leftovers_at_once_and_the_unprovable_once_their_lease_ends() {
    if child_mode().await {
        return;
    }
    ensure_test_image();
    let artifacts = tempfile::tempdir().expect("tempdir");
    let killed_run = run_id("killed");
    let killed_label = format!("bork-ci.run={killed_run}");
    let mut child = spawn_child(
        "sandbox::gc_reaps_a_dead_runs_leftovers_at_once_and_the_unprovable_once_their_lease_ends",
        &killed_run,
        artifacts.path(),
    );
    assert_eq!(wait_for_container(&killed_label).len(), 1);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // Over `copy` the run also has its idle anchor; a kill -9 leaves both.
    assert_eq!(job_containers_of(&killed_run).len(), 1, "kill -9 leaves it");
    // A run of another PID namespace (or host, or boot) whose lease runs: nothing proves it
    // dead, whatever this process table says.
    let lease_until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + CHILD_LEASE.as_secs();
    let elsewhere_run = run_id("elsewhere");
    let elsewhere = Command::new("docker")
        .args(["create", "--label", "bork-ci=1", "--label"])
        .arg(format!("bork-ci.run={elsewhere_run}"))
        .arg("--label")
        .arg(format!("bork-ci.lease-until={lease_until}"))
        .args([
            "--label",
            "bork-ci.pid-ns=pid:[1]",
            "--label",
            "bork-ci.pid=999999",
            "--label",
            "bork-ci.pid-start=1",
        ])
        .arg("--label")
        .arg(format!(
            "bork-ci.boot={}",
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .expect("boot id")
                .trim()
        ))
        .args([TEST_IMAGE, "true"])
        .output()
        .expect("docker create");
    assert!(elsewhere.status.success(), "{}", text(&elsewhere.stderr));
    let elsewhere_label = format!("bork-ci.run={elsewhere_run}");
    // The killed run is provably dead (same boot and PID namespace, its pid gone): its
    // leftovers go at once, within their lease.
    let early = sandbox(artifacts.path(), "early-reaper").await;
    docker::gc(&early, Duration::from_secs(0)).await.expect("gc runs");
    assert!(
        containers_with(&killed_label).is_empty(),
        "a dead run's leftovers stay"
    );
    assert_eq!(containers_with(&elsewhere_label).len(), 1, "its lease still runs");
    tokio::time::sleep(CHILD_LEASE + Duration::from_secs(2)).await;

    // An unlabelled container and a live run's container must survive.
    let unlabelled = Command::new("docker")
        .args(["create", TEST_IMAGE, "true"])
        .output()
        .expect("docker create");
    let unlabelled = text(&unlabelled.stdout).trim().to_owned();
    assert!(!unlabelled.is_empty());
    let live = sandbox_over(artifacts.path(), "live", any_transport()).await;
    let live_run = live.run_id().to_owned();
    let live_label = format!("bork-ci.run={live_run}");
    let repo = repo();
    let live_task = {
        let repo = repo.path().to_owned();
        tokio::spawn(async move {
            let mut job = sh(JobKind::Checker, "sleep 20");
            job.timeout = Duration::from_secs(20);
            let out = live.run(&repo, &job).await;
            (live, out)
        })
    };
    assert_eq!(wait_for_container(&live_label).len(), 1);

    let reaper = sandbox(artifacts.path(), "reaper").await;
    let report = docker::gc(&reaper, Duration::from_secs(3600))
        .await
        .expect("gc runs");
    assert!(
        containers_with(&elsewhere_label).is_empty(),
        "leftover reaped once its lease ended"
    );
    // Docker-outside-of-Docker: the leftover is gone, but this reaper's report can be empty
    // there (another reaper of the shared engine removed it first); the removal itself is
    // what the line above proves on every engine.
    if engine() != "dood" {
        assert!(!report.containers.is_empty());
    }
    assert_eq!(job_containers_of(&live_run).len(), 1, "live run untouched");
    let still_there = Command::new("docker")
        .args(["inspect", "-f", "{{.Id}}", &unlabelled])
        .output()
        .expect("docker inspect");
    assert!(still_there.status.success(), "unlabelled container untouched");
    let _ = Command::new("docker").args(["rm", "-f", &unlabelled]).output();
    let (live, _) = live_task.await.expect("live run ends");
    live.cleanup_all().await.expect("cleanup");
    assert!(containers_with(&live_label).is_empty());
}

#[tokio::test]
async fn edit_step_over_copy_sees_no_tree_and_hands_its_state_back() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("tempdir");
    std::fs::write(state.path().join("input.json"), "{\"in\":1}").expect("state file");
    let repo = repo();
    let before = tree_listing(repo.path());
    let mut settings = settings(artifacts.path());
    settings.transport = Transport::Copy;
    ensure_test_image();
    let sandbox = DockerSandbox::connect(settings, &run_id("edit-copy"))
        .await
        .expect("connects");
    let mut job = sh(
        JobKind::EditStep,
        "echo entries=$(ls -A /repo | wc -l); echo new > /repo/new.txt && echo TREEWRITE; \
         cat /state/step/input.json; echo; echo '{\"out\":2}' > /state/step/output.json; \
         touch /state/x && echo STATEROOT; \
         echo uid=$(id -u); echo key=$LLM_KEY",
    );
    job.env = vec![("LLM_KEY".into(), "the-llm-key".into())];
    job.state_dir = Some(state.path().to_owned());
    let out = sandbox.run(repo.path(), &job).await.expect("runs");
    let stdout = text(&out.stdout);
    assert_eq!(out.outcome, Outcome::Exited(0), "{stdout} {}", text(&out.stderr));
    assert!(stdout.contains("entries=0"), "no working tree: {stdout}");
    assert!(!stdout.contains("TREEWRITE"), "{stdout}");
    // Podman gives a fresh volume's root to the container's user (`docker::Podman`): there the
    // step may write beside `step/`; either way nothing of it comes back.
    if !sandbox.is_podman() {
        assert!(!stdout.contains("STATEROOT"), "{stdout}");
    }
    assert!(!state.path().join("x").exists(), "only step/ comes back");
    assert!(
        stdout.contains("{\"in\":1}") && stdout.contains("uid=65534"),
        "{stdout}"
    );
    assert!(stdout.contains("key=the-llm-key"));
    assert_eq!(
        std::fs::read_to_string(state.path().join("output.json")).expect("copied back"),
        "{\"out\":2}\n"
    );
    assert_eq!(tree_listing(repo.path()), before, "the host tree is untouched");
    assert!(volumes_with(&format!("bork-ci.run={}", sandbox.run_id())).is_empty());
}

/// The edit step's state over its stdio (`Job::state_over_stdio`, what `bork-ci edit-step
/// --stdio` reads and writes): the state folder's files arrive on stdin as one tar, what the step
/// prints on stdout becomes the host's `output.json`, and no state volume is made. A step that
/// never reads its stdin, or prints nothing, ends all the same and leaves no result.
#[tokio::test]
async fn edit_step_over_stdio_takes_its_state_on_stdin_and_gives_its_result_on_stdout() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    for transport in transports() {
        let mut settings = settings(artifacts.path());
        settings.transport = transport;
        ensure_test_image();
        let sandbox = DockerSandbox::connect(settings, &run_id(&format!("stdio-{}", transport.as_str())))
            .await
            .expect("connects");
        let state = tempfile::tempdir().expect("tempdir");
        // Larger than any pipe buffer: the engine takes it only as the step reads.
        let big = "i".repeat(3 << 20);
        std::fs::write(state.path().join("input.json"), format!("{{\"in\":\"{big}\"}}")).expect("state");
        std::fs::write(state.path().join("script.json"), "[\"answer\"]").expect("state");
        let mut job = sh(
            JobKind::EditStep,
            "mkdir /tmp/s && cd /tmp/s && tar xf - && wc -c < input.json >&2 && cat script.json >&2 \
             && ls /state >&2; echo '{\"out\":3}'",
        );
        job.state_dir = Some(state.path().to_owned());
        job.state_over_stdio = true;
        let out = sandbox.run(repo.path(), &job).await.expect("runs");
        let stderr = text(&out.stderr);
        assert_eq!(out.outcome, Outcome::Exited(0), "{stderr}");
        assert!(stderr.contains(&format!("{}\n", big.len() + 9)), "{stderr}");
        assert!(stderr.contains("[\"answer\"]"), "{stderr}");
        assert!(stderr.contains("No such file"), "no state mount: {stderr}");
        assert!(out.stdout.is_empty(), "the result goes to the state folder");
        assert_eq!(
            std::fs::read_to_string(state.path().join("output.json")).expect("the result"),
            "{\"out\":3}\n"
        );
        assert!(volumes_with(&format!("bork-ci.run={}", sandbox.run_id())).is_empty());

        // A step that reads nothing and says nothing: it ends, and there is no result.
        let quiet = tempfile::tempdir().expect("tempdir");
        std::fs::write(quiet.path().join("input.json"), &big).expect("state");
        let mut job = sh(JobKind::EditStep, "exit 0");
        job.state_dir = Some(quiet.path().to_owned());
        job.state_over_stdio = true;
        let started = std::time::Instant::now();
        let out = sandbox.run(repo.path(), &job).await.expect("runs");
        assert_eq!(out.outcome, Outcome::Exited(0));
        assert!(started.elapsed() < Duration::from_secs(30));
        assert!(!quiet.path().join("output.json").exists());
    }
}

#[tokio::test]
async fn copy_mounts_no_host_path_and_keeps_a_cache_per_repository() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    std::fs::write(repo.path().join("ignored.log"), "x").expect("write");
    std::fs::write(repo.path().join(".gitignore"), "*.log\n").expect("write");
    std::fs::write(repo.path().join("untracked.txt"), "u").expect("write");
    // More files than an engine is asked to extract itself (a small tree goes in that way): the
    // tree goes through bork-ci's helper, and through the engine when the helper cannot be had.
    std::fs::create_dir(repo.path().join("many")).expect("mkdir");
    for index in 0..600 {
        std::fs::write(repo.path().join(format!("many/{index}.txt")), "m").expect("write");
    }
    let repo_path = std::fs::canonicalize(repo.path()).expect("canonical");
    let artifacts_path = std::fs::canonicalize(artifacts.path()).expect("canonical");
    let job = sh(
        JobKind::Checker,
        "cat /proc/self/mountinfo; ls -A /repo; cat $BORK_DEPS_DIR/seen 2>/dev/null; \
         cat $XDG_CACHE_HOME/built 2>/dev/null && echo BUILT-CARRIED; echo built > $XDG_CACHE_HOME/built; \
         echo x > $BORK_DEPS_DIR/w 2>/dev/null && echo DEPS-WRITABLE; true",
    );
    let setup = Job::new(JobKind::Setup, Vec::new(), Duration::from_secs(60), 1 << 16);
    let fill = [vec![
        "sh".to_owned(),
        "-c".to_owned(),
        "[ -f $BORK_DEPS_DIR/seen ] || echo here > $BORK_DEPS_DIR/seen".to_owned(),
    ]];
    let mut cache_volume = String::new();
    for round in 0..2 {
        // Two sandboxes: two runs of the same repository share the dependency cache, which only
        // the setup job writes; each run has a build cache of its own. The second has a runner
        // image without bork-ci: the engine extracts the tree itself then. Each fills a tree
        // volume of its own (a kept tree: `a_kept_tree_gives_the_next_run_its_own_tree_...`).
        ensure_test_image();
        let sandbox = {
            let mut settings = settings(artifacts.path());
            settings.transport = Transport::Copy;
            settings.keep_tree = false;
            if round == 0 {
                settings.runner_image = None;
                settings.runner_binary = Some(env!("CARGO_BIN_EXE_bork-ci").into());
            }
            let label = if round == 0 {
                "cache-copy"
            } else {
                "cache-fallback"
            };
            DockerSandbox::connect(settings, &run_id(label))
                .await
                .expect("connects")
        };
        if round == 0 {
            let filled = sandbox
                .run_sequence(repo.path(), &setup, &fill)
                .await
                .expect("setup runs");
            assert_eq!(
                filled[0].outcome,
                Outcome::Exited(0),
                "{}",
                text(&filled[0].stderr)
            );
        }
        let out = sandbox.run(repo.path(), &job).await.expect("runs");
        let stdout = text(&out.stdout);
        assert_eq!(out.outcome, Outcome::Exited(0), "{}", text(&out.stderr));
        for host_path in [&repo_path, &artifacts_path] {
            assert!(
                !stdout.contains(host_path.to_str().expect("utf-8")),
                "{} is mounted: {stdout}",
                host_path.display()
            );
        }
        assert!(stdout.contains("untracked.txt") && stdout.contains(".gitignore"));
        assert!(
            !stdout.contains("ignored.log"),
            "ignored files stay out: {stdout}"
        );
        assert!(
            stdout.contains("here"),
            "the dependency cache from setup: {stdout}"
        );
        assert!(
            !stdout.contains("BUILT-CARRIED"),
            "a build cache per run: {stdout}"
        );
        assert!(
            !stdout.contains("DEPS-WRITABLE"),
            "judges read the dependency cache only: {stdout}"
        );
        assert_eq!(
            sandbox.tree_through_engine(),
            round == 1,
            "busybox has no bork-ci to unpack"
        );
        sandbox.cleanup_all().await.expect("cleanup");
        let (kept, caches): (Vec<String>, Vec<String>) =
            volumes_with(&format!("bork-ci.repo={}", repo_path.display()))
                .into_iter()
                .partition(|name| name.starts_with("bork-ci-kept-"));
        assert_eq!(caches.len(), 1, "{caches:?}");
        cache_volume = caches[0].clone();
        // `sandbox.keep-tree: false`: the tree went with its run.
        assert!(kept.is_empty(), "{kept:?}");
    }
    let reaper = sandbox(artifacts.path(), "cache-gc").await;
    let report = docker::gc(&reaper, Duration::from_secs(3600))
        .await
        .expect("gc runs");
    assert!(!report.volumes.contains(&cache_volume), "a run's gc keeps caches");
    let report = docker::gc_caches(&reaper, Duration::ZERO).await.expect("gc runs");
    assert!(report.contains(&cache_volume), "{report:?}");
    assert!(volumes_with(&format!("bork-ci.repo={}", repo_path.display())).is_empty());
}

/// A mark that the judges' bork-ci volume was filled whole stays while that very volume (its
/// name and id) is there, and goes with it: `gc_caches` never leaves a mark vouching for a
/// volume made again under the same name.
#[tokio::test]
async fn a_tool_volumes_mark_goes_with_it_and_only_then() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let tool = format!("bork-ci-tool-test{}", &tag[..12]);
    let volume = |name: &str, extra: &[String]| {
        let created = Command::new("docker")
            .args([
                "volume",
                "create",
                "--label",
                "bork-ci=1",
                "--label",
                "bork-ci.cache=1",
            ])
            .args(extra.iter().flat_map(|label| ["--label", label.as_str()]))
            .arg(name)
            .output()
            .expect("docker volume create");
        assert!(created.status.success(), "{}", text(&created.stderr));
    };
    // Made long ago: a `gc_caches` whose age limit only it passes leaves other tests' caches be.
    volume(
        &tool,
        &[format!("bork-ci.volume-id={tag}"), "bork-ci.created=1".to_owned()],
    );
    let older_than = Duration::from_secs(1_000_000_000);
    let marks = |id: &str, of: &str| {
        let mark = format!("{of}-whole-{id}");
        volume(
            &mark,
            &[format!("bork-ci.marks={of}"), format!("bork-ci.marks-id={id}")],
        );
        mark
    };
    let whole = marks(&tag, &tool);
    let other_id = marks("0123456789abcdef", &tool);
    let gone = marks(&tag, &format!("{tool}-gone"));
    // The tool volume held, as a live run holds it.
    let hold = Command::new("docker")
        .args(["create", "--label", "bork-ci-test.mark-hold=1", "-v"])
        .arg(format!("{tool}:/t"))
        .args([TEST_IMAGE, "true"])
        .output()
        .expect("docker create");
    assert!(hold.status.success(), "{}", text(&hold.stderr));
    let hold = text(&hold.stdout).trim().to_owned();
    let reaper = sandbox(artifacts.path(), "mark-gc").await;
    let removed = docker::gc_caches(&reaper, older_than).await.expect("gc runs");
    assert!(volume_exists(&tool) && volume_exists(&whole), "{removed:?}");
    assert!(
        !volume_exists(&other_id),
        "a mark of another id goes: {removed:?}"
    );
    assert!(
        !volume_exists(&gone),
        "a mark of a volume not there goes: {removed:?}"
    );
    let _ = Command::new("docker").args(["rm", "-f", &hold]).output();
    let removed = docker::gc_caches(&reaper, older_than).await.expect("gc runs");
    assert!(!volume_exists(&tool), "{removed:?}");
    assert!(
        !volume_exists(&whole),
        "the mark goes with its volume: {removed:?}"
    );
}

#[tokio::test]
async fn auto_binds_only_where_the_engine_sees_this_hosts_paths() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let sandbox = sandbox_over(artifacts.path(), "auto", Transport::Auto).await;
    // Bind on a local socket of this host (Docker, Podman); copy over TCP, and from a container
    // whose paths the engine's host does not have (the probe finds other bytes or none there).
    let expected = if engine_sees_host_paths() {
        Transport::Bind
    } else {
        Transport::Copy
    };
    assert_eq!(sandbox.chosen_transport(), None);
    assert_eq!(sandbox.transport(repo.path(), TEST_IMAGE).await, expected);
    assert_eq!(sandbox.chosen_transport(), Some(expected));
    assert!(job_containers_of(sandbox.run_id()).is_empty());
    assert!(
        std::fs::read_dir(artifacts.path())
            .expect("artifact root")
            .all(|entry| !entry
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .contains("probe")),
        "the probe's marker is removed"
    );
    // A later run on the same engine, repository and folders: a `bind` answer is remembered
    // and taken without a probe container; the run's first job proves it before it starts and
    // judges the tree. Where the engine does not see this host's paths, a remembered `bind`
    // (written here, as a stale answer would be) fails that proof and the run goes over `copy`.
    let again = sandbox_over(artifacts.path(), "auto-again", Transport::Auto).await;
    let remembered = again
        .remembered_transport_file(repo.path())
        .expect("the remembered answer's file");
    assert_eq!(
        remembered.exists(),
        expected == Transport::Bind,
        "only a bind is remembered: {}",
        remembered.display()
    );
    if expected == Transport::Copy {
        std::fs::create_dir_all(remembered.parent().expect("parent")).expect("mkdir");
        std::fs::write(&remembered, "bind\n").expect("write");
    }
    let job = sh(
        JobKind::Checker,
        "cat README.md; ls -a \"${TMPDIR:-/tmp}\" /tmp | grep -c probe || true",
    );
    let out = again.run(repo.path(), &job).await.expect("runs");
    assert_eq!(
        text(&out.stdout),
        "hello\n0\n",
        "the tree, and no marker left for the job: {}",
        text(&out.stderr)
    );
    assert_eq!(again.chosen_transport(), Some(expected));
    if expected == Transport::Bind {
        assert!(
            !again.transport_probed(),
            "a remembered bind runs no probe container"
        );
        assert!(remembered.exists());
    } else if engine() == "dood" {
        assert!(!remembered.exists(), "a bind that did not hold is forgotten");
    }
    again.cleanup_all().await.expect("cleanup");
    assert!(job_containers_of(again.run_id()).is_empty());
    // The edit step is made for its transport (its state, who applies the edits): a remembered
    // `bind` is proven before the step is made, not by the step's own container.
    if expected == Transport::Copy {
        std::fs::create_dir_all(remembered.parent().expect("parent")).expect("mkdir");
        std::fs::write(&remembered, "bind\n").expect("write");
    }
    let step = sandbox_over(artifacts.path(), "auto-step", Transport::Auto).await;
    assert_eq!(
        step.edit_step_transport(repo.path()).await.expect("decides"),
        expected
    );
    assert!(step.transport_probed(), "the remembered bind was proven first");
    assert_eq!(step.chosen_transport(), Some(expected));
    if engine() == "dood" {
        assert_eq!(
            remembered.exists(),
            expected == Transport::Bind,
            "a bind that did not hold is forgotten"
        );
    }
    step.cleanup_all().await.expect("cleanup");
    assert!(job_containers_of(step.run_id()).is_empty());
}

/// The volumes of run `run_id` labelled `bork-ci.step=step`. One label filter, the other label
/// read from each volume: engines differ in how they combine label filters on volumes (Podman
/// 4.3 matches any of them).
fn run_volumes_of_step(run_id: &str, step: &str) -> Vec<String> {
    let listed = Command::new("docker")
        .args([
            "volume",
            "ls",
            "--format",
            "{{.Name}} {{.Label \"bork-ci.step\"}}",
            "--filter",
        ])
        .arg(format!("label=bork-ci.run={run_id}"))
        .output()
        .expect("docker volume ls");
    text(&listed.stdout)
        .lines()
        .filter_map(|line| line.split_once(' '))
        .filter(|(_, label)| *label == step)
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Whether the engine has a volume named `name`.
fn volume_exists(name: &str) -> bool {
    Command::new("docker")
        .args(["volume", "inspect", name])
        .output()
        .expect("docker volume inspect")
        .status
        .success()
}

/// The volumes the never-started containers of run `run_id` hold whose names start with `prefix`.
fn held_volumes(run_id: &str, prefix: &str) -> Vec<String> {
    let ids = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=bork-ci.run={run_id}"))
        .output()
        .expect("docker ps");
    let ids: Vec<String> = text(&ids.stdout).split_whitespace().map(str::to_owned).collect();
    if ids.is_empty() {
        return Vec::new();
    }
    let output = Command::new("docker")
        .args(["inspect", "-f", "{{range .Mounts}}{{.Name}} {{end}}"])
        .args(&ids)
        .output()
        .expect("docker inspect");
    let mut names: Vec<String> = text(&output.stdout)
        .split_whitespace()
        .filter(|name| name.starts_with(prefix))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[tokio::test]
async fn judges_over_copy_share_one_bork_ci_volume_per_executable() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let job = sh(
        JobKind::Checker,
        "test -x /opt/bork-ci/bin/bork-ci -o -x /opt/bork-ci/libexec/bork-ci && echo bork-ci there",
    );
    let run = |label: &'static str| {
        let artifacts = artifacts.path().to_owned();
        let repo = repo.path().to_owned();
        let job = job.clone();
        async move {
            let sandbox = sandbox_over(&artifacts, label, Transport::Copy).await;
            let out = sandbox.run(&repo, &job).await.expect("runs");
            sandbox.settle().await;
            assert_eq!(text(&out.stdout), "bork-ci there\n", "{}", text(&out.stderr));
            // The kept volume its holder holds, or the run's own.
            let held = held_volumes(sandbox.run_id(), "bork-ci-tool-");
            // Held by this test too until it ends: another test's `gc_caches` removes every
            // cache volume no container references.
            for volume in &held {
                let _ = Command::new("docker")
                    .args(["create", "--label", "bork-ci-test.tool-hold=1", "-v"])
                    .arg(format!("{volume}:/t"))
                    .args([TEST_IMAGE, "true"])
                    .output();
            }
            let mut used = held;
            used.extend(run_volumes_of_step(sandbox.run_id(), "tool"));
            sandbox.cleanup_all().await.expect("cleanup");
            used
        }
    };
    let release_holds = || {
        let holds = Command::new("docker")
            .args(["ps", "-aq", "--filter", "label=bork-ci-test.tool-hold=1"])
            .output()
            .expect("docker ps");
        let ids: Vec<String> = text(&holds.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if !ids.is_empty() {
            let _ = Command::new("docker").args(["rm", "-f"]).args(&ids).output();
        }
    };
    // The first run fills it (or finds it filled by another test of this executable); it
    // outlives the run, marked complete, and the next run takes the very same volume.
    let first = run("tool-first").await;
    assert_eq!(first.len(), 1, "{first:?}");
    let kept = first[0].clone();
    let key = kept.trim_start_matches("bork-ci-tool-").to_owned();
    assert_eq!(key.len(), 16, "named by the executable: {kept}");
    let labels = Command::new("docker")
        .args(["volume", "inspect", "-f", "{{json .Labels}}", &kept])
        .output()
        .expect("docker volume inspect");
    let labels: serde_json::Value = serde_json::from_slice(&labels.stdout)
        .unwrap_or_else(|error| panic!("the labels of {kept}: {error}: {}", text(&labels.stderr)));
    assert_eq!(labels["bork-ci.cache"], "1", "kept for `bork-ci gc`: {labels}");
    assert!(labels.get("bork-ci.run").is_none(), "{labels}");
    // Marked whole by a volume named for it and its id.
    let id = labels["bork-ci.volume-id"].as_str().expect("an id").to_owned();
    let whole = format!("{kept}-whole-{id}");
    assert!(volume_exists(&whole), "{whole}");
    assert_eq!(run("tool-second").await, vec![kept.clone()]);
    // Created, started and waited for without attaching (Podman's API refuses the CLI's
    // attach), with ulimits within this host's hard limits (Podman's defaults are above them).
    let mark = |script: &str| {
        let created = Command::new("docker")
            .args(["create", "--network", "none", "--user", "0:0"])
            .args([
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=1024:1024",
                "-v",
            ])
            .arg(format!("{kept}:/t"))
            .args([TEST_IMAGE, "sh", "-c", script])
            .output()
            .expect("docker create");
        assert!(created.status.success(), "{}", text(&created.stderr));
        let id = text(&created.stdout).trim().to_owned();
        let started = Command::new("docker")
            .args(["start", &id])
            .output()
            .expect("docker start");
        let waited = Command::new("docker")
            .args(["wait", &id])
            .output()
            .expect("docker wait");
        let _ = Command::new("docker").args(["rm", "-f", &id]).output();
        assert!(started.status.success(), "{}", text(&started.stderr));
        assert_eq!(text(&waited.stdout).trim(), "0", "{script}");
    };
    // Marked whole, it is taken as it is: not read back (its last file gone here).
    mark("rm /t/.bork-ci-complete");
    assert_eq!(run("tool-marked").await, vec![kept.clone()]);
    // Half filled (no mark, and the file its filling writes last missing, as after a run
    // killed while filling it): not used; the run fills one of its own, which goes with the run.
    let removed = Command::new("docker")
        .args(["volume", "rm", &whole])
        .output()
        .expect("docker volume rm");
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    let third = run("tool-third").await;
    assert_eq!(third.len(), 1, "{third:?}");
    assert_ne!(third[0], kept, "a half-filled volume is not used");
    assert!(
        !volumes_with("bork-ci.step=tool").contains(&third[0]),
        "the run's own volume goes with it"
    );
    // Its last file back (a volume an older bork-ci filled has no mark): taken, and marked.
    mark(&format!("printf %s {key} > /t/.bork-ci-complete"));
    assert_eq!(run("tool-fourth").await, vec![kept]);
    assert!(volume_exists(&whole), "marked whole again: {whole}");
    release_holds();
    drop_cache(repo.path());
}

#[tokio::test]
async fn an_edit_step_image_that_cannot_be_built_is_one_line_naming_the_fix() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let not_elf = artifacts.path().join("bork-ci");
    std::fs::write(&not_elf, "#!/bin/sh\necho not a binary\n").expect("write");
    let mut settings = settings(artifacts.path());
    settings.runner_image = None;
    settings.runner_binary = Some(not_elf);
    ensure_test_image();
    let sandbox = DockerSandbox::connect(settings, &run_id("unbuildable"))
        .await
        .expect("connects");
    let error = sandbox
        .ready_image(JobKind::EditStep)
        .await
        .expect_err("a shell script is no executable to build from");
    assert!(matches!(error, SandboxError::RunnerImage { .. }), "{error}");
    let message = error.to_string();
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("bork-ci-runner:"), "{message}");
    assert!(message.contains("not an ELF file"), "{message}");
    assert!(
        message.contains("sandbox.runner-image") && message.contains("--sandbox none"),
        "{message}"
    );
}

#[tokio::test]
async fn copy_sends_only_changes_and_each_job_sees_the_tree_as_it_is() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    std::fs::create_dir_all(repo.path().join("dir")).expect("mkdir");
    std::fs::write(repo.path().join("dir/inner.txt"), "inner\n").expect("write");
    std::fs::write(repo.path().join("gone.txt"), "gone\n").expect("write");
    std::fs::write(repo.path().join("kept.txt"), "kept\n").expect("write");
    let sandbox = sandbox_over(artifacts.path(), "delta", Transport::Copy).await;
    let job = sh(
        JobKind::Checker,
        "find . -path ./.git -prune -o -print | sort; echo ---; cat README.md dir 2>&1; \
         cat kept.txt new.txt 2>&1",
    );
    let first = text(&sandbox.run(repo.path(), &job).await.expect("runs").stdout);
    assert!(
        first.contains("./gone.txt") && first.contains("./dir/inner.txt"),
        "{first}"
    );
    // What an edit step does between two checks: change, delete, add, a folder turned file.
    std::fs::write(repo.path().join("README.md"), "changed\n").expect("write");
    std::fs::remove_file(repo.path().join("gone.txt")).expect("rm");
    std::fs::write(repo.path().join("new.txt"), "new\n").expect("write");
    std::fs::remove_dir_all(repo.path().join("dir")).expect("rm");
    std::fs::write(repo.path().join("dir"), "now a file\n").expect("write");
    let second = text(&sandbox.run(repo.path(), &job).await.expect("runs").stdout);
    assert!(
        !second.contains("gone.txt") && !second.contains("inner.txt"),
        "{second}"
    );
    assert!(
        second.contains("changed\n") && second.contains("now a file\n"),
        "{second}"
    );
    assert!(second.contains("kept\nnew\n"), "{second}");
    // Nothing changed: the same again.
    let third = text(&sandbox.run(repo.path(), &job).await.expect("runs").stdout);
    assert_eq!(third, second);
    // Only writes (a changed file, a new folder with an executable in it): they reach the
    // volume through the tree's holder, a container never started, as the job's user reads them.
    std::fs::write(repo.path().join("kept.txt"), "kept again\n").expect("write");
    std::fs::create_dir_all(repo.path().join("sub")).expect("mkdir");
    std::fs::write(repo.path().join("sub/tool.sh"), "#!/bin/sh\necho tool ran\n").expect("write");
    std::fs::set_permissions(
        repo.path().join("sub/tool.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let writes = sh(
        JobKind::Checker,
        "cat kept.txt new.txt; ./sub/tool.sh; stat -c '%a %u' sub/tool.sh sub kept.txt",
    );
    let fourth = text(&sandbox.run(repo.path(), &writes).await.expect("runs").stdout);
    // A judge's container and volumes go after its result is in: settled before they are listed.
    sandbox.settle().await;
    assert_eq!(
        fourth, "kept again\nnew\ntool ran\n755 0\n755 0\n644 0\n",
        "the writes as the tree has them"
    );
    // A removal below the top (an old file beside a kept one, a folder in a folder): its folder
    // is replaced whole through the holder, no helper container started.
    std::fs::write(repo.path().join("sub/old.txt"), "old\n").expect("write");
    std::fs::create_dir_all(repo.path().join("sub/deep")).expect("mkdir");
    std::fs::write(repo.path().join("sub/deep/deeper.txt"), "deeper\n").expect("write");
    let listing = sh(
        JobKind::Checker,
        "find sub | sort; cat sub/old.txt 2>&1; stat -c '%a %u' sub sub/tool.sh",
    );
    let fifth = text(&sandbox.run(repo.path(), &listing).await.expect("runs").stdout);
    assert!(
        fifth.starts_with("sub\nsub/deep\nsub/deep/deeper.txt\nsub/old.txt\n"),
        "{fifth}"
    );
    std::fs::remove_file(repo.path().join("sub/old.txt")).expect("rm");
    std::fs::remove_dir_all(repo.path().join("sub/deep")).expect("rm");
    let helpers = sandbox.tree_helper_runs();
    let sixth = text(&sandbox.run(repo.path(), &listing).await.expect("runs").stdout);
    assert_eq!(
        sixth, "sub\nsub/tool.sh\ncat: can't open 'sub/old.txt': No such file or directory\n755 0\n755 0\n",
        "the removed file and folder gone, the folder made again as it was"
    );
    assert_eq!(
        sandbox.tree_helper_runs(),
        helpers,
        "no helper container for a removal below the top"
    );
    sandbox.settle().await;
    let holders = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=bork-ci.run={}", sandbox.run_id()))
        .args(["--filter", "label=bork-ci.step=tree-holder"])
        .output()
        .expect("docker ps");
    assert_eq!(
        text(&holders.stdout).lines().count(),
        1,
        "one holder for the run's tree volume"
    );
    assert!(!sandbox.tree_through_engine(), "the helper unpacked every time");
    // The tree's volume (its holder first) and the run's build cache removed between two jobs:
    // the next job judges the whole tree again, not an empty volume the engine made for the
    // name it was created with, and finds the build cache's folders open to it again.
    let of_step = |step: &str| run_volumes_of_step(sandbox.run_id(), step);
    // Not kept: a tree of 512 files or fewer (`sandbox.keep-tree`).
    let (trees, builds) = (of_step("repo"), of_step("build"));
    assert_eq!((trees.len(), builds.len()), (1, 1), "{trees:?} {builds:?}");
    assert!(kept_trees(repo.path()).is_empty());
    let removed = Command::new("docker")
        .args(["rm", "-f"])
        .args(text(&holders.stdout).split_whitespace())
        .status()
        .expect("docker rm");
    assert!(removed.success());
    // Each removed on its own, and then looked for: on Podman a volume listed a moment ago may
    // be gone already (seen once in CI), which is the state wanted here too.
    for volume in trees.iter().chain(&builds) {
        let _ = Command::new("docker").args(["volume", "rm", volume]).output();
    }
    assert!(
        of_step("repo").is_empty() && of_step("build").is_empty(),
        "the tree's volume and the build cache are gone"
    );
    std::fs::write(repo.path().join("new.txt"), "newer\n").expect("write");
    let again = sh(
        JobKind::Checker,
        "cat kept.txt new.txt README.md; ./sub/tool.sh; stat -c '%a' /cache/xdg /cache/cargo-target",
    );
    let seventh = text(&sandbox.run(repo.path(), &again).await.expect("runs").stdout);
    assert_eq!(
        seventh, "kept again\nnewer\nchanged\ntool ran\n1777\n1777\n",
        "the whole tree in a volume filled again, the build cache's skeleton in its new volume"
    );
    assert_eq!(
        of_step("repo").len(),
        1,
        "the old tree volume is gone with its job"
    );
    sandbox.cleanup_all().await.expect("cleanup");
    assert!(volumes_with(&format!("bork-ci.run={}", sandbox.run_id())).is_empty());
    drop_cache(repo.path());
}

/// A sandbox over `copy` with `sandbox.keep-tree` on.
async fn kept_sandbox(artifacts: &Path, label: &str) -> DockerSandbox {
    let mut settings = settings(artifacts);
    settings.transport = Transport::Copy;
    settings.keep_tree = true;
    settings.runner_image = None;
    settings.runner_binary = Some(env!("CARGO_BIN_EXE_bork-ci").into());
    DockerSandbox::connect(settings, &run_id(label))
        .await
        .expect("the Docker engine answers")
}

/// Asserts that `sandbox`'s run, its jobs settled, has a tree volume of its own (not a kept one).
async fn assert_own_tree(sandbox: &DockerSandbox) {
    sandbox.settle().await;
    assert_eq!(
        run_volumes_of_step(sandbox.run_id(), "repo").len(),
        1,
        "{}: a tree volume of its own",
        sandbox.run_id()
    );
}

/// The tree volumes the `copy` transport keeps for `repo` across runs.
fn kept_trees(repo: &Path) -> Vec<String> {
    let repo = std::fs::canonicalize(repo).unwrap_or_else(|_| repo.to_owned());
    let with_repo = volumes_with(&format!("bork-ci.repo={}", repo.display()));
    let kept = volumes_with("bork-ci.step=kept-tree");
    with_repo.into_iter().filter(|name| kept.contains(name)).collect()
}

/// Sets the modification time of `path` to Unix second `seconds`.
fn set_mtime(path: &Path, seconds: u64) {
    let file = std::fs::File::options().write(true).open(path).expect("open");
    file.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(seconds))
        .expect("set mtime");
}

/// A first run of the repository at `root` on this engine, with `sandbox.keep-tree`: a tree
/// volume of its own, gone with it, and the kept tree's state volume left for the next run.
async fn a_first_run_keeps_no_tree(artifacts: PathBuf, root: PathBuf, look: Job) {
    let (artifacts, root, look) = (artifacts.as_path(), root.as_path(), &look);
    let zeroth = kept_sandbox(artifacts, "kept-zeroth").await;
    let seen = text(&zeroth.run(root, look).await.expect("runs").stdout);
    assert!(seen.contains("./gone.txt\n./same.txt\n"), "{seen}");
    assert_own_tree(&zeroth).await;
    zeroth.cleanup_all().await.expect("cleanup");
    assert!(kept_trees(root).is_empty(), "nothing kept by a first run");
    assert!(volumes_with(&format!("bork-ci.run={}", zeroth.run_id())).is_empty());
    let canonical = std::fs::canonicalize(root).expect("canonical");
    let states = volumes_with("bork-ci.step=kept-state");
    let state_of_repo = volumes_with(&format!("bork-ci.repo={}", canonical.display()))
        .into_iter()
        .filter(|name| states.contains(name))
        .count();
    assert_eq!(state_of_repo, 1, "the state volume stays");
}

#[tokio::test]
async fn a_kept_tree_gives_the_next_run_its_own_tree_sending_only_what_differs() {
    // A repository's tree volume outlives its run: the next run of the same repository (a new
    // checkout: every file has a new time) sends only what differs by content. One run holds it
    // at a time; a run killed while holding it, or a state that is not one, makes the next
    // run start a new volume. Every job sees exactly its own tree.
    kept_tree_across_runs().await;
}

/// The body of [`a_kept_tree_gives_the_next_run_its_own_tree_sending_only_what_differs`], boxed
/// by a plain function: a debug build's test future, held on the test thread's stack, would
/// hold every run it awaits and overflow it.
fn kept_tree_across_runs() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> {
    Box::pin(async {
        let artifacts = tempfile::tempdir().expect("tempdir");
        let repo = repo();
        let root = repo.path();
        drop_cache(root);
        let write = |path: &str, text: &str| {
            let full = root.join(path);
            std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
            std::fs::write(&full, text).expect("write");
        };
        write("same.txt", "same\n");
        write("changes.txt", "before\n");
        write("gone.txt", "gone\n");
        write("dir/inner.txt", "inner\n");
        // More files than a small tree, which is not kept (its first fill is one upload).
        for index in 0..600 {
            write(&format!("many/{index}.txt"), "m");
        }
        for path in [
            "same.txt",
            "changes.txt",
            "gone.txt",
            "dir/inner.txt",
            "README.md",
        ] {
            set_mtime(&root.join(path), 1_000_000_000);
        }
        let look = sh(
            JobKind::Checker,
            "find . -path ./.git -prune -o -path ./many -prune -o -type f -print | sort; echo ---; \
             cat same.txt changes.txt dir new.txt 2>&1; stat -c '%n %Y' same.txt changes.txt",
        );
        // The first run of the repository on this engine keeps nothing (an engine may live for one
        // job); the state volume it leaves tells the next run that the engine outlives its runs.
        // On a task of its own: polled inside this test's future, the run overflows a debug build's
        // stack.
        tokio::spawn(a_first_run_keeps_no_tree(
            artifacts.path().to_owned(),
            root.to_owned(),
            look.clone(),
        ))
        .await
        .expect("the first run");
        let first = kept_sandbox(artifacts.path(), "kept-first").await;
        let seen = text(&first.run(root, &look).await.expect("runs").stdout);
        assert!(seen.contains("./gone.txt\n./same.txt\n"), "{seen}");
        first.cleanup_all().await.expect("cleanup");
        let kept = kept_trees(root);
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert!(volumes_with(&format!("bork-ci.run={}", first.run_id())).is_empty());
        // A new checkout: the same file with a new time, a change, a removal, an addition, a folder
        // turned file.
        write("changes.txt", "after\n");
        std::fs::remove_file(root.join("gone.txt")).expect("rm");
        std::fs::remove_dir_all(root.join("dir")).expect("rm");
        write("dir", "now a file\n");
        write("new.txt", "new\n");
        for path in ["same.txt", "changes.txt", "dir", "new.txt", "README.md"] {
            set_mtime(&root.join(path), 2_000_000_000);
        }
        let second = kept_sandbox(artifacts.path(), "kept-second").await;
        let seen = text(&second.run(root, &look).await.expect("runs").stdout);
        assert_eq!(
            seen,
            "./README.md\n./changes.txt\n./dir\n./new.txt\n./same.txt\n---\n\
             same\nafter\nnow a file\nnew\nsame.txt 1000000000\nchanges.txt 2000000000\n",
            "the new tree; the unchanged file not sent again (its time is the first run's)"
        );
        assert_eq!(kept_trees(root), kept, "the same volume");
        // While the second run holds it, a third run of the repository uses a volume of its own.
        write("changes.txt", "third\n");
        let third = kept_sandbox(artifacts.path(), "kept-third").await;
        let seen = text(&third.run(root, &look).await.expect("runs").stdout);
        assert!(seen.contains("same\nthird\nnow a file\nnew\n"), "{seen}");
        assert_own_tree(&third).await;
        third.cleanup_all().await.expect("cleanup");
        second.cleanup_all().await.expect("cleanup");
        // A run that dies holding the tree (its containers go as the reaper removes them; it writes
        // no state): the next run does not trust that volume.
        let killed = kept_sandbox(artifacts.path(), "kept-killed").await;
        write("changes.txt", "killed\n");
        let seen = text(&killed.run(root, &look).await.expect("runs").stdout);
        assert!(seen.contains("killed\n"), "{seen}");
        killed.settle().await;
        let leftovers = containers_with(&format!("bork-ci.run={}", killed.run_id()));
        assert!(!leftovers.is_empty());
        let removed = Command::new("docker")
            .args(["rm", "-f"])
            .args(&leftovers)
            .output()
            .expect("docker rm");
        assert!(removed.status.success(), "{}", text(&removed.stderr));
        write("changes.txt", "after the kill\n");
        let next = kept_sandbox(artifacts.path(), "kept-next").await;
        let seen = text(&next.run(root, &look).await.expect("runs").stdout);
        assert!(seen.contains("same\nafter the kill\nnow a file\nnew\n"), "{seen}");
        assert!(
            seen.contains("same.txt 2000000000"),
            "a new volume, filled whole: {seen}"
        );
        next.cleanup_all().await.expect("cleanup");
        let renewed = kept_trees(root);
        assert_eq!(renewed.len(), 1, "the older volume is removed: {renewed:?}");
        assert_ne!(renewed, kept, "a new volume");
        drop_cache(root);
        drop_cache(root);
    })
}

#[tokio::test]
async fn a_tree_not_kept_goes_with_its_run() {
    // `sandbox.keep-tree: false`: a volume of the run's own, gone with it.
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let root = repo.path();
    std::fs::write(root.join("same.txt"), "same\n").expect("write");
    std::fs::create_dir(root.join("many")).expect("mkdir");
    for index in 0..600 {
        std::fs::write(root.join(format!("many/{index}.txt")), "m").expect("write");
    }
    let look = sh(JobKind::Checker, "cat same.txt");
    let mut settings = settings(artifacts.path());
    settings.transport = Transport::Copy;
    settings.keep_tree = false;
    settings.runner_image = None;
    settings.runner_binary = Some(env!("CARGO_BIN_EXE_bork-ci").into());
    let unkept = DockerSandbox::connect(settings, &run_id("kept-off"))
        .await
        .expect("connects");
    let seen = text(&unkept.run(root, &look).await.expect("runs").stdout);
    assert_eq!(seen, "same\n");
    assert_own_tree(&unkept).await;
    unkept.cleanup_all().await.expect("cleanup");
    assert!(kept_trees(root).is_empty());
    assert!(
        volumes_with(&format!(
            "bork-ci.repo={}",
            std::fs::canonicalize(root).expect("canonical").display()
        ))
        .iter()
        .all(|name| !name.starts_with("bork-ci-kept-"))
    );
    drop_cache(root);
}

/// Loads an image made of `config` and `layer` under `tag` (as a co-tenant of the engine would,
/// with `docker load`); returns the engine's answer.
fn load_spoof(tag: &str, config: &serde_json::Value, layer: &[u8]) -> std::process::Output {
    use bork_ci::sandbox::docker::runner_image;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("image.tar");
    let config = serde_json::to_vec(config).expect("json");
    std::fs::write(
        &file,
        runner_image::archive(tag, &config, layer).expect("archive"),
    )
    .expect("write");
    Command::new("docker")
        .arg("load")
        .arg("-i")
        .arg(&file)
        .output()
        .expect("docker load")
}

fn image_id(name: &str) -> String {
    let output = Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", name])
        .output()
        .expect("docker image inspect");
    text(&output.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spoofed_runner_image_is_never_used() {
    // A co-tenant of the engine tags its own image as bork-ci's runner image (the tag is
    // predictable): bork-ci checks the image's content before the edit step (and the key) goes
    // into it, loads its own again, and runs it by id. A static executable (busybox, small, as
    // `.ci/run` installs it; else bork-ci) with a marker appended stands for bork-ci: its tag is
    // its own, so parallel tests never share it.
    use bork_ci::sandbox::docker::runner_image::{self, Executable};
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("bork-ci");
    let source = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
        .unwrap_or(env!("CARGO_BIN_EXE_bork-ci"));
    let mut bytes = std::fs::read(source).expect("an executable");
    bytes.extend_from_slice(format!("spoof-test-{}", std::process::id()).as_bytes());
    std::fs::write(&copy, &bytes).expect("write");
    let executable = Executable::at(&copy).expect("executable");
    let tag = executable.tag();
    let layer = runner_image::layer(&executable).expect("layer");
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(&layer)));
    // The engine `DOCKER_HOST` names, as the `docker` CLI the spoofs go through uses (tcp too).
    let docker = bork_ci::sandbox::docker::bollard::Docker::connect_with_defaults().expect("engine");
    let genuine: serde_json::Value =
        serde_json::from_slice(&runner_image::config(&executable, &digest, 1)).expect("config");

    // Another layer altogether (a script in bork-ci's place).
    let mut other = tar::Builder::new(Vec::new());
    let script = b"#!/bin/sh\nenv > /repo/LEAKED\n";
    let mut header = tar::Header::new_gnu();
    header.set_size(script.len() as u64);
    header.set_mode(0o755);
    other
        .append_data(&mut header, "usr/local/bin/bork-ci", script.as_slice())
        .expect("tar");
    let other = other.into_inner().expect("tar");
    let other_digest = format!("sha256:{}", hex::encode(Sha256::digest(&other)));

    // The engine itself refuses a layer that is not what its configuration names: the content
    // check rests on that.
    let lying = load_spoof(&tag, &genuine, &other);
    assert!(
        !lying.status.success(),
        "the engine loaded a layer under another layer's digest: {}",
        text(&lying.stdout)
    );

    let mut with_other_layer = genuine.clone();
    with_other_layer["rootfs"]["diff_ids"] = serde_json::json!([other_digest]);
    let mut with_a_proxy = genuine.clone();
    with_a_proxy["config"]["Env"] = serde_json::json!([
        "PATH=/usr/local/bin",
        "HOME=/tmp",
        "HTTPS_PROXY=http://127.0.0.1:9"
    ]);
    let mut with_an_entrypoint = genuine.clone();
    with_an_entrypoint["config"]["Entrypoint"] = serde_json::json!(["/usr/local/bin/bork-ci", "--evil"]);
    let spoofs = [
        (&with_other_layer, &other),
        (&with_a_proxy, &layer),
        (&with_an_entrypoint, &layer),
    ];
    let mut spoofed_ids = Vec::new();
    for (config, content) in spoofs {
        let loaded = load_spoof(&tag, config, content);
        assert!(loaded.status.success(), "{}", text(&loaded.stderr));
        let spoofed = image_id(&tag);
        assert!(spoofed.starts_with("sha256:"), "{spoofed}");
        spoofed_ids.push(spoofed.clone());
        let image = runner_image::ensure(&docker, &executable).await.expect("ensure");
        assert_ne!(image.id, spoofed, "the spoofed image is never used");
        let inspected = docker.inspect_image(&image.id).await.expect("inspect");
        assert_eq!(runner_image::checked(&inspected, &digest), Ok(image.id.clone()));
        assert_eq!(image_id(&tag), image.id, "the tag is bork-ci's again");
    }
    // Found again, and kept, by a later run.
    let first = image_id(&tag);
    let again = runner_image::ensure(&docker, &executable).await.expect("ensure");
    assert_eq!(again.id, first);
    let _ = Command::new("docker").args(["rmi", "--force", &tag]).output();
    for spoofed in &spoofed_ids {
        let _ = Command::new("docker").args(["rmi", "--force", spoofed]).output();
    }
}

/// A fake engine that says it is Podman 4.3 and lists one expired bork-ci container: in
/// Podman's transient `stopped` state (which the Engine API does not have) `stopped_lists`
/// times, then `exited`.
async fn podman_listing_stopped(stopped_lists: u64) -> wiremock::MockServer {
    use wiremock::matchers::{method, path_regex};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex(r"^(/v[0-9.]+)?/version$"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "ApiVersion": "1.41",
            "Version": "4.3.1",
            "Components": [{"Name": "Podman Engine", "Version": "4.3.1"}],
        })))
        .mount(&server)
        .await;
    let listed = |state: &str| {
        ResponseTemplate::new(200).set_body_json(serde_json::json!([{
            "Id": "leftover",
            "State": state,
            "Labels": {"bork-ci": "1", "bork-ci.run": "killed", "bork-ci.lease-until": "1"},
        }]))
    };
    Mock::given(method("GET"))
        .and(path_regex(r"/containers/json$"))
        .respond_with(listed("stopped"))
        .up_to_n_times(stopped_lists)
        .with_priority(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"/containers/json$"))
        .respond_with(listed("exited"))
        .with_priority(2)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path_regex(r"/containers/leftover$"))
        .respond_with(ResponseTemplate::new(204))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex(r"/volumes$"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(serde_json::json!({"Volumes": [], "Warnings": []})),
        )
        .mount(&server)
        .await;
    server
}

async fn container_lists(server: &wiremock::MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|request| request.url.path().ends_with("/containers/json"))
        .count()
}

/// Podman before 5 lists a container that is being stopped in the state `stopped`, and the
/// Engine API client refuses the whole list over it: `gc` (and the end of a run) ask again while
/// the state lasts, and give up with a clear error after a bounded number of lists.
#[tokio::test]
async fn gc_outlasts_podmans_transient_stopped_state_and_stops_asking_in_time() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let server = podman_listing_stopped(2).await;
    let mut fake = settings(artifacts.path());
    fake.host = Some(format!("tcp://{}", server.address()));
    let sandbox = DockerSandbox::connect(fake.clone(), &run_id("podman-stopped"))
        .await
        .expect("the fake engine answers");
    let report = docker::gc(&sandbox, Duration::from_secs(3600))
        .await
        .expect("gc outlasts the transient state");
    assert_eq!(report.containers, ["leftover"]);
    assert_eq!(
        container_lists(&server).await,
        3,
        "two refused lists, then one that parses"
    );

    let stuck = podman_listing_stopped(u64::MAX).await;
    fake.host = Some(format!("tcp://{}", stuck.address()));
    let sandbox = DockerSandbox::connect(fake, &run_id("podman-stuck"))
        .await
        .expect("the fake engine answers");
    let error = docker::gc(&sandbox, Duration::from_secs(3600))
        .await
        .expect_err("a state that never parses is an error");
    assert!(error.to_string().contains("list containers"), "{error}");
    let asked = container_lists(&stuck).await;
    assert!((2..=50).contains(&asked), "asked {asked} times");
}

/// Both transports judge the same tree: tracked files and untracked ones git does not ignore.
/// What git ignores (a build folder, a `*.log`, a nested `.env`) never reaches a judge: over
/// `copy` it is not sent, over `bind` an empty read-only folder or file covers it. A file that
/// matches `.gitignore` but is tracked (`git add -f`) is judged on both.
#[tokio::test]
async fn both_transports_judge_the_same_tree_without_ignored_contents() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let repo = repo();
    let root = repo.path();
    std::fs::write(root.join(".gitignore"), "build/\n*.log\n.env\n").expect("write");
    std::fs::write(root.join("kept.log"), "TRACKED-LOG\n").expect("write");
    git(root, &["add", "-f", ".gitignore", "kept.log"]);
    git(
        root,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
            "commit",
            "-qm",
            "ignore",
        ],
    );
    std::fs::create_dir_all(root.join("build/deep")).expect("mkdir");
    std::fs::write(root.join("build/deep/gen.py"), "IGNORED-BUILD\n").expect("write");
    std::fs::write(root.join("x.log"), "IGNORED-LOG\n").expect("write");
    std::fs::create_dir_all(root.join("sub")).expect("mkdir");
    std::fs::write(root.join("sub/.env"), "IGNORED-ENV\n").expect("write");
    std::fs::write(root.join("sub/untracked.txt"), "UNTRACKED\n").expect("write");
    let job = sh(
        JobKind::Checker,
        "cd /repo && find . -path ./.git -prune -o -type f -size +0 -print | sort; \
         cat build/deep/gen.py x.log sub/.env 2>/dev/null; cat kept.log sub/untracked.txt",
    );
    let mut seen = Vec::new();
    for transport in transports() {
        let sandbox = sandbox_over(artifacts.path(), "ignored", transport).await;
        let out = sandbox.run(root, &job).await.expect("runs");
        let stdout = text(&out.stdout);
        assert_eq!(
            out.outcome,
            Outcome::Exited(0),
            "{transport:?}: {stdout}{}",
            text(&out.stderr)
        );
        for hidden in ["IGNORED-BUILD", "IGNORED-LOG", "IGNORED-ENV"] {
            assert!(
                !stdout.contains(hidden),
                "{transport:?}: {hidden} reached a judge: {stdout}"
            );
        }
        assert!(
            stdout.contains("TRACKED-LOG\nUNTRACKED\n") && stdout.contains("./sub/untracked.txt\n"),
            "{transport:?}: tracked and untracked files are judged: {stdout}"
        );
        sandbox.cleanup_all().await.expect("cleanup");
        seen.push((transport, stdout));
    }
    if let [(first, a), (second, b)] = &seen[..] {
        assert_eq!(a, b, "{first:?} and {second:?} judge different trees");
    }
    assert!(std::fs::read_to_string(root.join("x.log")).is_ok_and(|text| text == "IGNORED-LOG\n"));
    drop_cache(root);
}

/// A later run of the same executable learns its runner image from what the first remembered
/// under the artifact root, without reading the executable; what is remembered is trusted only
/// when the engine holds exactly that image: a remembered identity that names another layer, or
/// an image gone from the engine, and the image is built from the executable again.
#[tokio::test]
async fn a_remembered_runner_image_is_used_only_when_the_engine_holds_exactly_it() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let cache = artifacts.path().join("cache/runner-image");
    // An executable of this test's own, so that its image is no other test's: a 64-bit
    // little-endian ELF header with no program headers (static: no interpreter, no libraries;
    // the image is loaded and checked, never run), then 16 random bytes.
    let binary = artifacts.path().join("bork-ci");
    let mut bytes = vec![0u8; 64];
    bytes[..4].copy_from_slice(b"\x7fELF");
    bytes[4] = 2; // 64-bit
    bytes[5] = 1; // little-endian
    bytes[6] = 1; // ELF version 1
    bytes[16] = 2; // an executable
    bytes[18] = 0x3e; // x86-64
    bytes[20] = 1; // version 1
    bytes[52] = 64; // the header's size
    bytes.extend_from_slice(uuid::Uuid::new_v4().as_bytes());
    std::fs::write(&binary, bytes).expect("write");
    let engine = docker::bollard::Docker::connect_with_defaults().expect("engine");
    use docker::runner_image;
    let first = runner_image::ensure_cached(&engine, Some(binary.clone()), &cache)
        .await
        .expect("built");
    let stamp = runner_image::stamp(&binary).expect("stamp");
    let known = runner_image::recall(&cache, &stamp).expect("remembered");
    assert_eq!(known.layer_digest, first.layer_digest);
    assert!(first.tag.ends_with(&known.sha256[..16]), "{first:?} {known:?}");
    let again = runner_image::ensure_cached(&engine, Some(binary.clone()), &cache)
        .await
        .expect("found");
    assert_eq!(again.id, first.id);
    // A remembered layer the engine's image does not have: not trusted, built and checked again.
    let wrong = runner_image::Known {
        sha256: known.sha256.clone(),
        layer_digest: format!("sha256:{}", "0".repeat(64)),
    };
    runner_image::remember(&cache, &stamp, &wrong);
    let checked = runner_image::ensure_cached(&engine, Some(binary.clone()), &cache)
        .await
        .expect("checked");
    assert_eq!(checked.id, first.id);
    assert_eq!(
        runner_image::recall(&cache, &stamp),
        Some(known.clone()),
        "remembered anew"
    );
    // The image gone from the engine: loaded again from the executable.
    let removed = Command::new("docker")
        .args(["rmi", "--force", &first.tag])
        .output()
        .expect("docker rmi");
    assert!(removed.status.success(), "{}", text(&removed.stderr));
    let reloaded = runner_image::ensure_cached(&engine, Some(binary), &cache)
        .await
        .expect("loaded again");
    assert_eq!(reloaded.layer_digest, first.layer_digest);
    assert_eq!(reloaded.tag, first.tag);
    let _ = Command::new("docker")
        .args(["rmi", "--force", &reloaded.tag])
        .output();
}
