//! The whole loop with both steps in containers on the real engine: the edit step in the runner
//! image (reaching a model server on the host's loopback), the checker and the verifier in the
//! toolchain image with the repository read-only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply, TEST_KEY};
use crate::sandbox::{TEST_IMAGE, containers_with, ensure_test_image};
use crate::support::{Repo, bork, checker_wanting, report};

/// Builds the runner image from this very binary, once.
fn ensure_runner_image() {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/build-images.sh");
        let output = Command::new(script)
            .arg("runner")
            .env("BORK_CI_BINARY", env!("CARGO_BIN_EXE_bork-ci"))
            .output()
            .map_err(|error| error.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    });
    if let Err(error) = built {
        panic!("ci/build-images.sh runner failed: {error}");
    }
}

fn answer(contents: &str) -> Reply {
    Reply::json(&json!({"create-or-update": {"src/app.txt": contents}}))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_loop_converges_with_both_steps_in_containers() {
    ensure_test_image();
    ensure_runner_image();
    let fake = FakeLlm::openai(vec![answer("first try\n"), answer("DONE\n")]).await;
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
            "llm": {"provider": "openai", "model": "gpt-test", "base-url": fake.base_url(), "max-retries": 0},
            "sandbox": {"kind": "docker", "image": TEST_IMAGE, "pull": "never"}
        })
        .to_string(),
    );
    // The checker runs as another user: the checkout must be world-readable, as CI checkouts are.
    std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let scratch = tempfile::tempdir().expect("tempdir");
    let report_path = scratch.path().join("report.json");
    let output = bork()
        .args(["run", "--repo"])
        .arg(repo.path())
        .arg("--report")
        .arg(&report_path)
        .env_remove("BORK_SANDBOX_KIND")
        .env("OPENAI_API_KEY", TEST_KEY)
        .env("GITHUB_TOKEN", "ghs-canary-for-docker-4242")
        .env("BORK_SANDBOX_ARTIFACT_DIR", scratch.path().join("artifacts"))
        .output()
        .expect("bork-ci runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
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
    assert_eq!(fake.requests().len(), 2, "the edit step reached the host's loopback");
    let run_id = report["run-id"].as_str().expect("run id");
    assert!(containers_with(&format!("bork-ci.run={run_id}")).is_empty(), "no container left");
    assert!(!stderr.contains("ghs-canary-for-docker-4242"));
}
