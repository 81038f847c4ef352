//! What a clean verdict costs: a converged one-iteration run with the defaults (`preflight` and
//! `confirm-clean` on: the preflight fills the warm build cache and each judge works in a copy of
//! it) against the same run with both off, side by side in interleaved pairs, on the
//! real-toolchain examples (`examples/rust`, `examples/python`; scripted model, Docker sandbox).
//! Each example's repository stays in one place across the runs, reset between them, as a CI
//! checkout of the same repository is: the warm cache of the runs before is there.
//!
//! With `crate` as an argument it also runs a crate with about fifty dependencies (written here,
//! its lock file resolved from crates.io) three times with the defaults and prints each run's
//! judge times: the first builds the dependencies once, in the preflight; a later run pays no
//! cold build.
//!
//! Needs the engine, `ci/build-images.sh debian examples`, and crates.io for the Rust setup.
//! Run: `cargo bench --bench verdict` or `cargo bench --bench verdict -- crate`.
//! `BORK_BENCH_BIN` names another bork-ci executable (default: this build's).
#![expect(
    clippy::disallowed_methods,
    reason = "benchmarks lay out fixtures, read the environment and run tools directly"
)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ROUNDS: usize = 5;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// A copy of `source` at `dir`, a git repository whose `main` holds it, readable by the judges'
/// user.
fn repository(source: &Path, dir: &Path) {
    let status = Command::new("cp")
        .arg("-R")
        .arg(format!("{}/.", source.display()))
        .arg(dir)
        .status()
        .expect("cp");
    assert!(status.success());
    let status = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir)
        .status()
        .expect("chmod");
    assert!(status.success());
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "bench"]);
}

/// One run: the repository reset to `main`, the spec change applied, `bork-ci run` with `env`.
/// Returns its wall time and its report.
struct Example {
    bin: PathBuf,
    repo: PathBuf,
    artifacts: PathBuf,
    script: PathBuf,
    spec: (String, String),
}

impl Example {
    fn run(&self, env: &[(&str, &str)]) -> (Duration, serde_json::Value) {
        git(&self.repo, &["checkout", "-q", "-f", "main"]);
        git(&self.repo, &["clean", "-q", "-fdx"]);
        std::fs::write(self.repo.join(&self.spec.0), &self.spec.1).expect("spec change");
        let report = self.artifacts.join("bench-report.json");
        let started = Instant::now();
        let output = Command::new(&self.bin)
            .args(["run", "--report"])
            .arg(&report)
            .current_dir(&self.repo)
            .env("BORK_LLM_SCRIPT", &self.script)
            .env("BORK_SANDBOX_ARTIFACT_DIR", &self.artifacts)
            .envs(env.iter().copied())
            .output()
            .expect("bork-ci runs");
        let took = started.elapsed();
        assert!(
            output.status.success(),
            "bork-ci run ended {:?}:\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("report JSON");
        assert_eq!(report["status"], "converged");
        (took, report)
    }
}

const OFF: &[(&str, &str)] = &[("BORK_PREFLIGHT", "false"), ("BORK_CONFIRM_CLEAN", "false")];

fn example(root: &Path, bin: &Path, name: &str, spec: &str) {
    let here = root.join("examples").join(name);
    let work = tempfile::tempdir().expect("tempdir");
    let repo = work.path().join("repo");
    let artifacts = work.path().join("artifacts");
    std::fs::create_dir_all(&repo).expect("mkdir");
    std::fs::create_dir_all(&artifacts).expect("mkdir");
    let status = Command::new("chmod")
        .args(["-R", "755"])
        .arg(work.path())
        .status()
        .expect("chmod");
    assert!(status.success());
    repository(&here.join("repo"), &repo);
    let example = Example {
        bin: bin.to_owned(),
        repo,
        artifacts,
        script: here.join("scripted-answers.json"),
        spec: (
            spec.to_owned(),
            std::fs::read_to_string(here.join("spec-change.md")).expect("spec change"),
        ),
    };
    // Once each first: the runner image, the dependency cache, the warm cache.
    example.run(&[]);
    example.run(OFF);
    let (mut on, mut off) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        on.push(example.run(&[]).0);
        off.push(example.run(OFF).0);
    }
    let (on, off) = (median(on), median(off));
    println!(
        "{name:<8} defaults (preflight, confirm-clean) {:>7.2} s   both off {:>7.2} s   ratio {:.2}x   (medians of {ROUNDS} interleaved pairs)",
        on.as_secs_f64(),
        off.as_secs_f64(),
        on.as_secs_f64() / off.as_secs_f64()
    );
}

