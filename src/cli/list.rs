//! `list`'s own arguments: the output's form.

use clap::Args;

use super::connection::Connection;

#[derive(Debug, Args)]
pub struct List {
    /// Print a JSON array instead of lines
    ///
    /// One object per lock, each as `status --json` prints it.
    #[arg(long)]
    pub json: bool,

    #[command(flatten)]
    pub connection: Connection,
}
