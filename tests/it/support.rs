//! Shared fixtures: real git repositories in temp dirs, and the `bork-ci` binary with a clean
//! environment.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

/// A git repository in a temp dir whose `main` holds the initial files.
pub struct Repo {
    pub dir: tempfile::TempDir,
}

impl Repo {
    /// A repository already in `dir` (a clone, say).
    pub fn at(dir: tempfile::TempDir) -> Self {
        Repo { dir }
    }

    /// Creates the repository with `files` committed on `main`.
    pub fn new(files: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let repo = Repo { dir };
        repo.git(&["init", "-q", "-b", "main"]);
        for (path, contents) in files {
            repo.write(path, contents);
        }
        repo.commit("initial");
        repo
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file (creating directories); `#!` files become executable.
    pub fn write(&self, path: &str, contents: &str) {
        let full = self.path().join(path);
        std::fs::create_dir_all(full.parent().expect("parent")).expect("mkdir");
        std::fs::write(&full, contents).expect("write");
        if contents.starts_with("#!") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&full, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        }
    }

    pub fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.path().join(path)).unwrap_or_else(|_| "<absent>".into())
    }

    pub fn git(&self, args: &[&str]) -> String {
        git(self.path(), args)
    }

    pub fn commit(&self, message: &str) {
        self.git(&["add", "-A"]);
        self.git(&["commit", "-q", "--allow-empty", "-m", message]);
    }

    /// A hash of every file under `.git`, to show it was not touched.
    pub fn git_dir_hash(&self) -> String {
        tree_hash(&self.path().join(".git"))
    }
}

/// `git ARGS` in `dir` as a test author (no global configuration needed): its stdout; panics
/// with git's stderr when it fails.
pub fn git(dir: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&git_bytes(dir, args)).into_owned()
}

/// [`git`], stdout as bytes.
pub fn git_bytes(dir: &Path, args: &[&str]) -> Vec<u8> {
    let output = Command::new("git")
        .args(["-c", "user.name=test", "-c", "user.email=test@example.invalid"])
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// sha256 over the paths, modes and contents of every entry below `root` (links not followed).
pub fn tree_hash(root: &Path) -> String {
    let mut entries = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in read.flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("stat");
            let key = path
                .strip_prefix(root)
                .expect("prefix")
                .to_string_lossy()
                .into_owned();
            if meta.is_dir() {
                stack.push(path);
                entries.insert(key, b"dir".to_vec());
            } else if meta.file_type().is_symlink() {
                entries.insert(
                    key,
                    std::fs::read_link(&path)
                        .expect("link")
                        .to_string_lossy()
                        .as_bytes()
                        .to_vec(),
                );
            } else {
                entries.insert(key, std::fs::read(&path).unwrap_or_default());
            }
        }
    }
    let mut hasher = Sha256::new();
    for (key, value) in entries {
        hasher.update(key.as_bytes());
        hasher.update([0]);
        hasher.update(&value);
        hasher.update([0]);
    }
    hex::encode(hasher.finalize())
}

/// Variables passed from the test process to the binary: what it needs to find programs and
/// temporary space, nothing that could change bork-ci's behaviour.
const PASSED_THROUGH: &[&str] = &["PATH", "TMPDIR", "LANG", "LC_ALL"];

/// A home directory shared by the binaries started without a [`TestContext`]: empty, so no
/// `~/.agent-artifacts`, git configuration or cache of the machine leaks in.
fn shared_home() -> &'static Path {
    static HOME: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        tempfile::Builder::new()
            .prefix("bork-ci-test-home-")
            .tempdir()
            .expect("test home")
    })
    .path()
}

/// The `bork-ci` binary in a hermetic environment: only [`PASSED_THROUGH`] variables from the
/// test process (no `HOME`, `DOCKER_HOST`, `AGENT_ARTIFACT_DIR`, `BORK_*`, `GITHUB_*`, CI or
/// cloud variables), an empty home, and the local sandbox unless a test asks for Docker. An
/// engine other than the default socket is named by `BORK_TEST_DOCKER_HOST`.
pub fn bork() -> Command {
    bork_in(shared_home())
}

