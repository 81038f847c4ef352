//! A new team's first minutes: `bork-ci init` on a fresh repository of each toolchain, then
//! `bork-ci doctor`, then `bork-ci run`, with the toolchain images built offline from Debian's
//! packages (`ci/build-images.sh examples`) as the judges' image.

use std::path::Path;
use std::process::Command;

use serde_json::json;

use crate::support::{Repo, TestContext};

/// Builds the example toolchain images once.
pub fn ensure_example_images() {
    static BUILT: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/build-images.sh");
        let output = Command::new(script)
            .arg("examples")
            .output()
            .expect("build-images runs");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    });
}

/// `bork-ci VERB --repo REPO extra...` in the context, to its end.
fn verb(ctx: &TestContext<'_>, repo: &Repo, verb: &str, extra: &[&str]) -> std::process::Output {
    ctx.command(verb)
        .arg("--repo")
        .arg(repo.path())
        .args(extra)
        .output()
        .unwrap_or_else(|error| panic!("bork-ci {verb}: {error}"))
}

fn fresh(files: &[(&str, &str)]) -> Repo {
    let repo = Repo::new(files);
    std::fs::set_permissions(repo.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    repo
}

fn init_doctor_run(repo: &Repo, image: &str, answer: serde_json::Value, toolchain: &str) {
    let mut ctx = TestContext::on(repo);
    ctx.docker(image).scripted(&[answer]);
    // A setup that fetches from a registry: a runner behind a TLS-inspecting proxy names the CA
    // it trusts, and bork-ci hands it to the setup job.
    if let Some(ca) = std::env::var_os("SSL_CERT_FILE") {
        ctx.env("SSL_CERT_FILE", ca);
    }
    let init = verb(&ctx, repo, "init", &["--ci", "github"]);
    let stdout = String::from_utf8_lossy(&init.stdout);
    assert_eq!(
        init.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&init.stderr)
    );
    assert!(stdout.contains(&format!("checker for {toolchain}")), "{stdout}");
    for path in [
        ".config/bork.json",
        "checks/bork-check",
        ".github/workflows/bork-ci.yml",
    ] {
        assert!(repo.path().join(path).is_file(), "{path}");
    }
    assert!(
        stdout.contains("commit them: git add .config/bork.json"),
        "{stdout}"
    );
    // Run again: what is as init writes it stays, an edited file is kept and listed (never
    // replaced without --force), a missing one is added.
    let config = repo.read(".config/bork.json");
    let edited = config.replace("\"max-iterations\": 5", "\"max-iterations\": 4");
    assert_ne!(edited, config);
    repo.write(".config/bork.json", &edited);
    std::fs::remove_file(repo.path().join("checks/bork-check")).expect("remove");
    let again = verb(&ctx, repo, "init", &["--ci", "github"]);
    let said = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(0), "{said}");
    assert!(
        said.contains("kept .config/bork.json") && said.contains("--force"),
        "{said}"
    );
    assert!(said.contains("wrote checks/bork-check"), "{said}");
    assert!(said.contains("unchanged .github/workflows/bork-ci.yml"), "{said}");
    assert_eq!(
        repo.read(".config/bork.json"),
        edited,
        "an edited config is never replaced"
    );
    assert!(repo.path().join("checks/bork-check").is_file());
    repo.write(".config/bork.json", &config);
    repo.commit("bork-ci init");
    let doctor = verb(&ctx, repo, "doctor", &[]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(
        doctor.status.code(),
        Some(0),
        "{report}{}",
        String::from_utf8_lossy(&doctor.stderr)
    );
    for check in ["git", "config", "model", "endpoint", "engine", "preflight"] {
        assert!(
            report
                .lines()
                .any(|line| line.starts_with("ok") && line.contains(check)),
            "{check}: {report}"
        );
    }
    let run = ctx.run(&[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.report["status"], "converged");
}

#[test]
fn init_doctor_and_run_on_a_fresh_python_repository() {
    ensure_example_images();
    let repo = fresh(&[
        ("specs/greet.md", "greet(name) returns 'hello, NAME!'.\n"),
        ("greet/__init__.py", "def greet(name):\n    return 'hi'\n"),
        (
            "tests/test_greet.py",
            "from greet import greet\n\ndef test_greet():\n    assert greet('bo') == 'hello, bo!'\n",
        ),
        ("pyproject.toml", "[project]\nname = 'greet'\nversion = '0.1.0'\n"),
    ]);
    init_doctor_run(
        &repo,
        "bork-ci-example/python:bookworm",
        json!({"create-or-update": {"greet/__init__.py": "def greet(name):\n    return f'hello, {name}!'\n"}}),
        "python",
    );
}

/// A src layout whose `pyproject.toml` declares a dependency (from PyPI) and a test extra: the
/// setup `init` writes installs both into the dependency cache (never the project itself), and
/// the checker puts `src` on the path, so the tests import the package from the tree.
#[test]
fn init_doctor_and_run_on_a_python_src_layout_with_dependencies() {
    ensure_example_images();
    let repo = fresh(&[
        ("specs/greet.md", "greet(name) returns 'hello, NAME!'.\n"),
        (
            "src/greet/__init__.py",
            "import six\n\ndef greet(name):\n    return six.ensure_str('hi')\n",
        ),
        (
            "tests/test_greet.py",
            "import iniconfig\nfrom greet import greet\n\ndef test_greet():\n    assert greet('bo') == 'hello, bo!'\n",
        ),
        (
            "pyproject.toml",
            "[project]\nname = 'greet'\nversion = '0.1.0'\ndependencies = ['six==1.16.0']\n\n[project.optional-dependencies]\ntest = ['iniconfig==2.0.0']\n",
        ),
    ]);
    init_doctor_run(
        &repo,
        "bork-ci-example/python:bookworm",
        json!({"create-or-update": {"src/greet/__init__.py": "import six\n\ndef greet(name):\n    return six.ensure_str(f'hello, {name}!')\n"}}),
        "python",
    );
}

#[test]
fn init_doctor_and_run_on_a_fresh_rust_repository() {
    ensure_example_images();
    let repo = fresh(&[
        ("specs/double.md", "double(x) returns twice x.\n"),
        (
            "Cargo.toml",
            "[package]\nname = \"demo\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
        ),
        (
            "Cargo.lock",
            "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n\n[[package]]\nname = \"demo\"\nversion = \"0.1.0\"\n",
        ),
        (
            "src/lib.rs",
            "pub fn double(x: u32) -> u32 { x }\n\n#[test]\nfn doubles() { assert_eq!(double(2), 4); }\n",
        ),
    ]);
    init_doctor_run(
        &repo,
        "bork-ci-example/rust:bookworm",
        json!({"create-or-update": {"src/lib.rs": "pub fn double(x: u32) -> u32 { x * 2 }\n\n#[test]\nfn doubles() { assert_eq!(double(2), 4); }\n"}}),
        "rust",
    );
}

#[test]
fn init_doctor_and_run_on_a_fresh_node_repository() {
    ensure_example_images();
    let test = "const assert = require('node:assert');\nconst { triple } = require('./src/index.js');\nassert.strictEqual(triple(2), 6);\nconsole.log('ok');\n";
    let repo = fresh(&[
        ("specs/triple.md", "triple(x) returns three times x.\n"),
        (
            "package.json",
            "{\"name\": \"triple\", \"version\": \"1.0.0\", \"private\": true, \"scripts\": {\"test\": \"node test.js\"}}\n",
        ),
        // A lock file: init's setup runs `npm ci` (into the dependency cache, never the checkout).
        (
            "package-lock.json",
            "{\"name\": \"triple\", \"version\": \"1.0.0\", \"lockfileVersion\": 3, \"requires\": true, \"packages\": {\"\": {\"name\": \"triple\", \"version\": \"1.0.0\"}}}\n",
        ),
        ("src/index.js", "exports.triple = (x) => x;\n"),
        ("test.js", test),
    ]);
    init_doctor_run(
        &repo,
        "bork-ci-example/tools:bookworm",
        json!({"create-or-update": {"src/index.js": "exports.triple = (x) => x * 3;\n"}}),
        "node",
    );
}

#[test]
fn init_doctor_and_run_on_a_fresh_go_repository() {
    ensure_example_images();
    let repo = fresh(&[
        ("specs/half.md", "Half(x) returns x divided by two.\n"),
        ("go.mod", "module example.com/half\n\ngo 1.19\n"),
        ("half.go", "package half\n\nfunc Half(x int) int { return x }\n"),
        (
            "half_test.go",
            "package half\n\nimport \"testing\"\n\nfunc TestHalf(t *testing.T) {\n\tif Half(8) != 4 {\n\t\tt.Fatalf(\"Half(8) = %d\", Half(8))\n\t}\n}\n",
        ),
    ]);
    init_doctor_run(
        &repo,
        "bork-ci-example/tools:bookworm",
        json!({"create-or-update": {"half.go": "package half\n\nfunc Half(x int) int { return x / 2 }\n"}}),
        "go",
    );
}

#[test]
fn init_doctor_and_run_on_a_fresh_make_repository() {
    ensure_example_images();
    let repo = fresh(&[
        ("specs/answer.md", "answer.txt holds 42.\n"),
        (
            "Makefile",
            "all:\n\ttrue\n\ncheck:\n\tgrep -qx 42 src/answer.txt\n",
        ),
        ("src/answer.txt", "41\n"),
    ]);
    init_doctor_run(
        &repo,
        "bork-ci-example/tools:bookworm",
        json!({"create-or-update": {"src/answer.txt": "42\n"}}),
        "make",
    );
    let checker = repo.read("checks/bork-check");
    assert!(checker.contains("make check"), "{checker}");
}

#[test]
fn doctor_names_what_is_missing_with_the_fix() {
    let repo = fresh(&[
        ("specs/a.md", "a\n"),
        (
            ".config/bork.json",
            r#"{"correctness-checker": "checks/none", "llm": {"provider": "openai"}}"#,
        ),
    ]);
    let ctx = TestContext::on(&repo);
    let doctor = verb(&ctx, &repo, "doctor", &[]);
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(2), "{report}");
    assert!(
        report.lines().any(|line| line.starts_with("FAIL")
            && line.contains("model")
            && line.contains("OPENAI_API_KEY")),
        "{report}"
    );
    assert!(
        report
            .lines()
            .any(|line| line.starts_with("FAIL") && line.contains("checker") && line.contains("fix")),
        "{report}"
    );
}

