//! The master that a set of Sentinels names (`redis+sentinel://`): the URL's form, and the
//! search, on every (re)connect, that asks the sentinels in turn
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`) and accepts a server only when it says `ROLE`
//! master: right after a failover a sentinel may still name the old master, now a replica.
//! Each sentinel, with the master it names, gets its share of the search's time; the search
//! starts with the one that answered last, or past the one that failed last. Sending
//! commands to the master, and dropping its connection after a failure (including the
//! `READONLY` a demoted master answers), is `connection.rs`'s part.

use std::time::Instant;

use anyhow::Result;
use redis::{ConnectionInfo, RedisResult, Role, Value};

use super::url::{address, userinfo, MultiUrl, NodeUrl};
use super::{connect, reason, role, share_until, Node};
use crate::backend::error::{describe_error, is_auth_error, BackendError};

/// Where a `redis+sentinel://` host without a port listens.
const SENTINEL_PORT: u16 = 26379;

pub(super) struct Sentinels {
    /// Each sentinel's address and how to connect to it.
    pub(super) sentinels: Vec<(String, ConnectionInfo)>,
    /// The master's name in the sentinels' configuration.
    pub(super) service: String,
    pub(super) master: NodeUrl,
    /// The sentinel that answered last: asked first next time.
    preferred: usize,
}

impl Sentinels {
    /// `[user:password@]host[:port][,host[:port]…]/master-name[/db][?sentinel_username=…&sentinel_password=…]`
    pub(super) fn parse(rest: &str, tls: bool) -> Result<Sentinels, String> {
        let url = MultiUrl::parse(rest, tls, SENTINEL_PORT)?;
        let mut path = url.path.trim_start_matches('/').splitn(2, '/');
        let service = path.next().unwrap_or_default().to_string();
        if service.is_empty() {
            return Err(String::from(
                "the master's name is missing: redis+sentinel://HOST:PORT[,HOST:PORT…]/NAME",
            ));
        }
        let db = match path.next() {
            Some(db) => format!("/{db}"),
            None => String::new(),
        };
        let (mut user, mut password) = ("", None);
        for (name, value) in &url.query {
            match name.as_str() {
                "sentinel_username" => user = value,
                "sentinel_password" => password = Some(value.as_str()),
                // The name is not repeated: it is text from the URL, which may hold a secret.
                _ => {
                    return Err(String::from(
                        "unknown parameter: the only ones are sentinel_username and \
                         sentinel_password",
                    ))
                }
            }
        }
        // Sentinels keep their own credentials (often none): those in the user part are the
        // master's.
        let to_sentinel = NodeUrl {
            userinfo: userinfo(user, password),
            ..url.node_url(String::new())
        };
        let sentinels = url
            .hosts
            .iter()
            .map(|host| Ok((host.clone(), to_sentinel.info(host)?)))
            .collect::<RedisResult<Vec<_>>>()
            .map_err(|err| err.to_string())?;
        let master = url.node_url(db);
        // Checked now, so that a bad database number or password escape is a usage error.
        master.info(&url.hosts[0]).map_err(|err| err.to_string())?;
        Ok(Sentinels {
            sentinels,
            service,
            master,
            preferred: 0,
        })
    }

