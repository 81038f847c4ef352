//! The Verifier end to end, in a real container and with local processes: stop at the first
//! failure, the exact artifact layout, the manifest, the contract JSON and timeouts.

use std::path::Path;
use std::time::Duration;

use bork_ci::findings::Finding;
use bork_ci::sandbox::docker::DockerSandbox;
use bork_ci::sandbox::{Sandbox, none::Local};
use bork_ci::verify::{self, Status, Step, VerifyOptions};

use crate::sandbox::{ensure_test_image, git, repo, run_id, settings};

fn steps(list: &[(&str, &str)]) -> Vec<Step> {
    list.iter()
        .map(|(name, command)| Step {
            name: (*name).to_owned(),
            command: (*command).to_owned(),
        })
        .collect()
}

async fn docker(artifacts: &Path) -> Sandbox {
    ensure_test_image();
    Sandbox::Docker(Box::new(
        DockerSandbox::connect(settings(artifacts), &run_id("verify"))
            .await
            .expect("connects"),
    ))
}

async fn stops_at_first_failure_with_exact_layout(sandbox: Sandbox, artifacts: &Path) {
    let repo = repo();
    let head = git(repo.path(), &["rev-parse", "HEAD"]).trim().to_owned();
    let pipeline = steps(&[
        (
            "install",
            "echo installing; echo built > \"$AGENT_BUILD_DIR/out.bin\"; echo tmp > \"$TMPDIR/t\" && test -s \"$TMPDIR/t\"; echo db > \"$TEST_DB_PATH/d\"",
        ),
        ("type check", "echo checking >&2; exit 3"),
        ("test", "echo never"),
    ]);
    let mut options = VerifyOptions::new(artifacts.to_owned());
    options.run_id = Some("run-1".to_owned());
    let result = verify::run(&sandbox, repo.path(), &pipeline, &options)
        .await
        .expect("verifier runs");
    assert_eq!(result.status, Status::Fail);
    assert_eq!(result.run_id, "run-1");
    let run = artifacts.join("runs/run-1");
    for path in [
        "manifest.json",
        "logs/combined.log",
        "logs/step-01-install.log",
        "logs/step-02-type-check.log",
        "build/out.bin",
        "db/d",
    ] {
        assert!(run.join(path).is_file(), "{path} missing");
    }
    assert!(
        !run.join("logs/step-03-test.log").exists(),
        "stopped at first failure"
    );
    // Seed 003: the test temporaries are under `runs/{run_id}/tmp/`, in the job's own folder.
    let temporaries: Vec<_> = std::fs::read_dir(run.join("tmp"))
        .expect("runs/run-1/tmp")
        .flatten()
        .map(|entry| entry.path())
        .collect();
    assert_eq!(temporaries.len(), 1, "{temporaries:?}");
    assert_eq!(
        std::fs::read_to_string(temporaries[0].join("t")).expect("the step's temporary file"),
        "tmp\n"
    );
    assert!(artifacts.join("deps").is_dir());
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("manifest.json")).expect("manifest")).expect("json");
    assert_eq!(manifest["commit_sha"], head);
    let commands = manifest["commands_executed"].as_array().expect("array");
    assert_eq!(commands.len(), 2);
    assert_eq!(commands[0]["name"], "install");
    assert_eq!(commands[0]["exit_code"], 0);
    assert_eq!(commands[1]["exit_code"], 3);
    assert!(commands[1]["duration_ms"].is_u64());
    for key in ["timestamp_start", "timestamp_end"] {
        let stamp = manifest[key].as_str().expect("string");
        assert!(
            time::OffsetDateTime::parse(stamp, &time::format_description::well_known::Rfc3339).is_ok(),
            "{key}: {stamp}"
        );
    }
    assert_eq!(manifest["platform"]["os"], "linux");
    assert!(result.tail_log.contains("installing") && result.tail_log.contains("checking"));
    assert!(!result.tail_log.contains("never"));
    assert!(
        result
            .artifact_paths
            .iter()
            .any(|p| p.ends_with("runs/run-1/manifest.json"))
    );
    let contract: serde_json::Value = serde_json::from_str(&result.to_json()).expect("json");
    assert_eq!(contract["status"], "FAIL");
    assert_eq!(
        contract["manifest"]["commands_executed"],
        manifest["commands_executed"]
    );
    let findings = verify::to_findings(&result);
    assert_eq!(findings.overall_findings.len(), 1);
    match &findings.overall_findings[0] {
        Finding::Command {
            command,
            stderr,
            exit_code,
            ..
        } => {
            assert_eq!(command, "echo checking >&2; exit 3");
            assert_eq!(stderr.trim(), "checking");
            assert_eq!(*exit_code, 3);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn docker_pipeline_stops_at_first_failure_with_exact_layout() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let sandbox = docker(artifacts.path()).await;
    assert_eq!(
        sandbox.image(bork_ci::sandbox::JobKind::Verify).as_deref(),
        Some(crate::sandbox::TEST_IMAGE)
    );
    stops_at_first_failure_with_exact_layout(sandbox, artifacts.path()).await;
}

#[tokio::test]
async fn local_pipeline_has_the_same_layout() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let local = Local::new(
        bork_ci::sandbox::SharedDirs::new(artifacts.path(), "run-local", "repo", "main"),
        Vec::new(),
    );
    stops_at_first_failure_with_exact_layout(Sandbox::None(local), artifacts.path()).await;
}

#[tokio::test]
async fn passing_pipeline_in_one_container_and_read_only_repo() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let sandbox = docker(artifacts.path()).await;
    let repo = repo();
    std::fs::write(
        repo.path().join("agent.yaml"),
        "verification:\n  steps:\n    - name: one\n      command: hostname > /tmp/host\n    - name: two\n      command: cat /tmp/host && cat README.md\n",
    )
    .expect("agent.yaml");
    let pipeline = verify::load_steps(repo.path(), &[]).expect("agent.yaml parses");
    let options = VerifyOptions::new(artifacts.path().to_owned());
    let result = verify::run(&sandbox, repo.path(), &pipeline, &options)
        .await
        .expect("runs");
    assert_eq!(result.status, Status::Pass, "{}", result.tail_log);
    assert!(result.tail_log.contains("hello"));
    assert_eq!(
        result.manifest.platform.container_image,
        crate::sandbox::TEST_IMAGE
    );
    assert!(verify::to_findings(&result).is_empty());

    let writes = steps(&[("write", "touch /repo/x")]);
    let result = verify::run(&sandbox, repo.path(), &writes, &options)
        .await
        .expect("runs");
    assert_eq!(result.status, Status::Fail);
    assert!(!repo.path().join("x").exists());
}

#[tokio::test]
async fn timeout_is_a_failure_without_retry() {
    let artifacts = tempfile::tempdir().expect("tempdir");
    let sandbox = docker(artifacts.path()).await;
    let repo = repo();
    let pipeline = steps(&[("hang", "echo start; sleep 300"), ("after", "echo never")]);
    let mut options = VerifyOptions::new(artifacts.path().to_owned());
    options.timeout = Duration::from_secs(2);
    let started = std::time::Instant::now();
    let result = verify::run(&sandbox, repo.path(), &pipeline, &options)
        .await
        .expect("runs");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(result.status, Status::Fail);
    assert_eq!(result.manifest.commands_executed.len(), 1);
    assert_eq!(
        result.manifest.commands_executed[0].exit_code,
        verify::TIMEOUT_EXIT_CODE
    );
    assert!(result.tail_log.contains("timed out"), "{}", result.tail_log);
}
