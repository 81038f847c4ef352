//! `bork-ci sandbox-unpack`: unpacks the working tree's archive in the `copy` transport's helper
//! container (started by the Docker sandbox, not by users).

use std::io::Write;

use anyhow::{Context, Result};

use crate::exit::ExitCode;

/// Unpacks, then confirms on stdout with the archive's name.
pub(super) fn sandbox_unpack(args: &crate::cli::SandboxUnpackArgs) -> Result<ExitCode> {
    crate::sandbox::docker::unpack_tree(&args.archive, args.remove.as_deref(), &args.into).with_context(
        || {
            format!(
                "unpacking {} into {}",
                args.archive.display(),
                args.into.display()
            )
        },
    )?;
    let name = args
        .archive
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "bork-ci unpacked {name}").context("writing to stdout")?;
    Ok(ExitCode::Converged)
}
