//! The correctness checker: runs the team's executable (no arguments, working directory the
//! repository root) through the sandbox and judges what it returned, failing closed.
//!
//! [`judge`] is pure: clean only when the exit code is 0 and the documented JSON holds no
//! findings (a `command` finding's `stdout` or `stderr` that is not UTF-8 is kept as
//! `"<non-UTF8 output>"`, see [`bork_ci_core::findings::parse_checker_output`]); exit 0 with findings counts as findings; exit 1 with none, exit 2, any other code, a
//! signal, a timeout, an OOM kill, truncated or undocumented stdout all count as failed to run.
//! This module does not decide what happens next; `reconcile` does.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sandbox::{Job, JobKind, JobOutput, Outcome, Sandbox, SandboxError};
use bork_ci_core::findings::Findings;

/// At most this much of the checker's stdout is read; more is a failure to run.
pub const OUTPUT_CAP: usize = 4 * 1024 * 1024;
/// How much of stderr is kept for the report and the next prompt.
pub const STDERR_TAIL: usize = 4 * 1024;

/// What one checker run says about the working tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case", tag = "status")]
pub enum Verdict {
    /// Exit 0 and no findings.
    Clean,
    /// The checker found problems.
    Findings { findings: Findings },
    /// The checker could not give an answer that can be trusted.
    FailedToRun { reason: String, stderr_tail: String },
}

impl Verdict {
    /// True only for [`Verdict::Clean`].
    pub fn is_clean(&self) -> bool {
        matches!(self, Verdict::Clean)
    }
}

/// Judges one checker run. Pure.
pub fn judge(output: &JobOutput, timeout: Duration) -> Verdict {
    let stderr_tail = bork_ci_core::untrusted::tail_bytes(&output.stderr, STDERR_TAIL);
    let failed = |reason: String| Verdict::FailedToRun {
        reason,
        stderr_tail: stderr_tail.clone(),
    };
    let code = match output.outcome {
        Outcome::Exited(code) => code,
        Outcome::Signaled(signal) => return failed(format!("killed by signal {signal}")),
        Outcome::TimedOut => return failed(format!("timed out after {}s", timeout.as_secs())),
        Outcome::OomKilled => return failed("killed for running out of memory".into()),
    };
    match code {
        0 | 1 => {}
        2 => return failed("exited with 2: the checker reports it failed to run".into()),
        other => {
            return failed(format!(
                "exited with {other}, which the checker contract does not define"
            ));
        }
    }
    if output.stdout_truncated {
        return failed(format!("wrote more than {OUTPUT_CAP} bytes to stdout"));
    }
    // A command finding's output that is not UTF-8 becomes the contract's placeholder; anything
    // else that cannot be read fails closed.
    let findings: Findings = match bork_ci_core::findings::parse_checker_output(&output.stdout) {
        Ok(findings) => findings,
        Err(error) => {
            return failed(format!(
                "exited with {code} but stdout is not the documented findings JSON ({error})"
            ));
        }
    };
    match (code, findings.is_empty()) {
        (0, true) => Verdict::Clean,
        (_, false) => Verdict::Findings { findings },
        (_, true) => failed("exited with 1 (findings) but reported none".into()),
    }
}

/// Why the configured checker is missing, if it is: it must resolve (through symlinks that stay
/// inside the repository) to a regular file. Checked before any model call (missing at the start
/// is a configuration error, exit 2).
pub fn missing(repo: &Path, checker: &str) -> Option<String> {
    match unusable(repo, checker) {
        Some(problem) if !problem.ends_with("is not executable") => Some(problem),
        _ => None,
    }
}

