//! Packing benchmark: generates a large repository in a temp dir and times,
//! side by side in one run, `pack::snapshot` plus rendering the whole prompt, the `bork-ci pack`
//! binary writing to `/dev/null`, the floor `git ls-files -z | xargs -0 cat > /dev/null`, and
//! `yek` and `code2prompt` when they are on `PATH`. Rounds are interleaved (every tool once per
//! round); prints the median of the rounds and the ratios. Run: `cargo bench --bench pack`.
//! `BORK_BENCH_FILES` sets the number of files (default 30000), `BORK_BENCH_ROUNDS` the rounds
//! (default 7), `BORK_BENCH_REPO` packs an existing repository instead of a generated one (and
//! generates one there first when the path does not exist, so several runs can share a tree).
#![expect(
    clippy::disallowed_methods,
    reason = "benchmarks lay out fixtures and run tools directly"
)]
#![expect(clippy::unwrap_used, reason = "a benchmark aborts on any setup failure")]
#![expect(clippy::print_stdout, reason = "a benchmark prints its table")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bork_ci::pack::{self, PackOptions};

fn main() {
    let files: usize = env_number("BORK_BENCH_FILES", 30_000);
    let rounds: usize = env_number("BORK_BENCH_ROUNDS", 7);
    let temp = tempfile::tempdir().unwrap();
    let repo = std::env::var_os("BORK_BENCH_REPO").map_or_else(|| temp.path().join("repo"), PathBuf::from);
    if !repo.exists() {
        let started = Instant::now();
        generate(&repo, files);
        println!("generated {files} files in {:.1?}", started.elapsed());
    }

    let mut tools: Vec<(&str, Runner)> = Vec::new();
    let pack_repo = repo.clone();
    tools.push((
        "bork-ci pack (snapshot + render)",
        Box::new(move || {
            let snapshot = pack::snapshot(&pack_repo, &PackOptions::default()).unwrap();
            snapshot.render().len()
        }),
    ));
    let floor_repo = repo.clone();
    tools.push((
        "floor: git ls-files -z | xargs -0 cat",
        Box::new(move || {
            shell(&floor_repo, "git ls-files -z | xargs -0 cat > /dev/null");
            0
        }),
    ));
    // The whole command as a user runs it: configuration, the prompt around the pack, stdout.
    let binary_repo = repo.clone();
    tools.push((
        "bork-ci pack (binary, > /dev/null)",
        Box::new(move || {
            let status = Command::new(env!("CARGO_BIN_EXE_bork-ci"))
                .arg("pack")
                .current_dir(&binary_repo)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap();
            assert!(status.success(), "bork-ci pack failed");
            0
        }),
    ));
    let mut skipped = Vec::new();
    if on_path("yek") {
        let yek_repo = repo.clone();
        let out = temp.path().join("yek-out");
        tools.push((
            "yek",
            Box::new(move || {
                shell(
                    &yek_repo,
                    &format!(
                        "yek --max-size 10000MB --output-dir {} . > /dev/null",
                        out.display()
                    ),
                );
                0
            }),
        ));
    } else {
        skipped.push("yek");
    }
    if on_path("code2prompt") {
        let c2p_repo = repo.clone();
        let out = temp.path().join("code2prompt.txt");
        tools.push((
            "code2prompt",
            Box::new(move || {
                shell(
                    &c2p_repo,
                    &format!(
                        "code2prompt . --no-clipboard --output-file {} > /dev/null",
                        out.display()
                    ),
                );
                0
            }),
        ));
    } else {
        skipped.push("code2prompt");
    }

    // One warm-up round fills the page cache for everyone.
    let mut prompt_bytes = 0;
    for (_, run) in &tools {
        prompt_bytes = prompt_bytes.max(run());
    }
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); tools.len()];
    for _ in 0..rounds {
        for (index, (_, run)) in tools.iter().enumerate() {
            let started = Instant::now();
            run();
            times[index].push(started.elapsed());
        }
    }
    let medians: Vec<Duration> = times.iter_mut().map(|t| median(t)).collect();
    let floor = medians[1];
    let yek = tools
        .iter()
        .position(|(name, _)| *name == "yek")
        .map(|i| medians[i]);
    println!(
        "\n{} rounds, median; prompt {} bytes (~{} tokens)",
        rounds,
        prompt_bytes,
        prompt_bytes.div_ceil(4)
    );
    println!(
        "{:<40} {:>10} {:>10} {:>10}",
        "tool", "median", "vs floor", "vs yek"
    );
    for ((name, _), time) in tools.iter().zip(&medians) {
        let vs_yek = yek.map_or("-".to_owned(), |yek| ratio(*time, yek));
        println!(
            "{:<40} {:>8.1}ms {:>10} {:>10}",
            name,
            time.as_secs_f64() * 1000.0,
            ratio(*time, floor),
            vs_yek
        );
    }
    for tool in skipped {
        println!("{tool}: not found on PATH, skipped");
    }
}