fn bork_in(home: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bork-ci"));
    command.env_clear();
    for name in PASSED_THROUGH {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    if let Some(host) = std::env::var_os("BORK_TEST_DOCKER_HOST").filter(|host| !host.is_empty()) {
        command.env("DOCKER_HOST", host);
    }
    command.env("HOME", home);
    command.env("BORK_SANDBOX_KIND", "none");
    command
}

/// One test's world, in uv's shape: a repository, a scratch directory outside it (home, report,
/// scripts), the environment and arguments the binary gets, and one way to run it.
pub struct TestContext<'r> {
    pub repo: &'r Repo,
    pub scratch: tempfile::TempDir,
    env: Vec<(String, String)>,
}

impl<'r> TestContext<'r> {
    /// A context around `repo`.
    pub fn on(repo: &'r Repo) -> Self {
        let scratch = tempfile::tempdir().expect("scratch");
        std::fs::create_dir_all(scratch.path().join("home")).expect("home");
        Self {
            repo,
            scratch,
            env: Vec::new(),
        }
    }

    /// Sets a variable for every command of this context.
    pub fn env(&mut self, name: &str, value: impl AsRef<std::ffi::OsStr>) -> &mut Self {
        self.env
            .push((name.to_owned(), value.as_ref().to_string_lossy().into_owned()));
        self
    }

    /// A scripted model that gives these answers in turn.
    pub fn scripted(&mut self, answers: &[serde_json::Value]) -> &mut Self {
        let path = script(self.scratch.path(), answers);
        self.env("BORK_LLM_PROVIDER", "scripted")
            .env("BORK_LLM_SCRIPT", path)
    }

    /// The fake OpenAI-compatible server as the model (`openai`, `gpt-4.1`, the test key).
    pub fn openai(&mut self, fake: &crate::fake_llm::FakeLlm) -> &mut Self {
        self.env("BORK_LLM_PROVIDER", "openai")
            .env("BORK_LLM_MODEL", "gpt-4.1")
            .env("BORK_LLM_BASE_URL", fake.base_url())
            .env("OPENAI_API_KEY", crate::fake_llm::TEST_KEY)
    }

    /// Runs as a GitHub Actions job of `acme/widgets` on the simulator, pushed to `main`, with
    /// this token; outputs and the step summary go to the scratch directory.
    pub fn github(&mut self, sim: &crate::ghsim::GithubSim, token: &str) -> &mut Self {
        for (name, value) in sim.actions_env(token, self.scratch.path()) {
            self.env(name, value);
        }
        self
    }

    /// As a job started by `event` (`GITHUB_EVENT_NAME`) with this payload.
    pub fn event(&mut self, name: &str, payload: &serde_json::Value) -> &mut Self {
        let path = self.scratch.path().join(format!("event-{name}.json"));
        std::fs::write(&path, payload.to_string()).expect("write the event payload");
        self.env("GITHUB_EVENT_NAME", name).env("GITHUB_EVENT_PATH", path)
    }

    /// Steps run in containers on the test's Docker engine (`BORK_TEST_DOCKER_HOST`, or the
    /// default socket), with this image for the checker and the verifier; artifacts go to the
    /// scratch directory.
    pub fn docker(&mut self, image: &str) -> &mut Self {
        let artifacts = self.scratch_file("artifacts");
        self.env("BORK_SANDBOX_KIND", "docker")
            .env("BORK_SANDBOX_IMAGE", image)
            .env("BORK_SANDBOX_PULL", "never")
            .env("BORK_SANDBOX_ARTIFACT_DIR", artifacts)
    }

    /// A file in the scratch directory (outside the repository).
    pub fn scratch_file(&self, name: &str) -> PathBuf {
        self.scratch.path().join(name)
    }

    /// Where `run` asks for the report.
    pub fn report_path(&self) -> PathBuf {
        self.scratch.path().join("report.json")
    }

