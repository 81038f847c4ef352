//! The first run of a new bork-ci executable against a later one: the edit step's image is
//! loaded as one layer through the Engine API (`POST /images/load`) and, later, found and
//! checked by content. Printed side by side in one run with the way it used to be
//! made, `docker build` of the same files (`FROM scratch`, `COPY`), the baseline. Then whole
//! `bork-ci run`s (the Docker sandbox, a scripted model, one iteration): the first of a new
//! executable (its image removed before) against a later one. Several rounds, medians and their
//! ratios. A later run is timed as it was (the executable read, its layer built and hashed) and
//! as it is (the identity remembered under the artifact root). Needs the engine and `ci/build-images.sh busybox`. Run:
//! `cargo bench --bench runner_image`.
#![expect(
    clippy::disallowed_methods,
    reason = "benchmarks lay out fixtures and run tools directly"
)]

use std::process::Command;
use std::time::{Duration, Instant};

use bork_ci::sandbox::docker::runner_image::{self, Executable};

const ROUNDS: usize = 7;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn remove(tag: &str) {
    let _ = Command::new("docker")
        .args(["rmi", "--force", tag])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let docker =
        bork_ci::sandbox::docker::bollard::Docker::connect_with_defaults().expect("the Docker engine");
    let executable = Executable::at(std::path::Path::new(env!("CARGO_BIN_EXE_bork-ci"))).expect("bork-ci");
    let tag = executable.tag();
    // The baseline's context: the same layer, unpacked, built the old way.
    let context = tempfile::tempdir().expect("tempdir");
    let layer = runner_image::layer(&executable).expect("layer");
    std::fs::create_dir_all(context.path().join("rootfs")).expect("mkdir");
    tar::Archive::new(layer.as_slice())
        .unpack(context.path().join("rootfs"))
        .expect("unpack");
    std::fs::write(
        context.path().join("Dockerfile"),
        "FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/local/bin HOME=/tmp\nWORKDIR /repo\nCMD [\"bork-ci\", \"--version\"]\n",
    )
    .expect("Dockerfile");
    let baseline_tag = "bork-ci-bench/built-runner:latest";

    let mut built = Vec::new();
    let mut first = Vec::new();
    let mut later = Vec::new();
    let mut remembered = Vec::new();
    let cache = tempfile::tempdir().expect("tempdir");
    let source = Some(std::path::PathBuf::from(env!("CARGO_BIN_EXE_bork-ci")));
    for _ in 0..ROUNDS {
        remove(baseline_tag);
        let started = Instant::now();
        let status = Command::new("docker")
            .args(["build", "-q", "-t", baseline_tag])
            .arg(context.path())
            .env("DOCKER_BUILDKIT", "0")
            .stdout(std::process::Stdio::null())
            .status()
            .expect("docker build");
        assert!(status.success());
        built.push(started.elapsed());

        remove(&tag);
        let started = Instant::now();
        runtime
            .block_on(runner_image::ensure(&docker, &executable))
            .expect("loaded");
        first.push(started.elapsed());

        // A later run as it was: read the executable, build and hash the layer, then check.
        let started = Instant::now();
        let read = Executable::at(std::path::Path::new(env!("CARGO_BIN_EXE_bork-ci"))).expect("bork-ci");
        runtime
            .block_on(runner_image::ensure(&docker, &read))
            .expect("found");
        later.push(started.elapsed());

        // A later run now: the identity remembered for this very file, then the same check.
        runtime
            .block_on(runner_image::ensure_cached(&docker, source.clone(), cache.path()))
            .expect("remembered");
        let started = Instant::now();
        runtime
            .block_on(runner_image::ensure_cached(&docker, source.clone(), cache.path()))
            .expect("found by what was remembered");
        remembered.push(started.elapsed());
    }
    remove(baseline_tag);
    let (built, first, later, remembered) = (median(built), median(first), median(later), median(remembered));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "runner image of a {:.0} MB executable, median of {ROUNDS} rounds:",
        executable.bytes.len() as f64 / 1e6
    );
    println!("  docker build (baseline)      {:>8.1} ms", ms(built));
    println!("  first run (load + check)     {:>8.1} ms", ms(first));
    println!(
        "  later run, executable read   {:>8.1} ms   (read, ldd, layer, hash, inspect + check)",
        ms(later)
    );
    println!(
        "  later run, remembered        {:>8.1} ms   (stat, inspect + check)",
        ms(remembered)
    );
    println!("  read / remembered: {:.1}x", ms(later) / ms(remembered));
    println!(
        "  first / later: {:.2}x   (baseline build / later: {:.2}x)",
        ms(first) / ms(later),
        ms(built) / ms(later)
    );

    // Whole runs, as a user meets them.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let images = Command::new(root.join("ci/build-images.sh"))
        .arg("busybox")
        .status()
        .expect("ci/build-images.sh runs");
    assert!(images.success(), "ci/build-images.sh busybox failed");
    let mut first_runs = Vec::new();
    let mut later_runs = Vec::new();
    for _ in 0..3 {
        remove(&tag);
        first_runs.push(whole_run());
        later_runs.push(whole_run());
    }
    let (first_run, later_run) = (median(first_runs), median(later_runs));
    println!("whole `bork-ci run` (Docker sandbox, defaults, one iteration), median of 3:");
    println!("  first run of this executable {:>8.1} ms", ms(first_run));
    println!("  later run                    {:>8.1} ms", ms(later_run));
    println!("  first / later: {:.2}x", ms(first_run) / ms(later_run));
}