/// One timed tool: runs once, returns the bytes it produced when it knows them.
type Runner = Box<dyn Fn() -> usize>;

fn ratio(time: Duration, base: Duration) -> String {
    format!("{:.2}x", time.as_secs_f64() / base.as_secs_f64())
}

fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

fn shell(dir: &Path, script: &str) {
    let status = Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .stdin(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "`{script}` failed");
}

fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "Bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?} failed");
}

/// A deterministic tree: 100 top directories of 10 subdirectories, source-like text files of
/// 200 B to 6 KiB, 1% binaries, a nested `.gitignore` per top directory with ignored files and an
/// ignored `gen/` directory, a few specs. Everything is added, half is committed, and a few
/// hundred files are created afterwards, untracked.
fn generate(repo: &Path, files: usize) {
    std::fs::create_dir_all(repo).unwrap();
    git(repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join(".gitignore"), "*.o\ntarget/\n").unwrap();
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let line = "    let value = compute(input, &options).context(\"computing the value\")?;\n";
    let per_dir = files.div_ceil(1000).max(1);
    let mut written = 0;
    'outer: for top in 0..100 {
        let top_dir = repo.join(format!("mod{top:02}"));
        std::fs::create_dir_all(top_dir.join("gen")).unwrap();
        std::fs::write(top_dir.join(".gitignore"), "*.tmp\ngen/\n!keep.tmp\n").unwrap();
        std::fs::write(top_dir.join("gen/generated.rs"), "ignored").unwrap();
        std::fs::write(top_dir.join("scratch.tmp"), "ignored").unwrap();
        for sub in 0..10 {
            let dir = top_dir.join(format!("part{sub}"));
            std::fs::create_dir_all(&dir).unwrap();
            for index in 0..per_dir {
                if written >= files {
                    break 'outer;
                }
                let random = next();
                if random % 100 == 0 {
                    let mut bytes = vec![0u8; 4096];
                    bytes.iter_mut().for_each(|byte| *byte = next() as u8);
                    std::fs::write(dir.join(format!("blob{index}.bin")), bytes).unwrap();
                } else {
                    let lines = 3 + (random % 80) as usize;
                    let mut text = format!("// mod{top:02}/part{sub}/file{index}.rs\n");
                    text.push_str(&line.repeat(lines));
                    std::fs::write(dir.join(format!("file{index}.rs")), text).unwrap();
                }
                written += 1;
            }
        }
    }
    std::fs::create_dir_all(repo.join("specs/core")).unwrap();
    std::fs::write(repo.join("specs/core/a.md"), "# A\nThe behaviour.\n").unwrap();
    git(repo, &["add", "-A"]);
    let half: Vec<String> = (0..50).map(|top| format!("mod{top:02}")).collect();
    let mut args = vec!["commit", "-q", "-m", "half", "--"];
    args.extend(half.iter().map(String::as_str));
    args.push(".gitignore");
    git(repo, &args);
    for top in 0..100 {
        let dir = repo.join(format!("mod{top:02}/untracked"));
        std::fs::create_dir_all(&dir).unwrap();
        for index in 0..3 {
            std::fs::write(dir.join(format!("new{index}.rs")), line.repeat(20)).unwrap();
        }
    }
}
