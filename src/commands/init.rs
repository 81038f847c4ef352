//! `bork-ci init`: writes `.config/bork.json`, a checker for the repository's toolchain and,
//! with `--ci`, the pipeline file (see `crate::init`). Never over an existing file without
//! `--force`: one that exists ends the command with exit 2, naming it, before anything is written.

use std::io::Write;

use anyhow::{Context, Result, bail};

use super::repo_root;
use crate::exit::ExitCode;

pub(super) fn init(args: crate::cli::InitArgs) -> Result<ExitCode> {
    let repo = repo_root(&args.repo)?;
    let detected = crate::init::detect(&repo);
    let toolchain = args.toolchain.or_else(|| detected.first().copied());
    let files = crate::init::plan(&repo, toolchain, args.ci);
    if !args.force {
        let existing: Vec<&str> = files
            .iter()
            .filter(|file| std::fs::symlink_metadata(repo.join(&file.path)).is_ok())
            .map(|file| file.path.as_str())
            .collect();
        if !existing.is_empty() {
            bail!(
                "{} already exist(s); nothing was written: move it away, or run `bork-ci init --force` to replace it",
                existing.join(", ")
            );
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
    for file in &files {
        let path = repo.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        crate::safe_fs::write_atomic(&path, file.text.as_bytes())
            .with_context(|| format!("writing {}", file.path))?;
        let mode = if file.executable { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .with_context(|| format!("setting the mode of {}", file.path))?;
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
    for file in &files {
        writeln!(stdout, "  wrote {}", file.path)?;
        if file
            .text
            .contains("bork-ci/bork-ci@0000000000000000000000000000000000000000")
        {
            writeln!(
                stdout,
                "  {}: replace the placeholder commit in `uses: bork-ci/bork-ci@0000…` with a commit of the action that pins a release (README: GitHub in ten lines)",
                file.path
            )?;
        }
    }
    writeln!(
        stdout,
        "next: `bork-ci doctor` checks the setup (key, engine, image, the checker on this tree)"
    )?;
    Ok(ExitCode::Converged)
}
