//! One checker iteration over the `bind` and the `copy` transport on a repository of 10,000
//! files (a git repository: its `.git` is copied too), side by side in one run: several
//! interleaved rounds, medians and their ratio. Between rounds one file changes, as an edit
//! step changes a few: `copy` then sends only that. Its first iteration in a run (the whole
//! tree into a new volume) is measured apart, with a new sandbox each round. Needs the engine
//! and `ci/build-images.sh busybox`. Run: `cargo bench --bench transport`.
//!
//! Then whole `bork-ci run`s (the executable built with the bench, the Docker sandbox, a
//! scripted model) over `bind` and over `copy`, interleaved: the quick start's repository
//! converging at the third iteration (two answers the checker rejects, then the right one),
//! each run on a fresh checkout (a new repository, its objects packed as a clone's are) at the
//! same path, as a CI runner checks a repository out, so `copy` finds the tree volume the
//! previous run of the repository kept; `copy` on a repository it has never seen (a new
//! path each time: the whole tree goes into a new volume); and `copy` with
//! `BORK_SANDBOX_KEEP_TREE=false` (a volume per run, as before trees were kept). Then the same with 3,500 generated
//! files of 10 KiB added under `src/` (about 35 MiB). `BORK_BENCH_RUN_ROUNDS` sets the rounds
//! (default 5; 0 skips the part).
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
const FILES: usize = 10_000;
const ROUNDS: usize = 5;
/// A checker that reads the whole tree, then reports clean.
const SCRIPT: &str = "n=$(find . -path ./.git -prune -o -type f -print | wc -l); cat $(find src -type f) > /dev/null; \
                      echo \"$n\" >&2; echo '{\"per_file_findings\":[],\"overall_findings\":[]}'";

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn git(repo: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// Makes `dir` a git repository whose one commit holds all that is in it.
fn commit_all(dir: &Path, message: &str) {
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["add", "-A"]);
    // No automatic `gc` in the background: the caller packs when it wants to.
    let config = [
        "-c",
        "gc.auto=0",
        "-c",
        "user.name=b",
        "-c",
        "user.email=b@example.com",
    ];
    git(dir, &[&config[..], &["commit", "-qm", message]].concat());
}

/// A git repository of `FILES` files of about 1 KiB in 100 directories, committed.
fn repository(root: &Path) -> u64 {
    let mut bytes = 0u64;
    for index in 0..FILES {
        let dir = root.join(format!("src/m{:02}", index % 100));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let text = format!("// file {index}\n{}\n", "x".repeat(1000));
        bytes += text.len() as u64;
        std::fs::write(dir.join(format!("f{index:05}.rs")), text).expect("write");
    }
    commit_all(root, "bench");
    // Packed, as a CI checkout is (a clone brings one pack, not an object file per file).
    git(root, &["gc", "-q"]);
    bytes
}

