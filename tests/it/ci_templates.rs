//! The pipeline files `bork-ci init --ci gitlab|buildkite` writes, run as those CI systems run
//! them, on this machine and without their servers. A fresh Python repository on the GitHub
//! simulator gets `init`'s files (the only hand edit: the toolchain image, one built offline from
//! Debian's packages, since no registry can be pulled here); a push to a feature branch changes
//! its spec; the job then runs with the fake OpenAI model and delivers its pull request.
//!
//! - GitLab (`.gitlab-ci.yml`, the Docker-in-Docker variant), as its Docker executor runs a job:
//!   the job's `image:` (the release image, built from the static binary under the name the
//!   template uses), its `docker:dind` service started as `docker:dind`'s entrypoint sets it up
//!   from `DOCKER_TLS_CERTDIR` (TLS on 2376, a CA and server and client certificates, the client's
//!   in `/certs/client`), the job's and GitLab's predefined variables, a full clone checked out
//!   detached at the commit, and the script run by `sh` in `/builds/<group>/<project>`. What
//!   differs, because this machine cannot do it: the service runs Debian's dockerd (the engines
//!   matrix's image) instead of the `docker:dind` image pulled by digest, it is reached at
//!   127.0.0.1 (the job uses the host's network to reach the local test servers, as a runner's
//!   `network_mode = "host"` does, and `docker` names the loopback), and the toolchain image is
//!   loaded into it instead of pulled.
//! - Buildkite (`.buildkite/pipeline.yml` and `.config/bork-ci.Dockerfile`), as its agent runs a
//!   command step: the command with Buildkite's `$$` escapes resolved, by `bash -e -c` in a
//!   checkout detached at the commit, with `BUILDKITE_*` set, on an agent whose engine is this
//!   machine's. `BORK_CI_DOCKER_ARGS` (the template's documented hook) gives the container the
//!   host's network and the test servers' URLs.
//!
//! Both need the static build: `ci/static-smoke.sh` builds it and runs them
//! (`BORK_STATIC_BINARY=... cargo test --locked --test it ci_templates -- --ignored`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use crate::fake_llm::{FakeLlm, Reply, TEST_KEY};
use crate::ghsim::GithubSim;
use crate::static_build::run;
use crate::support::git;

const BOT_TOKEN: &str = "t-bork-bot";
/// The toolchain image: Debian's python3 and pytest, built offline by ci/build-images.sh.
const TOOLCHAIN: &str = "bork-ci-example/python:bookworm";

/// The name the templates give bork-ci's image, built here from the static binary.
fn release_image() -> String {
    let tag = format!("ghcr.io/bork-ci/bork-ci:{}", env!("CARGO_PKG_VERSION"));
    crate::static_build::build_release_image(&tag);
    tag
}

fn ensure_toolchain_image() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/build-images.sh");
    run(Command::new(script).arg("python").env("BORK_REBUILD_IMAGES", "0"));
}

/// `acme/app` on the simulator after a team's first steps: `init`'s files committed on `main`,
/// then a push of `feature` that changes the spec.
struct Project {
    sim: GithubSim,
    /// The commit before the push (`main`) and the pushed one (`feature`).
    before: String,
    sha: String,
    _work: tempfile::TempDir,
}

