//! The run report: what `--report PATH` writes, what the summary line says, and how refused and
//! held edits are shown on stdout. Rendering is pure; [`write_json`] and [`print_edits`] are the
//! only I/O, and take their writer or path from the caller.
//!
//! Model-written contents are untrusted: they are printed escaped (control characters shown as
//! code points), bounded with a sha256 of the whole, and, under GitHub Actions, between
//! `::stop-commands::` markers so they cannot issue workflow commands.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::budget::Spent;
use crate::exit::ExitCode;
use bork_ci_core::findings::Findings;
use bork_ci_edit::edit::apply::{AppliedEdit, EditAction, PendingApproval, RefusedEdit};
use bork_ci_llm::llm::Usage;
use bork_ci_sandbox::checker::Verdict;

pub use crate::exit::RunStatus;

/// What one judge said about an iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", rename_all_fields = "kebab-case", tag = "status")]
pub enum JudgeStatus {
    /// Not configured.
    Absent,
    /// Not run, because the answer could not be used or a budget ran out.
    Skipped,
    Clean,
    Findings {
        count: usize,
    },
    FailedToRun {
        reason: String,
        stderr_tail: String,
    },
}

impl From<&Verdict> for JudgeStatus {
    fn from(verdict: &Verdict) -> Self {
        match verdict {
            Verdict::Clean => JudgeStatus::Clean,
            Verdict::Findings { findings } => JudgeStatus::Findings {
                count: findings.len(),
            },
            Verdict::FailedToRun { reason, stderr_tail } => JudgeStatus::FailedToRun {
                reason: reason.clone(),
                stderr_tail: stderr_tail.clone(),
            },
        }
    }
}

/// Wall-clock time of an iteration's stages, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Durations {
    pub llm_ms: u64,
    pub apply_ms: u64,
    pub check_ms: u64,
    pub verify_ms: u64,
    pub review_ms: u64,
    pub total_ms: u64,
}

/// One iteration of the loop.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct IterationReport {
    pub number: u32,
    pub applied: Vec<AppliedEdit>,
    pub refused: Vec<RefusedEdit>,
    pub pending: Vec<PendingApproval>,
    pub unchanged: Vec<String>,
    /// Why the model's answer could not be used (after one corrected retry), if so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer_error: Option<String>,
    /// Answers asked for again within the iteration because they did not parse.
    pub parse_retries: u32,
    pub checker: Option<JudgeStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verifier: Option<JudgeStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reviewer: Option<JudgeStatus>,
    /// All findings of the iteration's judges on the tree after it.
    pub findings: Findings,
    pub usage: Usage,
    pub review_usage: Usage,
    pub durations: Durations,
}

/// A pull request bork-ci opened or updated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct PullRequestRef {
    pub number: u64,
    pub url: String,
    pub purpose: PullPurpose,
}

/// Why a pull request was opened: written `result` or `approval of PATH` in the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullPurpose {
    /// The run's result: every applied edit.
    Result,
    /// One held edit of this path, for a human to approve.
    Approval(String),
}

impl std::fmt::Display for PullPurpose {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PullPurpose::Result => f.write_str("result"),
            PullPurpose::Approval(path) => write!(f, "approval of {path}"),
        }
    }
}