fn job() -> Job {
    Job::new(
        JobKind::Checker,
        vec!["sh".into(), "-c".into(), SCRIPT.into()],
        Duration::from_secs(300),
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
    std::fs::set_permissions(repo.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let bytes = repository(repo.path());
    let artifacts = tempfile::tempdir().expect("tempdir");
    let sandbox = |transport: Transport, run: &str| {
        let mut settings = bork_ci::config::SandboxConfig::default()
            .docker_settings(artifacts.path().to_owned())
            .expect("the default settings convert");
        settings.host = std::env::var("DOCKER_HOST").ok().filter(|host| !host.is_empty());
        settings.image = IMAGE.to_owned();
        settings.pull = PullPolicy::Never;
        settings.transport = transport;
        // The runner image (whose bork-ci unpacks the tree over `copy`) from the bench's bork-ci.
        settings.runner_binary = Some(env!("CARGO_BIN_EXE_bork-ci").into());
        runtime
            .block_on(DockerSandbox::connect(settings, &format!("bench-{run}")))
            .expect("the Docker engine answers")
    };
    let bind = sandbox(Transport::Bind, "bind");
    let copy = sandbox(Transport::Copy, "copy");
    let once = |sandbox: &DockerSandbox| {
        let started = Instant::now();
        let out = runtime.block_on(sandbox.run(repo.path(), &job())).expect("runs");
        let elapsed = started.elapsed();
        assert_eq!(
            out.outcome,
            Outcome::Exited(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: usize = String::from_utf8_lossy(&out.stderr)
            .trim()
            .parse()
            .expect("a count");
        assert!(seen >= FILES, "the checker saw {seen} files");
        elapsed
    };
    // Warm both (page cache, the runner image, the tree and cache volumes).
    once(&bind);
    once(&copy);
    let (mut bind_times, mut copy_times, mut first_times) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // What an edit step does between two checks.
        std::fs::write(
            repo.path().join("src/m00/f00000.rs"),
            format!("// round {round}\n"),
        )
        .expect("write");
        bind_times.push(once(&bind));
        copy_times.push(once(&copy));
        // A new sandbox: `copy` holds the repository's kept tree, so this one fills its own.
        let fresh = sandbox(Transport::Copy, &format!("copy-first-{round}"));
        first_times.push(once(&fresh));
        runtime.block_on(fresh.cleanup_all()).expect("cleanup");
    }
    assert!(
        !copy.tree_through_engine(),
        "bork-ci unpacked the tree in its helper"
    );
    let (bind_time, copy_time, first_time) = (median(bind_times), median(copy_times), median(first_times));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "one checker iteration on {FILES} files ({:.1} MiB, plus .git), median of {ROUNDS} interleaved rounds:",
        bytes as f64 / (1 << 20) as f64
    );
    println!(
        "  bind  (host paths mounted)                      {:>8.1} ms",
        ms(bind_time)
    );
    println!(
        "  copy, a later iteration (one file changed)      {:>8.1} ms",
        ms(copy_time)
    );
    println!(
        "  copy, the first iteration (the whole tree)      {:>8.1} ms",
        ms(first_time)
    );
    println!(
        "  ratio copy / bind: later {:.2}x, first {:.2}x",
        copy_time.as_secs_f64() / bind_time.as_secs_f64(),
        first_time.as_secs_f64() / bind_time.as_secs_f64()
    );
    runtime.block_on(async {
        let _ = bind.cleanup_all().await;
        let _ = copy.cleanup_all().await;
    });
    whole_runs(root, false);
    whole_runs(root, true);
    drop_kept(repo.path());
}

/// The quick start's greet script, wrong twice (no `--shout`; `--shout` without a name), then
/// right: a run that converges at its third iteration.
const ANSWERS: &str = r##"{"answers": [
  {"create-or-update": {"src/greet.sh": "#!/bin/sh\nname=\"${1:-world}\"\necho \"Hello, $name!\"\n"}},
  {"create-or-update": {"src/greet.sh": "#!/bin/sh\nif [ \"$1\" = --shout ]; then\n    echo \"Hello, $2!\" | tr a-z A-Z\n    exit 0\nfi\nname=\"${1:-world}\"\necho \"Hello, $name!\"\n"}},
  {"create-or-update": {"src/greet.sh": "#!/bin/sh\nif [ \"$1\" = --shout ]; then\n    name=\"${2:-world}\"\n    echo \"Hello, $name!\" | tr a-z A-Z\n    exit 0\nfi\nname=\"${1:-world}\"\necho \"Hello, $name!\"\n"}}
]}"##;

/// Generated files of 10 KiB added under `src/gen/` for the large whole runs.
const LARGE_FILES: usize = 3_500;

/// [`LARGE_FILES`] files of 10 KiB of text in folders of 20 under `dir/src/gen/`, the same
/// bytes every time.
fn generate(dir: &Path) {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for folder in 0..LARGE_FILES / 20 {
        let path = dir.join(format!("src/gen/p{folder}"));
        std::fs::create_dir_all(&path).expect("mkdir");
        for file in 0..20 {
            let mut text = String::with_capacity(10 << 10);
            while text.len() + 17 <= 10 << 10 {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                text.push_str(&format!("{state:016x}\n"));
            }
            std::fs::write(path.join(format!("f{file}.txt")), text).expect("write");
        }
    }
}

/// A fresh checkout of the quick start's repository in `dir` (its spec changed, as the example
/// does), set up for the Docker sandbox over `transport`; with `large`, [`generate`]d files too.
fn quickstart(root: &Path, dir: &Path, transport: &str, large: bool) {
    let copied = Command::new("cp")
        .arg("-R")
        .arg(root.join("examples/quickstart/repo/."))
        .arg(dir)
        .status()
        .expect("cp runs");
    assert!(copied.success());
    let config = format!(
        r#"{{"correctness-checker": "checks/run", "max-iterations": 5,
  "llm": {{"provider": "scripted", "model": "scripted-bench"}},
  "sandbox": {{"kind": "docker", "image": "{IMAGE}", "pull": "never", "transport": "{transport}"}}}}"#
    );
    std::fs::write(dir.join(".config/bork.json"), config).expect("config");
    if large {
        generate(dir);
    }
    let chmod = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(dir)
        .status()
        .expect("chmod");
    assert!(chmod.success());
    commit_all(dir, "quick start");
    // Packed, as a clone is.
    git(dir, &["gc", "-q"]);
    std::fs::copy(
        root.join("examples/quickstart/spec-change.md"),
        dir.join("specs/greet.md"),
    )
    .expect("the spec change");
}

/// Removes the volumes the `copy` transport keeps for the repository at `dir` (its caches, and
/// its tree with `sandbox.keep-tree`).
fn drop_kept(dir: &Path) {
    let Ok(canonical) = std::fs::canonicalize(dir) else {
        return;
    };
    let volumes = Command::new("docker")
        .args(["volume", "ls", "-q", "--filter"])
        .arg(format!("label=bork-ci.repo={}", canonical.display()))
        .output()
        .expect("docker volume ls");
    for volume in String::from_utf8_lossy(&volumes.stdout).split_whitespace() {
        let _ = Command::new("docker").args(["volume", "rm", volume]).output();
    }
}

