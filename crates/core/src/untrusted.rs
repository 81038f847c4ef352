//! The one path for untrusted text: whatever came from a model, an endpoint, a checker, a
//! verifier step, a reviewer or GitHub goes through here before it reaches stdout, stderr, a log
//! line, the report, the summary, an annotation or a pull request.
//!
//! Owns escaping ([`escape`]: C0/C1 controls, bidirectional and invisible characters; [`inline`]
//! also flattens newlines), cutting at character boundaries ([`cut`]; Markdown with its code
//! fences closed, [`cut_markdown`]), framing for the GitHub
//! Actions runner ([`block`]: `::stop-commands::<token>` … `::<token>::`), and the stderr writer
//! every log line goes through ([`LogWriter`]): one event is one line, whatever its text holds,
//! no line it writes starts with `::` (the runner's command prefix, leading blanks ignored), and
//! every registered secret is redacted before anything is written.

use std::fmt::Write as _;
use std::io::Write;

/// Escapes control, bidirectional and invisible characters (other than newline and tab) as
/// `\u{..}` so they cannot drive a terminal or a log parser, and defuses the Actions runner's
/// legacy command form (`##[`), which it accepts anywhere in a line.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c.is_control() && c != '\n' && c != '\t') || is_invisible(c) {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    defuse_legacy(out)
}

/// The Actions runner's legacy command form, `##[command]`, is accepted anywhere in a line, not
/// only at its start: every `##[` bork-ci prints is shown as `#\u{23}[`.
fn defuse_legacy(text: String) -> String {
    if text.contains("##[") {
        text.replace("##[", "#\\u{23}[")
    } else {
        text
    }
}

/// Bidirectional overrides and isolates, zero-width and other invisible format characters.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{180e}' | '\u{00ad}')
}

/// [`escape`] with newlines flattened (`\n`, `\r` and tabs shown escaped), for text quoted
/// inside one line (an error message, a reason, a field).
pub fn inline(text: &str) -> String {
    escape(text).replace('\n', "\\n").replace('\t', "\\t")
}

/// At most `max` bytes of `text`, cut at a character boundary, saying how much was cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}[... {} bytes cut]", &text[..end], text.len() - end)
}

/// Markdown `text` cut to at most `max` bytes at a character boundary, then a code fence the
/// cut left open (an odd number of ```` ``` ````) closed so the rest of the page renders as
/// Markdown, then `note` (saying what was cut). Cuts even when `text` fits: the caller decides
/// when, and how much room `note` and the closing fence need.
pub fn cut_markdown(text: &str, max: usize, note: &str) -> String {
    let mut end = max.min(text.len());
    while end > 0 && !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut cut = text[..end].to_owned();
    if cut.matches("```").count() % 2 == 1 {
        cut.push_str("\n```");
    }
    cut.push_str(note);
    cut
}

/// At most `chars` characters of `text`, with an ellipsis when cut: a short excerpt inside a
/// one-line message (a server's error, a refusal).
pub fn excerpt(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_owned(),
    }
}

/// The first at most `max` bytes of `text`, ending at a character boundary (no marker).
pub fn head(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last at most `max` bytes of `text`, starting at a character boundary (no marker).
pub fn last(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The end of `text`, at most `max` bytes, saying how much was cut before it.
pub fn tail(text: &str, max: usize) -> String {
    let kept = last(text, max);
    if kept.len() == text.len() {
        return text.to_owned();
    }
    format!("[... {} bytes cut ...]{kept}", text.len() - kept.len())
}

/// [`tail`] of a process's output bytes, invalid UTF-8 shown as U+FFFD.
pub fn tail_bytes(bytes: &[u8], max: usize) -> String {
    tail(&String::from_utf8_lossy(bytes), max)
}

/// `text` without control characters other than newline and tab, at most `max` bytes (cut at
/// a character boundary, saying so): for untrusted text quoted inside a prompt to a model,
/// where escapes would only be noise.
pub fn strip_controls(text: &str, max: usize) -> String {
    let stripped: String = text
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect();
    let kept = head(&stripped, max);
    if kept.len() == stripped.len() {
        return stripped;
    }
    format!("{kept}\n[... cut ...]")
}

/// A Markdown fence of backticks longer than any backtick run in `text` (at least three), so
/// no line of `text` can close it.
pub fn backtick_fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

/// Untrusted text as a fenced Markdown code block (pull-request bodies, comments, the job
/// summary): controls made visible, inside a fence no line of it can close.
pub fn markdown_block(text: &str) -> String {
    let escaped = escape(text);
    let fence = backtick_fence(&escaped);
    let newline = if escaped.ends_with('\n') { "" } else { "\n" };
    format!("{fence}text\n{escaped}{newline}{fence}")
}

/// One line of plain text for a title, a commit subject or a list item: newlines and tabs
/// become spaces, control and invisible characters are dropped, blanks collapse, at most 200
/// characters.
pub fn one_line(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if matches!(c, '\n' | '\r' | '\t') { ' ' } else { c })
        .filter(|c| !c.is_control() && !is_invisible(*c))
        .collect();
    let line = line.split_whitespace().collect::<Vec<_>>().join(" ");
    line.chars().take(200).collect()
}

/// A path or name shown as Markdown inline code: [`one_line`], with backticks replaced so it
/// cannot leave the code span.
pub fn code_span(text: &str) -> String {
    format!("`{}`", one_line(text).replace('`', "'"))
}

/// A fresh random token (hex, 128 bits) for stop-commands blocks and heredoc delimiters.
pub fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    hex::encode(bytes)
}

