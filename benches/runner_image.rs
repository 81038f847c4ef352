//! The first run of a new bork-ci executable against a later one: the edit step's image is
//! imported as one layer through the Engine API (`POST /images/create?fromSrc=-`) and, later,
//! found and checked by content. Printed side by side in one run with the way it used to be
//! made, `docker build` of the same files (`FROM scratch`, `COPY`), the baseline. Several rounds,
//! medians and their ratios. Needs the engine. Run: `cargo bench --bench runner_image`.
#![allow(clippy::disallowed_methods)] // benchmarks lay out fixtures and run tools directly

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
    let docker = bollard::Docker::connect_with_local_defaults().expect("the Docker engine");
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
            .expect("imported");
        first.push(started.elapsed());

        let started = Instant::now();
        runtime
            .block_on(runner_image::ensure(&docker, &executable))
            .expect("found");
        later.push(started.elapsed());
    }
    remove(baseline_tag);
    let (built, first, later) = (median(built), median(first), median(later));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "runner image of a {:.0} MB executable, median of {ROUNDS} rounds:",
        executable.bytes.len() as f64 / 1e6
    );
    println!("  docker build (baseline)      {:>8.1} ms", ms(built));
    println!("  first run (import + check)   {:>8.1} ms", ms(first));
    println!("  later run (inspect + check)  {:>8.1} ms", ms(later));
    println!(
        "  first / later: {:.2}x   (baseline build / later: {:.2}x)",
        ms(first) / ms(later),
        ms(built) / ms(later)
    );
}
