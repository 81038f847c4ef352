//! `bork-ci edit-step`: one edit step inside the sandbox (started by `run`, not by users).

use anyhow::{Context, Result};

use super::non_dumpable;
use crate::config;
use crate::exit::ExitCode;

pub(super) async fn edit_step(args: crate::cli::EditStepArgs, env: &config::Env) -> Result<ExitCode> {
    use crate::edit_step::{self, EditStepInput};
    // The step holds the model key in its environment: closed to other same-user processes.
    non_dumpable();
    let mut input: EditStepInput = if args.stdio {
        crate::sandbox::state_stdio::receive(std::io::stdin().lock(), &args.state, edit_step::INPUT)
            .context("reading the edit step's state from stdin")?
    } else {
        edit_step::read_json(&args.state, edit_step::INPUT)?
    };
    let api_key = env
        .get(&input.llm.key_env())
        .filter(|key| !key.is_empty())
        .map(|key| secrecy::SecretString::from(key.clone()));
    let credentials = input.llm.credentials(env);
    let repo = std::env::current_dir().context("reading the working directory")?;
    let output = edit_step::run(&mut input, &repo, api_key, credentials).await;
    if args.stdio {
        crate::sandbox::state_stdio::write_result(std::io::stdout().lock(), &output)
            .context("writing the edit step's result to stdout")?;
    } else {
        edit_step::write_json(&args.state, edit_step::OUTPUT, &output)?;
    }
    Ok(ExitCode::Converged)
}
