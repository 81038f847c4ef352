//! The GitHub simulator harness: starts `../shared/github-sim/ghsim.py` on a free port for one
//! test, sets it up through its control API, and clones its repositories.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};

/// One running simulator; dropped with the test.
pub struct GithubSim {
    child: Child,
    pub url: String,
    http: bork_ci::net::reqwest::Client,
    _data: tempfile::TempDir,
}

impl GithubSim {
    pub fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let data = tempfile::tempdir().expect("temp dir");
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/github-sim/ghsim.py");
        let mut child = Command::new("python3")
            .args([script, "--port", "0", "--watch-stdin", "--data-dir"])
            .arg(data.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start ghsim");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("banner");
        let url = line
            .trim()
            .strip_prefix("ghsim listening on ")
            .expect("ghsim banner")
            .to_owned();
        GithubSim {
            child,
            url,
            http: bork_ci::net::client_builder().build().expect("HTTP client"),
            _data: data,
        }
    }

    /// A control or REST call; `token` authenticates as that user.
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>, token: Option<&str>) -> Value {
        let method = bork_ci::net::reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = token {
            request = request.header("authorization", format!("token {token}"));
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("simulator answers");
        let text = response.text().await.expect("body");
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    }

    /// `acme/widgets` with a spec and some code, and the users every test needs.
    pub async fn setup(&self, bot_token: &str) {
        self.call(
            "POST",
            "/_sim/repos",
            Some(json!({
                "owner": "acme", "name": "widgets", "default_branch": "main",
                "protected_branches": ["main"],
                "files": {
                    "README.md": "widgets\n",
                    "specs/widget.md": "A widget is blue.\n",
                    "src/widget.txt": "colour = red\n",
                }
            })),
            None,
        )
        .await;
        self.call(
            "POST",
            "/_sim/users",
            Some(json!([
                {"login": "bork-bot", "token": bot_token, "type": "User", "permissions": {"acme/widgets": "write"}},
                {"login": "alice", "token": "t-alice", "permissions": {"acme/widgets": "write"}},
                {"login": "carol", "token": "t-carol", "permissions": {"acme/widgets": "admin"}},
                {"login": "bob", "token": "t-bob", "permissions": {"acme/widgets": "read"}},
                {"login": "approver[bot]", "token": "t-app", "type": "Bot", "permissions": {"acme/widgets": "write"}}
            ])),
            None,
        )
        .await;
    }

    /// The URL `git clone` takes for `repo` (`owner/name`), authenticated with `token`.
    pub fn clone_url(&self, repo: &str, token: &str) -> String {
        let authority = self.url.trim_start_matches("http://");
        format!("http://x-access-token:{token}@{authority}/{repo}.git")
    }

    /// Clones `acme/widgets` into `dir` (as alice, who can read).
    pub fn clone_into(&self, dir: &Path) {
        let authority = self.url.trim_start_matches("http://");
        let status = Command::new("git")
            .args(["clone", "--quiet"])
            .arg(format!(
                "http://x-access-token:t-alice@{authority}/acme/widgets.git"
            ))
            .arg(dir)
            .status()
            .expect("git clone");
        assert!(status.success());
    }

    /// A fresh clone of `acme/widgets` (main) as a test repository (git clones into an empty
    /// directory, so the temp dir is the repository's root).
    pub fn checkout(&self) -> crate::support::Repo {
        let dir = tempfile::tempdir().expect("tempdir");
        self.clone_into(dir.path());
        crate::support::Repo::at(dir)
    }

    /// The simulator's whole state.
    pub async fn state(&self) -> Value {
        self.call("GET", "/_sim/state", None, None).await
    }

    /// What a GitHub Actions runner sets for a `push` to `main` of `acme/widgets`, pointed at
    /// this simulator, with `token` as `GITHUB_TOKEN` and the output files in `scratch`.
    pub fn actions_env(&self, token: &str, scratch: &Path) -> Vec<(&'static str, String)> {
        vec![
            ("GITHUB_ACTIONS", "true".into()),
            ("GITHUB_REPOSITORY", "acme/widgets".into()),
            ("GITHUB_API_URL", self.url.clone()),
            ("GITHUB_SERVER_URL", self.url.clone()),
            ("GITHUB_TOKEN", token.into()),
            ("GITHUB_REF", "refs/heads/main".into()),
            ("GITHUB_EVENT_NAME", "push".into()),
            (
                "GITHUB_OUTPUT",
                scratch.join("github-output").display().to_string(),
            ),
            (
                "GITHUB_STEP_SUMMARY",
                scratch.join("step-summary").display().to_string(),
            ),
        ]
    }

    /// Every request the simulator saw.
    pub async fn requests(&self, query: &str) -> Value {
        self.call("GET", &format!("/_sim/requests{query}"), None, None)
            .await
    }
}

impl Drop for GithubSim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The pull requests of `acme/widgets` in a state the simulator returned (its repos are a map
/// or a list, depending on the version).
pub fn pulls_of(state: &Value) -> Vec<Value> {
    pulls_in(state, "acme/widgets")
}

/// The pull requests of `repo` (`owner/name`) in a state the simulator returned.
pub fn pulls_in(state: &Value, repo: &str) -> Vec<Value> {
    state["repos"][repo]["pulls"]
        .as_array()
        .cloned()
        .or_else(|| {
            state["repos"]
                .as_array()
                .and_then(|repos| repos.iter().find(|r| r["full_name"] == repo))
                .and_then(|entry| entry["pulls"].as_array().cloned())
        })
        .unwrap_or_default()
}