/// Untrusted text between `::stop-commands::<token>` and `::<token>::`, escaped, so no line of
/// it is read as a workflow command. Should the text contain the token, a new one is drawn.
pub fn block(text: &str, token: &str) -> String {
    let mut token = token.to_owned();
    while token.is_empty() || text.contains(&token) {
        token = random_token();
    }
    let body = escape(text);
    let newline = if body.ends_with('\n') || body.is_empty() {
        ""
    } else {
        "\n"
    };
    format!("::stop-commands::{token}\n{body}{newline}::{token}::\n")
}

/// Text for a terminal line, in this order: registered secrets redacted, then controls (ANSI
/// escapes included) escaped, newlines flattened and `##[` defused. Every byte bork-ci writes
/// to stderr passes here, through [`line()`], [`LogWriter`], [`ColourLogWriter`] or [`relay`]
/// (and the text log's fields, so no colour code of theirs survives [`ColourLogWriter`]).
pub fn terminal_text(text: &str) -> String {
    inline(&crate::secrets::redact(text)).replace("##[", "#\\u{23}[")
}

/// One line safe to print outside a stop-commands block: [`terminal_text`], and a leading `::`
/// (after blanks) defused.
pub fn line(text: &str) -> String {
    let mut out = terminal_text(text);
    if out.trim_start().starts_with("::") {
        out.insert_str(0, "[untrusted] ");
    }
    out
}

/// Lines for a terminal outside a stop-commands block (a judge's output, an edit's contents):
/// secrets redacted, then [`escape`]d with newlines kept, and each line that would start a
/// workflow command (`::` after blanks) defused as in [`line()`]. Outside GitHub Actions, where
/// bork-ci draws no stop-commands token, its output may still reach a runner's log (a
/// container started by a workflow step sees no `GITHUB_ACTIONS`).
pub fn terminal_lines(text: &str) -> String {
    let escaped = escape(&crate::secrets::redact(text));
    if !escaped.lines().any(|each| each.trim_start().starts_with("::")) {
        return escaped;
    }
    let mut out = String::with_capacity(escaped.len() + 16);
    for each in escaped.split_inclusive('\n') {
        if each.trim_start().starts_with("::") {
            out.push_str("[untrusted] ");
        }
        out.push_str(each);
    }
    out
}

/// The writer of every `tracing` line on stderr, on a terminal or not: [`ColourLogWriter`]
/// when the formatter writes colours, else [`LogWriter`].
pub fn log_writer(colour: bool) -> Box<dyn Write> {
    if colour {
        Box::new(ColourLogWriter(std::io::stderr()))
    } else {
        Box::new(LogWriter(std::io::stderr()))
    }
}

/// The writer behind every log line on stderr: each write (one `tracing` event) becomes
/// exactly one [`line()`], however many newlines its text held.
pub struct LogWriter<W>(pub W);

