//! Parse, validate, run, exit. Usage errors exit 125 like any other failure of redlock-run
//! itself, so a wrapper failure is never mistaken for the command's own exit 1 or 2.

use std::process::ExitCode;

use clap::error::ErrorKind;
use redlock_run::cli::{self, Cli};
use redlock_run::config::Task;
use redlock_run::exit::Outcome;
use redlock_run::{admin, report, run};

/// On musl, dlmalloc rather than musl's allocator: see Cargo.toml.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    outcome().exit()
}

fn outcome() -> Outcome {
    let cli = match Cli::parse_args() {
        Ok(cli) => cli,
        Err(err)
            if matches!(
                err.kind(),
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion
            ) =>
        {
            let _ = err.print();
            return Outcome::Done;
        }
        Err(err) => {
            report::set_json(cli::json_logs_requested(std::env::args_os()));
            report::usage_error(&err.render().to_string());
            return Outcome::Failed;
        }
    };
    report::set_json(cli.log_format == "json");
    let task = match Task::from_cli(cli) {
        Ok(task) => task,
        Err(err) => {
            report::error(&err);
            return Outcome::Failed;
        }
    };
    if let Err(err) = task.protect_secrets() {
        report::error(&err);
        return Outcome::Failed;
    }
    match task {
        Task::Run(config) => run::run(&config),
        Task::Admin(config) => admin::run(&config),
    }
}
