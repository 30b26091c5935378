//! Whether a server can keep a lock at all, from what it says of itself: a server that may
//! evict keys under memory pressure (`maxmemory` set, any `maxmemory-policy` but
//! `noeviction`; the `volatile-*` ones evict exactly the keys that have a TTL, which every
//! lock key has) can delete a lock while its holder runs and let a second holder in; a
//! Redis Cluster node reached by a plain URL takes locks that `redis+cluster://` users do
//! not see the notices of. Both are refused before a lock is taken.
//!
//! It costs the uncontended path no round trip: `INFO memory cluster` rides in the same
//! write as a connection's first acquisition (`Prelude`; Redis 6.2, which takes one
//! section at a time, is asked each after, in a round trip of its own), and what it says is
//! kept with the connection (and, for a waiter that closes it between tries, with the
//! endpoint until a failure: see `Endpoint::rest`). `INFO` is asked rather than `CONFIG GET`: managed services
//! and hardened servers refuse or rename `CONFIG`, and a user allowed `CONFIG GET` could
//! read the server's passwords. Only where `INFO` is refused is `CONFIG GET` tried, in a
//! round trip of its own.
//!
//! What this module does not own: when the check is made (`protocol`), what a refusal
//! does to a quorum (`quorum`).

use redis::{Cmd, ConnectionLike, RedisResult, Value};

use super::wire::Wire;

/// What one server said of itself, for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    pub memory: Memory,
    /// `cluster_enabled:1`: a Redis Cluster node.
    pub cluster: bool,
}

/// Whether the server may evict the lock's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Memory {
    /// No memory limit, or `noeviction`: a key goes only when it expires or is deleted.
    Keeps,
    /// A memory limit and this eviction policy.
    Evicts { policy: String },
    /// The server did not say; why.
    Unknown(String),
}

/// Whether an acquisition goes ahead on a server that may evict the lock
/// (`--allow-eviction`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    Refused,
    Allowed,
}

/// Why a server cannot be trusted with a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unfit {
    Evicts { policy: String },
    MayEvict { why: String },
    ClusterNode,
}

/// A server refused as unfit for a lock: a refusal of the whole attempt, which a Redlock
/// quorum does not outvote.
#[derive(Debug)]
pub struct UnfitServer {
    message: String,
}

impl std::fmt::Display for UnfitServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for UnfitServer {}

/// Whether `err` is a server refused as unfit for a lock.
pub fn is_unfit(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|cause| cause.downcast_ref::<UnfitServer>().is_some())
}

/// What keeps a lock from being safe on a server that said `facts` (`None`: it was not
/// asked, which a successful acquisition never leaves), reached through a `cluster` URL
/// or not.
pub fn unfit(facts: Option<&Facts>, eviction: Eviction, cluster: bool) -> Option<Unfit> {
    let Some(facts) = facts else {
        return Some(Unfit::MayEvict {
            why: String::from("it was not asked"),
        });
    };
    if facts.cluster && !cluster {
        return Some(Unfit::ClusterNode);
    }
    match (&facts.memory, eviction) {
        (_, Eviction::Allowed) | (Memory::Keeps, _) => None,
        (Memory::Evicts { policy }, Eviction::Refused) => Some(Unfit::Evicts {
            policy: policy.clone(),
        }),
        (Memory::Unknown(why), Eviction::Refused) => Some(Unfit::MayEvict { why: why.clone() }),
    }
}

impl Unfit {
    /// The refusal, naming the server by `display` and saying what would fix it.
    pub fn error(&self, display: &str) -> anyhow::Error {
        let message = match self {
            Unfit::Evicts { policy } => format!(
                "{display} may evict the lock's key: maxmemory is set and maxmemory-policy is \
                 {policy}, so under memory pressure Redis may delete a held lock and let a \
                 second holder in; run `CONFIG SET maxmemory-policy noeviction` there (and set \
                 it in its configuration file), or keep locks on a separate Redis that does \
                 not evict; --allow-eviction (REDLOCK_ALLOW_EVICTION=1) takes the risk"
            ),
            Unfit::MayEvict { why } => format!(
                "cannot tell whether {display} may evict the lock's key: {why}; allow this \
                 user `+info` (see docs/security.md), or pass --allow-eviction if the \
                 server never evicts keys"
            ),
            Unfit::ClusterNode => format!(
                "{display} is a Redis Cluster node: use a redis+cluster:// URL (through a plain \
                 URL, locks would not share release notices and queues with redis+cluster:// \
                 users of the same lock)"
            ),
        };
        anyhow::Error::new(UnfitServer { message })
    }
}

/// The commands a connection's first acquisition carries before its own: one `INFO` of
/// both sections (Redis 7 and Valkey take several; Redis 6.2 answers a syntax error, and
/// `facts_from` asks it each one after).
pub fn questions() -> [Cmd; 1] {
    let mut info = redis::cmd("INFO");
    info.arg("memory").arg("cluster");
    [info]
}

