//! Exit codes: the one place that maps how a run ended to the number the shell sees.
//!
//! | code | meaning |
//! |---|---|
//! | 0 | converged: the checker is clean (or there is none) and nothing awaits approval |
//! | 1 | needs-human: iterations, tokens or time ran out with findings left |
//! | 2 | error: bad configuration or input, a checker that failed to run, an unreachable model |
//! | 3 | awaiting approval: protected edits are pending a human's decision |

use serde::{Deserialize, Serialize};

/// How a run ended (`status` in the report and the step outputs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunStatus {
    Converged,
    NeedsHuman,
    AwaitingApproval,
    #[default]
    Error,
    Skipped,
}

impl RunStatus {
    /// The status named `text` (as [`RunStatus::as_str`] writes it).
    pub fn parse(text: &str) -> Option<RunStatus> {
        [
            RunStatus::Converged,
            RunStatus::NeedsHuman,
            RunStatus::AwaitingApproval,
            RunStatus::Error,
            RunStatus::Skipped,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }

    /// The status as written in reports and outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Converged => "converged",
            RunStatus::NeedsHuman => "needs-human",
            RunStatus::AwaitingApproval => "awaiting-approval",
            RunStatus::Error => "error",
            RunStatus::Skipped => "skipped",
        }
    }
}

/// How the process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitCode {
    Converged = 0,
    NeedsHuman = 1,
    Error = 2,
    AwaitingApproval = 3,
}

impl ExitCode {
    /// The numeric code.
    pub fn code(self) -> i32 {
        self as i32
    }
}

impl From<RunStatus> for ExitCode {
    fn from(status: RunStatus) -> Self {
        match status {
            RunStatus::Converged | RunStatus::Skipped => ExitCode::Converged,
            RunStatus::NeedsHuman => ExitCode::NeedsHuman,
            RunStatus::AwaitingApproval => ExitCode::AwaitingApproval,
            RunStatus::Error => ExitCode::Error,
        }
    }
}

/// `bork-ci verify`: a failing pipeline is findings a human (or the loop) must act on.
impl From<bork_ci_sandbox::verify::Status> for ExitCode {
    fn from(status: bork_ci_sandbox::verify::Status) -> Self {
        match status {
            bork_ci_sandbox::verify::Status::Pass => ExitCode::Converged,
            bork_ci_sandbox::verify::Status::Fail => ExitCode::NeedsHuman,
        }
    }
}

impl ExitCode {
    /// `bork-ci review` speaks the checker contract: 0 clean, 1 findings, anything else an
    /// error.
    pub fn of_checker_contract(code: i32) -> Self {
        match code {
            0 => ExitCode::Converged,
            1 => ExitCode::NeedsHuman,
            _ => ExitCode::Error,
        }
    }
}

/// The exit-code table for `--help`.
pub const HELP: &str = "Exit codes:\n  0  converged (checker clean, nothing pending)\n  1  needs-human (out of iterations, tokens or time with findings left)\n  2  error (configuration, input, checker failed to run, model unreachable)\n  3  awaiting approval (protected edits pending)";
