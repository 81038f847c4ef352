//! Command-line conventions, through the binary: `--color` and `NO_COLOR`, `-q` and `-v`,
//! `completions`, `man`, `--version`, and structured fields in JSON log lines.

use std::process::Output;

use serde_json::{Value, json};

use crate::support::{Repo, bork, checker_wanting, script};

const SPEC: &str = "---\nkind: spec\nid: app\ndescription: the app\n---\nThe app prints DONE.\n";

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A repository the scripted model brings in line in one iteration.
fn converging_run(global: &[&str], env: &[(&str, &str)]) -> Output {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        ("src/app.txt", "nothing yet\n"),
        ("check.sh", &checker_wanting("src/app.txt", "DONE")),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "check.sh", "llm": {"provider": "scripted"}}"#,
        ),
    ]);
    let scratch = tempfile::tempdir().expect("tempdir");
    let answers = [json!({"create-or-update": {"src/app.txt": "DONE\n"}})];
    let script = script(scratch.path(), &answers);
    let mut command = bork();
    command
        .args(global)
        .arg("run")
        .arg("--repo")
        .arg(repo.path())
        .env("BORK_LLM_SCRIPT", &script);
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("bork-ci runs");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    output
}

/// An error line (a configuration file that does not exist), with these flags and variables.
fn error_line(args: &[&str], env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut command = bork();
    command
        .args(args)
        .args(["config", "--config", "missing.json", "--repo"])
        .arg(dir.path())
        .env_remove("NO_COLOR");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("bork-ci runs");
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(stderr.contains("missing.json"), "{stderr}");
    stderr
}

#[test]
fn color_follows_the_flag_and_no_color() {
    let ansi = |stderr: &str| stderr.contains("\u{1b}[");
    assert!(ansi(&error_line(&["--color", "always"], &[])));
    assert!(
        ansi(&error_line(&["--color", "always"], &[("NO_COLOR", "1")])),
        "the flag wins"
    );
    assert!(!ansi(&error_line(&["--color", "never"], &[])));
    // Not a terminal: `auto` does not colour, with or without NO_COLOR.
    assert!(!ansi(&error_line(&[], &[])));
    assert!(!ansi(&error_line(&["--color", "auto"], &[("NO_COLOR", "1")])));
    // JSON lines are never coloured.
    let json_line = error_line(&["--color", "always", "--log-format", "json"], &[]);
    assert!(!ansi(&json_line), "{json_line}");
    let bad = bork()
        .args(["--color", "sometimes", "config"])
        .output()
        .expect("runs");
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn quiet_silences_progress_and_verbose_adds_debug_lines() {
    let normal = text(&converging_run(&[], &[]).stderr);
    assert!(normal.contains("iteration 1 of 5"), "{normal}");
    let quiet = text(&converging_run(&["-q"], &[]).stderr);
    assert!(!quiet.contains("iteration 1 of 5"), "{quiet}");
    assert!(!quiet.contains("INFO"), "{quiet}");
    // Errors still show under -q.
    assert!(error_line(&["--quiet"], &[]).contains("ERROR"));
    // -v reaches the edit step too: its debug line about the applied edit is relayed.
    let verbose = text(&converging_run(&["-v"], &[]).stderr);
    assert!(
        verbose.contains("DEBUG") && verbose.contains("applied edit"),
        "{verbose}"
    );
    assert!(!normal.contains("DEBUG"), "{normal}");
    // Other crates' debug lines (globset compiling each glob) only from -vv on.
    assert!(
        !verbose.contains("glob converted to regex") && !verbose.contains("built glob set"),
        "{verbose}"
    );
    let very = text(&converging_run(&["-vv"], &[]).stderr);
    assert!(
        very.contains("glob converted to regex") || very.contains("built glob set"),
        "{very}"
    );
    // BORK_LOG takes precedence over -q.
    let env_wins = text(&converging_run(&["-q"], &[("BORK_LOG", "info")]).stderr);
    assert!(env_wins.contains("iteration 1 of 5"), "{env_wins}");
    // `pack -q` prints the prompt and no size line.
    let repo = Repo::new(&[("specs/app.md", SPEC)]);
    let pack = bork()
        .args(["pack", "-q", "--repo"])
        .arg(repo.path())
        .output()
        .expect("runs");
    assert!(pack.status.success());
    assert!(text(&pack.stdout).contains("The app prints DONE."));
    assert!(
        !text(&pack.stderr).contains("bork-ci pack:"),
        "{}",
        text(&pack.stderr)
    );
    let both = bork().args(["-q", "-v", "config"]).output().expect("runs");
    assert_eq!(both.status.code(), Some(2), "-q and -v conflict");
}

#[test]
fn completions_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let output = bork().args(["completions", shell]).output().expect("runs");
        assert!(output.status.success(), "{shell}: {}", text(&output.stderr));
        let script = text(&output.stdout);
        for word in ["bork-ci", "run", "pack", "completions", "diff-base", "color"] {
            assert!(script.contains(word), "{shell} script names {word}");
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bork-ci.bash");
    let output = bork().args(["completions", "bash"]).output().expect("runs");
    std::fs::write(&path, &output.stdout).expect("write");
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&path)
        .output()
        .expect("bash runs");
    assert!(check.status.success(), "{}", text(&check.stderr));
    // Sourced, it registers a completion for bork-ci.
    let sourced = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!("source '{}' && complete -p bork-ci", path.display()))
        .output()
        .expect("bash runs");
    assert!(
        text(&sourced.stdout).contains("bork-ci"),
        "{}",
        text(&sourced.stderr)
    );
    let bad = bork().args(["completions", "tcsh"]).output().expect("runs");
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn man_page() {
    let output = bork().arg("man").output().expect("runs");
    assert!(output.status.success());
    let page = text(&output.stdout);
    assert!(
        page.starts_with(".TH bork-ci 1"),
        "{}",
        &page[..page.len().min(200)]
    );
    assert!(page.contains(".SH NAME") && page.contains("completions"));
    for section in [".SH \"EXIT STATUS\"", ".SH ENVIRONMENT", ".SH FILES"] {
        assert!(page.contains(section), "{section}");
    }
    assert!(page.contains("BORK_MAX_ITERATIONS") && page.contains(".config/bork.json"));
    let dir = tempfile::tempdir().expect("tempdir");
    let output = bork()
        .arg("man")
        .arg("--out-dir")
        .arg(dir.path())
        .output()
        .expect("runs");
    assert!(output.status.success(), "{}", text(&output.stderr));
    for name in ["bork-ci.1", "bork-ci-run.1", "bork-ci-pack.1"] {
        let written = std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
        assert!(written.contains(".TH"), "{name}");
    }
    let main = std::fs::read_to_string(dir.path().join("bork-ci.1")).unwrap_or_default();
    assert!(main.contains(".SH \"EXIT STATUS\""), "{main}");
}

