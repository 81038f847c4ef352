//! The statically linked build and the published image, as a user meets them.
//!
//! - The static binary runs in an empty (`FROM scratch`) container, resolves the model's host
//!   NAME through a DNS server named in the container's `/etc/resolv.conf` (no libc resolver, no
//!   NSS modules exist there), and completes an edit step against the fake OpenAI server.
//! - The release image (`images/release/Dockerfile`, built from that binary on the local Debian
//!   base) has git, CA certificates and bork-ci, and packs a checkout owned by another uid, as root
//!   and as an arbitrary user.
//!
//! Both need the static binary: `ci/static-smoke.sh` builds it with the README's command and runs
//! them (`BORK_STATIC_BINARY=... cargo test --locked --test it static_build -- --ignored`).

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

use bork_ci::config::LlmConfig;
use bork_ci::edit_step::{self, EditStepInput, EditStepOutput};
use bork_ci::llm::Conversation;
use serde_json::json;

use crate::fake_llm::{FakeLlm, Reply, TEST_KEY};
use crate::support::Repo;

/// The model's host name: resolvable only through the fake DNS server below.
const MODEL_HOST: &str = "model.bork-smoke.test";
const SCRATCH_IMAGE: &str = "bork-ci-test/static-scratch:latest";
const RELEASE_IMAGE: &str = "bork-ci-test/release:smoke";

fn static_binary() -> PathBuf {
    let path = std::env::var_os("BORK_STATIC_BINARY")
        .map(PathBuf::from)
        .expect("BORK_STATIC_BINARY names the statically linked bork-ci (ci/static-smoke.sh builds it)");
    assert!(path.is_file(), "{} does not exist", path.display());
    let file = run(Command::new("file").arg("-L").arg(&path));
    let described = String::from_utf8_lossy(&file.stdout);
    assert!(
        described.contains("statically linked") || described.contains("static-pie linked"),
        "{} is not statically linked: {described}",
        path.display()
    );
    path
}

pub(crate) fn run(command: &mut Command) -> Output {
    let output = command.output().expect("spawning a command");
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Builds `tag` from a context holding `files` (name, source path) and this Dockerfile.
fn build_image(tag: &str, files: &[(&str, &Path)], dockerfile: &str, args: &[&str]) {
    let context = tempfile::tempdir().expect("tempdir");
    for (name, source) in files {
        let target = context.path().join(name);
        std::fs::create_dir_all(target.parent().expect("parent")).expect("context dir");
        std::fs::copy(source, &target).expect("copying into the build context");
    }
    std::fs::write(context.path().join("Dockerfile"), dockerfile).expect("Dockerfile");
    let mut command = Command::new("docker");
    command
        .env("DOCKER_BUILDKIT", "0")
        .args(["build", "-q", "-t", tag])
        .args(args)
        .arg(context.path());
    run(&mut command);
}

/// Builds the release image (`images/release/Dockerfile`) from the static binary as `tag`.
pub(crate) fn build_release_image(tag: &str) {
    let binary = static_binary();
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("images/release/Dockerfile"))
            .expect("images/release/Dockerfile");
    build_image(
        tag,
        &[("linux/amd64/bork-ci", &binary)],
        &dockerfile,
        &["--build-arg", "TARGETPLATFORM=linux/amd64"],
    );
}

/// A DNS server on `127.x.y.z:53` (UDP) that answers `A` for [`MODEL_HOST`] with 127.0.0.1,
/// an empty `NOERROR` for its other types, and `NXDOMAIN` for every other name.
struct FakeDns {
    address: Ipv4Addr,
    queries: Arc<Mutex<Vec<(String, u16)>>>,
}

impl FakeDns {
    fn start() -> Self {
        let pid = std::process::id();
        let address = Ipv4Addr::new(127, 53, (pid >> 8) as u8, (pid as u8).max(2));
        let socket = UdpSocket::bind((address, 53)).unwrap_or_else(|error| {
            panic!("binding {address}:53 for the fake DNS server (needs root): {error}")
        });
        let queries = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&queries);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 1500];
            while let Ok((length, peer)) = socket.recv_from(&mut buffer) {
                if let Some((name, qtype, answer)) = dns_answer(&buffer[..length]) {
                    seen.lock().expect("lock").push((name, qtype));
                    let _ = socket.send_to(&answer, peer);
                }
            }
        });
        Self { address, queries }
    }

    fn queried(&self) -> Vec<(String, u16)> {
        self.queries.lock().expect("lock").clone()
    }
}

