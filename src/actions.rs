//! GitHub Actions workflow-command output: `::add-mask::` lines, untrusted text wrapped in
//! `::stop-commands::`, the job summary, `::warning` annotations and step outputs with random
//! heredoc delimiters. Rendering is pure; [`ActionsWriter`] is the one small writer. This module
//! does not decide what a run's status is; it reports what it is given.

use std::fmt::Write as _;
use std::path::Path;

use crate::findings::{Finding, Findings};

/// GitHub's limit for one step's summary.
pub const MAX_SUMMARY_BYTES: usize = 1024 * 1024;
/// GitHub shows about this many annotations of one kind per step.
pub const MAX_ANNOTATIONS: usize = 50;

/// `::add-mask::` lines for a secret, one per non-empty line of it (a multi-line secret is
/// masked line by line, as the runner matches lines).
pub fn mask(secret: &str) -> String {
    let mut out = String::new();
    for line in secret.lines().map(str::trim).filter(|line| !line.is_empty()) {
        let _ = writeln!(out, "::add-mask::{line}");
    }
    out
}

/// Masks every secret in the runner's log (`::add-mask::` on stdout), before anything else is
/// printed.
pub fn mask_secrets<'a>(secrets: impl IntoIterator<Item = &'a secrecy::SecretString>) {
    use secrecy::ExposeSecret;
    let mut stdout = std::io::stdout().lock();
    for secret in secrets {
        let _ = std::io::Write::write_all(&mut stdout, mask(secret.expose_secret()).as_bytes());
    }
    let _ = std::io::Write::flush(&mut stdout);
}

fn escape_data(text: &str) -> String {
    text.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

fn escape_property(text: &str) -> String {
    escape_data(text).replace(':', "%3A").replace(',', "%2C")
}

/// `::warning file=…::` lines for per-file findings, at most [`MAX_ANNOTATIONS`], most
/// important first: files with the most findings first, then in checker order. A finding text
/// of the form `line N:` or `:N:` sets `line=`. When some are left out, the last line says so.
pub fn annotations(findings: &Findings) -> Vec<String> {
    let mut per_file: Vec<(&str, &str)> = findings
        .per_file_findings
        .iter()
        .filter_map(|finding| match finding {
            Finding::CodeReview {
                file: Some(file),
                finding,
            } => Some((file.as_str(), finding.as_str())),
            _ => None,
        })
        .collect();
    let count = |file: &str| per_file.iter().filter(|(f, _)| *f == file).count();
    let counts: Vec<usize> = per_file.iter().map(|(file, _)| count(file)).collect();
    let mut indexed: Vec<(usize, (&str, &str))> = counts.into_iter().zip(per_file.drain(..)).collect();
    indexed.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    let total = indexed.len();
    let mut lines: Vec<String> = indexed
        .into_iter()
        .take(MAX_ANNOTATIONS)
        .map(|(_, (file, text))| {
            let mut properties = format!("file={}", escape_property(&crate::untrusted::escape(file)));
            if let Some(line) = crate::findings::line_hint(text) {
                let _ = write!(properties, ",line={line}");
            }
            let text: String = crate::untrusted::escape(text).chars().take(4000).collect();
            format!("::warning {properties}::{}", escape_data(&text))
        })
        .collect();
    if total > MAX_ANNOTATIONS {
        lines.pop();
        lines.push(format!(
            "::notice::{} more findings are in the job summary",
            total - (MAX_ANNOTATIONS - 1)
        ));
    }
    lines
}

/// A pull request shown in the summary.
#[derive(Debug, Clone)]
pub struct SummaryLink {
    pub title: String,
    pub url: String,
}

/// What the job summary shows.
#[derive(Debug, Clone, Default)]
pub struct SummaryInput {
    pub status: crate::report::RunStatus,
    /// Why the run was skipped or failed, when it was.
    pub reason: Option<String>,
    pub iterations: u32,
    /// What the checker found on the approved tree before any edit (the preflight), if it ran.
    pub baseline: Option<usize>,
    pub findings: Findings,
    pub tokens: (u64, u64, u64),
    /// Answers whose usage the server did not report (their tokens are estimated).
    pub estimated_answers: u64,
    pub cost_usd: Option<f64>,
    pub pull_requests: Vec<SummaryLink>,
    /// Long logs (checker output, refused contents), folded.
    pub logs: Vec<(String, String)>,
}

fn status_icon(status: crate::report::RunStatus) -> &'static str {
    use crate::report::RunStatus;
    match status {
        RunStatus::Converged => "✅",
        RunStatus::NeedsHuman => "⚠️",
        RunStatus::AwaitingApproval => "⏳",
        RunStatus::Skipped => "⏭️",
        RunStatus::Error => "❌",
    }
}