    /// Asks the sentinels for the master and connects to it, all by `until`, each sentinel
    /// (and the master it names) in its share of the time.
    pub(super) fn master(&mut self, until: Instant, display: &str) -> Result<Node> {
        let count = self.sentinels.len();
        let mut unknown = 0;
        let mut last = String::from("no sentinel answered");
        let first = self.preferred;
        for step in 0..count {
            let index = (first + step) % count;
            let Ok(by) = share_until(until, count - step) else {
                last = match step {
                    0 => String::from("no time left to ask a sentinel"),
                    _ => format!("{last}; no time left to ask the others"),
                };
                break;
            };
            match self.ask(index, by, display) {
                Ok(node) => {
                    self.preferred = index;
                    return Ok(node);
                }
                Err(Miss::Refused(err)) => return Err(err),
                Err(Miss::Unknown(why)) => {
                    unknown += 1;
                    last = why;
                }
                Err(Miss::Failed(why)) => last = why,
            }
            // The next search starts past a sentinel that did not help: one that hangs would
            // otherwise cost every search its share.
            if self.preferred == index {
                self.preferred = (index + 1) % count;
            }
        }
        let message = format!("cannot find the master of {display}: {last}");
        // Every sentinel answered and none knows the name: a typo, not an outage.
        let transient = unknown < count;
        Err(anyhow::Error::new(BackendError::transient_if(
            transient, message,
        )))
    }

    /// Asks sentinel `index` for the master and connects to the server it names, all by `by`.
    fn ask(&self, index: usize, by: Instant, display: &str) -> Result<Node, Miss> {
        let (sentinel, info) = &self.sentinels[index];
        let address = match ask_sentinel(info, &self.service, by) {
            Ok(Some(address)) => address,
            Ok(None) => {
                let why = format!("sentinel {sentinel} knows no master {:?}", self.service);
                return Err(Miss::Unknown(why));
            }
            Err(err) => {
                return Err(Miss::Failed(format!(
                    "sentinel {sentinel}: {}",
                    reason(&err)
                )))
            }
        };
        let opened = self.master.info(&address).and_then(|info| {
            let mut connection = connect(info, by)?;
            let role = role(&mut connection)?;
            Ok((connection, role))
        });
        match opened {
            Ok((connection, Role::Primary { replicas, .. })) => Ok(Node {
                connection: connection.into(),
                replicas: Some(replicas.len()),
                facts: None,
            }),
            Ok(_) => Err(Miss::Failed(format!(
                "{address}, which sentinel {sentinel} names as the master, is not a master (a \
                 failover is under way)"
            ))),
            Err(err) if is_auth_error(&err) => Err(Miss::Refused(describe_error(
                err,
                &format!("{display} (master {address})"),
            ))),
            Err(err) => Err(Miss::Failed(format!(
                "master {address} from sentinel {sentinel}: {}",
                reason(&err)
            ))),
        }
    }
}

/// Why one sentinel did not lead to the master.
enum Miss {
    /// It knows no master by that name.
    Unknown(String),
    /// It, or the server it named, failed or did not answer in time; another may do better.
    Failed(String),
    /// The master turned our credentials down: asking another sentinel will not help.
    Refused(anyhow::Error),
}