/// A crate with about fifty dependencies (the lock file resolved here, for the image's Rust
/// 1.85), whose test fails until `answer` returns 42.
fn crate_repository(dir: &Path, examples: &Path) {
    std::fs::create_dir_all(dir.join("src")).expect("mkdir");
    std::fs::create_dir_all(dir.join("tests")).expect("mkdir");
    std::fs::create_dir_all(dir.join("specs")).expect("mkdir");
    std::fs::create_dir_all(dir.join("checks")).expect("mkdir");
    std::fs::create_dir_all(dir.join(".config")).expect("mkdir");
    std::fs::write(
        dir.join("Cargo.toml"),
        r#"[package]
name = "answer"
version = "0.1.0"
edition = "2021"
rust-version = "1.85"
resolver = "3"

[dependencies]
anyhow = "1"
chrono = { version = "0.4", default-features = false, features = ["clock", "std"] }
clap = { version = "4", features = ["derive"] }
rand = "0.8"
regex = "1"
serde = { version = "1", features = ["derive"] }
serde_json = "1"
thiserror = "2"
uuid = { version = "1", features = ["v4"] }
"#,
    )
    .expect("write");
    std::fs::write(
        dir.join("src/lib.rs"),
        "//! The answer.\n\n/// The answer to everything.\npub fn answer() -> u32 {\n    41\n}\n\n\
         /// Pulls every dependency in.\npub fn touch() -> usize {\n    let re = regex::Regex::new(\"a+\").expect(\"regex\");\n    \
         let text = serde_json::to_string(&vec![1, 2]).expect(\"json\");\n    \
         let id = uuid::Uuid::new_v4().to_string();\n    let now = chrono::Utc::now().to_rfc3339();\n    \
         let n: u8 = rand::random();\n    let _ = anyhow::anyhow!(\"x\");\n    \
         re.find_iter(&text).count() + id.len() + now.len() + usize::from(n)\n}\n\n\
         #[derive(clap::Parser, serde::Serialize, Debug)]\n/// Arguments.\npub struct Args {\n    /// A name.\n    pub name: String,\n}\n\n\
         #[derive(thiserror::Error, Debug)]\n/// An error.\n#[error(\"bad\")]\npub struct Bad;\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("tests/answer.rs"),
        "#[test]\nfn the_answer_is_42() {\n    assert_eq!(answer::answer(), 42);\n    assert!(answer::touch() > 0);\n}\n",
    )
    .expect("write");
    std::fs::write(dir.join("specs/answer.md"), "`answer` returns 41.\n").expect("write");
    std::fs::copy(
        examples.join("rust/repo/checks/cargo-test"),
        dir.join("checks/cargo-test"),
    )
    .expect("checker");
    std::fs::write(
        dir.join(".config/bork.json"),
        r#"{
    "correctness-checker": "checks/cargo-test",
    "checker-timeout-secs": 1800,
    "llm": { "provider": "scripted", "model": "scripted-bench" },
    "sandbox": {
        "kind": "docker",
        "image": "bork-ci-example/rust:bookworm",
        "pull": "never",
        "setup": ["cargo fetch --locked"],
        "setup-network": "bridge",
        "network": "none"
    }
}
"#,
    )
    .expect("write");
    let status = Command::new("cargo")
        .args(["generate-lockfile", "--quiet"])
        .current_dir(dir)
        .env("CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS", "fallback")
        .status()
        .expect("cargo generate-lockfile");
    assert!(status.success(), "resolving the crate's lock file (crates.io)");
}

fn heavy_crate(root: &Path, bin: &Path) {
    let work = tempfile::tempdir().expect("tempdir");
    let repo = work.path().join("repo");
    let source = work.path().join("source");
    let artifacts = work.path().join("artifacts");
    std::fs::create_dir_all(&repo).expect("mkdir");
    std::fs::create_dir_all(&artifacts).expect("mkdir");
    crate_repository(&source, &root.join("examples"));
    let packages = std::fs::read_to_string(source.join("Cargo.lock"))
        .expect("lock")
        .matches("[[package]]")
        .count();
    let status = Command::new("chmod")
        .args(["-R", "755"])
        .arg(work.path())
        .status()
        .expect("chmod");
    assert!(status.success());
    repository(&source, &repo);
    let script = work.path().join("answers.json");
    std::fs::write(
        &script,
        serde_json::json!({"answers": [{"create-or-update": {"src/lib.rs":
            std::fs::read_to_string(source.join("src/lib.rs")).expect("lib").replace("    41\n", "    42\n")}}]})
        .to_string(),
    )
    .expect("write");
    let example = Example {
        bin: bin.to_owned(),
        repo,
        artifacts,
        script,
        spec: ("specs/answer.md".to_owned(), "`answer` returns 42.\n".to_owned()),
    };
    println!("crate with {packages} packages in its lock file (the crate and its dependencies):");
    for run in 1..=3 {
        let (took, report) = example.run(&[]);
        let preflight = report["baseline"]["duration-ms"].as_u64().unwrap_or(0);
        let check = report["iterations"][0]["durations"]["check-ms"]
            .as_u64()
            .unwrap_or(0);
        println!(
            "  run {run}: {:>6.1} s in all; the judges {:>6.1} s (preflight {:>6.1} s, check {:>6.1} s)",
            took.as_secs_f64(),
            (preflight + check) as f64 / 1000.0,
            preflight as f64 / 1000.0,
            check as f64 / 1000.0
        );
    }
}

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = std::env::var_os("BORK_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bork-ci")));
    let built = Command::new(root.join("ci/build-images.sh"))
        .args(["debian", "examples"])
        .status()
        .expect("ci/build-images.sh runs");
    assert!(built.success(), "ci/build-images.sh failed");
    let heavy = std::env::args().any(|arg| arg == "crate");
    println!("bork-ci {}", bin.display());
    if heavy {
        heavy_crate(root, &bin);
    } else {
        example(root, &bin, "rust", "specs/counts.md");
        example(root, &bin, "python", "specs/durations.md");
    }
}
