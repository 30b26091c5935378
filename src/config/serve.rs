//! `serve`'s options, checked: the address to listen on and the credentials clients must
//! give, beside the connection every subcommand shares. What the server does with them is
//! `serve`'s.

use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::connection::{check_connection, read_secret_line};
use crate::backend::{Deployment, Key};
use crate::cli::serve::Serve;
use crate::report;

/// `redlock-run serve`, checked.
#[derive(Debug)]
pub struct ServeConfig {
    pub redis: Deployment,
    pub prefix: Key,
    pub redis_timeout: Duration,
    pub listen: SocketAddr,
    /// `user:password` from `--auth-file`: every request must carry it.
    pub credentials: Option<AuthPair>,
}

/// `user:password`, never shown (its `Debug` is `***`).
pub struct AuthPair(pub String);

impl std::fmt::Debug for AuthPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl ServeConfig {
    pub(super) fn from_args(args: Serve) -> Result<ServeConfig> {
        let Serve {
            listen,
            auth_file,
            connection,
        } = args;
        if connection.prefix.is_empty() {
            bail!("serve needs a --prefix: with '' it would read every key in the database");
        }
        let listen: SocketAddr = listen.trim().parse().with_context(|| {
            format!(
                "invalid --listen {:?}: give ADDR:PORT, such as 127.0.0.1:9110 or [::1]:9110",
                report::escape(&listen)
            )
        })?;
        let credentials = match &auth_file {
            Some(file) => {
                let line = read_secret_line(file, "--auth-file", "user:password")?;
                if !line.contains(':') {
                    bail!(
                        "the --auth-file {} has no ':' in its first line: it is user:password",
                        file.display()
                    );
                }
                Some(AuthPair(line))
            }
            None => None,
        };
        let (redis, redis_timeout) = check_connection(&connection)?;
        Ok(ServeConfig {
            redis,
            prefix: Key::new(connection.prefix.as_bytes()),
            redis_timeout,
            listen,
            credentials,
        })
    }
}
