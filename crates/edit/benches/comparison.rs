//! What the judges' comparison with the approved revision costs (`judge_files::Baseline`),
//! beside its floor: one bare walk of the same tree (`read_dir` of every folder, the kind from
//! the listing, nothing else). The tree is a git repository of 50,000 files in 2,500 folders:
//! code under `src/`, tests under `tests/`, a file that is not code in each folder, and an
//! ignored `build/` of 5,000 files, with the code rules a run derives from that layout.
//! Interleaved rounds, medians.
//!
//! Run: `cargo bench --bench comparison`; `BORK_BENCH_FILES` sets the number of files.
#![expect(
    clippy::disallowed_methods,
    reason = "benchmarks lay out fixtures, read the environment and run tools directly"
)]

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use bork_ci_edit::edit::judge_files::{Baseline, JudgeRules};

const ROUNDS: usize = 9;

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// The floor: every folder read once, nothing looked at but the kind the listing gives.
fn bare_walk(root: &Path) -> usize {
    let mut stack = vec![root.to_owned()];
    let mut entries = 0;
    while let Some(dir) = stack.pop() {
        for item in std::fs::read_dir(&dir).expect("reads") {
            let item = item.expect("entry");
            entries += 1;
            if item.file_name() == ".git" {
                continue;
            }
            if item.file_type().expect("kind").is_dir() {
                stack.push(item.path());
            }
        }
    }
    entries
}

fn tree(root: &Path, files: usize) {
    let per_folder = 20;
    let folders = files / per_folder;
    std::fs::write(root.join(".gitignore"), "/build/\n").expect("write");
    std::fs::write(root.join("README.md"), "# bench\n").expect("write");
    for folder in 0..folders {
        let dir = match folder % 10 {
            0 => root.join(format!("tests/t{folder}")),
            1 => root.join(format!("build/b{folder}")),
            _ => root.join(format!("src/m{}/p{folder}", folder % 37)),
        };
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("NOTES.md"), format!("folder {folder}\n")).expect("write");
        for file in 1..per_folder {
            std::fs::write(dir.join(format!("f{file}.py")), format!("x = {file}\n")).expect("write");
        }
    }
    let git = |args: &[&str]| {
        let status = Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@example.invalid"])
            .args(args)
            .current_dir(root)
            .status()
            .expect("git runs");
        assert!(status.success(), "git {args:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "bench"]);
}

fn main() {
    let files: usize = std::env::var("BORK_BENCH_FILES")
        .ok()
        .and_then(|files| files.parse().ok())
        .unwrap_or(50_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    tree(root, files);
    let mut rules = JudgeRules::resolve(None, &[], &BTreeMap::new()).expect("resolves");
    // The code rules a run derives from the layout when `.config/bork.json` states none.
    rules.code = Some(bork_ci_edit::edit::layout::derive(root).expect("derives"));
    let matcher = rules.matcher().expect("compiles");
    let entries = bare_walk(root);
    let baseline = Baseline::capture(root, &matcher).expect("captures");
    println!(
        "comparison: {files} files, {entries} entries, {} recorded (judge files and what is not code), {ROUNDS} rounds",
        baseline.len()
    );
    let (mut floor, mut capture, mut check) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let started = Instant::now();
        std::hint::black_box(bare_walk(root));
        floor.push(started.elapsed());
        let started = Instant::now();
        std::hint::black_box(Baseline::capture(root, &matcher).expect("captures"));
        capture.push(started.elapsed());
        let started = Instant::now();
        let checked = baseline.check(root, &matcher).expect("walks");
        check.push(started.elapsed());
        assert!(checked.is_ok(), "the tree is the approved one: {checked:?}");
    }
    let floor = median(floor);
    let (capture, check) = (median(capture), median(check));
    println!(
        "  floor, one bare walk:                 {:>8.1} ms  1.00x",
        ms(floor)
    );
    println!(
        "  Baseline::check (before every judge): {:>8.1} ms  {:.2}x",
        ms(check),
        ms(check) / ms(floor)
    );
    println!(
        "  Baseline::capture (once per round):   {:>8.1} ms  {:.2}x",
        ms(capture),
        ms(capture) / ms(floor)
    );
}
