//! What a finished run leaves behind, besides its pull requests: the JSON report, SARIF, the
//! GitHub Actions job summary and step outputs, annotations for the findings, and the summary
//! line in the log. Every file goes through `safe_fs`; every text through `untrusted` and the
//! `secrets` redaction (by `actions` and `report`).

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

use crate::report::{PullPurpose, RunReport};

/// Where a run's outputs go; `None`: not asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Destinations<'a> {
    /// `--report`: the JSON report.
    pub report: Option<&'a Path>,
    /// `--sarif`: the findings left, as SARIF.
    pub sarif: Option<&'a Path>,
    /// `GITHUB_STEP_SUMMARY`: the job summary (Markdown, appended).
    pub step_summary: Option<&'a Path>,
    /// `GITHUB_OUTPUT`: the step's outputs (appended).
    pub step_outputs: Option<&'a Path>,
}

/// Writes the report, SARIF, job summary, step outputs and annotations that were asked for, and
/// logs the summary line.
pub fn write(report: &RunReport, to: &Destinations<'_>, checker: Option<&str>) -> Result<()> {
    if let Some(path) = &to.report {
        crate::report::write_json(report, path)
            .with_context(|| format!("writing the report to {}", path.display()))?;
    }
    if let Some(path) = &to.sarif {
        let sarif = crate::sarif::render(&report.findings_left, env!("CARGO_PKG_VERSION"), checker);
        let text = serde_json::to_string_pretty(&sarif).context("rendering SARIF")?;
        crate::safe_fs::write_atomic(path, text.as_bytes())
            .with_context(|| format!("writing SARIF to {}", path.display()))?;
    }
    let result_pr = report
        .pull_requests
        .iter()
        .find(|pr| pr.purpose == PullPurpose::Result);
    if let Some(path) = &to.step_summary {
        let summary = crate::actions::render_summary(&crate::actions::SummaryInput {
            status: report.status,
            reason: Some(report.error.clone().unwrap_or_else(|| report.stop_reason.clone())),
            iterations: report.iterations.len() as u32,
            baseline: report.baseline.as_ref().map(|baseline| baseline.findings.len()),
            findings: report.findings_left.clone(),
            tokens: (
                report.usage.input_tokens,
                report.usage.output_tokens,
                report.usage.cached_input_tokens,
            ),
            estimated_answers: report.usage.estimated_answers + report.review_usage.estimated_answers,
            cost_usd: report.cost_usd,
            pull_requests: report
                .pull_requests
                .iter()
                .map(|pr| crate::actions::SummaryLink {
                    title: format!("#{} ({})", pr.number, pr.purpose),
                    url: pr.url.clone(),
                })
                .collect(),
            logs: Vec::new(),
        });
        crate::actions::ActionsWriter::append(path, &summary)
            .with_context(|| format!("writing the job summary to {}", path.display()))?;
    }
    if let Some(path) = &to.step_outputs {
        let outputs = crate::actions::run_outputs(
            report.status.as_str(),
            result_pr.map(|pr| pr.number),
            result_pr.map(|pr| pr.url.as_str()),
            report.iterations.len() as u32,
            (report.result_branch.as_deref(), report.result_sha.as_deref()),
        );
        crate::actions::ActionsWriter::append(path, &crate::actions::render_outputs(&outputs))
            .with_context(|| format!("writing step outputs to {}", path.display()))?;
    }
    if to.step_summary.is_some() || to.step_outputs.is_some() {
        let mut stdout = crate::secrets::Redacting(std::io::stdout().lock());
        for line in crate::actions::annotations(&report.findings_left) {
            let _ = stdout.write_all(line.as_bytes());
        }
        let _ = stdout.flush();
    }
    if let Some(error) = &report.error {
        crate::report::log_error(error);
    }
    tracing::info!(
        status = report.status.as_str(),
        exit_code = report.exit_code,
        iterations = report.iterations.len(),
        input_tokens = report.usage.input_tokens,
        output_tokens = report.usage.output_tokens,
        "{}",
        report.summary_line()
    );
    Ok(())
}
