//! The run's budgets and what it has spent: iterations, tokens and loop time, added up across
//! the approval rounds of one job and the jobs of one run (a resumed run reads it back from the
//! state saved in the result pull request). This module owns the limits ([`Limits`], resolved
//! once), the check ([`Budget::exhausted`], [`Budget::time_left`]) and the one enum of stop
//! reasons ([`Stop`]) with one message each; `reconcile` asks it, `github` saves [`Spent`] for a
//! resume.
//!
//! The budgets are run-level: `llm.max-total-tokens`, `llm.max-cost-usd` (the model's tokens
//! priced with `llm.prices`) and `run-timeout-secs` count everything a run spent since its first
//! job and never reset. `max-iterations` bounds the iterations between
//! two human looks: a round that follows a human decision on a held edit may run up to
//! `max-iterations` more (numbered on from the earlier ones), and one job runs at most
//! [`MAX_ROUNDS`] rounds. Time spent waiting for reviewers is not loop time.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use bork_ci_llm::llm::{self, Prices, Usage};

/// Most rounds of "run the loop, publish, wait for reviewers" in one job.
pub const MAX_ROUNDS: u32 = 10;

/// Iterations, tokens and loop time spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", default)]
pub struct Spent {
    /// Rounds of the loop run so far (one per job without approvals, one more per decision).
    pub rounds: u32,
    pub iterations: u32,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cached_input_tokens: u64,
    pub review_input_tokens: u64,
    pub review_output_tokens: u64,
    /// Time the loop ran (packing, model calls, judges), not time spent waiting for people.
    pub elapsed_ms: u64,
}

impl Spent {
    /// Input plus output tokens of the model and the reviewer: what `llm.max-total-tokens` counts.
    pub fn tokens(&self) -> u64 {
        self.input_tokens
            .saturating_add(self.output_tokens)
            .saturating_add(self.review_input_tokens)
            .saturating_add(self.review_output_tokens)
    }

    /// `self` followed by `later`.
    pub fn plus(self, later: Spent) -> Spent {
        Spent {
            rounds: self.rounds.saturating_add(later.rounds),
            iterations: self.iterations.saturating_add(later.iterations),
            input_tokens: self.input_tokens.saturating_add(later.input_tokens),
            output_tokens: self.output_tokens.saturating_add(later.output_tokens),
            cached_input_tokens: self.cached_input_tokens.saturating_add(later.cached_input_tokens),
            review_input_tokens: self.review_input_tokens.saturating_add(later.review_input_tokens),
            review_output_tokens: self
                .review_output_tokens
                .saturating_add(later.review_output_tokens),
            elapsed_ms: self.elapsed_ms.saturating_add(later.elapsed_ms),
        }
    }

    /// Whether nothing was spent yet.
    pub fn is_zero(&self) -> bool {
        *self == Spent::default()
    }
}

/// The run's limits, resolved from the configuration once (part of the run's plan).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// `run-timeout-secs`: loop time over the whole run.
    pub wall_clock: Duration,
    /// `llm.max-total-tokens`: the model's and the reviewer's tokens over the whole run.
    pub max_total_tokens: Option<u64>,
    /// `llm.max-cost-usd`: the model's tokens priced with [`Limits::prices`].
    pub max_cost_usd: Option<f64>,
    /// `llm.prices`, when known.
    pub prices: Option<Prices>,
}

/// Why a run stops for a budget: the one list, with one message each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Stop {
    #[error("the run's wall-clock budget (`run-timeout-secs`) ran out")]
    Time,
    #[error("the run's token budget (`llm.max-total-tokens`) ran out")]
    Tokens,
    #[error("the run's cost budget (`llm.max-cost-usd`) ran out")]
    Cost,
}

/// One round's view of the budgets: the limits, what earlier rounds and jobs spent, and the
/// deadline that leaves.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    limits: Limits,
    earlier: Spent,
    deadline: Instant,
}

impl Budget {
    /// A round starting `now`, after `earlier` was spent.
    pub fn start(limits: Limits, earlier: Spent, now: Instant) -> Budget {
        let remaining = limits
            .wall_clock
            .saturating_sub(Duration::from_millis(earlier.elapsed_ms));
        let deadline = now
            .checked_add(remaining)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        Budget {
            limits,
            earlier,
            deadline,
        }
    }