impl Serialize for PullPurpose {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PullPurpose {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for PullPurpose {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.strip_prefix("approval of ") {
            _ if text == "result" => Ok(PullPurpose::Result),
            Some(path) => Ok(PullPurpose::Approval(path.to_owned())),
            None => Err(format!("not a pull request purpose: {text:?}")),
        }
    }
}

/// The whole run, as `--report PATH` writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct RunReport {
    pub status: RunStatus,
    pub exit_code: i32,
    /// Why the loop stopped, in words.
    pub stop_reason: String,
    pub prompt_version: String,
    pub run_id: String,
    pub provider: String,
    pub model: String,
    pub sandbox: String,
    pub max_iterations: u32,
    pub iterations: Vec<IterationReport>,
    pub pending_approvals: Vec<PendingApproval>,
    pub refused: Vec<RefusedEdit>,
    /// Findings on the final tree.
    pub findings_left: Findings,
    pub usage: Usage,
    pub review_usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub prompt_tokens_estimate: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub warnings: Vec<String>,
    pub pull_requests: Vec<PullRequestRef>,
    pub started_at: String,
    pub duration_ms: u64,
    /// What the whole run spent so far: earlier jobs of a resumed run, every approval round of
    /// this one. The budgets are checked against this, not against this job alone.
    pub run_totals: Spent,
    /// The checker's verdict on the approved tree before the first model call (`preflight`):
    /// the run's baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<Baseline>,
    /// On GitHub: bork-ci's branch with the result, and the commit it is at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_sha: Option<String>,
}

/// The checker on the approved tree, before any edit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Baseline {
    pub checker: JudgeStatus,
    pub findings: Findings,
    pub duration_ms: u64,
}

impl RunReport {
    /// An empty report for a run that is starting.
    pub fn new(
        run_id: String,
        provider: String,
        model: String,
        sandbox: String,
        max_iterations: u32,
    ) -> Self {
        RunReport {
            status: RunStatus::Error,
            exit_code: ExitCode::Error.code(),
            stop_reason: String::new(),
            prompt_version: bork_ci_edit::prompt::PROMPT_VERSION.to_owned(),
            run_id,
            provider,
            model,
            sandbox,
            max_iterations,
            iterations: Vec::new(),
            pending_approvals: Vec::new(),
            refused: Vec::new(),
            findings_left: Findings::default(),
            usage: Usage::default(),
            review_usage: Usage::default(),
            cost_usd: None,
            prompt_tokens_estimate: 0,
            error: None,
            warnings: Vec::new(),
            pull_requests: Vec::new(),
            started_at: now_rfc3339(),
            duration_ms: 0,
            run_totals: Spent::default(),
            baseline: None,
            result_branch: None,
            result_sha: None,
        }
    }

    /// Sets the final status and its exit code.
    pub fn finish(&mut self, status: RunStatus, reason: impl Into<String>) {
        self.status = status;
        self.exit_code = ExitCode::from(status).code();
        self.stop_reason = reason.into();
    }

    /// What this report's own iterations spent (one round).
    pub fn spent(&self) -> Spent {
        Spent {
            rounds: 1,
            iterations: u32::try_from(self.iterations.len()).unwrap_or(u32::MAX),
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cached_input_tokens: self.usage.cached_input_tokens,
            review_input_tokens: self.review_usage.input_tokens,
            review_output_tokens: self.review_usage.output_tokens,
            elapsed_ms: self.duration_ms,
        }
    }

    /// Appends a later round of the same run: its iterations (already numbered on from these),
    /// its refusals and warnings; its status, held edits and findings replace these; usage,
    /// cost and time add up.
    pub fn absorb(&mut self, later: RunReport) {
        self.iterations.extend(later.iterations);
        self.refused.extend(later.refused);
        self.warnings.extend(later.warnings);
        self.pending_approvals = later.pending_approvals;
        self.findings_left = later.findings_left;
        self.usage += later.usage;
        self.review_usage += later.review_usage;
        self.cost_usd = match (self.cost_usd, later.cost_usd) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.prompt_tokens_estimate = later.prompt_tokens_estimate;
        self.error = later.error;
        self.duration_ms = self.duration_ms.saturating_add(later.duration_ms);
        self.run_totals = later.run_totals;
        self.status = later.status;
        self.exit_code = later.exit_code;
        self.stop_reason = later.stop_reason;
    }