impl Project {
    async fn new(ci: &str) -> Project {
        let sim = GithubSim::start();
        sim.call(
            "POST",
            "/_sim/repos",
            Some(json!({
                "owner": "acme", "name": "app", "default_branch": "main",
                "files": {
                    "specs/widget.md": "The widget's colour is blue.\n",
                    "src/app/__init__.py": "",
                    "src/app/widget.py": "COLOUR = \"red\"\n",
                    "tests/test_widget.py": "from app.widget import COLOUR\n\n\ndef test_colour():\n    assert COLOUR == \"blue\"\n",
                    "pyproject.toml": "[project]\nname = \"app\"\nversion = \"0.1.0\"\n",
                }
            })),
            None,
        )
        .await;
        sim.call(
            "POST",
            "/_sim/users",
            Some(json!([
                {"login": "bork-bot", "token": BOT_TOKEN, "type": "User", "permissions": {"acme/app": "write"}},
                {"login": "alice", "token": "t-alice", "permissions": {"acme/app": "write"}}
            ])),
            None,
        )
        .await;
        let work = tempfile::tempdir().expect("tempdir");
        let dir = work.path().join("app");
        run(Command::new("git")
            .args(["clone", "--quiet", &sim.clone_url("acme/app", "t-alice")])
            .arg(&dir));
        // The team's first steps: `init` for its CI, the image chosen, committed and pushed.
        let init = Command::new(env!("CARGO_BIN_EXE_bork-ci"))
            .args(["init", "--toolchain", "python", "--ci", ci])
            .current_dir(&dir)
            .env_remove("BORK_LOG")
            .output()
            .expect("bork-ci init");
        let said = String::from_utf8_lossy(&init.stdout).into_owned();
        assert!(
            init.status.success(),
            "{said}{}",
            String::from_utf8_lossy(&init.stderr)
        );
        choose_image(&dir);
        git(&dir, &["add", "-A"]);
        git(&dir, &["commit", "-q", "-m", "bork-ci init"]);
        git(&dir, &["push", "-q", "origin", "main"]);
        let before = git(&dir, &["rev-parse", "HEAD"]).trim().to_owned();
        git(&dir, &["checkout", "-q", "-b", "feature"]);
        std::fs::write(
            dir.join("specs/widget.md"),
            "The widget's colour is blue, as its test says.\n",
        )
        .expect("spec");
        git(&dir, &["commit", "-q", "-am", "Say where the colour is checked"]);
        git(&dir, &["push", "-q", "origin", "feature"]);
        let sha = git(&dir, &["rev-parse", "HEAD"]).trim().to_owned();
        Project {
            sim,
            before,
            sha,
            _work: work,
        }
    }

    /// A fresh checkout at the pushed commit, detached, as a CI system makes one.
    fn checkout_into(&self, dir: &Path) {
        run(Command::new("git")
            .args(["clone", "--quiet", &self.sim.clone_url("acme/app", "t-alice")])
            .arg(dir));
        git(dir, &["checkout", "-q", "-f", "--detach", &self.sha]);
    }

    /// The pull requests of `acme/app`.
    async fn pulls(&self) -> Vec<Value> {
        crate::ghsim::pulls_in(&self.sim.state().await, "acme/app")
    }
}

