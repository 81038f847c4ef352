//! Settings a CI system hands bork-ci, through the binary: a half-configured GitHub setup is an
//! error naming the missing setting (exit 2, nothing changed), a token alone stays local and
//! says so, and the default model follows the provider.

use serde_json::json;

use crate::support::{Repo, TestContext, bork};

fn repo() -> Repo {
    Repo::new(&[("specs/app.md", "The app says hello.\n"), ("src/app.txt", "hi\n")])
}

/// `bork-ci run` on `repo` with a scripted model that would edit `src/app.txt`.
fn run(repo: &Repo, env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let mut context = TestContext::on(repo);
    context.scripted(&[json!({"create-or-update": {"src/app.txt": "HELLO\n"}})]);
    for (name, value) in env {
        context.env(name, value);
    }
    let outcome = context.run(args);
    (outcome.code, outcome.stderr)
}

fn assert_refused(repo: &Repo, code: i32, stderr: &str, names: &[&str]) {
    assert_eq!(code, 2, "{stderr}");
    let errors: Vec<&str> = stderr.lines().filter(|line| line.contains("ERROR")).collect();
    assert_eq!(errors.len(), 1, "one line: {stderr}");
    for name in names {
        assert!(errors[0].contains(name), "names {name}: {}", errors[0]);
    }
    assert_eq!(repo.read("src/app.txt"), "hi\n", "nothing changed");
}

#[test]
fn a_repository_without_a_token_is_an_error_naming_the_token() {
    let repo = repo();
    let (code, stderr) = run(&repo, &[("GITHUB_REPOSITORY", "acme/widgets")], &[]);
    assert_refused(
        &repo,
        code,
        &stderr,
        &[
            "GITHUB_REPOSITORY",
            "acme/widgets",
            "BORK_GITHUB_TOKEN",
            "GITHUB_TOKEN",
        ],
    );
    let (code, stderr) = run(&repo, &[], &["--github-repo", "acme/widgets"]);
    assert_refused(&repo, code, &stderr, &["--github-repo", "no token is set"]);
    // A token variable passed but empty (a CI plugin forwarding an unset variable).
    let (code, stderr) = run(
        &repo,
        &[("BORK_GITHUB_TOKEN", "")],
        &["--github-repo", "acme/widgets"],
    );
    assert_refused(&repo, code, &stderr, &["BORK_GITHUB_TOKEN is set but empty"]);
    let (code, stderr) = run(
        &repo,
        &[("CI_TOKEN", "")],
        &["--github-repo", "acme/widgets", "--github-token-env", "CI_TOKEN"],
    );
    assert_refused(&repo, code, &stderr, &["CI_TOKEN is set but empty"]);
}

#[test]
fn a_token_with_an_empty_repository_is_an_error_naming_the_repository() {
    let repo = repo();
    let (code, stderr) = run(
        &repo,
        &[("GITHUB_REPOSITORY", ""), ("BORK_GITHUB_TOKEN", "t-canary-4411")],
        &[],
    );
    assert_refused(
        &repo,
        code,
        &stderr,
        &["GITHUB_REPOSITORY is set but empty", "BORK_GITHUB_TOKEN"],
    );
    assert!(!stderr.contains("t-canary-4411"), "{stderr}");
    let (code, stderr) = run(
        &repo,
        &[("GITHUB_TOKEN", "t-canary-4411")],
        &["--github-repo", ""],
    );
    assert_refused(
        &repo,
        code,
        &stderr,
        &["--github-repo is set but empty", "GITHUB_TOKEN"],
    );
}

#[test]
fn a_token_alone_stays_local_and_says_so() {
    let repo = repo();
    let (code, stderr) = run(&repo, &[("GITHUB_TOKEN", "t-canary-4411")], &[]);
    assert_eq!(code, 0, "{stderr}");
    let notes: Vec<&str> = stderr.lines().filter(|line| line.contains("local run")).collect();
    assert_eq!(notes.len(), 1, "{stderr}");
    assert!(
        notes[0].contains("GITHUB_TOKEN") && notes[0].contains("GITHUB_REPOSITORY"),
        "{}",
        notes[0]
    );
    assert!(!stderr.contains("t-canary-4411"));
    assert_eq!(repo.read("src/app.txt"), "HELLO\n", "the local run went ahead");
    // Neither set: local, without a word about GitHub.
    let repo = self::repo();
    let (code, stderr) = run(&repo, &[], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("local run"), "{stderr}");
}

fn model_shown(config: &str, env: &[(&str, &str)]) -> String {
    let repo = Repo::new(&[(".config/bork.json", config)]);
    let mut command = bork();
    command.args(["config", "--repo"]).arg(repo.path());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.lines()
        .find(|line| line.starts_with("llm.model "))
        .unwrap_or_else(|| panic!("{text}"))
        .to_owned()
}

#[test]
fn the_default_model_follows_the_provider() {
    let anthropic = model_shown(r#"{"llm": {"provider": "anthropic"}}"#, &[]);
    assert!(
        anthropic.contains("\"claude-sonnet-4-5\"") && anthropic.contains("# default"),
        "{anthropic}"
    );
    let openai = model_shown(r#"{"llm": {"provider": "openai"}}"#, &[]);
    assert!(openai.contains("\"gpt-4.1\""), "{openai}");
    let from_env = model_shown("{}", &[("BORK_LLM_PROVIDER", "anthropic")]);
    assert!(from_env.contains("\"claude-sonnet-4-5\""), "{from_env}");
    // A model that is set is kept, whatever the provider.
    let set = model_shown(
        r#"{"llm": {"provider": "anthropic", "model": "claude-opus-4-1"}}"#,
        &[],
    );
    assert!(
        set.contains("\"claude-opus-4-1\"") && set.contains(".config/bork.json"),
        "{set}"
    );
}
