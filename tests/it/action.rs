//! `action.yml` run as the Actions runner runs a composite action: each of `runs.steps` in order,
//! `if:` evaluated, `${{ }}` expressions substituted, `run:` scripts under
//! `bash --noprofile --norc -eo pipefail`, and the `GITHUB_OUTPUT`, `GITHUB_ENV`, `GITHUB_PATH`
//! and `GITHUB_STEP_SUMMARY` files honoured between steps. `uses:` steps (the cache) cannot run
//! here; the action never needs them on the paths under test, and the runner records each one it
//! skips. The release assets come from a local HTTP server through the `release-url` input; the
//! action under test is a byte-for-byte copy of the repository's, with one version pinned in its
//! `ci/release-sums.txt`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::ghsim::GithubSim;
use crate::support::{Repo, git, script, tree_hash};

const BOT_TOKEN: &str = "t-bot-canary-5150";
const LLM_KEY: &str = "sk-action-canary-2231";
const VERSION: &str = "0.0.1-test.1";

/// The runner's names for this machine, and the release asset built for it.
fn runner_platform() -> (&'static str, String) {
    match std::env::consts::ARCH {
        "aarch64" => ("ARM64", "bork-ci-aarch64-unknown-linux-musl.tar.gz".into()),
        _ => ("X64", "bork-ci-x86_64-unknown-linux-musl.tar.gz".into()),
    }
}

/// A release of the bork-ci binary under test: `(asset name, tarball bytes, sha256)`.
fn release_asset(dir: &Path) -> (String, Vec<u8>, String) {
    let (_, asset) = runner_platform();
    let stage = dir.join("stage");
    std::fs::create_dir_all(&stage).expect("stage");
    std::fs::copy(env!("CARGO_BIN_EXE_bork-ci"), stage.join("bork-ci")).expect("copy binary");
    let tarball = dir.join(&asset);
    let status = Command::new("tar")
        .arg("-czf")
        .arg(&tarball)
        .arg("-C")
        .arg(&stage)
        .arg("bork-ci")
        .status()
        .expect("tar");
    assert!(status.success());
    let bytes = std::fs::read(&tarball).expect("tarball");
    let sum = hex::encode(Sha256::digest(&bytes));
    (asset, bytes, sum)
}

/// The action directory under test: the repository's `action.yml` as it is, and its
/// `ci/release-sums.txt` with `pins` appended.
fn action_copy(dir: &Path, pins: &[String]) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let action = dir.join("action");
    std::fs::create_dir_all(action.join("ci")).expect("mkdir");
    std::fs::copy(root.join("action.yml"), action.join("action.yml")).expect("action.yml");
    let mut sums = std::fs::read_to_string(root.join("ci/release-sums.txt")).expect("release-sums.txt");
    for pin in pins {
        sums.push_str(pin);
        sums.push('\n');
    }
    std::fs::write(action.join("ci/release-sums.txt"), sums).expect("sums");
    action
}

/// A static file server on 127.0.0.1 that records every path asked for.
struct Assets {
    url: String,
    requested: Arc<Mutex<Vec<String>>>,
}

fn serve(files: BTreeMap<String, Vec<u8>>) -> Assets {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let requested = Arc::new(Mutex::new(Vec::new()));
    let log = requested.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut request_line = String::new();
            let _ = reader.read_line(&mut request_line);
            loop {
                let mut header = String::new();
                if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                    break;
                }
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("").to_owned();
            log.lock().expect("log").push(path.clone());
            let (status, body) = match files.get(&path) {
                Some(body) => ("200 OK", body.clone()),
                None => ("404 Not Found", b"not found\n".to_vec()),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    Assets { url, requested }
}

/// What one run of the action left behind.
#[derive(Debug)]
struct Outcome {
    /// Exit code of the step that failed, or 0.
    code: i32,
    /// Every step's stdout and stderr, in order.
    log: String,
    /// `steps.<id>.outputs`.
    steps: BTreeMap<String, BTreeMap<String, String>>,
    /// The action's own `outputs`.
    outputs: BTreeMap<String, String>,
    /// Each step not run, and why.
    skipped: Vec<String>,
    summary: String,
}

/// The runner: the action's directory, its `with:` inputs, the `github` context, and the job's
/// environment (the variables the runner sets for every step).
struct StepRunner {
    action_dir: PathBuf,
    workspace: PathBuf,
    temp: PathBuf,
    with: BTreeMap<String, String>,
    github: BTreeMap<String, String>,
    env: BTreeMap<String, String>,
}

/// The `KEY=value` and `KEY<<DELIMITER` lines of an environment file.
fn parse_env_file(text: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some((name, delimiter)) = line.split_once("<<") {
            let mut value = Vec::new();
            for inner in lines.by_ref() {
                if inner == delimiter {
                    break;
                }
                value.push(inner);
            }
            pairs.push((name.to_owned(), value.join("\n")));
        } else if let Some((name, value)) = line.split_once('=') {
            pairs.push((name.to_owned(), value.to_owned()));
        }
    }
    pairs
}

