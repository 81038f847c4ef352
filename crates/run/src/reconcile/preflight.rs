//! What the preflight decides and what it hands the loop. Pure: no file, process or network.
//!
//! The preflight stops a run before any model call only when the judge cannot start, which no
//! edit of the model could fix: [`cannot_start`] (exit 126 or 127, a job that never started,
//! the `bork-ci check` adapter's could-not-start line, a missing interpreter). A checker that
//! starts and reports findings or a failure (exit 1, exit 2 because the code does not build, a
//! timeout, a crash) is the run's baseline: its output goes into the first prompt
//! ([`Start::note`]) and the loop goes on, as the edit loop's contract says.
//!
//! A failure the model's edit left exactly as it was (the same judges failing with the same
//! reason, which names the exit code, and the same redacted stderr tail) ends the run then,
//! instead of paying for more model calls: [`Unchanged`] compares each iteration's failures
//! with the approved tree's and the previous iteration's by digest.

use sha2::{Digest, Sha256};

use crate::report::JudgeStatus;
use bork_ci_core::findings::Findings;
use bork_ci_sandbox::sandbox::Outcome;

/// The first line the `bork-ci check` adapter writes on stderr when it could not start the
/// command it wraps.
pub const COULD_NOT_START: &str = "bork-ci check: could not start";

/// Whether a checker run on the approved tree shows a checker that cannot start: the job never
/// started (`outcome` is `None`), it exited 126 (not executable) or 127 (a tool or interpreter
/// missing), the adapter said it could not start, or the system could not execute the file.
pub fn cannot_start(outcome: Option<Outcome>, stderr_tail: &str) -> bool {
    match outcome {
        None | Some(Outcome::Exited(126 | 127)) => return true,
        Some(_) => {}
    }
    stderr_tail.lines().any(|line| {
        let line = line.trim_start();
        let lower = line.to_ascii_lowercase();
        line.starts_with(COULD_NOT_START)
            || lower.contains("exec format error")
            || lower.contains("bad interpreter")
    })
}

/// The digest of one iteration's judge failures: each judge, its reason and its (redacted)
/// stderr tail, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureMark([u8; 32]);

impl FailureMark {
    /// The mark of `failures` (judge, reason, stderr tail); `None` when no judge failed.
    pub fn of(failures: &[(String, String, String)]) -> Option<FailureMark> {
        if failures.is_empty() {
            return None;
        }
        let mut hasher = Sha256::new();
        for (judge, reason, stderr_tail) in failures {
            for part in [judge, reason, stderr_tail] {
                hasher.update((part.len() as u64).to_le_bytes());
                hasher.update(part.as_bytes());
            }
        }
        Some(FailureMark(hasher.finalize().into()))
    }
}

/// The name the loop gives the checker among an iteration's failures.
pub const CHECKER: &str = "correctness checker";

/// What the preflight hands the first round: the text for the first prompt and the mark of the
/// checker's failure on the approved tree, if it failed to run.
#[derive(Debug, Clone, Default)]
pub struct Start {
    /// The checker's verdict on the approved tree, for the model (none when clean).
    pub note: Option<String>,
    /// The checker's failure to run on the approved tree.
    pub failure: Option<FailureMark>,
}

impl Start {
    /// From the preflight's verdict on the approved tree.
    pub fn of(status: &JudgeStatus, findings: &Findings) -> Start {
        match status {
            JudgeStatus::FailedToRun { reason, stderr_tail } => Start {
                note: Some(bork_ci_edit::prompt::baseline(
                    findings,
                    Some((reason, stderr_tail)),
                )),
                failure: FailureMark::of(&[(CHECKER.to_owned(), reason.clone(), stderr_tail.clone())]),
            },
            _ if !findings.is_empty() => Start {
                note: Some(bork_ci_edit::prompt::baseline(findings, None)),
                failure: None,
            },
            _ => Start::default(),
        }
    }
}

/// The failures of the approved tree and of the last judged iteration, to tell when an edit
/// changed nothing about why a judge fails.
#[derive(Debug, Default)]
pub struct Unchanged {
    baseline: Option<FailureMark>,
    previous: Option<FailureMark>,
}

/// Which earlier failure an iteration's failure repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeats {
    /// The failure on the approved tree (the preflight).
    ApprovedTree,
    /// The failure after the previous iteration.
    PreviousIteration,
}

impl std::fmt::Display for Repeats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Repeats::ApprovedTree => "on the approved tree",
            Repeats::PreviousIteration => "after the previous iteration",
        })
    }
}

impl Unchanged {
    /// Starts from the approved tree's failure, if the preflight saw one.
    pub fn new(baseline: Option<FailureMark>) -> Unchanged {
        Unchanged {
            baseline,
            previous: None,
        }
    }