    /// One line for stderr at the end of a run.
    pub fn summary_line(&self) -> String {
        let applied: usize = self.iterations.iter().map(|it| it.applied.len()).sum();
        let mut line = format!(
            "bork-ci: {} after {} iteration(s) ({}): {} edit(s) applied, {} refused, {} pending approval, {} finding(s) left, tokens in {} / out {} / cached {}",
            self.status.as_str(),
            self.iterations.len(),
            self.stop_reason,
            applied,
            self.refused.len(),
            self.pending_approvals.len(),
            self.findings_left.len(),
            self.usage.input_tokens,
            self.usage.output_tokens,
            self.usage.cached_input_tokens,
        );
        if self.usage.estimated_answers > 0 {
            line.push_str(" (estimated: the server reported no usage)");
        }
        if let Some(cost) = self.cost_usd {
            line.push_str(&format!(", cost ${cost:.4}"));
        }
        line
    }
}

/// The current time, RFC 3339.
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Writes the report as pretty JSON to `path` (through a temporary file and a rename).
pub fn write_json(report: &RunReport, path: &Path) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
    text.push('\n');
    bork_ci_core::safe_fs::write_atomic(path, text.as_bytes())
}

/// Most bytes of model-written contents shown for one edit.
pub const SHOWN_BYTES: usize = 64 * 1024;