/// The doctor's preflight says what a run would do: a checker that starts and fails because of
/// the code passes (the run asks the model to fix it), one that cannot start fails with the fix.
#[test]
fn doctor_passes_a_checker_failing_on_the_code_and_fails_one_that_cannot_start() {
    for (checker, expected, words) in [
        (
            "#!/bin/sh\necho 'SyntaxError: app.py line 1' >&2\nexit 2\n",
            "ok",
            "starts but fails",
        ),
        ("#!/bin/sh\nexec no-such-tool-here\n", "FAIL", "fix"),
    ] {
        let repo = fresh(&[
            ("specs/a.md", "a\n"),
            ("check", checker),
            (
                ".config/bork.json",
                r#"{"correctness-checker": "check", "llm": {"provider": "scripted"}}"#,
            ),
        ]);
        let mut ctx = TestContext::on(&repo);
        ctx.env("BORK_SANDBOX_KIND", "none")
            .scripted(&[serde_json::json!({})]);
        let doctor = verb(&ctx, &repo, "doctor", &[]);
        let report = String::from_utf8_lossy(&doctor.stdout);
        assert!(
            report
                .lines()
                .any(|line| line.starts_with(expected) && line.contains("preflight") && line.contains(words)),
            "{expected}: {report}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_reads_what_the_github_token_may_do() {
    let sim = crate::ghsim::GithubSim::start();
    sim.setup("t-bot-doctor").await;
    let checkout = sim.checkout();
    for (token, pushes) in [("t-bot-doctor", true), ("t-bob", false)] {
        let mut ctx = TestContext::on(&checkout);
        ctx.github(&sim, token).scripted(&[json!({})]);
        let mut command = ctx.command("doctor");
        command.arg("--repo").arg(checkout.path());
        let doctor = tokio::task::spawn_blocking(move || command.output().expect("doctor"))
            .await
            .expect("join");
        let report = String::from_utf8_lossy(&doctor.stdout);
        let line = report
            .lines()
            .find(|line| line.contains("github"))
            .unwrap_or_else(|| panic!("{report}{}", String::from_utf8_lossy(&doctor.stderr)));
        if pushes {
            assert!(line.starts_with("ok") && line.contains("may push"), "{report}");
        } else {
            assert!(
                line.starts_with("FAIL") && line.contains("contents: write"),
                "{report}"
            );
        }
    }
}

#[test]
fn init_never_writes_through_a_symlink_or_over_a_file() {
    let outside = tempfile::tempdir().expect("outside");
    let repo = fresh(&[("Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")]);
    std::os::unix::fs::symlink(outside.path(), repo.path().join("checks")).expect("symlink");
    let ctx = TestContext::on(&repo);
    for extra in [&[][..], &["--force"][..]] {
        let out = verb(&ctx, &repo, "init", extra);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("symbolic link"),
            "{extra:?}"
        );
        assert!(
            std::fs::read_dir(outside.path())
                .expect("outside")
                .next()
                .is_none()
        );
        assert!(
            !repo.path().join(".config/bork.json").exists(),
            "nothing was written"
        );
    }
}

/// `--provider` names the provider the config writes; without it, `openai`.
#[test]
fn init_writes_the_provider_it_is_given() {
    for (extra, provider) in [
        (&[][..], "openai"),
        (&["--provider", "anthropic"][..], "anthropic"),
    ] {
        let repo = fresh(&[("Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")]);
        let ctx = TestContext::on(&repo);
        let out = verb(&ctx, &repo, "init", extra);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let config: serde_json::Value =
            serde_json::from_str(&repo.read(".config/bork.json")).expect("config");
        assert_eq!(config["llm"]["provider"], provider);
    }
    let repo = fresh(&[]);
    let ctx = TestContext::on(&repo);
    let out = verb(&ctx, &repo, "init", &["--provider", "nonesuch"]);
    assert_eq!(out.status.code(), Some(2));
}

/// `init --ci github` names the action by this version's release tag, never a placeholder; with
/// `--pin` by the commit that tag points at (asked of GitHub's API, here the simulator), the
/// version as a comment. A tag GitHub does not have is an error and nothing is written.
#[tokio::test(flavor = "multi_thread")]
async fn init_names_the_action_by_its_release_tag_or_pins_the_tags_commit() {
    let version = env!("CARGO_PKG_VERSION");
    let sim = crate::ghsim::GithubSim::start();
    // The action's repository, its release tag on a commit of its own.
    let action = fresh(&[("action.yml", "name: bork-ci\n")]);
    action.commit("the action");
    let tagged = action.git(&["rev-parse", "HEAD"]).trim().to_owned();
    action.git(&["tag", &format!("v{version}")]);
    action.write("action.yml", "name: bork-ci (later)\n");
    action.commit("later");
    sim.call(
        "POST",
        "/_sim/repos",
        Some(serde_json::json!({"owner": "bork-ci", "name": "bork-ci", "source_path": action.path(), "default_branch": "main"})),
        None,
    )
    .await;
    let uses = |repo: &Repo| {
        repo.read(".github/workflows/bork-ci.yml")
            .lines()
            .find(|line| line.contains("uses: bork-ci/bork-ci@"))
            .map(str::trim)
            .map(str::to_owned)
            .unwrap_or_default()
    };
    let repo = fresh(&[("Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")]);
    let ctx = TestContext::on(&repo);
    let out = verb(&ctx, &repo, "init", &["--ci", "github"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        uses(&repo).ends_with(&format!("uses: bork-ci/bork-ci@v{version}")),
        "{}",
        uses(&repo)
    );

    let repo = fresh(&[("Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")]);
    let mut ctx = TestContext::on(&repo);
    ctx.env("GITHUB_API_URL", &sim.url);
    let out = verb(&ctx, &repo, "init", &["--ci", "github", "--pin"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        uses(&repo).ends_with(&format!("uses: bork-ci/bork-ci@{tagged} # v{version}")),
        "{}",
        uses(&repo)
    );
    assert!(!repo.read(".github/workflows/bork-ci.yml").contains("@0000000000"));

    // No such release on GitHub: exit 2, nothing written.
    sim.call("DELETE", "/_sim/repos/bork-ci/bork-ci", None, None)
        .await;
    let repo = fresh(&[("Cargo.toml", "[package]\nname = \"x\"\nversion = \"0.1.0\"\n")]);
    let mut ctx = TestContext::on(&repo);
    ctx.env("GITHUB_API_URL", &sim.url);
    let out = verb(&ctx, &repo, "init", &["--ci", "github", "--pin"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--pin"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!repo.path().join(".config/bork.json").exists());
}

/// `doctor`'s endpoint line asks the models list of the configured base URL (no paid call): a
/// base URL without its API path is a failure naming the 404, a refused key names the key, and
/// the right one passes. Every line is whole, however long.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_probes_the_models_list_of_the_configured_endpoint() {
    let fake = crate::fake_llm::FakeLlm::openai(Vec::new()).await;
    let repo = fresh(&[("specs/a.md", "a\n")]);
    repo.write(".config/bork.json", r#"{"sandbox": {"kind": "none"}}"#);
    repo.commit("a repository");
    for (base, key, ok, words) in [
        (
            fake.base_url(),
            crate::fake_llm::TEST_KEY,
            true,
            "answers (HTTP 200",
        ),
        (fake.url.clone(), crate::fake_llm::TEST_KEY, false, "HTTP 404"),
        (fake.base_url(), "sk-wrong", false, "the key is refused"),
    ] {
        let mut ctx = TestContext::on(&repo);
        ctx.env("BORK_LLM_PROVIDER", "openai")
            .env("BORK_LLM_MODEL", "gpt-4.1")
            .env("BORK_LLM_BASE_URL", &base)
            .env("OPENAI_API_KEY", key);
        let out = verb(&ctx, &repo, "doctor", &[]);
        let report = String::from_utf8_lossy(&out.stdout);
        let line = report
            .lines()
            .find(|line| line.contains("endpoint"))
            .unwrap_or_else(|| panic!("{report}"));
        assert_eq!(line.starts_with("ok"), ok, "{base}: {line}");
        assert!(line.contains(words), "{base}: {line}");
        assert!(!report.contains(crate::fake_llm::TEST_KEY), "{report}");
    }
}