    /// Records the failures of an iteration whose judges ran, and says which earlier failure
    /// they repeat exactly, if any.
    pub fn observe(&mut self, failures: &[(String, String, String)]) -> Option<Repeats> {
        let mark = FailureMark::of(failures);
        let repeats = match &mark {
            None => None,
            Some(mark) if self.previous.as_ref() == Some(mark) => Some(Repeats::PreviousIteration),
            Some(mark) if self.baseline.as_ref() == Some(mark) => Some(Repeats::ApprovedTree),
            Some(_) => None,
        };
        self.previous = mark;
        repeats
    }
}

/// The message of a run stopped on a failure the edit did not change.
pub fn unchanged_message(failures: &[(String, String, String)], repeats: Repeats) -> String {
    let (judge, reason) = failures
        .first()
        .map(|(judge, reason, _)| (judge.as_str(), reason.as_str()))
        .unwrap_or(("judge", "unknown"));
    format!(
        "the edit did not change the judge's failure: the {judge} failed to run again as it did {repeats} ({reason}, with the same stderr); stopped instead of asking the model again"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(outcome: Option<Outcome>, stderr: &str) -> bool {
        cannot_start(outcome, stderr)
    }

    #[test]
    fn only_a_judge_that_cannot_start_stops_the_preflight() {
        let cases = [
            (None, "", true),
            (Some(Outcome::Exited(127)), "sh: cargo: not found", true),
            (Some(Outcome::Exited(126)), "", true),
            (
                Some(Outcome::Exited(2)),
                "bork-ci check: could not start `pytest`: No such file",
                true,
            ),
            (
                Some(Outcome::Exited(2)),
                "  bork-ci check: could not start x",
                true,
            ),
            (Some(Outcome::Exited(2)), "exec /check: Exec format error", true),
            (
                Some(Outcome::Exited(2)),
                "./check: /usr/bin/python9: bad interpreter",
                true,
            ),
            (
                Some(Outcome::Exited(2)),
                "error[E0425]: cannot find value `x`",
                false,
            ),
            (
                Some(Outcome::Exited(2)),
                "ModuleNotFoundError: No module named 'app'",
                false,
            ),
            (
                Some(Outcome::Exited(2)),
                "the checker said: bork-ci check: could not start",
                false,
            ),
            (Some(Outcome::Exited(1)), "", false),
            (Some(Outcome::Exited(3)), "", false),
            (Some(Outcome::TimedOut), "", false),
            (Some(Outcome::Signaled(11)), "", false),
            (Some(Outcome::OomKilled), "", false),
        ];
        for (outcome, stderr, expected) in cases {
            assert_eq!(check(outcome, stderr), expected, "{outcome:?} {stderr:?}");
        }
    }

    fn failure(reason: &str, stderr: &str) -> Vec<(String, String, String)> {
        vec![(CHECKER.to_owned(), reason.to_owned(), stderr.to_owned())]
    }

    #[test]
    fn a_failure_repeated_exactly_is_seen_and_any_change_is_not() {
        let exit2 = "exited with 2: the checker reports it failed to run";
        let start = FailureMark::of(&failure(exit2, "does not build"));
        let mut unchanged = Unchanged::new(start);
        assert_eq!(
            unchanged.observe(&failure(exit2, "does not build")),
            Some(Repeats::ApprovedTree)
        );
        let mut unchanged = Unchanged::new(FailureMark::of(&failure(exit2, "does not build")));
        assert_eq!(unchanged.observe(&failure(exit2, "another error")), None);
        assert_eq!(
            unchanged.observe(&failure(exit2, "another error")),
            Some(Repeats::PreviousIteration)
        );
        assert_eq!(unchanged.observe(&[]), None);
        assert_eq!(
            unchanged.observe(&failure(exit2, "does not build")),
            Some(Repeats::ApprovedTree)
        );
        assert_eq!(
            unchanged.observe(&failure("timed out after 5s", "does not build")),
            None
        );
        let mut fresh = Unchanged::new(None);
        assert_eq!(fresh.observe(&failure(exit2, "x")), None);
        let mut two = failure(exit2, "x");
        two.push(("verifier".into(), "y".into(), String::new()));
        assert_eq!(fresh.observe(&two), None);
    }

    #[test]
    fn a_baseline_failure_goes_into_the_first_prompt() {
        let start = Start::of(
            &JudgeStatus::FailedToRun {
                reason: "exited with 2".into(),
                stderr_tail: "ImportError: cannot import name 'parse'".into(),
            },
            &Findings::default(),
        );
        let note = start.note.expect("a note");
        assert!(note.contains("ImportError: cannot import name 'parse'"), "{note}");
        assert!(note.contains("exited with 2"), "{note}");
        assert!(start.failure.is_some());
        let clean = Start::of(&JudgeStatus::Clean, &Findings::default());
        assert!(clean.note.is_none() && clean.failure.is_none());
    }
}