/// One `bork-ci run` of a fresh repository with the Docker sandbox and a scripted model.
fn whole_run() -> Duration {
    let repo = tempfile::tempdir().expect("tempdir");
    let path = repo.path();
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(["-c", "user.name=b", "-c", "user.email=b@example.com"])
            .args(args)
            .current_dir(path)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("git");
        assert!(status.success());
    };
    std::fs::create_dir_all(path.join(".config")).expect("mkdir");
    std::fs::create_dir_all(path.join("specs")).expect("mkdir");
    std::fs::write(path.join("specs/app.md"), "The app prints DONE.\n").expect("write");
    std::fs::write(path.join("app.txt"), "nothing\n").expect("write");
    std::fs::write(
        path.join("check.sh"),
        "#!/bin/sh\nif grep -q DONE app.txt; then echo '{\"per_file_findings\":[],\"overall_findings\":[]}'; exit 0; fi\necho '{\"per_file_findings\":[{\"provenance\":\"code-review\",\"file\":\"app.txt\",\"finding\":\"no DONE\"}],\"overall_findings\":[]}'; exit 1\n",
    )
    .expect("write");
    std::fs::write(
        path.join(".config/bork.json"),
        r#"{"correctness-checker": "check.sh", "llm": {"provider": "scripted"}, "sandbox": {"kind": "docker", "image": "bork-ci-test/busybox:latest", "pull": "never", "transport": "bind"}}"#,
    )
    .expect("write");
    let answers = tempfile::NamedTempFile::new().expect("tempfile");
    std::fs::write(
        answers.path(),
        r#"{"answers": [{"create-or-update": {"app.txt": "DONE\n"}}]}"#,
    )
    .expect("write");
    let script = answers.path();
    for (file, mode) in [(path.to_owned(), 0o755), (path.join("check.sh"), 0o755)] {
        std::fs::set_permissions(file, std::os::unix::fs::PermissionsExt::from_mode(mode)).expect("chmod");
    }
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "start"]);
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_bork-ci"))
        .args(["run", "--repo"])
        .arg(path)
        .env("BORK_LLM_SCRIPT", script)
        .output()
        .expect("bork-ci run");
    let took = started.elapsed();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    took
}