/// The master's address by one sentinel; `None` when it knows no master by that name.
fn ask_sentinel(
    info: &ConnectionInfo,
    service: &str,
    until: Instant,
) -> RedisResult<Option<String>> {
    let mut connection = connect(info.clone(), until)?;
    let reply = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(service)
        .query(&mut connection)?;
    master_address(reply)
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME`: `[host, port]`, or nil for a name it does not know.
pub(crate) fn master_address(reply: Value) -> RedisResult<Option<String>> {
    let reply: Option<(String, u16)> = redis::from_redis_value(reply)?;
    Ok(reply.map(|(host, port)| address(&host, port)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::endpoint::tests::{blackhole, bulk, fake_server, redis_values};
    use proptest::prelude::*;
    use std::time::Duration;

    /// A master, and a sentinel that names it.
    fn master_and_sentinel() -> (String, String) {
        let master = fake_server(|_, command| match command[0].as_str() {
            "ROLE" => format!("*3\r\n{}:0\r\n*0\r\n", bulk("master")),
            _ => String::from("-ERR unexpected\r\n"),
        });
        let (host, port) = master.rsplit_once(':').unwrap();
        let named = format!("*2\r\n{}{}", bulk(host), bulk(port));
        let sentinel = fake_server(move |_, _| named.clone());
        (master, sentinel)
    }

    #[test]
    fn a_sentinel_that_never_answers_leaves_time_for_the_others() {
        let (_master, sentinel) = master_and_sentinel();
        let (_hole, hole) = blackhole();
        let mut sentinels = Sentinels::parse(&format!("{hole},{sentinel}/m"), false).unwrap();
        // The silent one is asked first and gets half the time; the other answers in the
        // rest.
        let until = Instant::now() + Duration::from_secs(1);
        let node = sentinels.master(until, "test");
        assert!(node.is_ok(), "{:#}", node.err().unwrap());
        assert!(Instant::now() < until);
        assert_eq!(
            sentinels.preferred, 1,
            "the one that answered is asked first"
        );
        let started = Instant::now();
        sentinels
            .master(started + Duration::from_secs(1), "test")
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "waited for the silent sentinel: {:?}",
            started.elapsed()
        );
    }

    #[test]
    fn a_sentinel_that_failed_is_not_asked_first_next_time() {
        let (_master, sentinel) = master_and_sentinel();
        let (_hole, hole) = blackhole();
        let mut sentinels = Sentinels::parse(&format!("{hole},{sentinel}/m"), false).unwrap();
        // Too little time for the silent one's share to leave any for the other.
        let _ = sentinels.master(Instant::now() + MIN_TIME, "test");
        assert_eq!(sentinels.preferred, 1);
        let started = Instant::now();
        sentinels
            .master(started + Duration::from_secs(1), "test")
            .unwrap();
        assert!(started.elapsed() < Duration::from_millis(500));
    }

    /// Less than one server's least share.
    const MIN_TIME: Duration = Duration::from_millis(20);

    #[test]
    fn sentinel_urls() {
        let s =
            Sentinels::parse(":pw@a:1,b,[::1]:3/mymaster/2?sentinel_password=sp", false).unwrap();
        let hosts: Vec<&str> = s.sentinels.iter().map(|(a, _)| a.as_str()).collect();
        assert_eq!(hosts, ["a:1", "b:26379", "[::1]:3"]);
        assert_eq!(s.service, "mymaster");
        assert_eq!(s.master.path, "/2");
        assert_eq!(s.master.userinfo, ":pw@");
        assert_eq!(
            s.sentinels[0].1.redis_settings().password(),
            Some("sp"),
            "sentinels get their own password"
        );
        let s =
            Sentinels::parse("a/m?sentinel_username=n:m&sentinel_password=Qx/Zv?Wk", true).unwrap();
        let settings = s.sentinels[0].1.redis_settings();
        assert_eq!(settings.username(), Some("n:m"));
        assert_eq!(settings.password(), Some("Qx/Zv?Wk"));
        assert_eq!(
            s.master.userinfo, "",
            "the master's credentials are the user part's"
        );
        for bad in ["a:1", "a:1/", "a:x/m", "a,,b/m", "a/m?db=1"] {
            assert!(Sentinels::parse(bad, false).is_err(), "accepted {bad}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any reply to GET-MASTER-ADDR-BY-NAME gives an address, none, or an error.
        #[test]
        fn any_master_address_reply_is_read_or_refused(reply in redis_values()) {
            let _ = master_address(reply);
        }

        #[test]
        fn master_addresses_are_read_back(host in "[a-z0-9.:]{1,12}", port in any::<u16>()) {
            let reply = Value::Array(vec![
                Value::BulkString(host.clone().into_bytes()),
                Value::BulkString(port.to_string().into_bytes()),
            ]);
            prop_assert_eq!(master_address(reply).unwrap(), Some(address(&host, port)));
            prop_assert_eq!(master_address(Value::Nil).unwrap(), None);
        }

        #[test]
        fn any_sentinel_url_is_taken_apart_or_refused(rest in "[a-z0-9:/?#@&=,.%_\\[\\]-]{0,32}") {
            let _ = Sentinels::parse(&rest, false);
        }
    }
}