    /// When the wall-clock budget runs out.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Loop time left, or [`Stop::Time`] when none is.
    pub fn time_left(&self) -> Result<Duration, Stop> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() { Err(Stop::Time) } else { Ok(left) }
    }

    /// Whether a budget leaves no room for another model call, given what this round's model
    /// (`model`) and reviewer (`review`) calls used: no time left, the tokens at or past
    /// `llm.max-total-tokens`, or the cost at or past `llm.max-cost-usd`.
    pub fn exhausted(&self, model: Usage, review: Usage) -> Option<Stop> {
        if self.time_left().is_err() {
            return Some(Stop::Time);
        }
        let tokens = self
            .earlier
            .tokens()
            .saturating_add(model.total_tokens())
            .saturating_add(review.total_tokens());
        if self
            .limits
            .max_total_tokens
            .is_some_and(|budget| tokens >= budget)
        {
            return Some(Stop::Tokens);
        }
        match (self.limits.max_cost_usd, self.run_cost(model)) {
            (Some(budget), Some(cost)) if cost >= budget => Some(Stop::Cost),
            _ => None,
        }
    }

    /// What the whole run's model calls cost so far (earlier rounds and jobs, then `model`, this
    /// round's), when the model's prices are known.
    pub fn run_cost(&self, model: Usage) -> Option<f64> {
        let mut usage = Usage {
            input_tokens: self.earlier.input_tokens,
            output_tokens: self.earlier.output_tokens,
            cached_input_tokens: self.earlier.cached_input_tokens,
            estimated_answers: 0,
        };
        usage += model;
        self.cost(usage)
    }

    /// What `usage` costs, when the model's prices are known.
    pub fn cost(&self, usage: Usage) -> Option<f64> {
        self.limits.prices.map(|prices| llm::cost(&usage, &prices))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spending_adds_up_and_saturates() {
        let a = Spent {
            rounds: 1,
            iterations: 2,
            input_tokens: 10,
            output_tokens: 5,
            cached_input_tokens: 3,
            review_input_tokens: 7,
            review_output_tokens: 1,
            elapsed_ms: 100,
        };
        let sum = a.plus(a);
        assert_eq!(sum.iterations, 4);
        assert_eq!(sum.tokens(), 46);
        assert_eq!(sum.elapsed_ms, 200);
        let huge = Spent {
            input_tokens: u64::MAX,
            ..Spent::default()
        };
        assert_eq!(huge.plus(a).tokens(), u64::MAX);
        assert!(Spent::default().is_zero() && !a.is_zero());
    }

    fn limits() -> Limits {
        Limits {
            wall_clock: Duration::from_secs(60),
            max_total_tokens: Some(100),
            max_cost_usd: Some(1.0),
            prices: Some(Prices {
                input_per_mtok: 1_000_000.0 / 1000.0,
                output_per_mtok: 0.0,
                cached_input_per_mtok: 0.0,
            }),
        }
    }

    fn used(input_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            ..Usage::default()
        }
    }

    #[test]
    fn each_budget_stops_with_its_own_reason() {
        let now = Instant::now();
        let fresh = Budget::start(limits(), Spent::default(), now);
        assert_eq!(fresh.exhausted(used(10), Usage::default()), None);
        // Tokens: earlier jobs, this round's model and reviewer all count; at the budget, no
        // further call fits.
        let earlier = Spent {
            input_tokens: 40,
            ..Spent::default()
        };
        let later = Budget::start(limits(), earlier, now);
        assert_eq!(later.exhausted(used(30), used(30)), Some(Stop::Tokens));
        assert_eq!(later.exhausted(used(30), used(29)), None);
        // Cost: the model's tokens at 1/1000 $ each (the reviewer's are not priced).
        let mut no_token_cap = limits();
        no_token_cap.max_total_tokens = None;
        let priced = Budget::start(no_token_cap, earlier, now);
        assert_eq!(priced.exhausted(used(960), used(5000)), Some(Stop::Cost));
        assert_eq!(priced.exhausted(used(959), Usage::default()), None);
        // Time: what earlier jobs ran counts against run-timeout-secs.
        let spent_all = Spent {
            elapsed_ms: 60_000,
            ..Spent::default()
        };
        let late = Budget::start(limits(), spent_all, now);
        assert_eq!(late.time_left(), Err(Stop::Time));
        assert_eq!(
            late.exhausted(Usage::default(), Usage::default()),
            Some(Stop::Time)
        );
        assert!(
            fresh
                .time_left()
                .is_ok_and(|left| left <= Duration::from_secs(60))
        );
        assert_eq!(
            Stop::Cost.to_string(),
            "the run's cost budget (`llm.max-cost-usd`) ran out"
        );
    }

    #[test]
    fn reads_old_states_without_the_field() {
        let spent: Spent = serde_json::from_str("{}").expect("parses");
        assert!(spent.is_zero());
    }
}