/// One `bork-ci run` over `transport` on a fresh checkout at `work/place` (what was there
/// before is removed first): its wall time.
fn whole_run(
    root: &Path,
    work: &Path,
    answers: &Path,
    transport: &str,
    place: &str,
    large: bool,
    keep_tree: bool,
) -> Duration {
    let dir = work.join(place);
    if dir.exists() {
        std::fs::remove_dir_all(&dir).expect("rm");
    }
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    quickstart(root, &dir, transport, large);
    let report = dir.join("report.json");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_bork-ci"))
        .args(["run", "--report"])
        .arg(&report)
        .current_dir(&dir)
        .env("BORK_LLM_SCRIPT", answers)
        // The large tree's prompt (about 9M tokens) within the run's budget.
        .env("BORK_CONTEXT_BUDGET_TOKENS", "50000000")
        .env("BORK_SANDBOX_ARTIFACT_DIR", work.join("artifacts"))
        .env("BORK_SANDBOX_KEEP_TREE", if keep_tree { "true" } else { "false" })
        .output()
        .expect("bork-ci runs");
    let elapsed = started.elapsed();
    assert!(
        out.status.success(),
        "bork-ci run over {transport}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("a JSON report");
    let iterations = report["iterations"].as_array().map_or(0, Vec::len);
    assert_eq!(iterations, 3, "{report}");
    elapsed
}

fn whole_runs(root: &Path, large: bool) {
    let rounds: usize = std::env::var("BORK_BENCH_RUN_ROUNDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(5);
    if rounds == 0 {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(work.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let answers = work.path().join("answers.json");
    std::fs::write(&answers, ANSWERS).expect("answers");
    let size = if large { "large" } else { "small" };
    let (bind_at, copy_at) = (format!("bind-{size}"), format!("copy-{size}"));
    // Warm both (the runner image, page cache); `copy` keeps the tree of its checkout's path.
    whole_run(root, work.path(), &answers, "bind", &bind_at, large, true);
    // Twice: the first run of a repository on an engine keeps nothing, the second keeps its tree.
    whole_run(root, work.path(), &answers, "copy", &copy_at, large, true);
    whole_run(root, work.path(), &answers, "copy", &copy_at, large, true);
    let (mut bind, mut copy, mut first, mut unkept) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        bind.push(whole_run(
            root,
            work.path(),
            &answers,
            "bind",
            &bind_at,
            large,
            true,
        ));
        copy.push(whole_run(
            root,
            work.path(),
            &answers,
            "copy",
            &copy_at,
            large,
            true,
        ));
        let new_place = format!("copy-first-{round}-{size}");
        first.push(whole_run(
            root,
            work.path(),
            &answers,
            "copy",
            &new_place,
            large,
            true,
        ));
        let off_place = format!("copy-unkept-{size}");
        unkept.push(whole_run(
            root,
            work.path(),
            &answers,
            "copy",
            &off_place,
            large,
            false,
        ));
    }
    // Removed at the end, not between rounds (a removal slows the engine's next file work).
    drop_kept(&work.path().join(&copy_at));
    for round in 0..rounds {
        drop_kept(&work.path().join(format!("copy-first-{round}-{size}")));
    }
    let ratios = |of: &[Duration]| -> (f64, f64) {
        bind.iter()
            .zip(of)
            .map(|(b, c)| c.as_secs_f64() / b.as_secs_f64())
            .fold((f64::MAX, 0f64), |(low, high), r| (low.min(r), high.max(r)))
    };
    let ((low, high), (first_low, first_high), (off_low, off_high)) =
        (ratios(&copy), ratios(&first), ratios(&unkept));
    let (bind, copy, first, unkept) = (median(bind.clone()), median(copy), median(first), median(unkept));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let what = if large {
        format!("with {LARGE_FILES} files of 10 KiB more (about 35 MiB)")
    } else {
        "as it is".to_owned()
    };
    println!(
        "whole `bork-ci run`s, the quick start {what} converging at iteration 3, median of {rounds} interleaved rounds:"
    );
    println!(
        "  bind                                            {:>8.1} ms",
        ms(bind)
    );
    println!(
        "  copy, the repository's tree kept from its last run {:>5.1} ms",
        ms(copy)
    );
    println!(
        "  copy, a repository new to the engine            {:>8.1} ms",
        ms(first)
    );
    println!(
        "  copy, `sandbox.keep-tree: false`                {:>8.1} ms",
        ms(unkept)
    );
    let ratio = |of: Duration| of.as_secs_f64() / bind.as_secs_f64();
    println!(
        "  ratio copy / bind: {:.2}x (rounds {low:.2}x to {high:.2}x); new repository {:.2}x ({first_low:.2}x to {first_high:.2}x); keep-tree off {:.2}x ({off_low:.2}x to {off_high:.2}x)",
        ratio(copy),
        ratio(first),
        ratio(unkept)
    );
}
