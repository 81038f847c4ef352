//! The dependency cache (`/deps`) and the setup commands through the binary: a Rust checker
//! under `--sandbox none` keeps the seal while cargo rewrites its own bookkeeping, and any other
//! write into the cache still breaks it.

use serde_json::json;

use crate::support::{Repo, TestContext};

const CLEAN: &str = r#"{"per_file_findings":[],"overall_findings":[]}"#;

/// The team's checker: `cargo test` offline against the dependencies the setup fetched.
fn cargo_checker() -> String {
    format!(
        "#!/bin/sh\nif cargo test --offline --quiet >&2; then echo '{CLEAN}'; exit 0; fi\n\
         echo '{{\"per_file_findings\":[],\"overall_findings\":[{{\"provenance\":\"code-review\",\"finding\":\"cargo test fails\"}}]}}'; exit 1\n"
    )
}

/// Sets cargo's last-use stamps in `.global-cache` an hour back, as they stand when a judge
/// runs long after the setup: cargo then rewrites them.
const AGE_STAMPS: &str = "python3 -c \"import os, sqlite3; db = sqlite3.connect(os.environ['CARGO_HOME'] + '/.global-cache'); [db.execute('update ' + table + ' set timestamp = timestamp - 3600') for table in ('registry_index', 'registry_crate', 'registry_src')]; db.commit()\"";

/// A crate with one dependency from crates.io (the setup fetches it) and a test that fails
/// until `src/lib.rs` groups digits.
fn rust_repo() -> Repo {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/rust/repo");
    let read = |path: &str| std::fs::read_to_string(example.join(path)).expect("example file");
    let config = json!({
        "correctness-checker": "checks/cargo-test",
        "checker-timeout-secs": 600,
        "max-iterations": 1,
        "sandbox": {"setup": ["cargo fetch --locked", AGE_STAMPS], "setup-timeout-secs": 600}
    });
    Repo::new(&[
        ("Cargo.toml", &read("Cargo.toml")),
        ("Cargo.lock", &read("Cargo.lock")),
        (".gitignore", "/target\n"),
        ("specs/counts.md", "`count` returns the number as text.\n"),
        (
            "src/lib.rs",
            "pub fn count(n: u64) -> String {\n    let _ = n;\n    String::new()\n}\n",
        ),
        (
            "tests/count.rs",
            "#[test]\nfn counts() {\n    assert_eq!(counts::count(1234), \"1234\");\n}\n",
        ),
        ("checks/cargo-test", &cargo_checker()),
        (".config/bork.json", &config.to_string()),
    ])
}

/// The model's fix, with `extra` test files besides.
fn fix(extra: &[(&str, &str)]) -> serde_json::Value {
    let mut files = serde_json::Map::new();
    files.insert(
        "src/lib.rs".into(),
        json!("pub fn count(n: u64) -> String {\n    itoa::Buffer::new().format(n).to_owned()\n}\n"),
    );
    for (path, text) in extra {
        files.insert((*path).into(), json!(text));
    }
    json!({ "create-or-update": files })
}

/// A context whose judges find the runner's Rust toolchain (rustup's, under the real home).
fn rust_context(repo: &Repo) -> TestContext<'_> {
    let mut ctx = TestContext::on(repo);
    let artifacts = ctx.scratch_file("artifacts");
    ctx.env("BORK_SANDBOX_ARTIFACT_DIR", artifacts);
    for name in ["RUSTUP_HOME", "RUSTUP_TOOLCHAIN"] {
        if let Some(value) = std::env::var_os(name) {
            ctx.env(name, value);
        }
    }
    if std::env::var_os("RUSTUP_HOME").is_none()
        && let Some(home) = std::env::var_os("HOME")
    {
        let rustup = std::path::Path::new(&home).join(".rustup");
        if rustup.is_dir() {
            ctx.env("RUSTUP_HOME", rustup);
        }
    }
    ctx
}

