//! What a round is given (`RoundOptions`), what lasts across its rounds (`Lessons`), and how
//! a run or an iteration ends early (`RunError`, `Halt`).

use std::path::PathBuf;

use anyhow::Result;

use crate::budget::{Spent, Stop};
use crate::report::IterationReport;
use bork_ci_llm::llm::{self};

/// Everything one round needs besides the configuration; the run's owner ([`super::run`]) fills
/// it and carries what was spent from round to round.
pub(super) struct RoundOptions {
    pub repo: PathBuf,
    pub run_id: String,
    /// Print held and refused contents between stop-commands markers with this token.
    pub stop_token: Option<String>,
    /// Text appended to the first message (human decisions on held edits, when resuming).
    pub preamble: Option<String>,
    /// Called after each iteration that ran (commits it on bork-ci's branch on GitHub).
    pub after_iteration: Option<IterationHook>,
    /// The edit step logs JSON lines (`--log-format json`).
    pub json_logs: bool,
    /// What earlier rounds and jobs of this run spent: the budgets count it, iterations are
    /// numbered on from it.
    pub spent: Spent,
    /// What the model's and the reviewer's servers turned out not to accept, learned in
    /// earlier rounds of this job; each round starts from it and adds to it.
    pub learned: Lessons,
    /// What the preflight saw on the approved tree (first round only): its output for the first
    /// prompt, and the failure an edit must change.
    pub start: super::preflight::Start,
}

/// What providers learned about their servers (see [`llm::Learned`]), kept for the rest of a job.
#[derive(Debug, Default)]
pub struct Lessons {
    pub model: std::sync::Mutex<llm::Learned>,
    pub reviewer: std::sync::Mutex<llm::Learned>,
}

impl Lessons {
    pub(super) fn read(lesson: &std::sync::Mutex<llm::Learned>) -> llm::Learned {
        *lesson.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn add(lesson: &std::sync::Mutex<llm::Learned>, learned: llm::Learned) {
        let mut kept = lesson.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *kept = kept.merge(learned);
    }
}

/// Called after each iteration with its report.
pub type IterationHook = Box<dyn Fn(&IterationReport) -> Result<()> + Send + Sync>;

/// A typed error that ends the run before the loop could start, with its own exit code (2).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(
        "the packed prompt is about {estimate} tokens, over the context budget of {budget} (`context-budget-tokens`); run `bork-ci pack` to see it, and add what the model need not see to .gitignore"
    )]
    ContextBudget { estimate: u64, budget: u64 },
    #[error("the packed prompt contains the value of {name}; refusing to send a secret to the model")]
    SecretInPrompt { name: String },
    #[error("{problem} (`correctness-checker`); nothing was sent to the model")]
    CheckerUnusable { problem: String },
    #[error(
        "the setup command `{command}` failed ({outcome}); nothing was sent to the model. Its output ends:\n{tail}"
    )]
    SetupFailed {
        command: String,
        outcome: String,
        tail: String,
    },
    #[error(
        "preflight: the correctness checker cannot run on the approved tree: {reason}; nothing was sent to the model.\nLikely fix: {fix}\nIts stderr ends:\n{stderr_tail}"
    )]
    PreflightFailed {
        reason: String,
        fix: String,
        stderr_tail: String,
    },
}

/// Why an iteration ended before its end: a budget ran out (the round ends as needs-human with
/// the budget's message), or an error (the round ends in error).
#[derive(Debug)]
pub(super) enum Halt {
    Budget(Stop),
    Error(anyhow::Error),
}

impl From<Stop> for Halt {
    fn from(stop: Stop) -> Self {
        Halt::Budget(stop)
    }
}

impl From<anyhow::Error> for Halt {
    fn from(error: anyhow::Error) -> Self {
        Halt::Error(error)
    }
}