/// Renders one block of untrusted contents, bounded, with the sha256 of the whole.
/// An error and its causes as one line of text, each cause once: a cause whose text the error
/// (or an earlier cause) already says is not repeated (`thiserror` types often name their source
/// in their own message, and `anyhow`'s `{:#}` would then print it twice).
pub fn error_text(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// Logs an error: its first line as the log's error line (a log line is one line), and what
/// follows it (a command's output) below as lines, made safe as a judge's output is.
pub fn log_error(text: &str) {
    match text.split_once('\n') {
        Some((first, rest)) if !rest.trim().is_empty() => {
            tracing::error!("{first}");
            let block = judge_output_block("the error, continued", rest, None);
            let mut stderr = bork_ci_core::secrets::Redacting(std::io::stderr().lock());
            let _ = std::io::Write::write_all(&mut stderr, block.as_bytes());
        }
        _ => tracing::error!("{}", text.trim_end()),
    }
}

/// A judge's output (its stderr tail) for people, on bork-ci's stderr: under GitHub Actions
/// (`stop_token` given) a folded `::group::` whose lines sit inside a stop-commands block;
/// elsewhere between marker lines, as [`bork_ci_core::untrusted::terminal_lines`].
pub fn judge_output_block(title: &str, tail: &str, stop_token: Option<&str>) -> String {
    let title = bork_ci_core::untrusted::line(title);
    match stop_token {
        Some(token) => format!(
            "::group::{title}\n{}::endgroup::\n",
            bork_ci_core::untrusted::block(tail, token)
        ),
        None => {
            let mut body = bork_ci_core::untrusted::terminal_lines(tail);
            if !body.ends_with('\n') {
                body.push('\n');
            }
            format!("----- bork-ci: {title} -----\n{body}----- bork-ci: end -----\n")
        }
    }
}

pub fn untrusted_block(title: &str, contents: &str, stop_token: Option<&str>) -> String {
    let digest = hex::encode(Sha256::digest(contents.as_bytes()));
    let shown = bork_ci_core::untrusted::head(contents, SHOWN_BYTES);
    let cut = shown.len() < contents.len();
    let mut block = format!(
        "----- bork-ci: {} ({} bytes, sha256 {digest}) -----\n",
        bork_ci_core::untrusted::escape(title),
        contents.len()
    );
    let mut body = shown.to_owned();
    if cut {
        body.push_str(&format!(
            "\n[... {} more bytes not shown ...]\n",
            contents.len() - shown.len()
        ));
    }
    match stop_token {
        Some(token) => block.push_str(&bork_ci_core::untrusted::block(&body, token)),
        None => {
            block.push_str(&bork_ci_core::untrusted::terminal_lines(&body));
            if !block.ends_with('\n') {
                block.push('\n');
            }
        }
    }
    block.push_str("----- bork-ci: end -----\n");
    block
}

/// Prints refused edits (with their attempted contents where the policy shows them) and held
/// edits (with their proposed contents) to `out`.
pub fn print_edits(
    out: &mut impl Write,
    iteration: u32,
    refused: &[RefusedEdit],
    pending: &[PendingApproval],
    stop_token: Option<&str>,
) -> std::io::Result<()> {
    for edit in refused {
        let action = action_word(&edit.action);
        let title = format!(
            "iteration {iteration}: REFUSED {action} of {:?}: {} [{}]",
            edit.path, edit.reason, edit.code
        );
        match &edit.contents {
            Some(contents) => out.write_all(untrusted_block(&title, contents, stop_token).as_bytes())?,
            None => writeln!(
                out,
                "----- bork-ci: {} (contents not shown) -----",
                bork_ci_core::untrusted::escape(&title)
            )?,
        }
    }
    for edit in pending {
        let action = action_word(&edit.action);
        let title = format!(
            "iteration {iteration}: HELD FOR APPROVAL {action} of {:?} (matches {})",
            edit.path, edit.rule
        );
        match &edit.contents {
            Some(contents) => out.write_all(untrusted_block(&title, contents, stop_token).as_bytes())?,
            None => writeln!(
                out,
                "----- bork-ci: {} -----",
                bork_ci_core::untrusted::escape(&title)
            )?,
        }
    }
    out.flush()
}

fn action_word(action: &EditAction) -> &'static str {
    match action {
        EditAction::Write => "write",
        EditAction::Delete => "delete",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_neutralises_terminal_and_bidi() {
        assert_eq!(bork_ci_core::untrusted::escape("a\u{1b}[2Jb"), "a\\u{1b}[2Jb");
        assert_eq!(bork_ci_core::untrusted::escape("x\u{202e}y\n"), "x\\u{202e}y\n");
    }

    #[test]
    fn workflow_commands_stay_inside_the_block() {
        let contents = "::set-env name=LD_PRELOAD::/tmp/x.so\n::error file=a::pwn\n\
                        ::add-mask::x\n::stop-commands::abc\n\u{1b}]8;;http://evil\u{7}\u{1b}[2J\u{202e}";
        let token = bork_ci_core::untrusted::random_token();
        let block = untrusted_block("refused", contents, Some(&token));
        let lines: Vec<&str> = block.lines().collect();
        let open = lines
            .iter()
            .position(|line| *line == format!("::stop-commands::{token}"))
            .expect("opening line");
        let close = lines
            .iter()
            .position(|line| *line == format!("::{token}::"))
            .expect("closing line");
        for (index, line) in lines.iter().enumerate() {
            if line.starts_with("::") {
                assert!(index >= open && index <= close, "{line} outside the block");
            }
        }
        assert!(
            !block
                .chars()
                .any(|c| c != '\n' && (c.is_control() || c == '\u{202e}'))
        );
        assert!(block.contains("\\u{1b}]8;;http://evil\\u{7}"), "{block}");
        assert!(block.contains(&hex::encode(Sha256::digest(contents.as_bytes()))));
    }

    #[test]
    fn block_is_bounded_and_fenced() {
        let contents = format!("::set-env name=X::y\n{}", "z".repeat(SHOWN_BYTES));
        let block = untrusted_block("t", &contents, Some("tok123"));
        assert!(block.contains("::stop-commands::tok123\n::set-env"));
        assert!(block.contains("::tok123::"));
        assert!(block.contains("more bytes not shown"));
        assert!(block.len() < SHOWN_BYTES + 1024);
    }

    #[test]
    fn statuses_map_to_exit_codes() {
        assert_eq!(ExitCode::from(RunStatus::Converged).code(), 0);
        assert_eq!(ExitCode::from(RunStatus::Skipped).code(), 0);
        assert_eq!(ExitCode::from(RunStatus::NeedsHuman).code(), 1);
        assert_eq!(ExitCode::from(RunStatus::Error).code(), 2);
        assert_eq!(ExitCode::from(RunStatus::AwaitingApproval).code(), 3);
    }
}