/// Parses one query (RFC 1035 §4.1) and builds its answer: `(name, qtype, response)`.
fn dns_answer(query: &[u8]) -> Option<(String, u16, Vec<u8>)> {
    if query.len() < 12 || u16::from_be_bytes([query[4], query[5]]) != 1 {
        return None;
    }
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let length = usize::from(*query.get(at)?);
        at += 1;
        if length == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(query.get(at..at + length)?).to_ascii_lowercase());
        at += length;
    }
    let qtype = u16::from_be_bytes([*query.get(at)?, *query.get(at + 1)?]);
    let question_end = at + 4;
    let question = query.get(12..question_end)?;
    let name = labels.join(".");
    let known = name == MODEL_HOST;
    let answer_a = known && qtype == 1;
    let rd = query[2] & 0x01;
    let mut response = Vec::with_capacity(question_end + 16);
    response.extend_from_slice(&query[0..2]);
    response.push(0x80 | rd); // QR, opcode 0, RD copied
    response.push(if known { 0x80 } else { 0x83 }); // RA; NOERROR or NXDOMAIN
    response.extend_from_slice(&[0, 1, 0, u8::from(answer_a), 0, 0, 0, 0]);
    response.extend_from_slice(question);
    if answer_a {
        // A pointer to the question's name, type A, class IN, TTL 60, 4 bytes: 127.0.0.1.
        response.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
    }
    Some((name, qtype, response))
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs the static build: ci/static-smoke.sh runs it"]
async fn static_build_reaches_a_fake_model_by_name_from_an_empty_container() {
    let binary = static_binary();
    build_image(
        SCRATCH_IMAGE,
        &[("bork-ci", &binary)],
        "FROM scratch\nCOPY bork-ci /bork-ci\nENTRYPOINT [\"/bork-ci\"]\n",
        &[],
    );
    let version = run(Command::new("docker").args(["run", "--rm", SCRATCH_IMAGE, "--version"]));
    assert!(
        String::from_utf8_lossy(&version.stdout).contains(env!("CARGO_PKG_VERSION")),
        "--version in the empty container: {}",
        String::from_utf8_lossy(&version.stdout)
    );

    let dns = FakeDns::start();
    let fake = FakeLlm::openai(vec![Reply::json(
        &json!({"create-or-update": {"hello.txt": "hello from an empty container\n"}}),
    )])
    .await;
    let base_url = fake.base_url().replace("127.0.0.1", MODEL_HOST);
    assert!(base_url.contains(MODEL_HOST), "{base_url}");

    let etc = tempfile::tempdir().expect("tempdir");
    let resolv = etc.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        format!("nameserver {}\noptions timeout:2 attempts:2\n", dns.address),
    )
    .expect("resolv.conf");
    let repo = tempfile::tempdir().expect("tempdir");
    let state = tempfile::tempdir().expect("tempdir");
    let input = EditStepInput {
        conversation: Conversation {
            system: "Answer with whole-file edits as JSON.".into(),
            prefix: "Create hello.txt.".into(),
            turns: Vec::new(),
        },
        llm: LlmConfig {
            model: "fake-model-1".into(),
            base_url: Some(base_url),
            timeout_secs: 30,
            max_retries: 0,
            ..LlmConfig::default()
        },
        checker: None,
        edits_require_approval: Vec::new(),
        approved_tests: Default::default(),
        judge_files: Default::default(),
        aliases: Vec::new(),
        not_shown: BTreeSet::new(),
        timeout_secs: 60,
        apply_in_step: true,
        umask: None,
    };
    edit_step::write_json(state.path(), edit_step::INPUT, &input).expect("input.json");

    let mount = |from: &Path, to: &str, mode: &str| format!("{}:{to}:{mode}", from.display());
    let output = Command::new("docker")
        .args(["run", "--rm", "--network", "host"])
        .args(["-v", &mount(&resolv, "/etc/resolv.conf", "ro")])
        .args(["-v", &mount(repo.path(), "/repo", "rw")])
        .args(["-v", &mount(state.path(), "/state", "rw")])
        .args(["-w", "/repo", "-e", &format!("OPENAI_API_KEY={TEST_KEY}")])
        .args([SCRATCH_IMAGE, "edit-step", "--state", "/state"])
        .output()
        .expect("docker run");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "edit step failed: {stderr}");
    let result: EditStepOutput = edit_step::read_json(state.path(), edit_step::OUTPUT).expect("output.json");
    assert_eq!(result.error, None, "stderr: {stderr}");
    assert_eq!(
        std::fs::read_to_string(repo.path().join("hello.txt")).expect("hello.txt"),
        "hello from an empty container\n"
    );
    assert!(result.changeset.changed());

    let received = fake.received();
    assert_eq!(received.len(), 1, "one model request");
    let host = received[0].header("host").unwrap_or_default();
    assert!(host.starts_with(MODEL_HOST), "the request went to {host}");
    assert!(
        dns.queried()
            .iter()
            .any(|(name, qtype)| name == MODEL_HOST && *qtype == 1),
        "the name was resolved through the container's resolv.conf: {:?}",
        dns.queried()
    );
    assert!(!stderr.contains(TEST_KEY), "the key leaked: {stderr}");
}

#[test]
#[ignore = "needs the static build: ci/static-smoke.sh runs it"]
fn release_image_packs_a_checkout_owned_by_another_uid() {
    build_release_image(RELEASE_IMAGE);

    let repo = Repo::new(&[
        ("specs/app.md", "The app prints DONE.\n"),
        ("src/app.txt", "DONE\n"),
    ]);
    run(Command::new("chown").args(["-R", "1234:1234"]).arg(repo.path()));
    std::fs::set_permissions(repo.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    run(Command::new("chmod").args(["-R", "a+rX"]).arg(repo.path()));

    let volume = format!("{}:/repo", repo.path().display());
    for user in [None, Some("4321:4321")] {
        let mut command = Command::new("docker");
        command.args(["run", "--rm", "-v", &volume, "-w", "/repo"]);
        if let Some(user) = user {
            command.args(["--user", user, "-e", "HOME=/tmp"]);
        }
        command.args([
            RELEASE_IMAGE,
            "sh",
            "-c",
            "git --version && bork-ci --version && git status --porcelain && bork-ci pack",
        ]);
        let output = run(&mut command);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(stdout.contains("git version"), "as {user:?}: {stdout}");
        assert!(
            stdout.contains(env!("CARGO_PKG_VERSION")),
            "as {user:?}: {stdout}"
        );
        assert!(
            stdout.contains("src/app.txt") && stdout.contains("The app prints DONE."),
            "as {user:?}, the packed prompt: {stdout}"
        );
    }
    let certificates = run(Command::new("docker").args([
        "run",
        "--rm",
        RELEASE_IMAGE,
        "sh",
        "-c",
        "test -s /etc/ssl/certs/ca-certificates.crt && echo present",
    ]));
    assert_eq!(String::from_utf8_lossy(&certificates.stdout).trim(), "present");
}
