//! The Test Anything Protocol (`prove`, `node --test --test-reporter=tap`, any TAP producer):
//! each `not ok` line that is not `# TODO` or `# SKIP` is a failure. Pure.
//!
//! Where it failed comes from the YAML block after it (node: the first `stack` frame in the
//! test's file, else `location`), from Test::More's diagnostics (`#   Failed test 'NAME'` then
//! `#   at FILE line N.`, on stdout or stderr), else from the file `prove` is running
//! (`t/basic.t .. `). The message is the description and the block's `error`, or the
//! diagnostics.

use super::{Collected, Failure, file_line};

/// The most lines of a YAML block or of diagnostics read for one failure.
const BLOCK_LINES: usize = 60;

/// The failures in the TAP on `stdout`, with Test::More's diagnostics from `stdout` and `stderr`.
pub fn parse(stdout: &str, stderr: &str) -> Collected {
    let stdout = super::strip_ansi(stdout);
    let stderr = super::strip_ansi(stderr);
    let lines: Vec<&str> = stdout.lines().collect();
    let diagnostics = test_more_diagnostics(&stdout, &stderr);
    let mut collected = Collected::default();
    let mut current_file: Option<String> = None;
    for (index, raw) in lines.iter().enumerate() {
        let line = raw.trim_start();
        if let Some(file) = prove_header(raw) {
            current_file = Some(file);
            continue;
        }
        let Some(rest) = line.strip_prefix("not ok") else {
            continue;
        };
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == ' ');
        let rest = rest.strip_prefix("- ").unwrap_or(rest);
        let (description, directive) = match rest.strip_prefix("# ") {
            Some(directive) => ("", directive),
            None => rest.split_once(" # ").unwrap_or((rest, "")),
        };
        let directive = directive.trim_start().to_ascii_uppercase();
        if directive.starts_with("TODO") || directive.starts_with("SKIP") {
            continue;
        }
        let description = description.trim().to_owned();
        let block = yaml_block(&lines[index + 1..]);
        let mut failure = Failure {
            test: Some(description.clone()),
            ..Failure::default()
        };
        if let Some(found) = block.as_ref() {
            failure.file = found.place.as_ref().map(|(file, _)| file.clone());
            failure.line = found.place.as_ref().map(|(_, line)| *line);
            failure.message = found.error.clone();
        }
        if failure.file.is_none()
            && !description.is_empty()
            && let Some((file, line, said)) = diagnostics
                .iter()
                .find(|(_, _, said)| said.contains(&description))
        {
            failure.file = Some(file.clone());
            failure.line = Some(*line);
            if failure.message.is_empty() {
                failure.message = said.clone();
            }
        }
        if failure.file.is_none() {
            failure.file = current_file.clone();
        }
        collected.push(failure);
        if collected.failures.len() > super::MAX_FAILURES {
            break;
        }
    }
    // No TAP line said which failed (a harness printing only its summary): Test::More's
    // diagnostics still do.
    if collected.is_empty() {
        for (file, line, said) in diagnostics {
            let test = said.lines().next().and_then(|first| {
                first
                    .split_once('\'')?
                    .1
                    .rsplit_once('\'')
                    .map(|(name, _)| name.to_owned())
            });
            collected.push(Failure {
                file: Some(file),
                line: Some(line),
                test,
                message: said,
            });
        }
    }
    collected
}

/// `prove`'s line naming the test file it runs: `t/basic.t .. ` (dots and a blank after).
fn prove_header(line: &str) -> Option<String> {
    let (file, dots) = line.trim_end().split_once(" ..")?;
    (!file.is_empty()
        && !file.contains(char::is_whitespace)
        && dots.chars().all(|c| c == '.')
        && (file.contains('/') || file.ends_with(".t")))
    .then(|| file.to_owned())
}

/// What a YAML diagnostic block holds: where, and the error.
struct Block {
    place: Option<(String, u32)>,
    error: String,
}

/// The YAML block (`---` … `...`) right after a test line, when there is one.
fn yaml_block(after: &[&str]) -> Option<Block> {
    let start = after.iter().take(2).position(|line| line.trim() == "---")?;
    let body: Vec<&str> = after[start + 1..]
        .iter()
        .take_while(|line| line.trim() != "...")
        .take(BLOCK_LINES)
        .copied()
        .collect();
    let location = body.iter().find_map(|line| {
        let value = line.trim_start().strip_prefix("location:")?;
        file_line(value.trim().trim_matches(['\'', '"']))
    });
    // The first stack frame in the test's own file is where the assertion is.
    let frame = body.iter().find_map(|line| {
        let inner = line.trim().rsplit_once('(')?.1.strip_suffix(')')?;
        let (file, number) = file_line(inner)?;
        match &location {
            Some((located, _)) if *located != file => None,
            _ => Some((file, number)),
        }
    });
    let mut error = Vec::new();
    let mut in_error = false;
    let mut indent = 0;
    for line in &body {
        let trimmed = line.trim_start();
        let this_indent = line.len() - trimmed.len();
        if let Some(value) = trimmed
            .strip_prefix("error:")
            .or_else(|| trimmed.strip_prefix("message:"))
        {
            in_error = true;
            indent = this_indent;
            let value = value.trim();
            if !value.starts_with('|') && !value.starts_with('>') && !value.is_empty() {
                error.push(value.trim_matches(['\'', '"']).to_owned());
            }
            continue;
        }
        if in_error {
            if this_indent > indent || trimmed.is_empty() {
                error.push(trimmed.to_owned());
            } else {
                break;
            }
        }
    }
    Some(Block {
        place: frame.or(location),
        error: error.join("\n").trim().to_owned(),
    })
}