/// The one hand edit `init`'s files need here: the toolchain image, in the config and, where
/// there is one, in the Dockerfile's second `FROM`.
fn choose_image(dir: &Path) {
    let config_path = dir.join(".config/bork.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).expect("config")).expect("JSON");
    let chosen = config["sandbox"]["image"].as_str().expect("an image").to_owned();
    config["sandbox"]["image"] = json!(TOOLCHAIN);
    std::fs::write(&config_path, format!("{config:#}\n")).expect("config");
    let dockerfile = dir.join(".config/bork-ci.Dockerfile");
    if let Ok(text) = std::fs::read_to_string(&dockerfile) {
        let from = format!("\nFROM {chosen}\n");
        assert!(text.contains(&from), "{text}");
        std::fs::write(&dockerfile, text.replace(&from, &format!("\nFROM {TOOLCHAIN}\n"))).expect("write");
    }
}

/// The model's one answer: the code the spec asks for.
fn answer() -> Value {
    json!({"create-or-update": {"src/app/widget.py": "COLOUR = \"blue\"\n"}})
}

/// The fake OpenAI server giving [`answer`].
async fn model() -> FakeLlm {
    FakeLlm::openai(vec![Reply::json(&answer())]).await
}

fn yaml(path: &Path) -> Value {
    serde_norway::from_str(&std::fs::read_to_string(path).expect("pipeline file")).expect("YAML")
}

/// Checks the run's outcome: a converged report in the checkout, and one pull request from
/// `bork/feature` into `feature` whose head holds the model's code.
async fn assert_delivered(project: &Project, fake: Option<&FakeLlm>, report: &Path, log: &str) {
    let report: Value = serde_json::from_str(
        &std::fs::read_to_string(report).unwrap_or_else(|_| panic!("no report; the log:\n{log}")),
    )
    .expect("report JSON");
    assert_eq!(report["status"], "converged", "{report}\n{log}");
    let pulls = project.pulls().await;
    assert_eq!(pulls.len(), 1, "{pulls:?}\n{log}");
    assert_eq!(pulls[0]["head"], "bork/feature", "{pulls:?}");
    assert_eq!(pulls[0]["base"], "feature", "{pulls:?}");
    let clone = tempfile::tempdir().expect("tempdir");
    project.checkout_into(clone.path());
    git(clone.path(), &["fetch", "-q", "origin", "bork/feature"]);
    assert_eq!(
        git(clone.path(), &["show", "FETCH_HEAD:src/app/widget.py"]),
        "COLOUR = \"blue\"\n"
    );
    if let Some(fake) = fake {
        let received = fake.received();
        assert!(!received.is_empty(), "the model was never asked\n{log}");
        assert!(
            received
                .iter()
                .all(|request| request.header("authorization") == Some(format!("Bearer {TEST_KEY}").as_str())),
            "the key reached the model as the CI variable holds it"
        );
    }
    assert!(!log.contains(TEST_KEY) && !log.contains(BOT_TOKEN), "{log}");
}

/// A `docker:dind` service as its entrypoint sets it up with `DOCKER_TLS_CERTDIR=/certs`: TLS
/// on 2376 with certificates it generates, the client's in `/certs/client` (shared with the job).
struct DindService {
    name: String,
    certs: tempfile::TempDir,
}

const DIND_PORT: &str = "2376";

impl DindService {
    fn start(image: &str) -> DindService {
        let certs = tempfile::tempdir().expect("tempdir");
        // What docker:dind's dockerd-entrypoint.sh does with openssl: a CA, a server certificate
        // for the service's names, a client certificate.
        let script = r#"set -eu
mkdir -p ca server client
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj '/CN=docker:dind CA' -keyout ca/key.pem -out ca/cert.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj '/CN=docker:dind server' -keyout server/key.pem -out server/csr.pem 2>/dev/null
printf 'subjectAltName=DNS:docker,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server/ext.cnf
openssl x509 -req -days 1 -in server/csr.pem -CA ca/cert.pem -CAkey ca/key.pem -CAcreateserial -extfile server/ext.cnf -out server/cert.pem 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj '/CN=docker:dind client' -keyout client/key.pem -out client/csr.pem 2>/dev/null
printf 'extendedKeyUsage=clientAuth\n' >client/ext.cnf
openssl x509 -req -days 1 -in client/csr.pem -CA ca/cert.pem -CAkey ca/key.pem -CAcreateserial -extfile client/ext.cnf -out client/cert.pem 2>/dev/null
cp ca/cert.pem server/ca.pem
cp ca/cert.pem client/ca.pem
chmod -R a+rX .
"#;
        run(Command::new("sh").args(["-c", script]).current_dir(certs.path()));
        let name = format!("bork-ci-test-dind-{}", std::process::id());
        let _ = Command::new("docker").args(["rm", "-f", "-v", &name]).output();
        // `--privileged` (what GitLab's runner gives a dind service) is refused on this machine:
        // the engines matrix's grant instead (CAP_SYS_ADMIN, NET_ADMIN and SYS_PTRACE, a private
        // cgroup namespace whose hierarchies are remounted read-write, its seccomp profile).
        let seccomp = certs.path().join("seccomp.json");
        let profile =
            run(Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/engines.sh")).arg("seccomp"));
        std::fs::write(&seccomp, &profile.stdout).expect("seccomp profile");
        let seccomp_arg = format!("seccomp={}", seccomp.display());
        let certs_arg = format!("{}:/certs:ro", certs.path().display());
        // Removed when the test ends, also when the engine created it but could not start it.
        let service = DindService { name, certs };
        let dockerd = "for mnt in /sys/fs/cgroup /sys/fs/cgroup/*; do mount -o remount,rw,bind \"$mnt\"; done; \
            exec dockerd --host tcp://0.0.0.0:2376 --tlsverify --tlscacert /certs/server/ca.pem \
            --tlscert /certs/server/cert.pem --tlskey /certs/server/key.pem --storage-driver overlay2";
        run(Command::new("docker")
            .args(["run", "-d", "--name", &service.name])
            .args([
                "--cap-add",
                "SYS_ADMIN",
                "--cap-add",
                "NET_ADMIN",
                "--cap-add",
                "SYS_PTRACE",
            ])
            .args(["--cgroupns", "private", "--security-opt"])
            .arg(&seccomp_arg)
            .args(["--publish", &format!("127.0.0.1:{DIND_PORT}:2376")])
            .arg("--volume")
            .arg(&certs_arg)
            .args([
                "--volume",
                "/var/lib/docker",
                "--entrypoint",
                "sh",
                image,
                "-c",
                dockerd,
            ]));
        for _ in 0..120 {
            if service
                .docker()
                .arg("version")
                .output()
                .is_ok_and(|out| out.status.success())
            {
                return service;
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let logs = Command::new("docker")
            .args(["logs", &service.name])
            .output()
            .expect("logs");
        panic!(
            "the dind service did not answer on 127.0.0.1:{DIND_PORT}:\n{}",
            String::from_utf8_lossy(&logs.stderr)
        );
    }

    fn client_certs(&self) -> PathBuf {
        self.certs.path().join("client")
    }

    /// The docker CLI talking to the service as the job would (TLS, the client certificate).
    fn docker(&self) -> Command {
        let mut command = Command::new("docker");
        command
            .env("DOCKER_HOST", format!("tcp://127.0.0.1:{DIND_PORT}"))
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", self.client_certs());
        command
    }

    /// Loads `image` from this machine's engine (no registry to pull from).
    fn load(&self, image: &str) {
        let mut save = Command::new("docker")
            .args(["save", image])
            .stdout(Stdio::piped())
            .spawn()
            .expect("docker save");
        let stdout = save.stdout.take().expect("stdout");
        run(self.docker().args(["load", "-q"]).stdin(stdout));
        assert!(save.wait().expect("docker save").success());
    }
}

impl Drop for DindService {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", "-v", &self.name])
            .output();
    }
}

/// The engines matrix's image: Debian's dockerd (ci/engines.sh builds it once).
fn engine_image() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/engines.sh");
    let output = run(Command::new(script).arg("image"));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

fn string_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|map| {
            map.iter()
                .map(|(key, value)| {
                    let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
                    (key.clone(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the static build: ci/static-smoke.sh runs it"]
async fn gitlab_dind_template_runs_the_checker_in_the_toolchain_image_and_delivers() {
    let image = release_image();
    ensure_toolchain_image();
    let project = Project::new("gitlab").await;
    // The edit step runs on the service's engine, in its network: here that cannot reach a
    // server on this machine's loopback (on GitLab it reaches the provider), so the model is
    // the scripted one, named by CI variables; the Buildkite test speaks to the fake OpenAI
    // server.
    let scripted = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        scripted.path().join("answers.json"),
        serde_json::to_string(&json!({"answers": [answer()]})).expect("JSON"),
    )
    .expect("answers");
    let build = tempfile::tempdir().expect("tempdir");
    let project_dir = build.path().join("acme/app");
    project.checkout_into(&project_dir);

    let pipeline = yaml(&project_dir.join(".gitlab-ci.yml"));
    let job = &pipeline["bork-ci"];
    assert_eq!(job["image"], json!(image), "the job runs bork-ci's release image");
    // The rules: a push to a branch that is not bork-ci's own, changing specs/.
    let rule = &job["rules"][0];
    let condition = rule["if"].as_str().expect("if");
    assert!(
        condition.contains("$CI_PIPELINE_SOURCE == \"push\"") && condition.contains("bork\\/"),
        "{condition}"
    );
    assert_eq!(rule["changes"], json!(["specs/**/*"]));
    let service = &job["services"][0];
    assert!(
        service["name"]
            .as_str()
            .is_some_and(|name| name.starts_with("docker:") && name.contains("dind")),
        "{service}"
    );
    assert_eq!(service["alias"], "docker");
    let variables = string_map(&job["variables"]);
    assert_eq!(variables["DOCKER_TLS_CERTDIR"], "/certs");
    assert_eq!(variables["DOCKER_CERT_PATH"], "/certs/client");
    let port = variables["DOCKER_HOST"]
        .strip_prefix("tcp://docker:")
        .expect("the service by its alias");
    assert_eq!(port, DIND_PORT);

    let dind = DindService::start(&engine_image());
    dind.load(TOOLCHAIN);
    let started = run(dind.docker().args(["info", "--format", "{{.ID}}"]));
    assert!(!started.stdout.is_empty());

    // GitLab's predefined variables for a push pipeline of `feature`, the job's own, then the
    // project's CI/CD variables (masked), which take precedence.
    let mut env: BTreeMap<String, String> = [
        ("CI", "true"),
        ("GITLAB_CI", "true"),
        ("CI_PIPELINE_SOURCE", "push"),
        ("CI_COMMIT_BRANCH", "feature"),
        ("CI_COMMIT_REF_NAME", "feature"),
        ("CI_DEFAULT_BRANCH", "main"),
        ("CI_PROJECT_DIR", "/builds/acme/app"),
        ("CI_PROJECT_PATH", "acme/app"),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_owned(), value.to_owned()))
    .collect();
    env.insert("CI_COMMIT_SHA".into(), project.sha.clone());
    env.insert("CI_COMMIT_BEFORE_SHA".into(), project.before.clone());
    env.extend(variables);
    for (key, value) in [
        ("OPENAI_API_KEY", TEST_KEY.to_owned()),
        ("BORK_GITHUB_TOKEN", BOT_TOKEN.to_owned()),
        ("BORK_GITHUB_REPO", "acme/app".to_owned()),
        ("GITHUB_API_URL", project.sim.url.clone()),
        ("GITHUB_SERVER_URL", project.sim.url.clone()),
        ("BORK_LLM_PROVIDER", "scripted".to_owned()),
        ("BORK_LLM_SCRIPT", "/bork-test/answers.json".to_owned()),
    ] {
        env.insert(key.into(), value);
    }
    let script: Vec<&str> = job["script"]
        .as_array()
        .expect("script")
        .iter()
        .map(|line| line.as_str().expect("a script line"))
        .collect();
    let mut command = Command::new("docker");
    command
        .args([
            "run",
            "--rm",
            "--network",
            "host",
            "--add-host",
            "docker:127.0.0.1",
        ])
        .arg("--volume")
        .arg(format!("{}:/builds/acme/app", project_dir.display()))
        .args(["--workdir", "/builds/acme/app"])
        .arg("--volume")
        .arg(format!("{}:/certs/client:ro", dind.client_certs().display()))
        .arg("--volume")
        .arg(format!("{}:/bork-test:ro", scripted.path().display()));
    for (key, value) in &env {
        command.arg("--env").arg(format!("{key}={value}"));
    }
    command.args([&image, "sh", "-c", &script.join("\n")]);
    let since = chrono_now(&dind);
    let output = tokio::task::spawn_blocking(move || command.output().expect("docker run"))
        .await
        .expect("the job");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0), "{log}");
    assert_delivered(&project, None, &project_dir.join("bork-ci-report.json"), &log).await;

    // The judges ran on the service's engine, in the toolchain image, and left nothing there.
    let events = run(dind.docker().args([
        "events",
        "--since",
        &since,
        "--until",
        &chrono_now(&dind),
        "--filter",
        "type=container",
        "--filter",
        "event=create",
        "--format",
        "{{.Actor.Attributes.image}}",
    ]));
    let images = String::from_utf8_lossy(&events.stdout);
    assert!(
        images.lines().any(|line| line == TOOLCHAIN),
        "containers created: {images}"
    );
    let left = run(dind.docker().args(["ps", "-aq"]));
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
}

/// The service engine's clock, as `docker events --since/--until` takes it.
fn chrono_now(dind: &DindService) -> String {
    let info = run(dind.docker().args(["info", "--format", "{{.SystemTime}}"]));
    String::from_utf8_lossy(&info.stdout).trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the static build: ci/static-smoke.sh runs it"]
async fn buildkite_step_runs_bork_ci_in_the_toolchain_image_it_builds_and_delivers() {
    release_image();
    ensure_toolchain_image();
    let project = Project::new("buildkite").await;
    let fake = model().await;
    let agent = tempfile::tempdir().expect("tempdir");
    let checkout = agent.path().join("app");
    project.checkout_into(&checkout);

    let pipeline = yaml(&checkout.join(".buildkite/pipeline.yml"));
    let step = &pipeline["steps"][0];
    assert_eq!(step["if_changed"], "specs/**");
    assert_eq!(step["if"], "build.branch !~ /^bork\\//");
    // Buildkite interpolates `$VAR` when the pipeline is uploaded and turns `$$` into `$`: the
    // command escapes every `$`, so the step's shell expands them.
    let command = step["command"].as_str().expect("command");
    let unescaped = command.replace("$$", "");
    assert!(!unescaped.contains('$'), "an unescaped $ in: {command}");
    let command = command.replace("$$", "$");

    let extra = format!(
        "--network host --env GITHUB_API_URL={url} --env GITHUB_SERVER_URL={url} --env BORK_LLM_BASE_URL={llm}",
        url = project.sim.url,
        llm = fake.base_url()
    );
    let mut step_shell = Command::new("bash");
    step_shell
        .args(["-e", "-c", &command])
        .current_dir(&checkout)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", agent.path())
        .env("BUILDKITE", "true")
        .env("BUILDKITE_COMMIT", &project.sha)
        .env("BUILDKITE_BRANCH", "feature")
        .env("BUILDKITE_PIPELINE_SLUG", "app")
        .env("BORK_DIFF_BASE", &project.before)
        .env("OPENAI_API_KEY", TEST_KEY)
        .env("BORK_GITHUB_TOKEN", BOT_TOKEN)
        .env("BORK_GITHUB_REPO", "acme/app")
        .env("BORK_CI_DOCKER_ARGS", extra);
    let output = tokio::task::spawn_blocking(move || step_shell.output().expect("bash"))
        .await
        .expect("the step");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(output.status.code(), Some(0), "{log}");
    assert_delivered(&project, Some(&fake), &checkout.join("bork-ci-report.json"), &log).await;
    // The image the step built: the toolchain with bork-ci copied in.
    let probe = run(Command::new("docker").args([
        "run",
        "--rm",
        "bork-ci-toolchain:app",
        "sh",
        "-c",
        "bork-ci --version && python3 -m pytest --version && git --version",
    ]));
    let said = String::from_utf8_lossy(&probe.stdout);
    assert!(
        said.contains(env!("CARGO_PKG_VERSION")) && said.contains("git version"),
        "{said}"
    );
}
