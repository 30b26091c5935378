//! Receives the signals redlock-run forwards and reports each, with its origin, to the
//! supervisor as an event. It decides nothing.
//!
//! | signal                          | while waiting for the lock | while the command runs                |
//! |---------------------------------|----------------------------|---------------------------------------|
//! | INT, TERM, HUP, QUIT, USR1, USR2 sent with `kill` | abort the wait: exit 128+N, nothing run | forwarded to the command's process group |
//! | INT, QUIT typed at the terminal | abort the wait             | not forwarded when the command's group holds the terminal: the terminal already delivered it there, and forwarding would deliver it twice; forwarded otherwise |
//! | TSTP (Ctrl-Z), TTIN, TTOU, WINCH | default action           | reach the command's group from the terminal directly; when the command stops, redlock-run stops too and resumes it on `fg` |
//! | PIPE                            | ignored (Rust's default)   | the command's own default applies     |
//! | KILL                            | redlock-run dies; the key expires by its TTL | the guardian process (see `guardian.rs`) sends the command's group SIGTERM, then SIGKILL by the lease's end; the key expires by its TTL |
//!
//! The origin matters for the terminal row: `Cause::Kernel` marks a signal the terminal
//! driver generated, `Cause::Sent` one that a process sent with `kill`.

use std::sync::mpsc::Sender;

use anyhow::{Context, Result};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;

use crate::supervise::Event;

pub const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Starts listening. Call before anything else happens, so that no signal is missed.
pub fn listen(events: Sender<Event>) -> Result<()> {
    let mut signals =
        SignalsInfo::<WithOrigin>::new(FORWARDED).context("cannot install signal handlers")?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for origin in signals.forever() {
                let event = Event::Signal {
                    signal: origin.signal,
                    from_terminal: matches!(origin.cause, Cause::Kernel),
                };
                if events.send(event).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// The signal's name for messages, e.g. `SIGTERM`.
pub fn name(signal: libc::c_int) -> String {
    signal_hook::low_level::signal_name(signal)
        .map_or_else(|| format!("signal {signal}"), str::to_string)
}