impl<W: Write> Write for LogWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let body = text.strip_suffix('\n').unwrap_or(&text);
        let mut safe = line(body);
        safe.push('\n');
        self.0.write_all(safe.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// As [`LogWriter`], but keeps the colour codes bork-ci's own formatter writes (`--color
/// always` on a log that is not a terminal): SGR sequences `ESC [ digits ; m` pass, every other
/// byte is made safe as in [`line()`], and the line as seen without colours never starts a
/// workflow command.
pub struct ColourLogWriter<W>(pub W);

impl<W: Write> Write for ColourLogWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let body = text.strip_suffix('\n').unwrap_or(&text);
        let mut safe = String::new();
        let mut visible = String::new();
        let mut rest = body;
        while !rest.is_empty() {
            let (plain, colour, after) = match sgr_start(rest) {
                Some((start, end)) => (&rest[..start], &rest[start..end], &rest[end..]),
                None => (rest, "", ""),
            };
            let cleaned = terminal_text(plain);
            visible.push_str(&cleaned);
            safe.push_str(&cleaned);
            safe.push_str(colour);
            rest = after;
        }
        if visible.trim_start().starts_with("::") {
            safe.insert_str(0, "[untrusted] ");
        }
        safe.push('\n');
        self.0.write_all(safe.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// The first SGR sequence (`ESC [` digits and `;`, then `m`) in `text`: its byte range.
fn sgr_start(text: &str) -> Option<(usize, usize)> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(offset) = memchr::memchr(0x1b, &bytes[from..]) {
        let start = from + offset;
        if bytes.get(start + 1) == Some(&b'[') {
            let mut end = start + 2;
            while end < bytes.len() && (bytes[end].is_ascii_digit() || bytes[end] == b';') {
                end += 1;
            }
            if bytes.get(end) == Some(&b'm') {
                return Some((start, end + 1));
            }
        }
        from = start + 1;
    }
    None
}

/// Passes lines from another process (the edit step's stderr) on, each as one [`line()`].
pub fn relay(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    let text = String::from_utf8_lossy(bytes);
    for each in text.lines() {
        let mut safe = line(each);
        safe.push('\n');
        out.write_all(safe.as_bytes())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_line_starts_a_workflow_command() {
        for hostile in [
            "field\n::add-mask::x",
            "a\r::error::boom",
            "::stop-commands::tok",
            "  ::set-output name=x::y",
            "\u{85}::warning::x",
            "x\u{2028}::error::y",
            "##[set-env name=A]b",
            "\u{1b}]8;;http://x\u{7}",
        ] {
            let mut out = Vec::new();
            LogWriter(&mut out).write_all(hostile.as_bytes()).expect("write");
            relay(&mut out, hostile.as_bytes()).expect("relay");
            let text = String::from_utf8(out).expect("utf8");
            for each in text.split(['\n', '\r']) {
                assert!(!each.trim_start().starts_with("::"), "{hostile:?} -> {each:?}");
                assert!(!each.contains("##["), "{hostile:?} -> {each:?}");
                assert!(!each.contains('\u{1b}'));
            }
        }
    }

    #[test]
    fn terminal_lines_keep_newlines_and_start_no_command() {
        assert_eq!(terminal_lines("a\nb\n"), "a\nb\n");
        assert_eq!(
            terminal_lines("ok\n  ::add-mask::x\n\u{1b}[31mred\n::error::y"),
            "ok\n[untrusted]   ::add-mask::x\n\\u{1b}[31mred\n[untrusted] ::error::y"
        );
    }

    #[test]
    fn colour_codes_pass_and_nothing_else_does() {
        let mut out = Vec::new();
        ColourLogWriter(&mut out)
            .write_all("\u{1b}[32m INFO\u{1b}[0m ok \u{1b}]8;;http://x\u{7} \n::error::x".as_bytes())
            .expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.contains("\u{1b}[32m INFO\u{1b}[0m"), "{text:?}");
        assert!(!text.contains("\u{1b}]"), "{text:?}");
        assert_eq!(text.matches('\n').count(), 1, "{text:?}");
        let mut out = Vec::new();
        ColourLogWriter(&mut out)
            .write_all("\u{1b}[1m::add-mask::x".as_bytes())
            .expect("write");
        let text = String::from_utf8(out).expect("utf8");
        assert!(text.starts_with("[untrusted] "), "{text:?}");
    }

    proptest::proptest! {
        #[test]
        fn no_line_of_any_text_starts_a_command(text in "(.|\n|\r|::|##\\[){0,200}") {
            let mut out = Vec::new();
            LogWriter(&mut out).write_all(text.as_bytes()).expect("write");
            relay(&mut out, text.as_bytes()).expect("relay");
            let shown = String::from_utf8(out).expect("utf8");
            for each in shown.split('\n') {
                proptest::prop_assert!(!each.trim_start().starts_with("::"), "{:?}", each);
                proptest::prop_assert!(!each.contains('\r'));
            }
            let cut_text = cut(&text, 17);
            proptest::prop_assert!(cut_text.len() <= text.len().max(17 + 40));
        }
    }

    #[test]
    fn heads_and_tails_are_at_boundaries() {
        let cut = tail_bytes("ééééé".as_bytes(), 3);
        assert_eq!(cut, "[... 8 bytes cut ...]é");
        assert_eq!(head("éé", 3), "é");
        assert_eq!(head("abc", 10), "abc");
        assert_eq!(head("abc", 0), "");
        assert_eq!(last("éé", 3), "é");
        assert_eq!(strip_controls("a\u{1b}[2Jb\nc", 100), "a[2Jb\nc");
        assert_eq!(strip_controls("abcdef", 3), "abc\n[... cut ...]");
    }

    #[test]
    fn markdown_blocks_outlast_backticks_and_escape_controls() {
        assert_eq!(backtick_fence("no ticks"), "```");
        assert_eq!(backtick_fence("a ```` b"), "`````");
        let fenced = markdown_block("a ```` b\u{1b}]8;;http://evil\u{7}");
        assert!(fenced.starts_with("`````text\n"), "{fenced}");
        assert!(fenced.ends_with("\n`````"), "{fenced}");
        assert!(!fenced.contains('\u{1b}'));
    }

    #[test]
    fn markdown_cuts_close_the_fence_they_open() {
        assert_eq!(cut_markdown("ab```cd", 5, "!"), "ab```\n```!");
        assert_eq!(cut_markdown("```a```b", 7, "!"), "```a```!");
        assert_eq!(cut_markdown("éé", 3, ""), "é");
        assert_eq!(cut_markdown("abc", 10, " (all)"), "abc (all)");
    }

    #[test]
    fn cut_is_at_a_boundary() {
        let cut = cut("ééé", 3);
        assert!(cut.starts_with('é'));
        assert!(cut.contains("bytes cut"));
    }
}