struct Context<'a> {
    inputs: &'a BTreeMap<String, String>,
    github: &'a BTreeMap<String, String>,
    env: &'a BTreeMap<String, String>,
    steps: &'a BTreeMap<String, BTreeMap<String, String>>,
    temp: &'a Path,
}

impl Context<'_> {
    /// One operand: a `'literal'` or a context path.
    fn value(&self, operand: &str) -> String {
        let operand = operand.trim();
        if let Some(literal) = operand
            .strip_prefix('\'')
            .and_then(|rest| rest.strip_suffix('\''))
        {
            return literal.replace("''", "'");
        }
        let parts: Vec<&str> = operand.split('.').collect();
        let found = match parts.as_slice() {
            ["inputs", name] => self.inputs.get(*name).cloned(),
            ["github", name] => self.github.get(*name).cloned(),
            ["env", name] => self.env.get(*name).cloned(),
            ["runner", "temp"] => Some(self.temp.display().to_string()),
            ["steps", id, "outputs", name] => self
                .steps
                .get(*id)
                .and_then(|outputs| outputs.get(*name))
                .cloned(),
            _ => panic!("expression not supported by this runner: {operand}"),
        };
        found.unwrap_or_default()
    }

    /// `a || b`, `a == 'x'`, `a != 'x'` and plain operands: what the action uses. A comparison
    /// yields `true` or the empty string (false).
    fn eval(&self, expression: &str) -> String {
        let operands: Vec<&str> = expression.split("||").collect();
        let mut last = String::new();
        for operand in operands {
            last = if let Some((left, right)) = operand.split_once("==") {
                if self.value(left) == self.value(right) {
                    "true".into()
                } else {
                    String::new()
                }
            } else if let Some((left, right)) = operand.split_once("!=") {
                if self.value(left) != self.value(right) {
                    "true".into()
                } else {
                    String::new()
                }
            } else {
                self.value(operand)
            };
            if !last.is_empty() {
                return last;
            }
        }
        last
    }

    /// Substitutes every `${{ expression }}` in `text`.
    fn substitute(&self, text: &str) -> String {
        let mut out = String::new();
        let mut rest = text;
        while let Some(start) = rest.find("${{") {
            out.push_str(&rest[..start]);
            let end = rest[start..].find("}}").expect("closing }}") + start;
            out.push_str(&self.eval(&rest[start + 3..end]));
            rest = &rest[end + 2..];
        }
        out.push_str(rest);
        out
    }
}