/// What the replies to `questions` say; where `INFO` of two sections is a syntax error
/// (Redis 6.2), asks each section on `connection`, and where `INFO` was refused, `CONFIG
/// GET` (one more round trip each). The error is a failure of such a round trip's
/// connection (a timeout, a reset): no answer, so no verdict either, and the caller's try
/// fails as on any lost reply.
pub fn facts_from(replies: &[Value], connection: &mut dyn ConnectionLike) -> RedisResult<Facts> {
    let text = |reply: Option<&Value>| match reply {
        Some(Value::BulkString(bytes)) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Some(Value::VerbatimString { text, .. }) => Ok(text.clone()),
        Some(Value::SimpleString(text)) => Ok(text.clone()),
        Some(Value::ServerError(err)) => Err(format!(
            "{}{}",
            err.code(),
            err.details().map(|d| format!(" {d}")).unwrap_or_default()
        )),
        _ => Err(String::from("no readable reply to INFO")),
    };
    let (memory_info, cluster_info) = match text(replies.first()) {
        Err(said) if said.contains("syntax error") => {
            let mut pipe = redis::pipe();
            pipe.cmd("INFO").arg("memory").cmd("INFO").arg("cluster");
            match pipe.query::<Vec<Value>>(connection) {
                Ok(replies) => (text(replies.first()), text(replies.get(1))),
                Err(err) if err.is_io_error() || err.is_timeout() => return Err(err),
                Err(err) => (Err(err.to_string()), Err(err.to_string())),
            }
        }
        both => (both.clone(), both),
    };
    let cluster = cluster_info
        .ok()
        .and_then(|info| field(&info, "cluster_enabled").map(|on| on == "1"))
        .unwrap_or(false);
    let memory = match memory_info {
        Ok(info) => memory_from(
            field(&info, "maxmemory"),
            field(&info, "maxmemory_policy"),
            "INFO memory",
        ),
        Err(refused) => match memory_from_config(connection) {
            Ok(memory) => memory,
            Err(ConfigRefused::Lost(err)) => return Err(err),
            Err(ConfigRefused::Said(config)) => Memory::Unknown(format!(
                "it refused INFO ({refused}) and CONFIG GET ({config})"
            )),
        },
    };
    Ok(Facts { memory, cluster })
}

/// Why `CONFIG GET` gave no verdict.
enum ConfigRefused {
    /// The server's answer: refused, or unreadable.
    Said(String),
    /// No answer: the connection failed.
    Lost(redis::RedisError),
}

/// What a server said to `INFO memory` and `INFO cluster`, each asked on its own (`--dry-run`,
/// through the inspector's connections): `Err` is why it was refused. No `CONFIG GET`
/// fallback here: a refused `INFO` leaves the memory unknown, and the run would be
/// refused the same unless `CONFIG GET` is allowed.
pub fn facts_from_texts(memory: Result<String, String>, cluster: Option<&str>) -> Facts {
    let cluster = cluster
        .and_then(|info| field(info, "cluster_enabled").map(|on| on == "1"))
        .unwrap_or(false);
    let memory = match memory {
        Ok(info) => memory_from(
            field(&info, "maxmemory"),
            field(&info, "maxmemory_policy"),
            "INFO memory",
        ),
        Err(refused) => Memory::Unknown(format!("it refused INFO ({refused})")),
    };
    Facts { memory, cluster }
}

/// The value of `name` in `INFO` text, for `--dry-run`'s other questions (role, version).
pub fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    field(info, name)
}

/// `CONFIG GET maxmemory*`: the limit and the policy, among others.
fn memory_from_config(connection: &mut dyn ConnectionLike) -> Result<Memory, ConfigRefused> {
    let reply: RedisResult<Value> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory*")
        .query(connection);
    let pairs: Vec<(String, String)> = match reply {
        Ok(Value::Map(pairs)) => pairs
            .into_iter()
            .filter_map(|(name, value)| {
                Some((
                    redis::from_redis_value(name).ok()?,
                    redis::from_redis_value(value).ok()?,
                ))
            })
            .collect(),
        Ok(Value::Array(items)) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [name, value] => Some((
                    redis::from_redis_value(name.clone()).ok()?,
                    redis::from_redis_value(value.clone()).ok()?,
                )),
                _ => None,
            })
            .collect(),
        Ok(_) => return Err(ConfigRefused::Said(String::from("an unreadable reply"))),
        Err(err) if err.is_io_error() || err.is_timeout() => return Err(ConfigRefused::Lost(err)),
        Err(err) => return Err(ConfigRefused::Said(err.to_string())),
    };
    let get = |wanted: &str| {
        pairs
            .iter()
            .find(|(name, _)| name == wanted)
            .map(|(_, value)| value.as_str())
    };
    Ok(memory_from(
        get("maxmemory"),
        get("maxmemory-policy"),
        "CONFIG GET",
    ))
}