/// Why the configured checker cannot be run as it stands, if it cannot: it must resolve (through
/// symlinks that stay inside the repository) to an executable regular file. Checked before each
/// run: gone or not executable is a checker that failed to run.
pub fn unusable(repo: &Path, checker: &str) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let Some(resolved) = bork_ci_edit::edit::identity::resolve(repo, checker) else {
        return Some(format!(
            "the correctness checker `{checker}` resolves outside the repository"
        ));
    };
    match std::fs::symlink_metadata(repo.join(&resolved)) {
        Err(_) => Some(format!("the correctness checker `{checker}` does not exist")),
        Ok(meta) if !meta.is_file() => Some(format!(
            "the correctness checker `{checker}` is not a regular file"
        )),
        Ok(meta) if meta.permissions().mode() & 0o111 == 0 => {
            Some(format!("the correctness checker `{checker}` is not executable"))
        }
        Ok(_) => None,
    }
}

/// One checker run: the verdict, and what the checker printed on stderr (its tail) and how it
/// ended, for people.
#[derive(Debug, Clone)]
pub struct CheckerRun {
    pub verdict: Verdict,
    /// The last [`STDERR_TAIL`] bytes of stderr, redacted, cut at a character boundary.
    pub stderr_tail: String,
    /// How the job ended (`None`: it never started).
    pub outcome: Option<Outcome>,
}

/// Runs the checker at `checker` (relative to `repo`) and judges it, in the build cache `build`
/// names.
pub async fn run(
    sandbox: &Sandbox,
    repo: &Path,
    checker: &str,
    timeout: Duration,
    secret_env: &[String],
    build: crate::sandbox::BuildCache,
) -> Result<CheckerRun, SandboxError> {
    let not_started = |reason: String| CheckerRun {
        verdict: Verdict::FailedToRun {
            reason,
            stderr_tail: String::new(),
        },
        stderr_tail: String::new(),
        outcome: None,
    };
    // Gone since the start: failed to run (not executable: the start below fails and says so).
    if let Some(problem) = bork_ci_core::blocking::run(|| missing(repo, checker)) {
        return Ok(not_started(problem));
    }
    let mut job = Job::new(
        JobKind::Checker,
        vec![format!("./{checker}")],
        timeout,
        OUTPUT_CAP,
    );
    job.secret_env = secret_env.to_vec();
    job.build = build;
    let output = match sandbox.run(repo, &job).await {
        Ok(output) => output,
        // A checker that cannot even start (not executable, bad interpreter) failed to run,
        // like one that exits 126 or 127 in a container; the model hears about it.
        Err(SandboxError::Spawn { source, .. }) => {
            return Ok(not_started(format!("could not start `{checker}`: {source}")));
        }
        Err(error) => return Err(error),
    };
    Ok(CheckerRun {
        verdict: judge(&output, timeout),
        stderr_tail: bork_ci_core::untrusted::tail_bytes(&output.stderr, STDERR_TAIL),
        outcome: Some(output.outcome),
    })
}