    /// `bork-ci <verb>` for this context, hermetic, with its environment (not yet `--repo`).
    pub fn command(&self, verb: &str) -> Command {
        let mut command = bork_in(&self.scratch.path().join("home"));
        command.arg(verb);
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    /// `bork-ci run --repo REPO --report REPORT extra...`, with no report left from before.
    fn run_command(&self, extra: &[&str]) -> Command {
        let _ = std::fs::remove_file(self.report_path());
        let mut command = self.command("run");
        command
            .arg("--repo")
            .arg(self.repo.path())
            .arg("--report")
            .arg(self.report_path())
            .args(extra);
        command
    }

    /// `bork-ci run --repo REPO --report REPORT extra...` to its end.
    pub fn run(&self, extra: &[&str]) -> Outcome {
        Outcome::of(self.run_command(extra), Some(&self.report_path()))
    }

    /// Starts `bork-ci run` and returns at once, for a test that acts while it runs (a
    /// reviewer approving while the job waits).
    pub fn spawn(&self, extra: &[&str]) -> Running {
        let mut command = self.run_command(extra);
        command
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        Running {
            child: command.spawn().expect("bork-ci starts"),
            report: self.report_path(),
        }
    }

    /// [`TestContext::run`] off the async runtime, so fakes on it keep answering.
    pub async fn run_async(&self, extra: &[&str]) -> Outcome {
        let command = self.run_command(extra);
        let report = self.report_path();
        tokio::task::spawn_blocking(move || Outcome::of(command, Some(&report)))
            .await
            .expect("join")
    }
}

/// How one command of the binary ended: exit code, output, and the report it wrote (`Null`
/// when it wrote none).
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub report: serde_json::Value,
    pub report_text: String,
}

/// A `bork-ci run` started by [`TestContext::spawn`].
pub struct Running {
    child: std::process::Child,
    report: PathBuf,
}

impl Running {
    /// The pid of the `bork-ci` process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for it to end, off the async runtime.
    pub async fn finish(self) -> Outcome {
        let Running { child, report } = self;
        tokio::task::spawn_blocking(move || {
            let output = child.wait_with_output().expect("bork-ci ends");
            Outcome::from_output(output, Some(&report))
        })
        .await
        .expect("join")
    }
}

impl Outcome {
    /// Runs `command` to completion.
    pub fn of(mut command: Command, report_path: Option<&Path>) -> Self {
        Self::from_output(command.output().expect("bork-ci runs"), report_path)
    }

    fn from_output(output: std::process::Output, report_path: Option<&Path>) -> Self {
        let report_text = report_path
            .and_then(|path| std::fs::read_to_string(path).ok())
            .unwrap_or_default();
        Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            report: if report_text.is_empty() {
                serde_json::Value::Null
            } else {
                serde_json::from_str(&report_text).expect("the report is JSON")
            },
            report_text,
        }
    }
}

/// Writes a scripted-model file with these answers and returns its path.
pub fn script(dir: &Path, answers: &[serde_json::Value]) -> PathBuf {
    let path = dir.join("answers.json");
    std::fs::write(&path, serde_json::json!({ "answers": answers }).to_string()).expect("write script");
    path
}

/// The spec of the app repositories ([`app_repo`]).
pub const SPEC: &str = "---\nkind: spec\nid: app\ndescription: the app\n---\nThe app prints DONE.\n";

/// A repository whose checker (`check.sh`) is clean once `src/app.txt` contains `DONE`, with a
/// pending spec change, and `config` as `.config/bork.json`.
pub fn app_repo(config: &str) -> Repo {
    let repo = Repo::new(&[
        ("specs/app.md", SPEC),
        ("src/app.txt", "nothing yet\n"),
        ("check.sh", &checker_wanting("src/app.txt", "DONE")),
        (".config/bork.json", config),
    ]);
    repo.write("specs/app.md", &format!("{SPEC}It also prints DONE twice.\n"));
    repo
}

/// A checker that is clean when `file` contains `needle`, and reports a finding otherwise.
pub fn checker_wanting(file: &str, needle: &str) -> String {
    format!(
        "#!/bin/sh\nif grep -q '{needle}' '{file}' 2>/dev/null; then\n  echo '{{\"per_file_findings\":[],\"overall_findings\":[]}}'\n  exit 0\nfi\necho '{{\"per_file_findings\":[{{\"provenance\":\"code-review\",\"file\":\"{file}\",\"finding\":\"{file} lacks {needle}\"}}],\"overall_findings\":[]}}'\nexit 1\n"
    )
}

/// Reads the JSON report at `path`.
pub fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report written")).expect("report is JSON")
}