/// The verdict from the limit and the policy, as the server wrote them; `source` names
/// where they were read, for the message when one is missing.
fn memory_from(maxmemory: Option<&str>, policy: Option<&str>, source: &str) -> Memory {
    match (maxmemory.map(str::parse::<u64>), policy) {
        (Some(Ok(0)), _) | (Some(Ok(_)), Some("noeviction")) => Memory::Keeps,
        (Some(Ok(_)), Some(policy)) => Memory::Evicts {
            policy: policy.chars().take(64).collect(),
        },
        _ => Memory::Unknown(format!(
            "its {source} reply has no readable maxmemory and maxmemory-policy"
        )),
    }
}

/// The value of `name` in `INFO` text (`name:value` lines).
fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// A connection whose next request carries `questions` first, in the same write: their
/// replies are kept apart (`answers`) and the request's own returned as if alone.
pub struct Prelude<'a> {
    pub inner: &'a mut dyn Wire,
    pending: Option<Vec<u8>>,
    asked: usize,
    pub answers: Option<Vec<Value>>,
}

impl<'a> Prelude<'a> {
    /// `questions` go with the next request; none when `None`.
    pub fn new(inner: &'a mut dyn Wire, questions: Option<&[Cmd]>) -> Prelude<'a> {
        let asked = questions.map_or(0, <[Cmd]>::len);
        let pending = questions.map(|questions| {
            let mut pipe = redis::pipe();
            for question in questions {
                pipe.add_command(question.clone());
            }
            pipe.get_packed_pipeline()
        });
        Prelude {
            inner,
            pending,
            asked,
            answers: None,
        }
    }

    /// Sends the questions (if still to go) and `cmd`; returns the replies past `skip`.
    fn request(&mut self, cmd: &[u8], skip: usize, count: usize) -> RedisResult<Vec<Value>> {
        let Some(mut packed) = self.pending.take() else {
            return self.inner.req_packed_commands(cmd, skip, count);
        };
        packed.extend_from_slice(cmd);
        self.inner.send_packed(&packed)?;
        let mut replies = Vec::with_capacity(self.asked + skip + count);
        while replies.len() < self.asked + skip + count {
            match self.inner.recv() {
                Ok(reply) => replies.push(reply),
                // A server that turns a new connection away (at its client limit) answers
                // its first command with why, and hangs up: that is the answer, not the
                // closed connection. Not when the reply timed out (an `INFO` refused, then
                // no answer to the script): the script may have run, and only a failure
                // of the connection gets the try made again.
                Err(err) => {
                    return Err(match replies.as_slice() {
                        [Value::ServerError(said), ..] if !err.is_timeout() => said.clone().into(),
                        _ => err,
                    })
                }
            }
        }
        let own = replies.split_off(self.asked);
        self.answers = Some(replies);
        Ok(own.into_iter().skip(skip).collect())
    }
}

impl ConnectionLike for Prelude<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        if self.pending.is_none() {
            return self.inner.req_packed_command(cmd);
        }
        let mut replies = self.request(cmd, 0, 1)?;
        replies.pop().ok_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::Parse, "no reply to the command"))
        })
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.request(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.inner.check_connection()
    }

    fn is_open(&self) -> bool {
        self.inner.is_open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection whose every request gets `reply` (an answer, or a failure).
    struct Answering(fn() -> RedisResult<Value>);

    impl ConnectionLike for Answering {
        fn req_packed_command(&mut self, _: &[u8]) -> RedisResult<Value> {
            (self.0)()
        }
        fn req_packed_commands(&mut self, _: &[u8], _: usize, _: usize) -> RedisResult<Vec<Value>> {
            (self.0)().map(|reply| vec![reply])
        }
        fn get_db(&self) -> i64 {
            0
        }
        fn check_connection(&mut self) -> bool {
            true
        }
        fn is_open(&self) -> bool {
            true
        }
    }

    #[test]
    fn config_get_unanswered_is_no_verdict_and_refused_is_unknown() {
        let replies = [
            redis::parse_redis_value(
                b"-NOPERM this user has no permissions to run the 'info' command\r\n",
            )
            .unwrap(),
            Value::BulkString(b"cluster_enabled:0".to_vec()),
        ];
        let lost = || Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        let err = facts_from(&replies, &mut Answering(lost)).unwrap_err();
        assert!(err.is_timeout(), "{err}");
        let config_refused = || {
            redis::parse_redis_value(
                b"-NOPERM this user has no permissions to run the 'config|get' command\r\n",
            )
        };
        let facts = facts_from(&replies, &mut Answering(config_refused)).unwrap();
        assert!(matches!(facts.memory, Memory::Unknown(_)), "{facts:?}");
    }

    #[test]
    fn one_info_tells_both_and_redis_6_is_asked_each_section_after() {
        let both = "# Memory\r\nmaxmemory:100\r\nmaxmemory_policy:allkeys-lru\r\n\r\n\
                    # Cluster\r\ncluster_enabled:1\r\n";
        let replies = [Value::BulkString(both.as_bytes().to_vec())];
        let unasked = || panic!("nothing more is asked");
        let facts = facts_from(&replies, &mut Answering(unasked)).unwrap();
        let evicts = Memory::Evicts {
            policy: String::from("allkeys-lru"),
        };
        assert_eq!(facts.memory, evicts);
        assert!(facts.cluster);
        // Redis 6.2: one section at a time.
        let syntax = [redis::parse_redis_value(b"-ERR syntax error\r\n").unwrap()];
        let memory = || {
            let text = b"# Memory\r\nmaxmemory:100\r\nmaxmemory_policy:allkeys-lru\r\n";
            Ok(Value::BulkString(text.to_vec()))
        };
        let facts = facts_from(&syntax, &mut Answering(memory)).unwrap();
        assert_eq!(facts.memory, evicts);
        let lost = || Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into());
        assert!(facts_from(&syntax, &mut Answering(lost)).is_err());
    }

    #[test]
    fn the_policy_decides_only_with_a_limit() {
        let info = |max: &str, policy: &str| {
            let text = format!(
                "# Memory\r\nused_memory:1\r\nmaxmemory:{max}\r\nmaxmemory_human:x\r\n\
                 maxmemory_policy:{policy}\r\n"
            );
            memory_from(
                field(&text, "maxmemory"),
                field(&text, "maxmemory_policy"),
                "INFO memory",
            )
        };
        assert_eq!(info("0", "allkeys-lru"), Memory::Keeps);
        assert_eq!(info("104857600", "noeviction"), Memory::Keeps);
        for policy in [
            "allkeys-lru",
            "volatile-ttl",
            "volatile-lru",
            "allkeys-random",
        ] {
            assert_eq!(
                info("104857600", policy),
                Memory::Evicts {
                    policy: policy.to_string()
                }
            );
        }
        assert!(matches!(info("lots", "noeviction"), Memory::Unknown(_)));
        assert!(matches!(
            memory_from(Some("1"), None, "INFO memory"),
            Memory::Unknown(_)
        ));
        // `maxmemory_human` and the like are not `maxmemory`.
        assert_eq!(
            field("maxmemory_human:0B\r\nmaxmemory:5\r\n", "maxmemory"),
            Some("5")
        );
        assert_eq!(field("cluster_enabled:1\r\n", "cluster_enabled"), Some("1"));
    }

    #[test]
    fn an_unfit_server_is_refused_unless_eviction_is_allowed() {
        let facts = |memory: Memory, cluster: bool| Facts { memory, cluster };
        let evicts = || Memory::Evicts {
            policy: String::from("allkeys-lru"),
        };
        assert_eq!(
            unfit(Some(&facts(Memory::Keeps, false)), Eviction::Refused, false),
            None
        );
        assert!(matches!(
            unfit(Some(&facts(evicts(), false)), Eviction::Refused, false),
            Some(Unfit::Evicts { .. })
        ));
        assert_eq!(
            unfit(Some(&facts(evicts(), false)), Eviction::Allowed, false),
            None
        );
        let unknown = facts(Memory::Unknown(String::from("?")), false);
        assert!(matches!(
            unfit(Some(&unknown), Eviction::Refused, false),
            Some(Unfit::MayEvict { .. })
        ));
        assert_eq!(unfit(Some(&unknown), Eviction::Allowed, false), None);
        // A cluster node is refused behind a plain URL, whatever --allow-eviction says.
        let node = facts(Memory::Keeps, true);
        assert_eq!(
            unfit(Some(&node), Eviction::Allowed, false),
            Some(Unfit::ClusterNode)
        );
        assert_eq!(unfit(Some(&node), Eviction::Refused, true), None);
        let message = format!(
            "{:#}",
            Unfit::Evicts {
                policy: "volatile-ttl".into()
            }
            .error("R")
        );
        assert!(
            message.starts_with("R may evict the lock's key"),
            "{message}"
        );
        assert!(message.contains("CONFIG SET maxmemory-policy noeviction"));
    }

    proptest::proptest! {
        /// Whatever a server writes in its INFO reply, reading it never panics.
        #[test]
        fn any_info_text_is_read_or_called_unknown(text in "\\PC{0,200}") {
            let _ = memory_from(
                field(&text, "maxmemory"),
                field(&text, "maxmemory_policy"),
                "INFO memory",
            );
            let _ = field(&text, "cluster_enabled");
        }
    }
}