#[test]
fn version_names_the_commit_and_its_date() {
    let output = bork().arg("--version").output().expect("runs");
    assert!(output.status.success());
    let line = text(&output.stdout);
    let line = line.trim_end();
    let rest = line.strip_prefix("bork-ci ").unwrap_or_else(|| panic!("{line}"));
    let (version, build) = rest.split_once(' ').unwrap_or((rest, ""));
    assert_eq!(version, env!("CARGO_PKG_VERSION"), "{line}");
    let manifest = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(manifest)
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| text(&output.stdout).trim().to_owned())
    };
    let own_checkout = git(&["rev-parse", "--show-toplevel"]).is_some_and(|top| {
        std::path::Path::new(&top).canonicalize().ok() == std::path::Path::new(manifest).canonicalize().ok()
    });
    if !own_checkout {
        assert_eq!(build, "", "no git checkout, no commit: {line}");
        return;
    }
    let inner = build
        .strip_prefix('(')
        .and_then(|build| build.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line}"));
    let (commit, date) = inner.split_once(' ').unwrap_or_else(|| panic!("{line}"));
    assert!(
        commit.len() >= 7 && commit.bytes().all(|byte| byte.is_ascii_hexdigit()),
        "{line}"
    );
    let date_ok = date.len() == 10
        && date.bytes().enumerate().all(|(index, byte)| {
            if index == 4 || index == 7 {
                byte == b'-'
            } else {
                byte.is_ascii_digit()
            }
        });
    assert!(date_ok, "{line}");
    let head = git(&["rev-parse", "HEAD"]).expect("HEAD");
    assert!(head.starts_with(commit), "{commit} is HEAD {head}");
    let short = bork().arg("-V").output().expect("runs");
    assert_eq!(text(&short.stdout).trim_end(), line);
}