/// Test::More's diagnostics: for each `Failed test 'NAME'` followed by `at FILE line N.`, the
/// file, the line and the diagnostic lines (which hold the name).
fn test_more_diagnostics(stdout: &str, stderr: &str) -> Vec<(String, u32, String)> {
    let mut found = Vec::new();
    for text in [stdout, stderr] {
        let lines: Vec<&str> = text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            let comment = line.trim_start().trim_start_matches('#').trim();
            if !comment.starts_with("Failed test") {
                continue;
            }
            let said: Vec<&str> = lines[index..]
                .iter()
                .take(BLOCK_LINES)
                .take_while(|next| next.trim_start().starts_with('#'))
                .map(|next| next.trim_start().trim_start_matches('#').trim())
                .take_while(|next| !next.starts_with("Looks like you"))
                .collect();
            // `at t/basic.t line 3.` on this line or the next.
            let place = said.iter().take(3).find_map(|next| {
                let (_, after) = next.split_once("at ")?;
                let (file, rest) = after.split_once(" line ")?;
                let number: u32 = rest.trim_end_matches('.').trim().parse().ok()?;
                (number > 0 && !file.contains(char::is_whitespace)).then(|| (file.to_owned(), number))
            });
            if let Some((file, number)) = place {
                found.push((file, number, said.join("\n")));
            }
            if found.len() > super::MAX_FAILURES {
                return found;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        crate::check::fixtures::read(name)
    }

    #[test]
    fn real_node_test_tap() {
        let collected = parse(&fixture("node-test.tap"), "");
        assert_eq!(collected.failures.len(), 1);
        let failure = &collected.failures[0];
        assert_eq!(failure.file.as_deref(), Some("/fx/node/test/calc.test.js"));
        assert_eq!(failure.line, Some(5));
        assert_eq!(failure.test.as_deref(), Some("adds"));
        assert!(
            failure
                .message
                .starts_with("Expected values to be strictly equal:"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn real_prove_output() {
        // prove -v merges the diagnostics into what it prints.
        let collected = parse(&fixture("prove.tap"), "");
        assert_eq!(collected.failures.len(), 1);
        let failure = &collected.failures[0];
        assert_eq!(
            (failure.file.as_deref(), failure.line),
            (Some("t/basic.t"), Some(3))
        );
        assert_eq!(failure.test.as_deref(), Some("adds two"));
        assert!(failure.message.contains("got: '3'"), "{}", failure.message);
    }

    #[test]
    fn diagnostics_alone_say_what_failed() {
        let stderr = "#   Failed test 'adds two'\n#   at t/basic.t line 3.\n#          got: '3'\n# Looks like you failed 1 test of 3.\n";
        let collected = parse("t/basic.t .. \nDubious, test returned 1\n", stderr);
        assert_eq!(collected.failures.len(), 1);
        let failure = &collected.failures[0];
        assert_eq!(
            (failure.file.as_deref(), failure.line),
            (Some("t/basic.t"), Some(3))
        );
        assert_eq!(failure.test.as_deref(), Some("adds two"));
    }

    #[test]
    fn todo_and_skip_are_not_failures() {
        let collected = parse(
            "1..3\nnot ok 1 - a # TODO later\nnot ok 2 # skip no db\nnot ok 3 - real\n",
            "",
        );
        assert_eq!(collected.failures.len(), 1);
        assert_eq!(collected.failures[0].test.as_deref(), Some("real"));
    }

    proptest::proptest! {
        #[test]
        fn tap_never_panics(text in "((not )?ok [0-9]{0,3}( - [a-z ]{0,5})?( # (TODO|SKIP))?\n|  ---\n|  location: '[a-z/.:0-9]{0,10}'\n|  error: [|a-z]{0,4}\n|  stack: \\(x:1:2\\)\n|  \\.\\.\\.\n|#   Failed test '[a-z ]{0,4}'\n#   at [a-z.]{0,4} line [0-9]{0,3}\\.\n|[a-z/.]{0,5} \\.\\.\n|.{0,10}\n){0,16}") {
            let _ = parse(&text, &text);
        }
    }
}
