//! `bork-ci sandbox-unpack`: unpacks the working tree's archive, read from stdin, inside a
//! helper container of the runner image (started by the Docker sandbox over the `copy`
//! transport, not by users).

use std::io::Write;

use anyhow::{Context, Result};

use crate::exit::ExitCode;

/// Unpacks, then confirms on stdout with the call's token.
pub(super) fn sandbox_unpack(args: &crate::cli::SandboxUnpackArgs) -> Result<ExitCode> {
    crate::sandbox::docker::unpack_tree(std::io::stdin().lock(), &args.token, &args.into)
        .with_context(|| format!("unpacking the tree from stdin into {}", args.into.display()))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "bork-ci unpacked {}", args.token).context("writing to stdout")?;
    Ok(ExitCode::Converged)
}