#[test]
fn json_log_lines_carry_fields() {
    let output = converging_run(&["--log-format", "json"], &[]);
    let lines: Vec<Value> = text(&output.stderr)
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{line}: {error}")))
        .collect();
    let asking = lines
        .iter()
        .find(|line| {
            line["message"]
                .as_str()
                .is_some_and(|m| m.contains("asking the model"))
        })
        .expect("an 'asking the model' line");
    assert_eq!(asking["iteration"], 1);
    assert_eq!(asking["max_iterations"], 5);
    assert!(asking["elapsed_ms"].is_u64());
    assert_eq!(asking["level"], "INFO");
    let applied = lines
        .iter()
        .find(|line| line.get("applied").is_some())
        .expect("an edits line");
    assert_eq!(applied["applied"], 1);
    assert!(applied["input_tokens"].is_u64());
    let checked = lines
        .iter()
        .find(|line| line.get("findings").is_some())
        .expect("a findings line");
    assert_eq!(checked["findings"], 0);
    let summary = lines
        .iter()
        .find(|line| line.get("status").is_some())
        .expect("a summary line");
    assert_eq!(summary["status"], "converged");
    assert_eq!(summary["exit_code"], 0);
    assert_eq!(summary["iterations"], 1);
}

/// The error line of a failing `config`, printed on a pseudo-terminal (util-linux `script`).
fn error_line_on_a_terminal(args: &str, env: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let inner = format!(
        "'{}' {args} config --config missing.json --repo '{}'",
        env!("CARGO_BIN_EXE_bork-ci"),
        dir.path().display()
    );
    let mut command = std::process::Command::new("script");
    command
        .args(["-qec", &inner, "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm");
    for (name, _) in std::env::vars() {
        if name.starts_with("BORK_") || name.starts_with("GITHUB_") {
            command.env_remove(name);
        }
    }
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("script (util-linux) runs");
    let all = text(&output.stdout);
    assert!(all.contains("missing.json"), "{all}");
    all
}

#[test]
fn on_a_terminal_auto_colours_unless_no_color_or_a_dumb_terminal() {
    let ansi = |out: &str| out.contains("\u{1b}[");
    assert!(ansi(&error_line_on_a_terminal("", &[])));
    assert!(
        ansi(&error_line_on_a_terminal("", &[("NO_COLOR", "")])),
        "an empty NO_COLOR is unset"
    );
    assert!(!ansi(&error_line_on_a_terminal("", &[("NO_COLOR", "1")])));
    assert!(!ansi(&error_line_on_a_terminal("", &[("TERM", "dumb")])));
    assert!(!ansi(&error_line_on_a_terminal("--color never", &[])));
    assert!(ansi(&error_line_on_a_terminal(
        "--color always",
        &[("NO_COLOR", "1")]
    )));
}

/// `bork-ci config` on a repository whose configuration file is `config`.
fn config_of(config: &str) -> Output {
    let repo = Repo::new(&[(".config/bork.json", config)]);
    bork()
        .args(["config", "--repo"])
        .arg(repo.path())
        .output()
        .expect("bork-ci runs")
}

#[test]
fn a_misspelt_key_is_named_once_with_what_was_meant() {
    let out = config_of(r#"{"llm": {"modle": "gpt-4.1"}}"#);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("`llm.modle`"), "{stderr}");
    assert!(!stderr.contains("llm.modle.modle"), "{stderr}");
    assert!(stderr.contains("did you mean `model`?"), "{stderr}");
    let out = config_of(r#"{"max-iteration": 3}"#);
    assert!(
        text(&out.stderr).contains("did you mean `max-iterations`?"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn duplicate_keys_and_bad_sizes_are_refused_by_config() {
    let out = config_of(r#"{"max-iterations": 3, "max-iterations": 9}"#);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("duplicate key `max-iterations`"),
        "{}",
        text(&out.stderr)
    );
    let out = config_of(r#"{"sandbox": {"memory": "2 gigs"}}"#);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("sandbox.memory") && stderr.contains("gigs"),
        "{stderr}"
    );
    assert_eq!(
        config_of(r#"{"sandbox": {"memory": "512m"}}"#).status.code(),
        Some(0)
    );
}

#[test]
fn an_errors_cause_is_printed_once_and_text_logs_carry_no_fields() {
    let out = config_of("{not json");
    let stderr = text(&out.stderr);
    let lines: Vec<&str> = stderr.lines().filter(|line| line.contains("ERROR")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let cause = "not valid JSON";
    assert_eq!(lines[0].matches(cause).count(), 1, "{stderr}");
    // Text log lines say it in words; `key=value` fields are for the JSON log.
    let run = converging_run(&[], &[]);
    let stderr = text(&run.stderr);
    assert!(stderr.contains("iteration 1 of"), "{stderr}");
    assert!(!stderr.contains("max_iterations="), "{stderr}");
    assert!(!stderr.contains("status=\""), "{stderr}");
}

#[test]
fn the_provider_flag_lists_every_provider_under_its_heading() {
    let out = bork().args(["run", "--help"]).output().expect("bork-ci runs");
    let help = text(&out.stdout);
    for provider in ["openai", "anthropic", "azure", "bedrock", "vertex", "scripted"] {
        assert!(help.contains(provider), "{provider}: {help}");
    }
    for heading in ["Model:", "Loop:", "Sandbox:"] {
        assert!(help.contains(heading), "{heading}: {help}");
    }
}

#[test]
fn config_json_has_every_key_and_the_reference_documents_each() {
    let repo = Repo::new(&[(".config/bork.json", r#"{"max-iterations": 3}"#)]);
    let out = bork()
        .args(["config", "--format", "json", "--repo"])
        .arg(repo.path())
        .output()
        .expect("bork-ci runs");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let keys: Vec<&Value> = json["keys"].as_array().expect("keys").iter().collect();
    let find = |name: &str| keys.iter().find(|key| key["key"] == name).copied();
    let iterations = find("max-iterations").expect("max-iterations");
    assert_eq!(iterations["value"], 3);
    assert_eq!(iterations["source"], ".config/bork.json");
    // Unset keys are there too, as null.
    assert_eq!(find("diff-base").expect("an unset key")["value"], Value::Null);
    assert!(find("llm.max-cost-usd").is_some());
    // The reference has a row for every key, and no row for a key that does not exist.
    let reference =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/specs/core/config-file.md"))
            .expect("the reference");
    let documented: std::collections::BTreeSet<String> = reference
        .split("\n# Keys")
        .nth(1)
        .expect("a Keys part")
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split('`').next())
        .map(str::to_owned)
        .collect();
    let accepted: std::collections::BTreeSet<String> = keys
        .iter()
        .filter_map(|key| key["key"].as_str())
        .map(str::to_owned)
        .collect();
    let undocumented: Vec<_> = accepted.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&accepted).collect();
    assert!(
        undocumented.is_empty(),
        "keys with no row in the reference: {undocumented:?}"
    );
    assert!(
        unknown.is_empty(),
        "rows for keys bork-ci does not accept: {unknown:?}"
    );
}

#[test]
fn bedrocks_default_model_is_the_inference_profile_of_its_region() {
    for (region, model) in [
        ("eu-west-3", "eu.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("us-west-2", "us.anthropic.claude-sonnet-4-5-20250929-v1:0"),
        ("ap-southeast-2", "apac.anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ] {
        let repo = Repo::new(&[(".config/bork.json", r#"{"llm": {"provider": "bedrock"}}"#)]);
        let out = bork()
            .args(["config", "--format", "json", "--repo"])
            .arg(repo.path())
            .env("AWS_REGION", region)
            .output()
            .expect("bork-ci runs");
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
        let config: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
        let key = config["keys"]
            .as_array()
            .and_then(|keys| keys.iter().find(|key| key["key"] == "llm.model"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(key["value"], model, "{region}: {key}");
    }
}

#[test]
fn config_refuses_a_provider_chosen_without_what_it_needs() {
    let out = config_of(r#"{"llm": {"provider": "azure"}}"#);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("llm.base-url"),
        "{}",
        text(&out.stderr)
    );
    let out = config_of(r#"{"llm": {"provider": "azure", "base-url": "https://x.openai.azure.com"}}"#);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_misspelt_bork_variable_is_named_with_what_was_meant() {
    let repo = Repo::new(&[(".config/bork.json", "{}")]);
    let out = bork()
        .args(["config", "--repo"])
        .arg(repo.path())
        .env("BORK_MAX_ITERATION", "3")
        .env("BORK_TOTALLY_UNKNOWN_THING", "1")
        .env("BORK_LOG", "info")
        .output()
        .expect("bork-ci runs");
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("`BORK_MAX_ITERATION` is not a bork-ci variable and is ignored; did you mean `BORK_MAX_ITERATIONS`?"),
        "{stderr}"
    );
    assert!(
        stderr.contains("`BORK_TOTALLY_UNKNOWN_THING` is not a bork-ci variable and is ignored"),
        "{stderr}"
    );
    assert!(!stderr.contains("`BORK_LOG`"), "{stderr}");
}
