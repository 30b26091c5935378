//! Everything that touches processes, behind one small facade: readying this process to
//! supervise (`prepare`), starting the command (`Command`, `spawn`), watching it (`changes`, on SIGCHLD),
//! signalling and reaping it (`Child`), and the guardian that ends it if redlock-run cannot
//! (`Guardian`), and keeping this process's secrets to itself (`protect_secrets`). Nothing
//! here knows about locks or Redis: the lease's end reaches the
//! guardian as an `Instant`, and when to signal is `supervise.rs`'s decision.

mod child;
mod clock;
mod guardian;
mod launch;
mod secrets;

pub use child::{changes, is_init, prepare, spawn, Child, ChildChange, Group, SpawnError};
pub use guardian::{Guardian, ReadyGuardian};
pub use launch::{find as find_program, Command};
pub use secrets::protect as protect_secrets;

/// Readies `argv` to start: its PATH candidates, its arguments and the inherited
/// environment less the variables named in `sets`. `handled` are the signals this process
/// has handlers for (reset to their defaults in the command). Done before the lock is taken,
/// so that none of it lies between a release and the command's start.
pub fn command(
    argv: &[std::ffi::OsString],
    sets: &[&str],
    handled: &[libc::c_int],
) -> Result<Command, SpawnError> {
    Command::new(argv, sets, handled).map_err(SpawnError::from)
}
