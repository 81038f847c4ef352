//! Runs the test tool once and turns what it said into the checker contract's findings.
//!
//! The tool starts in the current folder with stdin closed and its output piped; each stream
//! is read to its end (or until 5 s after the tool ended, when a process it left behind
//! holds it open), keeping its first [`MAX_READ`] bytes (for the parsers) and its last
//! [`TAIL`] bytes (for people), so a tool that prints without end never fills memory. Its
//! report file goes into a private temporary folder under `$TMPDIR`, removed afterwards, and is
//! read bounded as a regular file only. A file a failure names is made relative to the
//! repository (the current folder) when it lies inside it; a path found nowhere in it is
//! quoted in the finding's text instead.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};

use super::{Collected, Failure, Format, MAX_READ, TAIL, go_json, jest, junit, libtest, sarif, tap, tool};
use bork_ci_core::findings::{Finding, Findings};

/// What `bork-ci check` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The format to read (`Auto`: ask a known tool, else sniff).
    pub format: Format,
    /// A JUnit XML file the command writes.
    pub junit: Option<PathBuf>,
    /// A SARIF file the command writes.
    pub sarif: Option<PathBuf>,
}

/// The tool could not start: the contract's exit 2.
#[derive(Debug, thiserror::Error)]
#[error("could not start `{program}`: {reason}")]
pub struct NotStarted {
    pub program: String,
    pub reason: String,
}

/// One checked run: the findings, the contract's exit code, and the output's tails.
#[derive(Debug)]
pub struct Checked {
    pub findings: Findings,
    /// 0 clean, 1 findings.
    pub exit_code: i32,
    pub stdout_tail: String,
    pub stderr_tail: String,
    /// How the tool ended, in words.
    pub ended: String,
}

/// One stream read to its end: its head for the parsers, its tail for people.
#[derive(Default)]
struct Captured {
    head: Vec<u8>,
    tail: Vec<u8>,
    total: u64,
}

impl Captured {
    fn keep(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let room = MAX_READ.saturating_sub(self.head.len());
        self.head.extend_from_slice(&chunk[..room.min(chunk.len())]);
        self.tail.extend_from_slice(chunk);
        if self.tail.len() > TAIL * 2 {
            let cut = self.tail.len() - TAIL;
            self.tail.drain(..cut);
        }
    }

    fn finish(mut self) -> Captured {
        if self.tail.len() > TAIL {
            let cut = self.tail.len() - TAIL;
            self.tail.drain(..cut);
        }
        self
    }
}

/// How long the streams are still read once the tool ended: a process it left behind may hold
/// them open for ever.
const GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Reads `stream` into `into` until its end.
async fn capture(stream: Option<impl AsyncRead + Unpin>, into: Arc<Mutex<Captured>>) {
    let Some(mut stream) = stream else {
        return;
    };
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if let Ok(mut captured) = into.lock() {
            captured.keep(&buffer[..read]);
        }
    }
}

/// What `captured` holds now.
fn taken(captured: &Arc<Mutex<Captured>>) -> Captured {
    captured
        .lock()
        .map(|mut captured| std::mem::take(&mut *captured))
        .unwrap_or_default()
        .finish()
}