fn cell(text: &str) -> String {
    crate::untrusted::escape(text)
        .replace('|', "\\|")
        .replace('\n', " ")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('[', "\\[")
        .replace('!', "\\!")
}

/// The job summary Markdown, under [`MAX_SUMMARY_BYTES`]. Untrusted text appears only in
/// table cells (escaped) or fenced blocks.
pub fn render_summary(input: &SummaryInput) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## bork-ci: {} {}\n",
        status_icon(input.status),
        input.status.as_str()
    );
    if let Some(reason) = &input.reason {
        let _ = writeln!(out, "{}\n", cell(reason));
    }
    let _ = writeln!(out, "| | |\n|---|---|");
    let _ = writeln!(out, "| status | `{}` |", input.status.as_str());
    let _ = writeln!(out, "| iterations | {} |", input.iterations);
    if let Some(baseline) = input.baseline {
        let _ = writeln!(out, "| findings before any edit (preflight) | {baseline} |");
    }
    let _ = writeln!(out, "| findings left | {} |", input.findings.len());
    let (tokens_in, tokens_out, cached) = input.tokens;
    let estimated = match input.estimated_answers {
        0 => String::new(),
        n => format!(" (estimated for {n} answer(s): the server reported no usage)"),
    };
    let _ = writeln!(
        out,
        "| tokens | {tokens_in} in, {tokens_out} out, {cached} cached{estimated} |"
    );
    if let Some(cost) = input.cost_usd {
        let _ = writeln!(out, "| cost | ${cost:.4} |");
    }
    if !input.pull_requests.is_empty() {
        let _ = writeln!(out, "\n### Pull requests\n");
        for link in &input.pull_requests {
            // Links here are built by bork-ci from GitHub's answers, never from model text.
            let _ = writeln!(out, "- [{}]({})", cell(&link.title), link.url.replace(')', "%29"));
        }
    }
    if !input.findings.is_empty() {
        let _ = writeln!(out, "\n### Findings\n\n| file | finding |\n|---|---|");
        for finding in input
            .findings
            .per_file_findings
            .iter()
            .chain(input.findings.overall_findings.iter())
        {
            let (file, text) = match finding {
                Finding::CodeReview { file, finding } => (
                    file.clone().unwrap_or_else(|| "(overall)".into()),
                    finding.clone(),
                ),
                Finding::Command {
                    command, exit_code, ..
                } => ("(command)".into(), format!("`{command}` exited {exit_code}")),
            };
            let short: String = text.chars().take(300).collect();
            let _ = writeln!(out, "| {} | {} |", cell(&file), cell(&short));
        }
    }
    let mut logs = String::new();
    for (title, text) in &input.logs {
        let _ = writeln!(
            logs,
            "\n<details><summary>{}</summary>\n\n{}\n\n</details>",
            cell(title),
            crate::untrusted::markdown_block(text)
        );
    }
    let room = MAX_SUMMARY_BYTES - 1024;
    if out.len() + logs.len() > room {
        logs = crate::untrusted::cut_markdown(
            &logs,
            room.saturating_sub(out.len()),
            "\n\n</details>\n\n(logs truncated to stay under the 1 MiB summary limit)\n",
        );
    }
    if out.len() > room {
        let mut end = room;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("\n\n(summary truncated)\n");
    } else {
        out.push_str(&logs);
    }
    out
}

/// The step outputs `status`, `pr-number`, `pr-url`, `iterations` in `$GITHUB_OUTPUT` heredoc
/// form, each with its own random delimiter.
pub fn render_outputs(outputs: &[(&str, String)]) -> String {
    let mut out = String::new();
    for (name, value) in outputs {
        let mut delimiter = format!("ghadelimiter_{}", crate::untrusted::random_token());
        while value.contains(&delimiter) {
            delimiter = format!("ghadelimiter_{}", crate::untrusted::random_token());
        }
        let _ = write!(out, "{name}<<{delimiter}\n{value}\n{delimiter}\n");
    }
    out
}

/// The standard outputs of a run.
pub fn run_outputs(
    status: &str,
    pr_number: Option<u64>,
    pr_url: Option<&str>,
    iterations: u32,
    result: (Option<&str>, Option<&str>),
) -> Vec<(&'static str, String)> {
    let exit_code = crate::report::RunStatus::parse(status)
        .map(|status| crate::exit::ExitCode::from(status).code().to_string())
        .unwrap_or_default();
    vec![
        ("status", status.to_owned()),
        ("exit-code", exit_code),
        ("pr-number", pr_number.map(|n| n.to_string()).unwrap_or_default()),
        ("pr-url", pr_url.unwrap_or_default().to_owned()),
        ("iterations", iterations.to_string()),
        ("result-branch", result.0.unwrap_or_default().to_owned()),
        ("result-sha", result.1.unwrap_or_default().to_owned()),
    ]
}

