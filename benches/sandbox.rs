//! What the `docker` backend adds to one checker run, measured against `docker run --rm` of the
//! same image and command, side by side in one run (several rounds, medians and their ratio);
//! then two checker runs of a command that fills the build cache, to show the second one reuses
//! it. Needs the engine and `ci/build-images.sh busybox`. Run: `cargo bench --bench sandbox`.
#![expect(
    clippy::disallowed_methods,
    reason = "benchmarks lay out fixtures and run tools directly"
)]

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bork_ci::sandbox::docker::{DockerSandbox, PullPolicy, Transport};
use bork_ci::sandbox::{Job, JobKind, Outcome};

const IMAGE: &str = "bork-ci-test/busybox:latest";
const ROUNDS: usize = 15;
const SCRIPT: &str = "echo '{\"per_file_findings\":[],\"overall_findings\":[]}'";

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn cli_run(repo: &Path) -> Duration {
    let started = Instant::now();
    let status = Command::new("docker")
        .args(["run", "--rm", "--network", "none", "-v"])
        .arg(format!("{}:/repo:ro", repo.display()))
        .args(["-w", "/repo", IMAGE, "sh", "-c", SCRIPT])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("docker run");
    assert!(status.success());
    started.elapsed()
}

fn job(script: &str) -> Job {
    Job::new(
        JobKind::Checker,
        vec!["sh".into(), "-c".into(), script.into()],
        Duration::from_secs(120),
        1 << 20,
    )
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let built = Command::new(root.join("ci/build-images.sh"))
        .arg("busybox")
        .status()
        .expect("ci/build-images.sh runs");
    assert!(built.success(), "ci/build-images.sh busybox failed");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let repo = tempfile::tempdir().expect("tempdir");
    std::fs::write(repo.path().join("README.md"), "bench\n").expect("write");
    let artifacts = tempfile::tempdir().expect("tempdir");
    let mut settings = bork_ci::config::SandboxConfig::default()
        .docker_settings(artifacts.path().to_owned())
        .expect("the default settings convert");
    settings.host = std::env::var("DOCKER_HOST").ok().filter(|host| !host.is_empty());
    settings.image = IMAGE.to_owned();
    settings.pull = PullPolicy::Never;
    // Bind mounts, as `docker run -v` does (`cargo bench --bench transport` compares with copy).
    settings.transport = Transport::Bind;
    let sandbox = runtime
        .block_on(DockerSandbox::connect(settings, "bench"))
        .expect("the Docker engine answers");

    // Warm both paths once (image layers, page cache).
    cli_run(repo.path());
    runtime
        .block_on(sandbox.run(repo.path(), &job(SCRIPT)))
        .expect("runs");

    let mut ours = Vec::new();
    let mut cli = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let out = runtime
            .block_on(sandbox.run(repo.path(), &job(SCRIPT)))
            .expect("runs");
        assert_eq!(out.outcome, Outcome::Exited(0));
        ours.push(started.elapsed());
        cli.push(cli_run(repo.path()));
    }
    let (ours, cli) = (median(ours), median(cli));
    println!("one checker run, median of {ROUNDS} rounds (interleaved):");
    println!("  docker run --rm          {:>8.1} ms", cli.as_secs_f64() * 1e3);
    println!("  bork-ci docker backend   {:>8.1} ms", ours.as_secs_f64() * 1e3);
    println!(
        "  ratio                    {:>8.2}x (goal <= 1.2x)",
        ours.as_secs_f64() / cli.as_secs_f64()
    );

    // A "build" that is slow the first time and reuses its output from the cache afterwards.
    let build = "if [ -f \"$CARGO_TARGET_DIR/artifact\" ]; then echo cached; \
                 else i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; \
                 echo built > \"$CARGO_TARGET_DIR/artifact\"; echo built; fi";
    let mut timings = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        let out = runtime
            .block_on(sandbox.run(repo.path(), &job(build)))
            .expect("runs");
        timings.push((
            started.elapsed(),
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        ));
    }
    println!("build cache across checker runs (cache/ kept):");
    for (index, (elapsed, said)) in timings.iter().enumerate() {
        println!(
            "  run {}: {:>8.1} ms ({said})",
            index + 1,
            elapsed.as_secs_f64() * 1e3
        );
    }
}