/// Runs `argv` in `repo` (the current folder) and reads what failed.
pub async fn run(argv: &[String], options: &Options, repo: &Path) -> Result<Checked, NotStarted> {
    let program = argv.first().cloned().unwrap_or_default();
    let not_started = |reason: String| NotStarted {
        program: program.clone(),
        reason,
    };
    if program.is_empty() {
        return Err(not_started("no command was given".to_owned()));
    }
    let temp = tempfile::Builder::new()
        .prefix("bork-ci-check-")
        .tempdir()
        .map_err(|error| not_started(format!("creating a temporary folder for its report: {error}")))?;
    let plan = tool::plan(
        argv,
        options.format,
        temp.path(),
        options.junit.as_deref(),
        options.sarif.as_deref(),
    );
    let mut child = spawn(&plan.argv, repo).map_err(|error| not_started(error.to_string()))?;
    let (stdout_kept, stderr_kept) = (Arc::default(), Arc::default());
    let readers = [
        tokio::spawn(capture(child.stdout.take(), Arc::clone(&stdout_kept))),
        tokio::spawn(capture(child.stderr.take(), Arc::clone(&stderr_kept))),
    ];
    let status = child
        .wait()
        .await
        .map_err(|error| not_started(format!("waiting for it: {error}")))?;
    for reader in readers {
        let abort = reader.abort_handle();
        if tokio::time::timeout(GRACE, reader).await.is_err() {
            abort.abort();
        }
    }
    let (stdout, stderr) = (taken(&stdout_kept), taken(&stderr_kept));
    let code = exit_code(&status);
    let stdout_text = String::from_utf8_lossy(&stdout.head).into_owned();
    let stderr_text = String::from_utf8_lossy(&stderr.head).into_owned();
    let stdout_tail = super::clean(&String::from_utf8_lossy(&stdout.tail), TAIL);
    let stderr_tail = super::clean(&String::from_utf8_lossy(&stderr.tail), TAIL);
    let ended = match status.code() {
        Some(code) => format!("exited with {code}"),
        None => format!("was killed by signal {}", code - 128),
    };
    // A tool that the command could not find or run: the launcher's conventional codes, or
    // Python without the module it was asked for.
    if matches!(code, 126 | 127) || missing_python_module(plan.tool, &stderr_text) {
        let said = stderr_tail
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .unwrap_or("");
        return Err(not_started(format!("it {ended}: {said}")));
    }
    let report = match &plan.report {
        Some((path, format)) => {
            let path = repo.join(path);
            bork_ci_core::blocking::run(move || bork_ci_core::safe_fs::read_regular(&path, MAX_READ as u64))
                .ok()
                .map(|bytes| (String::from_utf8_lossy(&bytes).into_owned(), *format))
        }
        None => None,
    };
    drop(temp);
    let whole_output = stdout.total <= stdout.head.len() as u64 && stderr.total <= stderr.head.len() as u64;
    let cut_short = incomplete(
        plan.report.is_some(),
        report.as_ref().map(|(text, format)| (text.as_str(), *format)),
        plan.output,
        whole_output
            .then(|| format!("{stdout_text}\n{stderr_text}"))
            .as_deref(),
    );
    let collected = match report {
        Some((text, format)) => parse(format, &text, ""),
        None => parse(plan.output, &stdout_text, &stderr_text),
    };
    let failures = bork_ci_core::blocking::run(|| {
        collected
            .failures
            .iter()
            .cloned()
            .map(|failure| placed(failure, repo))
            .collect::<Vec<_>>()
    });
    let (findings, exit_code) = if !failures.is_empty() {
        (super::findings(&failures, collected.total), 1)
    } else if code == 0 && cut_short.is_none() {
        (Findings::default(), 0)
    } else if let Some(why) = cut_short.filter(|_| code == 0) {
        let finding = Finding::CodeReview {
            file: None,
            finding: format!(
                "`{}` exited 0, but {why}: the run did not complete, so it is not a clean verdict",
                shell_words(argv)
            ),
        };
        (
            Findings {
                per_file_findings: Vec::new(),
                overall_findings: vec![finding],
            },
            1,
        )
    } else {
        let finding = Finding::Command {
            command: shell_words(argv),
            stdout: stdout_tail.clone(),
            stderr: stderr_tail.clone(),
            exit_code: i64::from(code),
        };
        (
            Findings {
                per_file_findings: Vec::new(),
                overall_findings: vec![finding],
            },
            1,
        )
    };
    Ok(Checked {
        findings,
        exit_code,
        stdout_tail,
        stderr_tail,
        ended,
    })
}

#[expect(
    clippy::disallowed_methods,
    reason = "`bork-ci check` starts the test tool it was given"
)]
fn spawn(argv: &[String], repo: &Path) -> std::io::Result<tokio::process::Child> {
    tokio::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(repo)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
}

