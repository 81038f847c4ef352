//! The whole loop with both steps in containers on the real engine: the edit step in the runner
//! image (reaching a model server on the host's loopback), the checker and the verifier in the
//! toolchain image with the repository read-only.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply, TEST_KEY};
use crate::sandbox::{TEST_IMAGE, containers_with, ensure_test_image};
use crate::support::{Repo, TestContext, bork, checker_wanting, report};

/// The label bork-ci puts on the runner image it builds from the binary under test.
fn this_binarys_runner_label() -> String {
    use sha2::{Digest, Sha256};
    let binary = std::fs::read(env!("CARGO_BIN_EXE_bork-ci")).expect("the bork-ci binary");
    format!(
        "label=bork-ci.binary-sha256={}",
        hex::encode(Sha256::digest(&binary))
    )
}

/// Removes, once per test process, the runner images bork-ci built from the binary under test
/// (not those of other builds sharing the engine), so that the runs below build theirs through
/// the Engine API, with nothing prepared by hand.
fn without_runner_images() {
    static REMOVED: OnceLock<()> = OnceLock::new();
    REMOVED.get_or_init(|| {
        let listed = Command::new("docker")
            .args([
                "images",
                "-aq",
                "--filter",
                "label=bork-ci.runner-image=1",
                "--filter",
            ])
            .arg(this_binarys_runner_label())
            .output()
            .expect("docker images");
        let ids: Vec<String> = String::from_utf8_lossy(&listed.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if !ids.is_empty() {
            let _ = Command::new("docker").arg("rmi").arg("-f").args(&ids).output();
        }
    });
}

/// The `sandbox.transport` values to run the loop under (see `sandbox::transports`).
fn transports() -> Vec<&'static str> {
    crate::sandbox::transports()
        .into_iter()
        .map(|transport| transport.as_str())
        .collect()
}

fn answer(contents: &str) -> Reply {
    Reply::json(&json!({"create-or-update": {"src/app.txt": contents}}))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_loop_converges_with_both_steps_in_containers() {
    ensure_test_image();
    without_runner_images();
    for transport in transports() {
        converges_over(transport, Model::Fake).await;
    }
    // The image loaded by the first run is reused by the later ones: exactly one for this binary.
    // Counted by its tag, because engines differ in how they combine label filters (Podman 4.3
    // matches any of them).
    let label = this_binarys_runner_label();
    let sha = label.trim_start_matches("label=bork-ci.binary-sha256=");
    let tag = format!("bork-ci-runner:{}", &sha[..16]);
    let listed = Command::new("docker")
        .args([
            "images",
            "--filter",
            "label=bork-ci.runner-image=1",
            "--format",
            "{{.ID}} {{.Repository}}:{{.Tag}}",
        ])
        .output()
        .expect("docker images");
    let ours: std::collections::BTreeSet<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        // Podman names a loaded short name under `localhost/`.
        .filter(|line| line.ends_with(&format!(" {tag}")) || line.ends_with(&format!(" localhost/{tag}")))
        .map(str::to_owned)
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "one runner image, built by bork-ci, tagged {tag}: {ours:?}"
    );
}

/// The same loop with the scripted model: on every engine, also one whose containers cannot
/// reach this host's loopback (a dockerd over TCP in its own network namespace).
#[tokio::test(flavor = "multi_thread")]
async fn the_loop_converges_on_any_engine_with_a_scripted_model() {
    ensure_test_image();
    without_runner_images();
    for transport in transports() {
        converges_over(transport, Model::Scripted).await;
    }
}

/// Where the edit step's answers come from.
#[derive(Clone, Copy, PartialEq)]
enum Model {
    /// An OpenAI-compatible server on this host's loopback.
    Fake,
    /// `llm.provider = scripted`: the answers travel with the edit step's state.
    Scripted,
}

