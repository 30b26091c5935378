//! Parse, validate, run, exit. Usage errors exit 125 like any other failure of redlock-run
//! itself, so a wrapper failure is never mistaken for the command's own exit 1 or 2; but
//! `check`, a monitoring plugin, reports them as plugins do: UNKNOWN, exit 3.

use std::process::ExitCode;

use clap::error::ErrorKind;
use redlock_run::admin::{self, check};
use redlock_run::cli::{self, Cli};
use redlock_run::config::Task;
use redlock_run::exit::Outcome;
use redlock_run::{dry_run, report, run, serve};

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
        Err(err) if cli::check_requested(std::env::args_os()) => {
            // Options before `check` are read as a run's, whose errors (a missing -k) would
            // only mislead.
            if std::env::args_os()
                .nth(1)
                .is_some_and(|first| first != "check")
            {
                return check::usage_unknown(
                    "options go after the subcommand's name: redlock-run check -r URL -k KEY \
                     [THRESHOLDS]",
                );
            }
            return check::usage_unknown(&err.render().to_string());
        }
        Err(err) => {
            report::set_json(cli::json_logs_requested(std::env::args_os()));
            report::usage_error(&err.render().to_string());
            return Outcome::Failed;
        }
    };
    report::set_json(cli.log_format == "json");
    // A monitoring plugin: whatever is not a verdict is UNKNOWN, on stdout.
    let plugin = matches!(cli.admin, Some(cli::Admin::Check(_)));
    let failed = |err: anyhow::Error| {
        if plugin {
            check::usage_unknown(&format!("{err:#}"))
        } else {
            report::error(&err);
            Outcome::Failed
        }
    };
    let task = match Task::from_cli(cli) {
        Ok(task) => task,
        Err(err) => return failed(err),
    };
    if let Err(err) = task.protect_secrets() {
        return failed(err);
    }
    match task {
        // A dry run is a task of its own (it reads, and takes nothing), not a phase of a run.
        Task::Run(config) if config.dry_run => dry_run::run(&config),
        Task::Run(config) => run::run(&config),
        Task::Admin(config) => admin::run(&config),
        // Nothing of the server (its runtime, its threads) exists before this line.
        Task::Serve(config) => serve::run(&config),
    }
}