impl StepRunner {
    fn run(&self) -> Outcome {
        let text = std::fs::read_to_string(self.action_dir.join("action.yml")).expect("action.yml");
        let action: Value = serde_norway::from_str(&text).expect("action.yml is YAML");
        assert_eq!(action["runs"]["using"], "composite");
        let mut env = self.env.clone();
        env.insert("GITHUB_ACTION_PATH".into(), self.action_dir.display().to_string());
        env.insert("RUNNER_TEMP".into(), self.temp.display().to_string());
        let summary_file = self.temp.join("_step_summary");
        let empty = BTreeMap::new();
        let no_steps = BTreeMap::new();
        // Inputs: `with:` values, else the defaults (which may use the github context).
        let mut inputs = BTreeMap::new();
        for (name, spec) in action["inputs"].as_object().expect("inputs") {
            let value = match self.with.get(name) {
                Some(value) => value.clone(),
                None => {
                    let context = Context {
                        inputs: &empty,
                        github: &self.github,
                        env: &env,
                        steps: &no_steps,
                        temp: &self.temp,
                    };
                    context.substitute(spec["default"].as_str().unwrap_or(""))
                }
            };
            inputs.insert(name.clone(), value);
        }
        let mut steps: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        let mut path_prefix: Vec<String> = Vec::new();
        let mut log = String::new();
        let mut skipped = Vec::new();
        let mut code = 0;
        for (index, step) in action["runs"]["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .enumerate()
        {
            let id = step["id"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| format!("__{index}"));
            let name = step["name"].as_str().unwrap_or(&id).to_owned();
            let context = Context {
                inputs: &inputs,
                github: &self.github,
                env: &env,
                steps: &steps,
                temp: &self.temp,
            };
            if let Some(condition) = step["if"].as_str() {
                let condition = condition.trim();
                let condition = condition
                    .strip_prefix("${{")
                    .and_then(|inner| inner.strip_suffix("}}"))
                    .unwrap_or(condition);
                if context.eval(condition).is_empty() {
                    skipped.push(format!("{name}: `if: {condition}` is false"));
                    continue;
                }
            }
            if let Some(uses) = step["uses"].as_str() {
                skipped.push(format!("{name}: `uses: {uses}` cannot run outside GitHub"));
                continue;
            }
            assert_eq!(step["shell"], "bash", "{name}: only bash steps");
            let script = context.substitute(step["run"].as_str().expect("run"));
            let mut step_env = env.clone();
            for (key, value) in step["env"].as_object().into_iter().flatten() {
                step_env.insert(key.clone(), context.substitute(value.as_str().unwrap_or("")));
            }
            let files: BTreeMap<&str, PathBuf> = [
                ("GITHUB_OUTPUT", self.temp.join(format!("_output_{index}"))),
                ("GITHUB_ENV", self.temp.join(format!("_env_{index}"))),
                ("GITHUB_PATH", self.temp.join(format!("_path_{index}"))),
            ]
            .into_iter()
            .collect();
            for (variable, file) in &files {
                std::fs::write(file, "").expect("command file");
                step_env.insert((*variable).into(), file.display().to_string());
            }
            step_env.insert("GITHUB_STEP_SUMMARY".into(), summary_file.display().to_string());
            let base_path = std::env::var("PATH").unwrap_or_default();
            let mut search = path_prefix.clone();
            search.reverse();
            search.push(step_env.get("PATH").cloned().unwrap_or(base_path));
            step_env.insert("PATH".into(), search.join(":"));
            let script_file = self.temp.join(format!("_step_{index}.sh"));
            std::fs::write(&script_file, &script).expect("script");
            let output = Command::new("bash")
                .args(["--noprofile", "--norc", "-eo", "pipefail"])
                .arg(&script_file)
                .env_clear()
                .envs(&step_env)
                .current_dir(&self.workspace)
                .output()
                .expect("bash runs");
            log.push_str(&format!("--- step {name}\n"));
            log.push_str(&String::from_utf8_lossy(&output.stdout));
            log.push_str(&String::from_utf8_lossy(&output.stderr));
            let read = |variable: &str| std::fs::read_to_string(&files[variable]).unwrap_or_default();
            steps.insert(
                id.clone(),
                parse_env_file(&read("GITHUB_OUTPUT")).into_iter().collect(),
            );
            for (key, value) in parse_env_file(&read("GITHUB_ENV")) {
                env.insert(key, value);
            }
            path_prefix.extend(read("GITHUB_PATH").lines().map(str::to_owned));
            if !output.status.success() {
                code = output.status.code().unwrap_or(-1);
                break;
            }
        }
        let context = Context {
            inputs: &inputs,
            github: &self.github,
            env: &env,
            steps: &steps,
            temp: &self.temp,
        };
        let outputs = action["outputs"]
            .as_object()
            .expect("outputs")
            .iter()
            .map(|(name, spec)| {
                (
                    name.clone(),
                    context.substitute(spec["value"].as_str().unwrap_or("")),
                )
            })
            .collect();
        Outcome {
            code,
            log,
            steps,
            outputs,
            skipped,
            summary: std::fs::read_to_string(&summary_file).unwrap_or_default(),
        }
    }
}

/// A runner for the action in `action_dir` on `workspace`, as on a Linux runner of this machine's
/// architecture, with the action at ref `action_ref`.
fn runner(action_dir: &Path, workspace: &Path, temp: &Path, action_ref: &str) -> StepRunner {
    let (arch, _) = runner_platform();
    let mut env = BTreeMap::new();
    for name in ["HOME", "PATH", "TMPDIR"] {
        if let Ok(value) = std::env::var(name) {
            env.insert(name.to_owned(), value);
        }
    }
    for (name, value) in [
        ("CI", "true"),
        ("GITHUB_ACTIONS", "true"),
        // As on GitHub's runner: empty in the `run` steps of a composite action
        // (actions/runner#2473, #2525); the `github` context has them (below).
        ("GITHUB_ACTION_REF", ""),
        ("GITHUB_ACTION_REPOSITORY", ""),
        ("RUNNER_OS", "Linux"),
        ("RUNNER_ARCH", arch),
        ("BORK_SANDBOX_KIND", "none"),
    ] {
        env.insert(name.to_owned(), value.to_owned());
    }
    env.insert("GITHUB_WORKSPACE".into(), workspace.display().to_string());
    std::fs::create_dir_all(temp).expect("runner temp");
    StepRunner {
        action_dir: action_dir.to_owned(),
        workspace: workspace.to_owned(),
        temp: temp.to_owned(),
        with: BTreeMap::new(),
        github: BTreeMap::from([
            ("action_ref".to_owned(), action_ref.to_owned()),
            ("action_repository".to_owned(), "bork-ci/bork-ci".to_owned()),
        ]),
        env,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn action_installs_the_pinned_release_and_delivers_a_push_on_the_simulator() {
    let sim = GithubSim::start();
    sim.setup(BOT_TOKEN).await;
    let scratch = tempfile::tempdir().expect("tempdir");

    // A developer pushes a spec change (and the repository's config) to main.
    let dev = scratch.path().join("dev");
    sim.clone_into(&dev);
    let before = git(&dev, &["rev-parse", "HEAD"]).trim().to_owned();
    std::fs::write(dev.join("specs/widget.md"), "A widget is blue and round.\n").expect("spec");
    std::fs::create_dir_all(dev.join(".config")).expect("mkdir");
    std::fs::write(dev.join(".config/bork.json"), r#"{"max-iterations": 3}"#).expect("config");
    git(&dev, &["add", "-A"]);
    git(&dev, &["commit", "-q", "-m", "widgets are round"]);
    let after = git(&dev, &["rev-parse", "HEAD"]).trim().to_owned();
    let authority = sim.url.trim_start_matches("http://");
    git(
        &dev,
        &[
            "push",
            "-q",
            &format!("http://x-access-token:t-carol@{authority}/acme/widgets.git"),
            "HEAD:main",
        ],
    );

    // The workflow's checkout of that push, and its event.
    let workspace = scratch.path().join("workspace");
    sim.clone_into(&workspace);
    assert_eq!(git(&workspace, &["rev-parse", "HEAD"]).trim(), after);
    let event = scratch.path().join("event.json");
    std::fs::write(
        &event,
        json!({"ref": "refs/heads/main", "before": before, "after": after,
               "repository": {"full_name": "acme/widgets", "default_branch": "main"}})
        .to_string(),
    )
    .expect("event");

    // The release: assets on a local server, their sums pinned in the action.
    let (asset, bytes, sum) = release_asset(scratch.path());
    let assets = serve(BTreeMap::from([(format!("/download/v{VERSION}/{asset}"), bytes)]));
    let action = action_copy(scratch.path(), &[format!("{VERSION} {asset} {sum}")]);
    let answers = script(
        scratch.path(),
        &[json!({"create-or-update": {"src/widget.txt": "colour = blue\nshape = round\n"}})],
    );

    let temp = scratch.path().join("runner-temp");
    let mut runner = runner(&action, &workspace, &temp, &format!("v{VERSION}"));
    for (name, value) in [
        ("GITHUB_REPOSITORY", "acme/widgets"),
        ("GITHUB_API_URL", sim.url.as_str()),
        ("GITHUB_SERVER_URL", sim.url.as_str()),
        ("GITHUB_SHA", after.as_str()),
        ("GITHUB_REF", "refs/heads/main"),
        ("GITHUB_EVENT_NAME", "push"),
        ("BORK_LLM_PROVIDER", "scripted"),
    ] {
        runner.env.insert(name.into(), value.into());
    }
    runner
        .env
        .insert("GITHUB_EVENT_PATH".into(), event.display().to_string());
    runner
        .env
        .insert("BORK_LLM_SCRIPT".into(), answers.display().to_string());
    runner.github.insert("token".into(), BOT_TOKEN.into());
    runner.github.insert("server_url".into(), sim.url.clone());
    let sarif = temp.join("bork-ci.sarif");
    for (name, value) in [
        ("api-key", LLM_KEY.to_owned()),
        ("release-url", format!("{}/download/v{VERSION}", assets.url)),
        ("sarif", sarif.display().to_string()),
    ] {
        runner.with.insert(name.into(), value);
    }

    let outcome = runner.run();
    assert_eq!(outcome.code, 0, "{}", outcome.log);

    // Installed from the release, checked against the pinned sum.
    assert_eq!(
        assets.requested.lock().expect("log").clone(),
        vec![format!("/download/v{VERSION}/{asset}")]
    );
    assert_eq!(outcome.steps["install"]["method"], "release", "{outcome:#?}");
    assert!(
        outcome.log.contains(&format!("sha256 {sum} verified")),
        "{}",
        outcome.log
    );
    assert!(
        outcome
            .skipped
            .iter()
            .any(|note| note.starts_with("Build bork-ci from source")),
        "{:?}",
        outcome.skipped
    );

    // bork-ci ran on the push with the repository's own config (no flag overrode it).
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(temp.join("bork-ci-report.json")).expect("report"))
            .expect("report JSON");
    assert_eq!(report["max-iterations"], 3, "{report:#}");
    assert_eq!(outcome.outputs["status"], "converged", "{}", outcome.log);
    assert_eq!(outcome.outputs["iterations"], "1");
    let number: u64 = outcome.outputs["pr-number"].parse().expect("pr-number");
    assert!(
        outcome.outputs["pr-url"].ends_with(&format!("/pull/{number}")),
        "{:?}",
        outcome.outputs
    );
    assert_eq!(outcome.outputs["sarif-file"], sarif.display().to_string());
    let sarif_json: Value =
        serde_json::from_str(&std::fs::read_to_string(&sarif).expect("SARIF written")).expect("SARIF JSON");
    assert_eq!(sarif_json["version"], "2.1.0");
    assert!(outcome.summary.contains("converged"), "{}", outcome.summary);

    // The result pull request is on the simulator.
    let state = sim.state().await;
    let all = crate::ghsim::pulls_of(&state);
    let result = all
        .iter()
        .find(|pull| pull["number"].as_u64() == Some(number))
        .unwrap_or_else(|| panic!("PR #{number} in {all:#?}"));
    assert_eq!(
        result["base"]["ref"].as_str().or(result["base"].as_str()),
        Some("main")
    );

    // The key was masked before use and appears nowhere else.
    assert!(outcome.log.contains(&format!("::add-mask::{LLM_KEY}")));
    for line in outcome.log.lines().filter(|line| line.contains(LLM_KEY)) {
        assert_eq!(line, format!("::add-mask::{LLM_KEY}"), "{}", outcome.log);
    }
}

#[test]
fn action_refuses_a_release_asset_whose_sum_differs() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let (asset, mut bytes, sum) = release_asset(scratch.path());
    bytes.push(0);
    let assets = serve(BTreeMap::from([(format!("/v{VERSION}/{asset}"), bytes)]));
    let action = action_copy(scratch.path(), &[format!("{VERSION} {asset} {sum}")]);
    let repo = Repo::new(&[("specs/app.md", "The app says hello.\n")]);
    let before = tree_hash(repo.path());
    let temp = scratch.path().join("runner-temp");
    let mut runner = runner(&action, repo.path(), &temp, &format!("v{VERSION}"));
    runner
        .with
        .insert("release-url".into(), format!("{}/v{VERSION}", assets.url));

    let outcome = runner.run();
    assert_eq!(outcome.code, 2, "{}", outcome.log);
    let error = outcome
        .log
        .lines()
        .find(|line| line.starts_with("::error"))
        .unwrap_or_else(|| panic!("{}", outcome.log));
    assert!(
        error.contains("checksum mismatch") && error.contains(&sum),
        "{error}"
    );
    assert!(error.contains("release-url"), "names the fix: {error}");
    assert!(
        !outcome.steps.contains_key("run"),
        "bork-ci never ran: {outcome:#?}"
    );
    assert!(!temp.join(&asset).exists(), "the bad download is removed");
    assert_eq!(tree_hash(repo.path()), before, "the repository is unchanged");
}

/// A repository whose spec wants DONE in `src/app.txt`, with an executable checker that says so
/// and the scripted model, one iteration.
fn checked_repo() -> Repo {
    let repo = Repo::new(&[
        ("specs/app.md", "The app says DONE.\n"),
        ("src/app.txt", "not yet\n"),
        (
            "check.sh",
            &crate::support::checker_wanting("src/app.txt", "DONE"),
        ),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "check.sh", "max-iterations": 1, "llm": {"provider": "scripted"}}"#,
        ),
    ]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        repo.path().join("check.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .expect("chmod");
    repo.commit("a checker");
    repo
}

/// A run that needs a human leaves the step green by default (`fail-on: error`), with the
/// outcome in the outputs; `fail-on: error,needs-human` makes the same run fail the step.
#[test]
fn action_fail_on_decides_whether_an_outcome_fails_the_step() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let (asset, bytes, sum) = release_asset(scratch.path());
    let assets = serve(BTreeMap::from([(format!("/v{VERSION}/{asset}"), bytes)]));
    let action = action_copy(scratch.path(), &[format!("{VERSION} {asset} {sum}")]);
    for (fail_on, code) in [("", 0), ("error,needs-human", 1)] {
        let repo = checked_repo();
        let answers = script(
            scratch.path(),
            &[json!({"create-or-update": {"src/app.txt": "still not\n"}})],
        );
        let temp = scratch.path().join(format!("runner-temp-{code}"));
        let mut runner = runner(&action, repo.path(), &temp, &format!("v{VERSION}"));
        runner
            .with
            .insert("release-url".into(), format!("{}/v{VERSION}", assets.url));
        if !fail_on.is_empty() {
            runner.with.insert("fail-on".into(), fail_on.into());
        }
        runner
            .env
            .insert("BORK_LLM_SCRIPT".into(), answers.display().to_string());
        runner.github.insert("token".into(), String::new());
        let outcome = runner.run();
        assert_eq!(outcome.code, code, "fail-on {fail_on:?}: {}", outcome.log);
        assert_eq!(outcome.outputs["status"], "needs-human", "{}", outcome.log);
        assert_eq!(outcome.outputs["exit-code"], "1", "{}", outcome.log);
    }
}

#[test]
fn action_at_any_commit_installs_the_newest_pinned_release() {
    // The action used at a commit (not a tag) that pins an older and a newer release: the
    // newer is installed and verified, no `version` needed.
    let scratch = tempfile::tempdir().expect("tempdir");
    let (asset, bytes, sum) = release_asset(scratch.path());
    let assets = serve(BTreeMap::from([(format!("/v{VERSION}/{asset}"), bytes)]));
    let older = format!("0.0.1 {asset} {}", "0".repeat(64));
    let action = action_copy(scratch.path(), &[older, format!("{VERSION} {asset} {sum}")]);
    let repo = Repo::new(&[("specs/app.md", "The app says hello.\n")]);
    let temp = scratch.path().join("runner-temp");
    let mut runner = runner(
        &action,
        repo.path(),
        &temp,
        "0123456789abcdef0123456789abcdef01234567",
    );
    runner
        .with
        .insert("release-url".into(), format!("{}/v{VERSION}", assets.url));
    let outcome = runner.run();
    assert_eq!(outcome.steps["install"]["method"], "release", "{}", outcome.log);
    assert_eq!(outcome.steps["install"]["version"], VERSION, "{}", outcome.log);
    assert!(
        outcome.log.contains("the newest release this action pins"),
        "{}",
        outcome.log
    );
}

#[test]
fn action_refuses_an_unknown_runner_architecture() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let assets = serve(BTreeMap::new());
    let action = action_copy(scratch.path(), &[]);
    let repo = Repo::new(&[("specs/app.md", "The app says hello.\n")]);
    let before = tree_hash(repo.path());
    let mut runner = runner(
        &action,
        repo.path(),
        &scratch.path().join("t"),
        &format!("v{VERSION}"),
    );
    runner.env.insert("RUNNER_ARCH".into(), "ARM".into());
    runner.with.insert("release-url".into(), assets.url.clone());

