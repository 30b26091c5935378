//! Parse, validate, run, exit. Usage errors exit 125 like any other failure of redlock-run
//! itself, so a wrapper failure is never mistaken for the command's own exit 1 or 2.

use std::process::ExitCode;

use clap::error::ErrorKind;
use clap::Parser;
use redlock_run::cli::Cli;
use redlock_run::config::Task;
use redlock_run::exit::WRAPPER_FAILED;
use redlock_run::{admin, report, run};

/// On musl, dlmalloc rather than musl's allocator: see Cargo.toml.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            report::usage_error(&err.render().to_string());
            return ExitCode::from(WRAPPER_FAILED);
        }
    };
    let outcome = match Task::from_cli(cli) {
        Ok(Task::Run(config)) => {
            report::redact_panics(&config.redis);
            run::run(&config)
        }
        Ok(Task::Admin(config)) => {
            report::redact_panics(&config.redis);
            admin::run(&config)
        }
        Err(err) => {
            report::error(&err);
            return ExitCode::from(WRAPPER_FAILED);
        }
    };
    ExitCode::from(outcome.exit_code())
}