/// The newest last-use stamp cargo keeps for a downloaded crate in the run's dependency cache.
fn newest_stamp(artifacts: &std::path::Path) -> i64 {
    let deps = std::fs::read_dir(artifacts.join("deps")).expect("deps folder");
    let mut newest = 0;
    for entry in deps.flatten() {
        let db = entry.path().join("cargo-home/.global-cache");
        if !db.is_file() {
            continue;
        }
        let output = std::process::Command::new("python3")
            .arg("-c")
            .arg("import sqlite3, sys; print(sqlite3.connect(sys.argv[1]).execute('select max(timestamp) from registry_crate').fetchone()[0])")
            .arg(&db)
            .output()
            .expect("python3 runs");
        let text = String::from_utf8_lossy(&output.stdout);
        newest = newest.max(text.trim().parse::<i64>().unwrap_or(0));
    }
    newest
}

#[test]
fn a_rust_checker_under_none_converges_while_cargo_rewrites_its_stamps() {
    let repo = rust_repo();
    let mut ctx = rust_context(&repo);
    ctx.scripted(&[fix(&[])]);
    let outcome = ctx.run(&[]);
    assert_eq!(outcome.code, 0, "{}\n{}", outcome.stderr, outcome.report_text);
    assert!(outcome.stderr.contains("setup: done"), "{}", outcome.stderr);
    // The setup set the stamps an hour back; a judge's cargo wrote them anew, and the seal held.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let newest = newest_stamp(&ctx.scratch_file("artifacts"));
    assert!(
        now - newest < 1800,
        "cargo did not rewrite its stamps: {newest} vs {now}"
    );
}

#[test]
fn a_rust_test_that_writes_into_the_dependency_cache_breaks_the_seal() {
    let plants = [
        (
            "a new start-up file in pip's folder",
            "#[test]\nfn plant() {\n    let deps = std::env::var(\"BORK_DEPS_DIR\").unwrap();\n    std::fs::write(format!(\"{deps}/pip/evil.pth\"), \"import os\\n\").unwrap();\n}\n",
        ),
        (
            "a changed source of a downloaded crate",
            "#[test]\nfn plant() {\n    let home = std::env::var(\"CARGO_HOME\").unwrap();\n    for index in std::fs::read_dir(format!(\"{home}/registry/src\")).unwrap() {\n        for krate in std::fs::read_dir(index.unwrap().path()).unwrap() {\n            let lib = krate.unwrap().path().join(\"src/lib.rs\");\n            let text = std::fs::read_to_string(&lib).unwrap();\n            std::fs::write(&lib, text + \"\\n// planted\\n\").unwrap();\n        }\n    }\n}\n",
        ),
    ];
    for (what, test) in plants {
        let repo = rust_repo();
        let mut ctx = rust_context(&repo);
        ctx.scripted(&[fix(&[("tests/plant.rs", test)])]);
        let outcome = ctx.run(&[]);
        assert_eq!(outcome.code, 2, "{what}\n{}", outcome.stderr);
        assert!(
            outcome.report_text.contains("wrote into the dependency cache"),
            "{what}\n{}",
            outcome.report_text
        );
    }
}

/// A repository whose dev container is built from the root `Dockerfile` with the root as its
/// context (a common layout), and a checker that is clean once `src/app.txt` says DONE.
fn devcontainer_repo(dockerfile: &str) -> Repo {
    let checker = format!(
        "#!/bin/sh\ngrep -q DONE src/app.txt && {{ echo '{CLEAN}'; exit 0; }}\n\
         echo '{{\"per_file_findings\":[],\"overall_findings\":[{{\"provenance\":\"code-review\",\"finding\":\"not done\"}}]}}'; exit 1\n"
    );
    let config = json!({"correctness-checker": "checks/run", "max-iterations": 1});
    Repo::new(&[
        (
            ".devcontainer/devcontainer.json",
            r#"{"build": {"dockerfile": "../Dockerfile", "context": ".."}}"#,
        ),
        ("Dockerfile", dockerfile),
        ("tools/judge-env.sh", "export STRICT=1\n"),
        ("specs/app.md", "src/app.txt says DONE.\n"),
        ("src/app.txt", "nothing yet\n"),
        ("checks/run", &checker),
        (".config/bork.json", &config.to_string()),
    ])
}

