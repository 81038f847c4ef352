//! The `bork-ci` binary: parse the command line, set up logging, run the command, exit with its code.

use std::process::ExitCode as ProcessExit;

use clap::Parser;

fn main() -> ProcessExit {
    let cli = bork_ci::cli::Cli::parse();
    // The environment, read once for the whole process; everything below receives this snapshot.
    let env = bork_ci::config::process_env();
    bork_ci::commands::init_logging(&cli, &env);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::error!("starting the async runtime: {error}");
            return ProcessExit::from(2);
        }
    };
    let code = runtime.block_on(bork_ci::commands::dispatch(cli, env));
    // A task still blocked (a third-party crate's plain read, say) never holds the exit up.
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    ProcessExit::from(u8::try_from(code.code()).unwrap_or(2))
}
