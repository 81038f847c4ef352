//! Which test tool a command runs, and how to ask it for structured output without the team
//! writing it: pytest gets `--junit-xml=<temp file>`, `go test` gets `-json`, jest and vitest
//! their JSON reporter to a temp file, `node --test` the TAP reporter, `prove` `-v` (its TAP
//! lines); `cargo test` is read as it prints. Pure: the temp folder is given.
//!
//! The tool is found among the command's first words, past launchers (`uv run`, `poetry run`,
//! `npx`, `pnpm exec`, `python -m`, ...). A command that already names its report keeps it.

use std::path::{Path, PathBuf};

use super::Format;

/// A test tool bork-ci knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Pytest,
    GoTest,
    Jest,
    Vitest,
    NodeTest,
    Cargo,
    Prove,
    Other,
}

/// How to run the command and what to read afterwards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The command as it is run.
    pub argv: Vec<String>,
    /// The tool found.
    pub tool: Tool,
    /// A report file to read after the tool ends, and its format.
    pub report: Option<(PathBuf, Format)>,
    /// How to read stdout and stderr (`Auto`: sniff them).
    pub output: Format,
}

/// Launchers that run the next word as the command.
const LAUNCHERS: &[&str] = &[
    "uv", "uvx", "run", "poetry", "pipenv", "pdm", "hatch", "npx", "pnpm", "yarn", "bunx", "exec", "env",
    "nice", "timeout", "xvfb-run",
];