    let outcome = runner.run();
    assert_eq!(outcome.code, 2, "{}", outcome.log);
    let errors: Vec<&str> = outcome
        .log
        .lines()
        .filter(|line| line.starts_with("::error"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", outcome.log);
    assert!(
        errors[0].contains("RUNNER_ARCH=ARM") && errors[0].contains("X64 or ARM64"),
        "{}",
        errors[0]
    );
    assert!(
        assets.requested.lock().expect("log").is_empty(),
        "nothing downloaded"
    );
    assert_eq!(tree_hash(repo.path()), before);
}

/// Any ref that is not a pinned release builds from the action's own source with `cargo
/// install --locked --path`. Building bork-ci again here would take minutes, so `cargo` is a
/// stand-in that records its arguments and installs the binary under test into `--root`.
#[test]
fn action_builds_from_source_at_an_unreleased_ref() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let action = action_copy(scratch.path(), &[]);
    let tools = scratch.path().join("tools");
    std::fs::create_dir_all(&tools).expect("mkdir");
    let record = scratch.path().join("cargo-args");
    std::fs::write(
        tools.join("cargo"),
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\nwhile [ $# -gt 0 ]; do [ \"$1\" = --root ] && root=$2; shift; done\nmkdir -p \"$root/bin\" && cp '{}' \"$root/bin/bork-ci\"\n",
            record.display(),
            env!("CARGO_BIN_EXE_bork-ci")
        ),
    )
    .expect("cargo stand-in");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(tools.join("cargo"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let repo = Repo::new(&[("specs/app.md", "The app says hello.\n"), ("src/app.txt", "hi\n")]);
    repo.write("specs/app.md", "The app says hello, loudly.\n");
    repo.commit("louder");
    let answers = script(
        scratch.path(),
        &[json!({"create-or-update": {"src/app.txt": "HELLO\n"}})],
    );
    let temp = scratch.path().join("runner-temp");
    let mut runner = runner(&action, repo.path(), &temp, "main");
    let path = format!("{}:{}", tools.display(), runner.env["PATH"]);
    runner.env.insert("PATH".into(), path);
    runner.env.insert("BORK_LLM_PROVIDER".into(), "scripted".into());
    runner
        .env
        .insert("BORK_LLM_SCRIPT".into(), answers.display().to_string());
    // No repository and no token: a local run.
    runner.github.insert("token".into(), String::new());

    let outcome = runner.run();
    assert_eq!(outcome.code, 0, "{}", outcome.log);
    assert_eq!(outcome.steps["install"]["method"], "source");
    // Never from a cache: nothing another workflow could have written runs with the key.
    assert!(
        !outcome.skipped.iter().any(|note| note.contains("actions/cache")),
        "{:?}",
        outcome.skipped
    );
    let args = std::fs::read_to_string(&record).expect("cargo was called");
    let args: Vec<&str> = args.lines().collect();
    assert_eq!(
        args,
        vec![
            "install",
            "--locked",
            "--path",
            action.to_str().expect("utf8"),
            "--root",
            temp.join("bork-ci-source").to_str().expect("utf8"),
        ]
    );
    assert_eq!(outcome.outputs["status"], "converged", "{}", outcome.log);
    assert_eq!(repo.read("src/app.txt"), "HELLO\n");
}

#[test]
fn release_follow_up_pins_the_sums_then_writes_that_commit_into_the_copy_me_workflows() {
    // The release workflow's follow-up, as its two jobs run it: ci/pin-release.sh with the
    // release's own .sha256 files, then (once that lands) ci/pin-copy-me.sh with the commit.
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = dir.path().join("action");
    std::fs::create_dir_all(copy.join("ci/workflows")).expect("mkdir");
    let templates = [
        "gitlab-ci.yml",
        "gitlab-ci-dind.yml",
        "buildkite.yml",
        "Jenkinsfile",
        "toolchain.Dockerfile",
    ];
    for name in ["pin-release.sh", "pin-copy-me.sh", "release-sums.txt"]
        .iter()
        .chain(&templates)
    {
        std::fs::copy(root.join("ci").join(name), copy.join("ci").join(name)).expect("copy");
    }
    let workflows: Vec<String> = std::fs::read_dir(root.join("ci/workflows"))
        .expect("workflows")
        .filter_map(Result::ok)
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yml"))
        .collect();
    assert!(workflows.len() >= 3, "{workflows:?}");
    for name in &workflows {
        std::fs::copy(
            root.join("ci/workflows").join(name),
            copy.join("ci/workflows").join(name),
        )
        .expect("copy");
    }
    let dist = dir.path().join("dist");
    std::fs::create_dir_all(&dist).expect("mkdir");
    let assets = [
        "bork-ci-x86_64-unknown-linux-musl.tar.gz",
        "bork-ci-aarch64-unknown-linux-musl.tar.gz",
        "bork-ci-x86_64-apple-darwin.tar.gz",
        "bork-ci-aarch64-apple-darwin.tar.gz",
    ];
    for (index, asset) in assets.iter().enumerate() {
        let sum = format!("{index}").repeat(64);
        std::fs::write(dist.join(format!("{asset}.sha256")), format!("{sum}  {asset}\n")).expect("write");
    }
    let script = |name: &str, args: &[&str]| {
        Command::new("bash")
            .arg(copy.join("ci").join(name))
            .args(args)
            .output()
            .expect("bash")
    };
    let pinned = script("pin-release.sh", &["v9.9.9", &dist.display().to_string()]);
    assert!(
        pinned.status.success(),
        "{}",
        String::from_utf8_lossy(&pinned.stderr)
    );
    let sums = std::fs::read_to_string(copy.join("ci/release-sums.txt")).expect("sums");
    for (index, asset) in assets.iter().enumerate() {
        assert!(
            sums.lines()
                .any(|line| line == format!("9.9.9 {asset} {}", format!("{index}").repeat(64))),
            "{sums}"
        );
    }

    let commit = "0123456789abcdef0123456789abcdef01234567";
    let written = script("pin-copy-me.sh", &[commit]);
    assert!(
        written.status.success(),
        "{}",
        String::from_utf8_lossy(&written.stderr)
    );
    for name in &workflows {
        let text = std::fs::read_to_string(copy.join("ci/workflows").join(name)).expect("read");
        let uses: Vec<&str> = text
            .lines()
            .filter(|line| line.contains("bork-ci/bork-ci@"))
            .collect();
        assert!(!uses.is_empty(), "{name}");
        for line in uses {
            assert!(
                line.trim_start()
                    .trim_start_matches("- ")
                    .starts_with(&format!("uses: bork-ci/bork-ci@{commit} # installs v9.9.9")),
                "{name}: {line}"
            );
        }
        assert!(
            !text.contains("0000000000000000000000000000000000000000"),
            "{name}"
        );
    }
    let refused = script("pin-copy-me.sh", &["main"]);
    assert_eq!(refused.status.code(), Some(2));
}

/// A repository checked out into a folder of the workspace (`actions/checkout` with `path:`):
/// the `working-directory` input runs bork-ci there.
#[test]
fn action_runs_bork_ci_in_its_working_directory() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let (asset, bytes, sum) = release_asset(scratch.path());
    let assets = serve(BTreeMap::from([(format!("/v{VERSION}/{asset}"), bytes)]));
    let action = action_copy(scratch.path(), &[format!("{VERSION} {asset} {sum}")]);
    let repo = checked_repo();
    // The workspace holds the repository as `app/`.
    let workspace = scratch.path().join("workspace");
    std::fs::create_dir_all(&workspace).expect("workspace");
    std::os::unix::fs::symlink(repo.path(), workspace.join("app")).expect("link");
    let answers = script(
        scratch.path(),
        &[json!({"create-or-update": {"src/app.txt": "DONE\n"}})],
    );
    for (input, code) in [("app", 0), ("missing", 2)] {
        let temp = scratch.path().join(format!("runner-temp-{input}"));
        let mut runner = runner(&action, &workspace, &temp, &format!("v{VERSION}"));
        runner
            .with
            .insert("release-url".into(), format!("{}/v{VERSION}", assets.url));
        runner.with.insert("working-directory".into(), input.into());
        runner
            .env
            .insert("BORK_LLM_SCRIPT".into(), answers.display().to_string());
        runner.github.insert("token".into(), String::new());
        let outcome = runner.run();
        assert_eq!(outcome.code, code, "{input}: {}", outcome.log);
        if code == 0 {
            assert_eq!(outcome.outputs["status"], "converged", "{}", outcome.log);
            assert_eq!(repo.read("src/app.txt"), "DONE\n");
        } else {
            assert!(
                outcome.log.contains("working-directory 'missing'"),
                "{}",
                outcome.log
            );
        }
    }
}

/// `gh attestation verify` failing: the step says why (a network failure names the documented
/// opt-out, `verify-attestation: false`), and with the opt-out the pinned sum alone decides.
#[test]
fn action_says_why_the_attestation_did_not_verify_and_honours_the_opt_out() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let (asset, bytes, sum) = release_asset(scratch.path());
    // The default release location: <server>/<action repository>/releases/download/v<version>.
    let assets = serve(BTreeMap::from([(
        format!("/bork-ci/bork-ci/releases/download/v{VERSION}/{asset}"),
        bytes,
    )]));
    let action = action_copy(scratch.path(), &[format!("{VERSION} {asset} {sum}")]);
    let repo = Repo::new(&[("specs/app.md", "The app says hello.\n")]);
    // A `gh` whose attestation check fails the way its error says.
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    let cases = [
        (
            "Post \"https://api.github.com/graphql\": dial tcp: lookup api.github.com: no such host",
            "true",
            Some("could not reach GitHub"),
        ),
        (
            "HTTP 403: API rate limit exceeded for installation",
            "true",
            Some("rate limit"),
        ),
        (
            "verification failed: no matching attestations",
            "true",
            Some("does not verify"),
        ),
        ("dial tcp: no such host", "false", None),
    ];
    for (index, (gh_error, verify, expected)) in cases.into_iter().enumerate() {
        std::fs::write(
            bin.join("gh"),
            format!("#!/bin/sh\necho '{gh_error}' >&2\nexit 1\n"),
        )
        .expect("gh");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(bin.join("gh"), std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let temp = scratch.path().join(format!("runner-temp-{index}"));
        let mut runner = runner(&action, repo.path(), &temp, &format!("v{VERSION}"));
        runner.env.insert("GITHUB_SERVER_URL".into(), assets.url.clone());
        let path = format!("{}:{}", bin.display(), runner.env["PATH"]);
        runner.env.insert("PATH".into(), path);
        runner.with.insert("github-token".into(), "t-attest".into());
        runner.with.insert("verify-attestation".into(), verify.into());
        let outcome = runner.run();
        let error = outcome.log.lines().find(|line| line.starts_with("::error"));
        match expected {
            Some(words) => {
                assert_eq!(outcome.code, 2, "{gh_error}: {}", outcome.log);
                let error = error.unwrap_or_else(|| panic!("{}", outcome.log));
                assert!(error.contains(words), "{gh_error}: {error}");
                if words == "could not reach GitHub" {
                    assert!(error.contains("verify-attestation: false"), "{error}");
                }
                assert!(!temp.join(&asset).exists(), "the unverified download is removed");
            }
            None => {
                assert!(
                    outcome.steps.contains_key("run"),
                    "installed and ran: {}",
                    outcome.log
                );
                assert!(
                    outcome.log.contains("verify-attestation: false"),
                    "the skip is said: {}",
                    outcome.log
                );
            }
        }
    }
}