/// The likely fix for a checker that failed to run before any model call, from how it ended
/// and what it printed: the image, the setup commands, the network, the timeout, or the
/// checker's own contract.
pub fn likely_fix(outcome: Option<Outcome>, stderr_tail: &str, image: Option<&str>) -> String {
    let lower = stderr_tail.to_ascii_lowercase();
    let image_hint = match image {
        Some(image) => format!(
            "the judge image `{image}` lacks the checker's toolchain: set `sandbox.image` to an image that has it (or `\"devcontainer\"` to use the repository's dev container)"
        ),
        None => "the checker's toolchain is not on this machine's PATH (`--sandbox none` runs it as a local process): install it, or use the Docker sandbox with an image that has it".to_owned(),
    };
    let network = [
        "could not resolve",
        "failed to download",
        "network is unreachable",
        "temporary failure in name resolution",
        "failed to fetch",
        "no matching package",
        "--offline",
        "offline",
        "connection refused",
        "failed to get",
        "no such host",
        "modulenotfounderror",
        "cannot find module",
        "econnrefused",
        "enotfound",
    ];
    match outcome {
        Some(Outcome::Exited(127)) => image_hint,
        // `bork-ci check` names the test tool it could not start (exit 2).
        _ if lower.contains("bork-ci check: could not start") => image_hint,
        _ if lower.contains("not found") && (lower.contains("command") || lower.contains(": not found")) => image_hint,
        Some(Outcome::Exited(126)) => "the checker (or a program it runs) is not executable or its interpreter is missing: check its mode and first line, and the judge image".to_owned(),
        _ if network.iter().any(|needle| lower.contains(needle)) => "the checker cannot reach its dependencies: judges run without network (`sandbox.network`), so fetch them in `sandbox.setup` (for example `cargo fetch --locked`, `pip download -d /deps/wheels -r requirements.txt`), which fills the read-only dependency cache they read".to_owned(),
        Some(Outcome::TimedOut) => "the checker did not finish within `checker-timeout-secs`: raise it, or make the checker faster (a warm build cache comes with the second run)".to_owned(),
        Some(Outcome::OomKilled) => "the checker ran out of memory: raise `sandbox.memory`".to_owned(),
        None => "the checker could not be started: check that it exists, is executable and that its interpreter is in the judge image".to_owned(),
        _ => "the checker must print the findings JSON of its contract and exit 0 or 1 (2 says it failed to run): see its stderr above".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(outcome: Outcome, stdout: &str) -> JobOutput {
        JobOutput {
            outcome,
            stdout: stdout.as_bytes().to_vec(),
            stderr: b"some stderr".to_vec(),
            stdout_truncated: false,
            stderr_truncated: false,
            duration: Duration::from_millis(5),
        }
    }

    const NONE: &str = r#"{"per_file_findings":[],"overall_findings":[]}"#;
    const ONE: &str = r#"{"per_file_findings":[{"provenance":"code-review","file":"a.rs","finding":"bad"}],"overall_findings":[]}"#;

    fn check(outcome: Outcome, stdout: &str) -> &'static str {
        match judge(&output(outcome, stdout), Duration::from_secs(7)) {
            Verdict::Clean => "clean",
            Verdict::Findings { .. } => "findings",
            Verdict::FailedToRun { .. } => "failed",
        }
    }

    #[test]
    fn a_test_tool_bork_ci_check_could_not_start_is_the_images_fault() {
        let stderr = "bork-ci check: could not start `pytest`: No such file or directory (os error 2)";
        let fix = likely_fix(Some(Outcome::Exited(2)), stderr, Some("debian:bookworm-slim"));
        assert!(fix.contains("lacks the checker's toolchain"), "{fix}");
        let local = likely_fix(Some(Outcome::Exited(2)), stderr, None);
        assert!(local.contains("not on this machine's PATH"), "{local}");
    }

    #[test]
    fn fail_closed_table() {
        let cases = [
            (Outcome::Exited(0), NONE, "clean"),
            (Outcome::Exited(0), "  \n{}\n", "clean"),
            (Outcome::Exited(0), ONE, "findings"),
            (Outcome::Exited(1), ONE, "findings"),
            (Outcome::Exited(1), NONE, "failed"),
            (Outcome::Exited(2), NONE, "failed"),
            (Outcome::Exited(2), ONE, "failed"),
            (Outcome::Exited(3), NONE, "failed"),
            (Outcome::Exited(127), NONE, "failed"),
            (Outcome::Exited(0), "", "failed"),
            (Outcome::Exited(0), "ok", "failed"),
            (Outcome::Exited(0), r#"{"findings":[]}"#, "failed"),
            (Outcome::Exited(0), "{} {}", "failed"),
            (Outcome::Signaled(9), NONE, "failed"),
            (Outcome::TimedOut, NONE, "failed"),
            (Outcome::OomKilled, NONE, "failed"),
        ];
        for (outcome, stdout, expected) in cases {
            assert_eq!(check(outcome, stdout), expected, "{outcome:?} {stdout:?}");
        }
    }

    #[test]
    fn truncated_or_non_utf8_stdout_fails() {
        let mut out = output(Outcome::Exited(0), NONE);
        out.stdout_truncated = true;
        assert!(matches!(
            judge(&out, Duration::from_secs(1)),
            Verdict::FailedToRun { .. }
        ));
        let mut out = output(Outcome::Exited(0), "");
        out.stdout = vec![0xff, 0xfe];
        assert!(matches!(
            judge(&out, Duration::from_secs(1)),
            Verdict::FailedToRun { .. }
        ));
    }

    /// A command finding whose output is not UTF-8 is kept, not a failure to run.
    #[test]
    fn non_utf8_command_output_is_a_finding() {
        let mut out = output(Outcome::Exited(1), "");
        out.stdout = b"{\"overall_findings\":[{\"provenance\":\"command\",\"command\":\"cat bin\",\"stdout\":\"\x89PNG\xff\",\"stderr\":\"\\ud800\",\"exit-code\":1}]}".to_vec();
        match judge(&out, Duration::from_secs(1)) {
            Verdict::Findings { findings } => assert_eq!(
                findings.overall_findings,
                vec![bork_ci_core::findings::Finding::Command {
                    command: "cat bin".into(),
                    stdout: bork_ci_core::findings::NON_UTF8_OUTPUT.into(),
                    stderr: bork_ci_core::findings::NON_UTF8_OUTPUT.into(),
                    exit_code: 1
                }]
            ),
            other => panic!("{other:?}"),
        }
        out.stdout =
            b"{\"overall_findings\":[{\"provenance\":\"code-review\",\"finding\":\"\xff\"}]}".to_vec();
        assert!(matches!(
            judge(&out, Duration::from_secs(1)),
            Verdict::FailedToRun { .. }
        ));
    }

    #[test]
    fn timeout_reason_and_stderr_tail_kept() {
        let verdict = judge(&output(Outcome::TimedOut, ""), Duration::from_secs(7));
        assert_eq!(
            verdict,
            Verdict::FailedToRun {
                reason: "timed out after 7s".into(),
                stderr_tail: "some stderr".into()
            }
        );
    }

    proptest::proptest! {
        /// Findings-shaped JSON at depth: judging never panics, and clean still means exit 0
        /// with no findings.
        #[test]
        fn judge_never_panics_on_findings_shaped_json(
            code in 0i32..3,
            parts in proptest::collection::vec(proptest::prop_oneof![
                proptest::strategy::Just("{".to_owned()), proptest::strategy::Just("}".to_owned()),
                proptest::strategy::Just("[".to_owned()), proptest::strategy::Just("]".to_owned()),
                proptest::strategy::Just(",".to_owned()), proptest::strategy::Just(":".to_owned()),
                proptest::strategy::Just("\"per_file_findings\"".to_owned()),
                proptest::strategy::Just("\"overall_findings\"".to_owned()),
                proptest::strategy::Just("\"file\"".to_owned()), proptest::strategy::Just("\"finding\"".to_owned()),
                proptest::strategy::Just("\"provenance\"".to_owned()), proptest::strategy::Just("\"code-review\"".to_owned()),
                proptest::strategy::Just("null".to_owned()), proptest::strategy::Just("1e999".to_owned()),
                "\"[^\"]{0,8}\"",
            ], 0..64),
        ) {
            let stdout = parts.concat();
            let verdict = judge(&output(Outcome::Exited(code), &stdout), Duration::from_secs(1));
            if verdict.is_clean() {
                proptest::prop_assert_eq!(code, 0);
            }
        }

        #[test]
        fn clean_only_when_exit_zero_and_no_findings(code in -1i32..300, stdout in ".{0,64}") {
            let verdict = judge(&output(Outcome::Exited(code), &stdout), Duration::from_secs(1));
            if verdict.is_clean() {
                proptest::prop_assert_eq!(code, 0);
                let parsed: Findings = serde_json::from_str(&stdout).expect("clean implies parsed");
                proptest::prop_assert!(parsed.is_empty());
            }
        }
    }
}