async fn converges_over(transport: &str, model: Model) {
    let fake = FakeLlm::openai(vec![answer("first try\n"), answer("DONE\n")]).await;
    let scratch = tempfile::tempdir().expect("tempdir");
    let llm = match model {
        Model::Fake => {
            json!({"provider": "openai", "model": "gpt-test", "base-url": fake.base_url(), "max-retries": 0})
        }
        Model::Scripted => json!({"provider": "scripted"}),
    };
    let answers = crate::support::script(
        scratch.path(),
        &[
            json!({"create-or-update": {"src/app.txt": "first try\n"}}),
            json!({"create-or-update": {"src/app.txt": "DONE\n"}}),
        ],
    );
    let repo = Repo::new(&[
        ("specs/app.md", "The app prints DONE.\n"),
        ("src/app.txt", "nothing yet\n"),
        ("check.sh", &checker_wanting("src/app.txt", "DONE")),
    ]);
    repo.write(
        ".config/bork.json",
        &json!({
            "correctness-checker": "check.sh",
            "checker-timeout-secs": 60,
            "verification": {"steps": [{"name": "lists", "command": "ls src"}]},
            "llm": llm,
            "sandbox": {"kind": "docker", "image": TEST_IMAGE, "pull": "never"}
        })
        .to_string(),
    );
    // The checker runs as another user: the checkout must be world-readable, as CI checkouts are.
    std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let report_path = scratch.path().join("report.json");
    let mut command = bork();
    command
        .args(["run", "--repo"])
        .arg(repo.path())
        .arg("--report")
        .arg(&report_path)
        .env_remove("BORK_SANDBOX_KIND")
        .env("OPENAI_API_KEY", TEST_KEY)
        .env("BORK_SANDBOX_TRANSPORT", transport)
        .env("GITHUB_TOKEN", "ghs-canary-for-docker-4242")
        .env("BORK_SANDBOX_ARTIFACT_DIR", scratch.path().join("artifacts"));
    if model == Model::Scripted {
        command.env("BORK_LLM_SCRIPT", &answers);
    }
    let output = command.output().expect("bork-ci runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{transport}: {stderr}");
    let report = report(&report_path);
    assert_eq!(report["sandbox"], "docker");
    let iterations = report["iterations"].as_array().expect("iterations");
    assert_eq!(iterations.len(), 2, "{report:#}");
    assert_eq!(iterations[0]["checker"]["status"], "findings");
    assert_eq!(iterations[1]["checker"]["status"], "clean");
    assert_eq!(iterations[1]["verifier"]["status"], "clean");
    assert_eq!(repo.read("src/app.txt"), "DONE\n");
    // Written by the edit step's container: the repository owner's file, mode 0644.
    let meta = std::fs::metadata(repo.path().join("src/app.txt")).expect("stat");
    assert_eq!(meta.permissions().mode() & 0o777, 0o644);
    let requests = if model == Model::Fake { 2 } else { 0 };
    assert_eq!(
        fake.requests().len(),
        requests,
        "the edit step reached the host's loopback"
    );
    let run_id = report["run-id"].as_str().expect("run id");
    assert!(
        containers_with(&format!("bork-ci.run={run_id}")).is_empty(),
        "no container left"
    );
    assert!(!stderr.contains("ghs-canary-for-docker-4242"));
    crate::sandbox::drop_cache(repo.path());
}

