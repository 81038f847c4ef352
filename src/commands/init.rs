//! `bork-ci init`: writes `.config/bork.json`, a checker for the repository's toolchain and,
//! with `--ci`, the pipeline file (see `crate::init`). Run again, it adds what is missing and
//! never replaces a file that differs from what it would write without `--force` (it lists
//! them); at the end it says what to commit.

use std::io::Write;

use anyhow::{Context, Result, bail};

use super::repo_root;
use crate::exit::ExitCode;

pub(super) async fn init(args: crate::cli::InitArgs, env: &crate::config::Env) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let detected = crate::init::detect(&repo);
    let toolchain = args.toolchain.or_else(|| detected.first().copied());
    let mut files = crate::init::plan(&repo, toolchain, args.ci, args.provider.clone());
    if args.pin {
        if args.ci != Some(crate::init::Ci::Github) {
            bail!("--pin pins the GitHub Action's commit: use it with --ci github");
        }
        let api = env
            .get("GITHUB_API_URL")
            .filter(|url| !url.is_empty())
            .map_or("https://api.github.com", String::as_str);
        let token = env.get("GITHUB_TOKEN").filter(|token| !token.is_empty());
        let sha = release_commit(api, token.map(String::as_str)).await?;
        let pin = crate::init::Pin::Commit(sha);
        for file in &mut files {
            file.text = crate::init::with_action_ref(&file.text, &pin);
        }
    }
    // Only through real folders: a symlinked `.config` or `checks` would carry a write out of
    // the repository.
    for file in &files {
        let mut at = repo.clone();
        for part in std::path::Path::new(&file.path).components() {
            at.push(part);
            if std::fs::symlink_metadata(&at).is_ok_and(|meta| meta.file_type().is_symlink()) {
                bail!(
                    "{} is a symbolic link; `bork-ci init` writes only through real folders, and nothing was written",
                    at.strip_prefix(&repo).unwrap_or(&at).display()
                );
            }
        }
    }
    // What is there already: the same text is left as it is; another text is kept unless
    // `--force` (a team's edited config or checker is never lost to a second `init`).
    let mut written = Vec::new();
    let mut same = Vec::new();
    let mut kept = Vec::new();
    for file in &files {
        let path = repo.join(&file.path);
        if std::fs::symlink_metadata(&path).is_ok() {
            let existing = crate::safe_fs::read_regular(&path, 1 << 20).ok();
            if existing.as_deref() == Some(file.text.as_bytes()) {
                same.push(file);
                continue;
            }
            if !args.force {
                kept.push(file);
                continue;
            }
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        crate::safe_fs::write_atomic(&path, file.text.as_bytes())
            .with_context(|| format!("writing {}", file.path))?;
        let mode = if file.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", file.path))?;
        written.push(file);
    }
    let mut stdout = std::io::stdout().lock();
    let found = if detected.is_empty() {
        "no toolchain found".to_owned()
    } else {
        let names: Vec<&str> = detected.iter().map(|t| t.as_str()).collect();
        format!("found: {}", names.join(", "))
    };
    let used = toolchain.map_or("none (edit checks/bork-check)", |t| t.as_str());
    writeln!(stdout, "bork-ci init: {found}; checker for {used}")?;
    for file in &written {
        writeln!(stdout, "  wrote {}", file.path)?;
    }
    for file in &same {
        writeln!(stdout, "  unchanged {} (already as init writes it)", file.path)?;
    }
    for file in &kept {
        writeln!(
            stdout,
            "  kept {}: it differs from what init would write (`bork-ci init --force` replaces it)",
            file.path
        )?;
    }
    if let Some(ci) = args.ci {
        let image = files
            .iter()
            .find(|file| file.path == crate::config::CONFIG_PATH)
            .and_then(|file| serde_json::from_str::<serde_json::Value>(&file.text).ok())
            .and_then(|config| config["sandbox"]["image"].as_str().map(str::to_owned))
            .unwrap_or_default();
        if let Some(note) = crate::init::ci_note(ci, &image) {
            writeln!(stdout, "  {note}")?;
        }
    }
    if !written.is_empty() {
        let paths: Vec<&str> = written.iter().map(|file| file.path.as_str()).collect();
        writeln!(
            stdout,
            "commit them: git add {} && git commit -m \"bork-ci init\"",
            paths.join(" ")
        )?;
    }
    writeln!(
        stdout,
        "next: `bork-ci doctor` checks the setup (key, engine, image, the checker on this tree)"
    )?;
    Ok(ExitCode::Converged)
}

/// The commit the release tag `v<this version>` of the action points at, asked of GitHub's REST
/// API at `api`.
async fn release_commit(api: &str, token: Option<&str>) -> Result<String> {
    let tag = format!("v{}", crate::init::VERSION);
    let token = token.map(|token| secrecy::SecretString::from(token.to_owned()));
    crate::github::tag_commit(api, token.as_ref(), crate::init::ACTION, &tag)
        .await
        .map_err(|error| {
            anyhow::anyhow!(
                "--pin: asking {} for the commit of {tag}: {error}; nothing was written (is {tag} released, and GitHub reachable? leave --pin off to use the tag)",
                crate::untrusted::one_line(api)
            )
        })
}