#[test]
fn the_root_dockerfile_of_the_dev_container_is_held_for_approval() {
    let original = "FROM bork-ci-test/busybox:latest\nCOPY tools/judge-env.sh /etc/profile.d/\n";
    let repo = devcontainer_repo(original);
    for (path, text) in [
        (
            "Dockerfile",
            "FROM bork-ci-test/busybox:latest\nRUN ln -sf /bin/true /bin/grep\n",
        ),
        ("tools/judge-env.sh", "export STRICT=0\n"),
    ] {
        let mut ctx = TestContext::on(&repo);
        ctx.scripted(&[json!({"create-or-update": {path: text, "src/app.txt": "DONE\n"}})]);
        let outcome = ctx.run(&[]);
        assert_eq!(outcome.code, 3, "{path}\n{}", outcome.stderr);
        let held = &outcome.report["pending-approvals"];
        assert!(
            held.as_array()
                .is_some_and(|held| held.iter().any(|edit| edit["path"] == path)),
            "{path}: {held}"
        );
        assert!(held.to_string().contains("dev container"), "{path}: {held}");
        assert_ne!(repo.read(path), text, "{path} was written");
        repo.git(&["checkout", "--", "src/app.txt"]);
    }
    assert_eq!(repo.read("Dockerfile"), original);
}

#[test]
fn an_image_planted_under_the_dev_containers_tag_is_rebuilt_not_judged_in() {
    crate::sandbox::ensure_test_image();
    let checker = format!(
        "#!/bin/sh\ngrep -q from-the-dev-container /etc/judge-marker || {{ echo 'not in the dev container' >&2; exit 2; }}\n\
         grep -q DONE src/app.txt && {{ echo '{CLEAN}'; exit 0; }}\n\
         echo '{{\"per_file_findings\":[],\"overall_findings\":[{{\"provenance\":\"code-review\",\"finding\":\"not done\"}}]}}'; exit 1\n"
    );
    let repo = devcontainer_repo(&format!(
        "FROM {}\nCOPY tools/marker /etc/judge-marker\n",
        crate::sandbox::TEST_IMAGE
    ));
    repo.write("tools/marker", "from-the-dev-container\n");
    repo.write("checks/run", &checker);
    repo.commit("judges need the dev container");
    let mut ctx = TestContext::on(&repo);
    ctx.docker(crate::sandbox::TEST_IMAGE)
        .env("BORK_SANDBOX_IMAGE", "devcontainer")
        .scripted(&[json!({"create-or-update": {"src/app.txt": "DONE\n"}})]);
    let first = ctx.run(&[]);
    assert_eq!(first.code, 0, "{}", first.stderr);
    // bork-ci recorded the id of the image it built, per digest of the build's inputs.
    let records = ctx.scratch_file("artifacts").join("devcontainer-images");
    let (digest, recorded) = std::fs::read_dir(&records)
        .expect("records")
        .flatten()
        .map(|entry| {
            let id = std::fs::read_to_string(entry.path()).expect("record");
            (entry.file_name().to_string_lossy().into_owned(), id)
        })
        .next()
        .expect("one record");
    let tag = format!("bork-ci-devcontainer:{}", &digest[..16]);
    let image_id = |name: &str| {
        let output = std::process::Command::new("docker")
            .args(["image", "inspect", "--format", "{{.Id}}", name])
            .output()
            .expect("docker runs");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    };
    assert_eq!(image_id(&tag), recorded);

    // Anyone with the engine moves the tag to another image: the next run builds again and
    // judges in what it built, never in the planted image.
    let planted = std::process::Command::new("docker")
        .args(["tag", crate::sandbox::TEST_IMAGE, &tag])
        .status()
        .expect("docker runs");
    assert!(planted.success());
    assert_ne!(image_id(&tag), recorded);
    repo.git(&["checkout", "--", "src/app.txt"]);
    let second = ctx.run(&[]);
    assert_eq!(second.code, 0, "{}", second.stderr);
    assert!(
        second.stderr.contains("did not build from these files"),
        "{}",
        second.stderr
    );
    let rebuilt = std::fs::read_to_string(records.join(&digest)).expect("record");
    assert_eq!(image_id(&tag), rebuilt);
    assert_ne!(rebuilt, image_id(crate::sandbox::TEST_IMAGE));
}