#[test]
fn sigterm_during_the_check_leaves_no_container_and_a_report() {
    ensure_test_image();
    without_runner_images();
    let repo = Repo::new(&[
        ("specs/app.md", "The app prints DONE.\n"),
        ("check.sh", "#!/bin/sh\nsleep 120\n"),
    ]);
    repo.write(
        ".config/bork.json",
        &json!({
            "correctness-checker": "check.sh",
            "llm": {"provider": "scripted"},
            "sandbox": {"kind": "docker", "image": TEST_IMAGE, "pull": "never"}
        })
        .to_string(),
    );
    std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let scratch = tempfile::tempdir().expect("tempdir");
    let answers = crate::support::script(
        scratch.path(),
        &[json!({"create-or-update": {"src/app.txt": "DONE\n"}})],
    );
    let report_path = scratch.path().join("report.json");
    let mut child = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .arg("--report")
        .arg(&report_path)
        .env_remove("BORK_SANDBOX_KIND")
        .env("BORK_LLM_SCRIPT", &answers)
        .env("BORK_SANDBOX_ARTIFACT_DIR", scratch.path().join("artifacts"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("bork-ci starts");
    // Wait until this run's checker container exists (the edit step has run by then).
    let pid_label = format!("bork-ci.pid={}", child.id());
    let started = std::time::Instant::now();
    loop {
        let running = Command::new("docker")
            .args(["ps", "-q", "--filter", "label=bork-ci.step=checker", "--filter"])
            .arg(format!("label={pid_label}"))
            .output()
            .expect("docker ps");
        if !String::from_utf8_lossy(&running.stdout).trim().is_empty() {
            break;
        }
        // Generous: the first Docker run of a fresh machine builds the edit step's image.
        assert!(
            started.elapsed().as_secs() < 240,
            "the checker container never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let signalled = std::time::Instant::now();
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    let exit = child.wait().expect("bork-ci exits");
    assert!(signalled.elapsed().as_secs() < 30, "cleanup is prompt");
    assert_eq!(exit.code(), Some(2));
    assert!(
        containers_with(&pid_label).is_empty(),
        "no container of the run is left"
    );
    let report = report(&report_path);
    assert_eq!(report["status"], "error");
    assert!(report["error"].as_str().expect("error").contains("SIGTERM"));
}

#[test]
fn a_checkout_the_checker_cannot_read_is_a_clear_error() {
    ensure_test_image();
    without_runner_images();
    let repo = Repo::new(&[
        ("specs/app.md", "The app prints DONE.\n"),
        ("check.sh", &checker_wanting("src/app.txt", "DONE")),
    ]);
    repo.write(
        ".config/bork.json",
        &json!({
            "correctness-checker": "check.sh",
            "llm": {"provider": "scripted"},
            "sandbox": {"kind": "docker", "image": TEST_IMAGE, "pull": "never"}
        })
        .to_string(),
    );
    std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    let outcome = TestContext::on(&repo)
        .docker(TEST_IMAGE)
        .scripted(&[json!({"create-or-update": {"src/app.txt": "DONE\n"}})])
        .run(&[]);
    assert_eq!(outcome.code, 2);
    let stderr = &outcome.stderr;
    assert!(
        stderr.contains("sandbox.user") && stderr.contains("chmod o+rx"),
        "{stderr}"
    );
}

#[test]
fn transport_and_ulimits_are_settings_shown_with_their_source() {
    let repo = Repo::new(&[("specs/app.md", "The app prints DONE.\n")]);
    let output = bork()
        .args(["config", "--repo"])
        .arg(repo.path())
        .env("BORK_SANDBOX_TRANSPORT", "copy")
        .env("BORK_SANDBOX_ULIMITS_NOFILE", "512")
        .env_remove("BORK_SANDBOX_RUNNER_IMAGE")
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = |key: &str| {
        stdout
            .lines()
            .find(|line| line.starts_with(&format!("{key} ")))
            .unwrap_or_else(|| panic!("{key} in {stdout}"))
            .to_owned()
    };
    assert!(
        line("sandbox.transport").contains("\"copy\"")
            && line("sandbox.transport").contains("BORK_SANDBOX_TRANSPORT")
    );
    assert!(line("sandbox.ulimits.nofile").contains("512"));
    assert!(
        line("sandbox.ulimits.nproc").contains("4096") && line("sandbox.ulimits.nproc").contains("default")
    );
    assert!(
        line("sandbox.runner-image").contains("unset"),
        "an unset key is shown as unset"
    );
    let bad = bork()
        .args(["config", "--repo"])
        .arg(repo.path())
        .env("BORK_SANDBOX_TRANSPORT", "rsync")
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert!(
        stderr.contains("sandbox.transport") && stderr.contains("auto, bind, copy"),
        "{stderr}"
    );
}

#[test]
fn a_missing_engine_is_one_line_naming_the_fix() {
    let repo = Repo::new(&[
        ("specs/app.md", "The app prints DONE.\n"),
        ("check.sh", &checker_wanting("src/app.txt", "DONE")),
    ]);
    repo.write(
        ".config/bork.json",
        &json!({
            "correctness-checker": "check.sh",
            "llm": {"provider": "scripted"},
            "sandbox": {"kind": "docker", "image": TEST_IMAGE}
        })
        .to_string(),
    );
    let scratch = tempfile::tempdir().expect("tempdir");
    let answers = crate::support::script(
        scratch.path(),
        &[json!({"create-or-update": {"src/app.txt": "DONE\n"}})],
    );
    let before = crate::support::tree_hash(repo.path());
    let output = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .env_remove("BORK_SANDBOX_KIND")
        .env("DOCKER_HOST", "unix:///nonexistent/docker.sock")
        .env("BORK_LLM_SCRIPT", &answers)
        .env("BORK_SANDBOX_ARTIFACT_DIR", scratch.path().join("artifacts"))
        .output()
        .expect("runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stderr
        .lines()
        .find(|line| line.contains("/nonexistent/docker.sock"))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(
        line.contains("DOCKER_HOST") && line.contains("--sandbox none"),
        "{line}"
    );
    assert_eq!(
        crate::support::tree_hash(repo.path()),
        before,
        "nothing in the repository changed"
    );
}

/// A repository for one run of the shared-engine test, in `root`: the loop needs two
/// iterations, a checker and a verifier step, in the busybox image.
fn shared_engine_repo(root: &std::path::Path) -> Repo {
    let repo = Repo::at(tempfile::tempdir_in(root).expect("tempdir"));
    repo.git(&["init", "-q", "-b", "main"]);
    for (path, contents) in [
        ("specs/app.md", "The app prints DONE.\n"),
        ("src/app.txt", "nothing yet\n"),
        ("check.sh", checker_wanting("src/app.txt", "DONE").as_str()),
    ] {
        repo.write(path, contents);
    }
    repo.commit("initial");
    repo.write(
        ".config/bork.json",
        &json!({
            "correctness-checker": "check.sh",
            "checker-timeout-secs": 120,
            "verification": {"steps": [{"name": "lists", "command": "ls src"}]},
            "llm": {"provider": "scripted"},
            "sandbox": {"kind": "docker", "image": TEST_IMAGE, "pull": "never"}
        })
        .to_string(),
    );
    std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    repo
}

/// How one run of the shared-engine test ended.
struct Ended {
    which: usize,
    transport: &'static str,
    code: Option<i32>,
    run_id: String,
    stderr: String,
}

/// `bork-ci run` of `repo` with the Docker sandbox over `transport` and the scripted model's
/// `answers`; its artifacts and report in `scratch`. The output and the report's path.
fn scripted_run(
    repo: &std::path::Path,
    transport: &str,
    answers: &std::path::Path,
    scratch: &std::path::Path,
) -> (std::process::Output, std::path::PathBuf) {
    let report_path = scratch.join("report.json");
    let output = bork()
        .args(["run", "--repo"])
        .arg(repo)
        .arg("--report")
        .arg(&report_path)
        .env_remove("BORK_SANDBOX_KIND")
        .env("BORK_SANDBOX_TRANSPORT", transport)
        .env("BORK_LLM_SCRIPT", answers)
        .env("BORK_SANDBOX_ARTIFACT_DIR", scratch.join("artifacts"))
        .output()
        .expect("bork-ci runs");
    (output, report_path)
}

/// `bork-ci run` of `repo` over `transport` with the scripted model; its scratch files in `root`.
fn shared_engine_run(root: &std::path::Path, which: usize, repo: &Repo, transport: &'static str) -> Ended {
    let scratch = tempfile::tempdir_in(root).expect("tempdir");
    let answers = crate::support::script(
        scratch.path(),
        &[
            json!({"create-or-update": {"src/app.txt": "first try\n"}}),
            json!({"create-or-update": {"src/app.txt": "DONE\n"}}),
        ],
    );
    let (output, report_path) = scripted_run(repo.path(), transport, &answers, scratch.path());
    Ended {
        which,
        transport,
        code: output.status.code(),
        run_id: report(&report_path)["run-id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn many_runs_share_one_engine_while_gc_runs_from_another_namespace() {
    // Eight runs at once on one engine (six repositories, one of them run three times in a row,
    // both transports), while `bork-ci gc --older-than-secs 0` runs in a loop in another PID and
    // mount namespace (same host name) where the runs' checkouts and temporary files do not
    // exist. Every run converges as it would alone; afterwards one gc leaves nothing of them.
    // It runs on the host's engine, where `.ci/run` runs it as root; the engines matrix
    // (another engine through BORK_TEST_DOCKER_HOST, or the tests in an unprivileged container)
    // runs the rest of this file and skips it, saying so.
    let unshare_works = Command::new("unshare")
        .args(["--pid", "--fork", "--mount", "--mount-proc", "true"])
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    if std::env::var_os("BORK_TEST_DOCKER_HOST").is_some_and(|host| !host.is_empty()) || !unshare_works {
        eprintln!("skipped: needs the host's engine and the right to make PID and mount namespaces");
        return;
    }
    ensure_test_image();
    let transports = transports();
    // The runs' checkouts and scratch files live under one folder, which the loop's mount
    // namespace hides behind an empty tmpfs; the loop's own files are elsewhere. The loop also
    // ends by itself after 3,000 rounds, whatever it can see.
    let runs_root = tempfile::tempdir().expect("tempdir");
    let stop = tempfile::tempdir().expect("tempdir");
    let stop_file = stop.path().join("stop");
    let gc_log = stop.path().join("gc.log");
    let script = format!(
        "mount -t tmpfs none '{runs}' || exit 97\n[ -z \"$(ls -A '{runs}')\" ] || exit 98\nn=0\nwhile [ ! -e '{stop}' ] && [ \"$n\" -lt 3000 ]; do\n  '{bork}' gc --older-than-secs 0 >> '{log}' 2>&1 || echo \"gc failed: $?\" >> '{log}'\n  n=$((n+1))\n  sleep 0.2\ndone\necho \"rounds=$n\" >> '{log}'\n",
        runs = runs_root.path().display(),
        stop = stop_file.display(),
        bork = env!("CARGO_BIN_EXE_bork-ci"),
        log = gc_log.display(),
    );
    let mut gc_loop = Command::new("unshare")
        .args([
            "--pid",
            "--fork",
            "--mount",
            "--mount-proc",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(std::env::var_os("DOCKER_HOST").map(|host| ("DOCKER_HOST", host)))
        .stdin(std::process::Stdio::null())
        .spawn()
        .expect("unshare");

    let runs = runs_root.path();
    let repos: Vec<Repo> = (0..6).map(|_| shared_engine_repo(runs)).collect();
    let outcomes = std::thread::scope(|scope| {
        let mut handles = Vec::new();
        for (index, repo) in repos.iter().enumerate() {
            let transport = transports[index % transports.len()];
            let times = if index == 0 { 3 } else { 1 };
            handles.push(scope.spawn(move || {
                let mut results = Vec::new();
                for round in 0..times {
                    if round > 0 {
                        repo.git(&["checkout", "--", "src/app.txt"]);
                        repo.write("src/app.txt", "nothing yet\n");
                    }
                    results.push(shared_engine_run(runs, index, repo, transport));
                }
                results
            }));
        }
        // Two more runs at once, of the same content in other checkouts.
        let twins: Vec<Repo> = (0..2).map(|_| shared_engine_repo(runs)).collect();
        let mut twin_results = Vec::new();
        std::thread::scope(|inner| {
            let twin_handles: Vec<_> = twins
                .iter()
                .enumerate()
                .map(|(index, twin)| {
                    let transport = transports[index % transports.len()];
                    inner.spawn(move || shared_engine_run(runs, 100 + index, twin, transport))
                })
                .collect();
            for handle in twin_handles {
                twin_results.push(handle.join().expect("a run's thread"));
            }
        });
        let mut all: Vec<Ended> = handles
            .into_iter()
            .flat_map(|handle| handle.join().expect("a run's thread"))
            .collect();
        all.extend(twin_results);
        all
    });
    std::fs::write(&stop_file, "").expect("stop the gc loop");
    let status = gc_loop.wait().expect("the gc loop ends");
    let log = std::fs::read_to_string(&gc_log).unwrap_or_default();
    assert!(status.success(), "the gc loop: {status:?}\n{log}");
    let rounds: u64 = log
        .lines()
        .find_map(|line| line.strip_prefix("rounds="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(rounds >= 3, "gc ran in a loop while the runs ran: {log}");
    assert!(!log.contains("gc failed"), "{log}");

    assert_eq!(outcomes.len(), 10, "ten runs");
    let mut run_ids = Vec::new();
    for ended in &outcomes {
        assert_eq!(
            ended.code,
            Some(0),
            "run {} over {}: {}",
            ended.which,
            ended.transport,
            ended.stderr
        );
        assert!(!ended.run_id.is_empty());
        run_ids.push(ended.run_id.clone());
    }
    // The gc loop removed nothing of a live run: each converged in two iterations with its
    // containers; and now one gc leaves nothing of any of them, caches included.
    let gc = bork()
        .args(["gc", "--older-than-secs", "0"])
        .env_remove("BORK_SANDBOX_KIND")
        .output()
        .expect("gc");
    assert!(gc.status.success(), "{}", String::from_utf8_lossy(&gc.stderr));
    for run_id in &run_ids {
        let label = format!("bork-ci.run={run_id}");
        assert!(
            containers_with(&label).is_empty(),
            "a container of run {run_id} is left"
        );
        assert!(
            crate::sandbox::volumes_with(&label).is_empty(),
            "a volume of run {run_id} is left"
        );
    }
    for repo in &repos {
        let canonical = std::fs::canonicalize(repo.path()).expect("canonical");
        let caches = crate::sandbox::volumes_with(&format!("bork-ci.repo={}", canonical.display()));
        assert!(
            caches.is_empty(),
            "the cache of {} is left: {caches:?}",
            canonical.display()
        );
    }
}

/// The containers `bork-ci` process `pid` created, by their labels.
fn containers_of_pid(pid: u32) -> Vec<String> {
    containers_with(&format!("bork-ci.pid={pid}"))
}

/// A run killed with SIGKILL is provably dead (same boot and PID namespace, its pid gone): its
/// checker container goes at once, with `bork-ci gc` and with the start of the next run,
/// not when its lease (the run's budget plus 15 minutes) ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_killed_runs_checker_container_is_reaped_at_once_by_gc_and_by_the_next_run() {
    ensure_test_image();
    for reaper in ["gc", "next run"] {
        let repo = Repo::new(&[
            ("specs/app.md", "src/app.txt says DONE.\n"),
            ("src/app.txt", "nothing yet\n"),
            ("check", "#!/bin/sh\necho 'checking slowly' >&2\nsleep 600\n"),
            (
                ".config/bork.json",
                r#"{"correctness-checker": "check", "checker-timeout-secs": 900, "llm": {"provider": "scripted"}}"#,
            ),
        ]);
        let mut ctx = TestContext::on(&repo);
        ctx.docker(TEST_IMAGE).scripted(&[json!({})]);
        let running = ctx.spawn(&[]);
        let pid = running.pid();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while containers_of_pid(pid).is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "{reaper}: no checker container"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid"),
            rustix::process::Signal::KILL,
        )
        .expect("SIGKILL sent");
        let killed = running.finish().await;
        assert_eq!(killed.code, -1, "{reaper}: {}", killed.stderr);
        assert!(
            !containers_of_pid(pid).is_empty(),
            "{reaper}: SIGKILL leaves the checker's container"
        );
        let started = std::time::Instant::now();
        match reaper {
            "gc" => {
                let output = ctx
                    .command("gc")
                    .arg("--repo")
                    .arg(repo.path())
                    .output()
                    .expect("gc");
                assert!(
                    output.status.success(),
                    "{}",
                    String::from_utf8_lossy(&output.stderr)
                );
            }
            _ => {
                // The next run starts by reaping; its checker cannot start, so it ends there.
                let next = Repo::new(&[
                    ("specs/app.md", "src/app.txt says DONE.\n"),
                    ("check", "#!/bin/sh\nexit 127\n"),
                    (
                        ".config/bork.json",
                        r#"{"correctness-checker": "check", "llm": {"provider": "scripted"}}"#,
                    ),
                ]);
                let mut next_ctx = TestContext::on(&next);
                next_ctx.docker(TEST_IMAGE).scripted(&[json!({})]);
                let outcome = next_ctx.run_async(&[]).await;
                assert_eq!(outcome.code, 2, "{}", outcome.stderr);
            }
        }
        assert!(
            containers_of_pid(pid).is_empty(),
            "{reaper}: the dead run's containers are still there after {:?}",
            started.elapsed()
        );
    }
}

/// An edit on a path `.gitignore` lists lands in the checkout but is judged on neither transport
/// (a pull request could not carry it): over `bind` as over `copy` the checker never sees it, and
/// the run ends needing a human instead of converging over one transport only.
#[tokio::test(flavor = "multi_thread")]
async fn an_edit_on_an_ignored_path_is_judged_alike_over_both_transports() {
    ensure_test_image();
    without_runner_images();
    for transport in transports() {
        let scratch = tempfile::tempdir().expect("tempdir");
        let answers = crate::support::script(
            scratch.path(),
            &[
                json!({"create-or-update": {"src/generated/app.txt": "DONE\n"}}),
                json!({"create-or-update": {"src/generated/app.txt": "DONE\n"}}),
            ],
        );
        let repo = Repo::new(&[
            ("specs/app.md", "The app prints DONE.\n"),
            ("src/app.txt", "nothing yet\n"),
            (".gitignore", "src/generated/\n"),
            ("check.sh", &checker_wanting("src/generated/app.txt", "DONE")),
        ]);
        repo.write(
            ".config/bork.json",
            &json!({
                "correctness-checker": "check.sh",
                "checker-timeout-secs": 60,
                "max-iterations": 2,
                "llm": {"provider": "scripted"},
                "sandbox": {"kind": "docker", "image": TEST_IMAGE, "pull": "never"}
            })
            .to_string(),
        );
        std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let (output, report_path) = scripted_run(repo.path(), transport, &answers, scratch.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{transport}: {stderr}");
        let report = report(&report_path);
        let iterations = report["iterations"].as_array().expect("iterations");
        assert_eq!(iterations.len(), 2, "{transport}: {report:#}");
        for iteration in iterations {
            assert_eq!(
                iteration["checker"]["status"], "findings",
                "{transport}: {report:#}"
            );
        }
        assert_eq!(
            repo.read("src/generated/app.txt"),
            "DONE\n",
            "{transport}: the edit was applied to the checkout"
        );
        crate::sandbox::drop_cache(repo.path());
    }
}
