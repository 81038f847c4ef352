//! bork-ci's run: the loop that owns a run (`reconcile`), its budgets, the edit step as a unit
//! of work, the report and the exit codes. Its one input is a [`run_plan::RunPlan`], built once
//! per run by the binary crate from the configuration; this crate cannot see the configuration
//! (no `config`, figment or clap), so no setting is read a second way inside the loop. It
//! depends on `bork-ci-core`, `bork-ci-edit`, `bork-ci-llm` and `bork-ci-sandbox`.
pub mod budget;
pub mod edit_step;
pub mod exit;
pub mod reconcile;
pub mod report;
pub mod run_plan;