/// The folders of dependency caches under the artifact root `artifacts`.
fn deps_folders(artifacts: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(artifacts.join("deps"))
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn an_approved_change_to_what_setup_reads_starts_an_empty_dependency_cache() {
    // The setup "installs" what `pytest.ini` (a judge file: held, approved, never code) names;
    // the checker fails to run when the cache holds anything else.
    let checker = format!(
        "#!/bin/sh\n[ \"$(cat \"$BORK_DEPS_DIR/pip/installed\")\" = \"$(cat pytest.ini)\" ] || {{ echo 'stale dependencies' >&2; exit 2; }}\n\
         grep -q DONE src/app.txt && {{ echo '{CLEAN}'; exit 0; }}\n\
         echo '{{\"per_file_findings\":[],\"overall_findings\":[{{\"provenance\":\"code-review\",\"finding\":\"not done\"}}]}}'; exit 1\n"
    );
    let config = json!({
        "correctness-checker": "checks/run",
        "max-iterations": 1,
        "sandbox": {"setup": ["cat pytest.ini >> \"$BORK_DEPS_DIR/pip/installed\""]}
    });
    let repo = Repo::new(&[
        ("pytest.ini", "[pytest]\naddopts = -q\n"),
        ("specs/app.md", "src/app.txt says DONE.\n"),
        ("src/app.txt", "nothing yet\n"),
        ("checks/run", &checker),
        (".config/bork.json", &config.to_string()),
    ]);
    let mut ctx = TestContext::on(&repo);
    let artifacts = ctx.scratch_file("artifacts");
    ctx.env("BORK_SANDBOX_ARTIFACT_DIR", &artifacts)
        .scripted(&[json!({"create-or-update": {"src/app.txt": "DONE\n"}})]);
    let run = |label: &str| {
        repo.git(&["checkout", "--", "src/app.txt"]);
        let outcome = ctx.run(&[]);
        assert_eq!(outcome.code, 0, "{label}\n{}", outcome.stderr);
        outcome
    };
    run("first run");
    let first = deps_folders(&artifacts);
    assert_eq!(first.len(), 1, "{first:?}");

    // Code changes keep the key: the same cache, which the setup already filled, so it is not
    // run again (it would append a second line, and the checker would say so).
    repo.write("src/other.txt", "code\n");
    repo.commit("more code");
    let installed = |key: &str| {
        std::fs::read_to_string(artifacts.join("deps").join(key).join("pip/installed")).expect("installed")
    };
    let before = installed(&first[0]);
    let outcome = run("the same cache, setup skipped");
    assert!(outcome.stderr.contains("setup: skipped"), "{}", outcome.stderr);
    assert!(!outcome.stderr.contains("setup: done"), "{}", outcome.stderr);
    assert_eq!(deps_folders(&artifacts), first);
    assert_eq!(installed(&first[0]), before);
    let _ = std::fs::remove_dir_all(artifacts.join("deps"));

    // An approved change to a file that is not code: a new key, and the new cache starts
    // empty, so nothing the old setup installed reaches the judges.
    run("before the change");
    let old = deps_folders(&artifacts);
    repo.write("pytest.ini", "[pytest]\naddopts = -q -p plugin\n");
    repo.commit("approved: a pytest plugin");
    run("after the change");
    let both = deps_folders(&artifacts);
    assert_eq!(both.len(), 2, "{both:?}");
    let new = both.iter().find(|key| !old.contains(key)).expect("a new key");
    assert_eq!(installed(new), "[pytest]\naddopts = -q -p plugin\n");

    // So is any other file that is not code, judge file or not: a requirement.
    repo.write("requirements.txt", "pytest-plugin==1.0\n");
    repo.commit("approved: a requirement");
    run("after the requirement");
    assert_eq!(deps_folders(&artifacts).len(), 3);
}