/// Why a run that exited 0 did not complete, when what it wrote shows it: the report the tool
/// was asked for is missing or names no test suite, or `cargo test` printed fewer closing
/// `test result:` lines than test binaries it started (a test ended the process early, with
/// exit 0). `output` is stdout and stderr when they were read whole (else nothing is said of
/// them).
fn incomplete(
    report_expected: bool,
    report: Option<(&str, Format)>,
    format: Format,
    output: Option<&str>,
) -> Option<String> {
    if report_expected {
        match report {
            None => return Some("it wrote no report".to_owned()),
            Some((text, Format::Junit)) if !text.contains("<testsuite") => {
                return Some("its JUnit report names no test suite".to_owned());
            }
            Some((text, Format::Jest)) if !text.trim_start().starts_with('{') => {
                return Some("its JSON report is empty".to_owned());
            }
            Some(_) => {}
        }
    }
    if format == Format::Libtest
        && let Some(output) = output
    {
        let output = super::strip_ansi(output);
        let started = output
            .lines()
            .filter(|line| {
                line.starts_with("running ") && (line.ends_with(" tests") || line.ends_with(" test"))
            })
            .count();
        let closed = output
            .lines()
            .filter(|line| line.starts_with("test result: "))
            .count();
        if closed < started.max(1) {
            return Some(format!(
                "{closed} of its {started} test binaries printed their closing `test result:` line"
            ));
        }
    }
    None
}

