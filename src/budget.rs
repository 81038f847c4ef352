//! What a run has spent: iterations, tokens and loop time, added up across the approval rounds
//! of one job and the jobs of one run (a resumed run reads it back from the state saved in the
//! result pull request). Pure data: `reconcile` checks the budgets against it and carries it from
//! round to round, `github` saves it for a resume.
//!
//! The budgets are run-level: `llm.max-total-tokens`, `llm.max-cost-usd` (the model's tokens
//! priced with `llm.prices`) and `run-timeout-secs` count everything a run spent since its first
//! job and never reset. `max-iterations` bounds the iterations between
//! two human looks: a round that follows a human decision on a held edit may run up to
//! `max-iterations` more (numbered on from the earlier ones), and one job runs at most
//! [`MAX_ROUNDS`] rounds. Time spent waiting for reviewers is not loop time.

use serde::{Deserialize, Serialize};

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

    #[test]
    fn reads_old_states_without_the_field() {
        let spent: Spent = serde_json::from_str("{}").expect("parses");
        assert!(spent.is_zero());
    }
}
