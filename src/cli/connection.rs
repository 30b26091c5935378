//! Where the locks live, for every form of the command (a run and each subcommand): the
//! URLs, the password file, the key prefix and the time limit of each Redis call. Checked
//! in `config::connection`.

use clap::Args;

/// Where the locks live; shared by every form of the command.
#[derive(Debug, Args)]
pub struct Connection {
    /// Redis URL: redis://, rediss:// (TLS) or redis+unix://, with user:password@ and /db;
    /// redis+sentinel://HOST:PORT,…/MASTER for the master that Sentinels name;
    /// redis+cluster://HOST:PORT,… for a Redis Cluster. Repeat it (or comma-separate URLs
    /// in REDLOCK_REDIS) for a Redlock quorum over independent masters; 3 or 5 are usual
    ///
    /// A URL's password is redacted wherever it is printed. Typed on the command line, it is
    /// visible to every local user in ps (redlock-run warns): prefer REDLOCK_REDIS,
    /// REDLOCK_PASSWORD or --password-file. With several URLs the lock is held while a
    /// majority of the masters holds it; Sentinel and Cluster URLs cannot be mixed with
    /// others. A flag on the command line beats REDLOCK_REDIS.
    #[arg(
        short,
        long,
        value_name = "URL",
        env = "REDLOCK_REDIS",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379",
        action = clap::ArgAction::Append
    )]
    pub redis: Vec<String>,

    /// Read the Redis password from the first line of FILE, for every URL that has none of
    /// its own (a password in a URL on the command line is visible to every local user in
    /// ps; REDLOCK_PASSWORD is the other way to keep it off the command line)
    ///
    /// REDLOCK_PASSWORD (not a flag) holds the password itself, for every URL that has none
    /// of its own. Neither is passed to the command; REDLOCK_REDIS and REDLOCK_PASSWORD are
    /// removed from the command's environment when they hold a password (see
    /// --pass-redis-env).
    #[arg(long, value_name = "FILE", env = "REDLOCK_PASSWORD_FILE")]
    pub password_file: Option<std::path::PathBuf>,

    /// Whether the URLs were typed on the command line (not taken from REDLOCK_REDIS or the
    /// default): set by `Cli::parse_from_args`.
    #[arg(skip)]
    pub typed: bool,

    /// Prefix of the Redis key; '' uses KEY as is
    ///
    /// The lock's Redis key is PREFIX + KEY, given to the command as REDLOCK_KEY. Every user
    /// of a lock must use the same prefix; `list` shows the locks under it.
    #[arg(
        long,
        value_name = "P",
        env = "REDLOCK_PREFIX",
        default_value = "redlock:"
    )]
    pub prefix: std::ffi::OsString,

    /// Time limit for connecting to Redis and for each Redis command (taking the lock: up
    /// to twice this, as an attempt whose answer is lost is made once more)
    ///
    /// From 10ms to an hour; a bare number is seconds. A connection that timed out is
    /// dropped, never reused. A renewal that times out is retried while the lease surely
    /// lasts. An attempt to take the lock that got no answer is made once more on a new
    /// connection (only that tells whether it took the lock), even past a --wait deadline:
    /// against a server that stops answering, taking the lock gives up after twice this,
    /// and a wait ends up to this much past its deadline.
    #[arg(
        long,
        value_name = "DUR",
        env = "REDLOCK_REDIS_TIMEOUT",
        default_value = "5s"
    )]
    pub redis_timeout: String,
}