fn base(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// The tool `argv` runs and the index of its word.
pub fn detect(argv: &[String]) -> (Tool, usize) {
    for (index, word) in argv.iter().enumerate().take(6) {
        let name = base(word);
        let next = argv.get(index + 1).map(String::as_str);
        let tool = match name {
            "pytest" | "py.test" => Tool::Pytest,
            "jest" => Tool::Jest,
            "vitest" => Tool::Vitest,
            "prove" => Tool::Prove,
            "go" if next == Some("test") => Tool::GoTest,
            "cargo" if matches!(next, Some("test" | "nextest")) => Tool::Cargo,
            "node" | "nodejs" if argv[index + 1..].iter().any(|arg| arg == "--test") => Tool::NodeTest,
            python if python.starts_with("python") => {
                if next == Some("-m") && argv.get(index + 2).is_some_and(|module| module == "pytest") {
                    return (Tool::Pytest, index + 2);
                }
                return (Tool::Other, index);
            }
            _ if LAUNCHERS.contains(&name) || word.starts_with('-') || word.contains('=') => continue,
            _ => return (Tool::Other, index),
        };
        return (tool, index);
    }
    (Tool::Other, 0)
}

/// What to run for `argv` with `format` (`Auto` asks a known tool for structured output), the
/// tool's report going into `temp`; `junit` and `sarif` name report files the command writes.
pub fn plan(
    argv: &[String],
    format: Format,
    temp: &Path,
    junit: Option<&Path>,
    sarif: Option<&Path>,
) -> Plan {
    let (tool, at) = detect(argv);
    let mut plan = Plan {
        argv: argv.to_vec(),
        tool,
        report: None,
        output: match (format, tool) {
            (Format::Auto, Tool::Cargo) => Format::Libtest,
            (Format::Auto, Tool::GoTest) => Format::GoJson,
            (Format::Auto, Tool::NodeTest | Tool::Prove) => Format::Tap,
            (Format::Junit | Format::Jest | Format::Sarif, _) => Format::Auto,
            (format, _) => format,
        },
    };
    if let Some(path) = sarif {
        plan.report = Some((path.to_owned(), Format::Sarif));
        return plan;
    }
    if let Some(path) = junit {
        plan.report = Some((path.to_owned(), Format::Junit));
        return plan;
    }
    if format != Format::Auto {
        return plan;
    }
    match tool {
        Tool::Pytest => {
            let named = named_value(argv, &["--junit-xml", "--junitxml"]);
            let path = named.clone().unwrap_or_else(|| temp.join("junit.xml"));
            if named.is_none() {
                plan.argv.push(format!("--junit-xml={}", path.display()));
                // xunit1 adds each case's `file` and `line`, for when the traceback has none.
                plan.argv.push("-o".to_owned());
                plan.argv.push("junit_family=xunit1".to_owned());
            }
            plan.report = Some((path, Format::Junit));
        }
        Tool::GoTest => {
            if !argv.iter().any(|arg| arg == "-json" || arg == "--json") {
                plan.argv.insert(at + 2, "-json".to_owned());
            }
        }
        Tool::Jest => {
            let named =
                named_value(argv, &["--outputFile"]).filter(|_| argv.iter().any(|arg| arg == "--json"));
            let path = named.clone().unwrap_or_else(|| temp.join("jest.json"));
            if named.is_none() {
                plan.argv.push("--json".to_owned());
                plan.argv.push(format!("--outputFile={}", path.display()));
                plan.argv.push("--testLocationInResults".to_owned());
            }
            plan.report = Some((path, Format::Jest));
        }
        Tool::Vitest => {
            let path = temp.join("vitest.json");
            plan.argv.push("--reporter=json".to_owned());
            plan.argv.push(format!("--outputFile={}", path.display()));
            plan.report = Some((path, Format::Jest));
        }
        Tool::NodeTest => {
            if !argv.iter().any(|arg| arg.starts_with("--test-reporter")) {
                let test = argv.iter().position(|arg| arg == "--test").unwrap_or(at);
                plan.argv.insert(test + 1, "--test-reporter=tap".to_owned());
            }
        }
        Tool::Prove => {
            // Without `-v` prove prints only its summary, not the TAP lines.
            if !argv.iter().any(|arg| arg == "-v" || arg == "--verbose") {
                plan.argv.insert(at + 1, "-v".to_owned());
            }
        }
        Tool::Cargo | Tool::Other => {}
    }
    plan
}

/// The value of the first option among `names`, as `--name=VALUE` or `--name VALUE`.
fn named_value(argv: &[String], names: &[&str]) -> Option<PathBuf> {
    for (index, arg) in argv.iter().enumerate() {
        for name in names {
            if let Some(value) = arg.strip_prefix(name).and_then(|rest| rest.strip_prefix('=')) {
                return Some(PathBuf::from(value));
            }
            if arg == name {
                return argv.get(index + 1).map(PathBuf::from);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    fn planned(text: &str) -> (Vec<String>, Tool, Option<(PathBuf, Format)>, Format) {
        let plan = plan(&words(text), Format::Auto, Path::new("/t"), None, None);
        (plan.argv, plan.tool, plan.report, plan.output)
    }

    #[test]
    fn known_tools_are_asked_for_structure() {
        let (argv, tool, report, _) = planned("python3 -m pytest -q");
        assert_eq!(tool, Tool::Pytest);
        assert_eq!(
            argv,
            words("python3 -m pytest -q --junit-xml=/t/junit.xml -o junit_family=xunit1")
        );
        assert_eq!(report, Some((PathBuf::from("/t/junit.xml"), Format::Junit)));
        let (argv, ..) = planned("uv run pytest --junitxml out.xml");
        assert_eq!(argv, words("uv run pytest --junitxml out.xml"));
        let (argv, tool, _, output) = planned("go test ./...");
        assert_eq!((tool, output), (Tool::GoTest, Format::GoJson));
        assert_eq!(argv, words("go test -json ./..."));
        let (argv, tool, report, _) = planned("npx jest --ci");
        assert_eq!(tool, Tool::Jest);
        assert_eq!(
            argv,
            words("npx jest --ci --json --outputFile=/t/jest.json --testLocationInResults")
        );
        assert_eq!(report, Some((PathBuf::from("/t/jest.json"), Format::Jest)));
        let (argv, tool, ..) = planned("node --test test/");
        assert_eq!(tool, Tool::NodeTest);
        assert_eq!(argv, words("node --test --test-reporter=tap test/"));
        let (argv, tool, report, output) = planned("cargo test --locked");
        assert_eq!((tool, report, output), (Tool::Cargo, None, Format::Libtest));
        assert_eq!(argv, words("cargo test --locked"));
        let (argv, tool, _, output) = planned("prove -r t/");
        assert_eq!((tool, output), (Tool::Prove, Format::Tap));
        assert_eq!(argv, words("prove -v -r t/"));
        assert_eq!(planned("make check").1, Tool::Other);
        assert_eq!(planned("python3 script.py").1, Tool::Other);
    }

    #[test]
    fn named_reports_and_forced_formats() {
        let plan = plan(
            &words("ruff check --output-format sarif -o r.sarif"),
            Format::Auto,
            Path::new("/t"),
            None,
            Some(Path::new("r.sarif")),
        );
        assert_eq!(plan.report, Some((PathBuf::from("r.sarif"), Format::Sarif)));
        let forced = super::plan(&words("pytest"), Format::Tap, Path::new("/t"), None, None);
        assert_eq!(
            (forced.argv, forced.output, forced.report),
            (words("pytest"), Format::Tap, None)
        );
    }
}