/// Appends to the files the runner gave (`GITHUB_STEP_SUMMARY`, `GITHUB_OUTPUT`).
#[derive(Debug, Default)]
pub struct ActionsWriter;

impl ActionsWriter {
    /// Appends `text` to `path` (the runner creates these files; they are not in the repo).
    pub fn append(path: &Path, text: &str) -> std::io::Result<()> {
        crate::safe_fs::append(path, text.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model of the runner's log parser: which workflow commands would it act on?
    fn commands_seen(log: &str) -> Vec<String> {
        let mut stopped: Option<String> = None;
        let mut seen = Vec::new();
        for line in log.lines() {
            if let Some(token) = &stopped {
                if line == format!("::{token}::") {
                    stopped = None;
                }
                continue;
            }
            if let Some(token) = line.strip_prefix("::stop-commands::") {
                stopped = Some(token.to_owned());
                continue;
            }
            if line.starts_with("::") {
                seen.push(line.to_owned());
            }
        }
        seen
    }

    #[test]
    fn untrusted_text_issues_no_commands() {
        // Threat model C10, K31.
        let evil = "::set-env name=LD_PRELOAD::/tmp/x.so\n::error file=a::pwn\n::add-mask::x\n\
                    ::stop-commands::abc\n::abc::\n::set-output name=a::b\n\u{1b}]8;;http://evil\u{7}";
        let token = crate::untrusted::random_token();
        let block = crate::untrusted::block(evil, &token);
        assert!(commands_seen(&block).is_empty(), "{block}");
        assert!(!block.contains('\u{1b}'));
        let sneaky = crate::untrusted::block(&format!("::{token}::\n::error::x"), &token);
        assert!(commands_seen(&sneaky).is_empty(), "{sneaky}");
    }

    #[test]
    fn masks_every_line() {
        assert_eq!(mask("abc"), "::add-mask::abc\n");
        assert_eq!(mask("a\nb\n"), "::add-mask::a\n::add-mask::b\n");
    }

    #[test]
    fn annotations_are_capped_and_escaped() {
        let findings = Findings {
            per_file_findings: (0..60)
                .map(|i| Finding::CodeReview {
                    file: Some(if i == 59 {
                        "hot,a:b.rs".into()
                    } else {
                        format!("f{i}.rs")
                    }),
                    finding: format!("line {}: bad\n::error::x", i + 1),
                })
                .chain((0..2).map(|_| Finding::CodeReview {
                    file: Some("hot,a:b.rs".into()),
                    finding: "again".into(),
                }))
                .collect(),
            overall_findings: vec![],
        };
        let lines = annotations(&findings);
        assert_eq!(lines.len(), MAX_ANNOTATIONS);
        assert!(
            lines[0].starts_with("::warning file=hot%2Ca%3Ab.rs,line=60::line 60: bad%0A::error::x"),
            "{}",
            lines[0]
        );
        assert!(lines.iter().all(|line| !line.contains('\n')));
        assert!(lines[MAX_ANNOTATIONS - 1].starts_with("::notice::13 more"));
    }

    #[test]
    fn outputs_use_random_delimiters() {
        let text = render_outputs(&run_outputs("skipped", None, None, 0, (None, None)));
        assert!(text.starts_with("status<<ghadelimiter_"));
        assert!(text.contains("\nskipped\nghadelimiter_"));
        assert!(text.contains("pr-number<<"));
        assert!(text.contains("iterations<<"));
        let a = render_outputs(&[("x", "1".into())]);
        let b = render_outputs(&[("x", "1".into())]);
        assert_ne!(a, b);
    }

    #[test]
    fn summary_says_skipped_and_stays_small() {
        let summary = render_summary(&SummaryInput {
            status: crate::report::RunStatus::Skipped,
            reason: Some("untrusted context: no secrets".into()),
            logs: vec![("checker output".into(), "y".repeat(3 * 1024 * 1024))],
            findings: Findings {
                per_file_findings: vec![Finding::CodeReview {
                    file: Some("a|b.rs".into()),
                    finding: "![x](https://attacker.example/)".into(),
                }],
                overall_findings: vec![],
            },
            ..SummaryInput::default()
        });
        assert!(summary.contains("skipped"));
        assert!(!summary.contains("✅"));
        assert!(summary.len() < MAX_SUMMARY_BYTES);
        assert!(summary.contains("<details>"));
        assert!(!summary.contains("![x]("));
    }
}