/// The exit code, or 128 + the signal that ended the tool.
fn exit_code(status: &std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Whether Python said it has no pytest (`python3 -m pytest` where pytest is not installed).
fn missing_python_module(tool: tool::Tool, stderr: &str) -> bool {
    tool == tool::Tool::Pytest
        && stderr
            .lines()
            .take(5)
            .any(|line| line.contains("No module named pytest"))
}

/// The failures `format` finds in the text read (`Auto`: the first format that finds any).
pub fn parse(format: Format, stdout: &str, stderr: &str) -> Collected {
    let both = || format!("{stdout}\n{stderr}");
    match format {
        Format::Libtest => libtest::parse(&both()),
        Format::Junit => junit::parse(stdout),
        Format::GoJson => go_json::parse(stdout, stderr),
        Format::Tap => tap::parse(stdout, stderr),
        Format::Jest => jest::parse(stdout),
        Format::Sarif => sarif::parse(stdout),
        Format::Auto => {
            let trimmed = stdout.trim_start();
            let candidates: Vec<Format> = if trimmed.starts_with('<') {
                vec![Format::Junit]
            } else if trimmed.starts_with("{\"Time\"") || trimmed.starts_with("{\"Action\"") {
                vec![Format::GoJson]
            } else if trimmed.starts_with('{') {
                vec![Format::Sarif, Format::Jest]
            } else {
                vec![Format::Tap, Format::Libtest]
            };
            for candidate in candidates {
                let collected = parse(candidate, stdout, stderr);
                if !collected.is_empty() {
                    return collected;
                }
            }
            Collected::default()
        }
    }
}

/// `failure` with its file made relative to `repo` when it lies inside; a path that cannot be
/// found there is quoted in the message and the failure has no file.
fn placed(mut failure: Failure, repo: &Path) -> Failure {
    let Some(named) = failure.file.take() else {
        return failure;
    };
    if let Some(relative) = inside(&named, repo) {
        failure.file = Some(relative);
        return failure;
    }
    let place = match failure.line.take() {
        Some(line) => format!("{named}:{line}"),
        None => named,
    };
    failure.message = format!("at {place}: {}", failure.message);
    failure
}

/// `named` as a plain relative path of a file inside `repo`: as it is when it names one, with
/// `repo`'s own prefix removed when absolute, else the shortest tail of it that names one (a Go
/// import path, a path inside another container).
fn inside(named: &str, repo: &Path) -> Option<String> {
    let path = Path::new(named);
    let plain = |path: &Path| {
        path.components().all(|part| matches!(part, Component::Normal(_)))
            && path.components().next().is_some()
    };
    let exists = |relative: &Path| {
        plain(relative) && std::fs::symlink_metadata(repo.join(relative)).is_ok_and(|meta| meta.is_file())
    };
    let relative = match path.strip_prefix(repo) {
        Ok(relative) => relative.to_path_buf(),
        Err(_) => path
            .components()
            .filter(|part| !matches!(part, Component::RootDir | Component::CurDir))
            .collect(),
    };
    if exists(&relative) {
        return relative.to_str().map(str::to_owned);
    }
    let parts: Vec<Component> = relative.components().collect();
    (1..parts.len().min(32))
        .map(|skip| parts[skip..].iter().collect::<PathBuf>())
        .find(|tail| exists(tail))
        .and_then(|tail| tail.to_str().map(str::to_owned))
        // A relative path that exists nowhere (a file the test deleted) is kept as the tool said.
        .or_else(|| (!path.is_absolute() && plain(&relative)).then(|| named.to_owned()))
}

/// The command as one line a shell would read back.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|word| {
            if !word.is_empty()
                && word
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                word.clone()
            } else {
                format!("'{}'", word.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_exited_0_without_its_closing_lines_or_report_is_incomplete() {
        let complete = "running 2 tests\ntest a ... ok\ntest b ... ok\n\ntest result: ok. 2 passed\n";
        assert_eq!(incomplete(false, None, Format::Libtest, Some(complete)), None);
        let early = "running 2 tests\ntest a ... ok\n";
        assert!(incomplete(false, None, Format::Libtest, Some(early)).is_some());
        let two = format!("{complete}running 1 test\n");
        assert!(incomplete(false, None, Format::Libtest, Some(&two)).is_some());
        // Output cut to its bounds says nothing.
        assert_eq!(incomplete(false, None, Format::Libtest, None), None);
        assert!(incomplete(true, None, Format::Junit, None).is_some());
        assert!(incomplete(true, Some(("", Format::Junit)), Format::Junit, None).is_some());
        let junit = "<testsuites><testsuite name=\"pytest\" tests=\"1\"></testsuite></testsuites>";
        assert_eq!(
            incomplete(true, Some((junit, Format::Junit)), Format::Junit, None),
            None
        );
        assert!(incomplete(true, Some(("", Format::Jest)), Format::Jest, None).is_some());
    }

    #[test]
    fn files_are_made_relative_to_the_repository() {
        let repo = tempfile::tempdir().expect("temp");
        std::fs::create_dir_all(repo.path().join("calc")).expect("dir");
        bork_ci_core::safe_fs::write_atomic(&repo.path().join("calc/calc_test.go"), b"x").expect("write");
        let root = repo.path().to_str().expect("utf-8");
        assert_eq!(
            inside("calc/calc_test.go", repo.path()).as_deref(),
            Some("calc/calc_test.go")
        );
        assert_eq!(
            inside(&format!("{root}/calc/calc_test.go"), repo.path()).as_deref(),
            Some("calc/calc_test.go")
        );
        assert_eq!(
            inside("example.com/mod/calc/calc_test.go", repo.path()).as_deref(),
            Some("calc/calc_test.go")
        );
        assert_eq!(
            inside("/rustc/abc/library/core/src/panicking.rs", repo.path()),
            None
        );
        assert_eq!(inside("gone.py", repo.path()).as_deref(), Some("gone.py"));
        assert_eq!(inside("../outside.py", repo.path()), None);
        let failure = placed(
            Failure {
                file: Some("/usr/lib/x.py".into()),
                line: Some(3),
                message: "boom".into(),
                ..Failure::default()
            },
            repo.path(),
        );
        assert_eq!(
            (failure.file, failure.line, failure.message.as_str()),
            (None, None, "at /usr/lib/x.py:3: boom")
        );
    }

    #[test]
    fn auto_sniffs_the_format() {
        assert_eq!(parse(Format::Auto, "1..1\nnot ok 1 - x\n", "").failures.len(), 1);
        assert_eq!(parse(Format::Auto, "test a ... FAILED\n", "").failures.len(), 1);
        assert_eq!(parse(Format::Auto, "all good\n", "").failures.len(), 0);
    }

    #[test]
    fn shell_words_quote() {
        assert_eq!(
            shell_words(&["a".into(), "b c".into(), "it's".into()]),
            "a 'b c' 'it'\\''s'"
        );
    }
}
