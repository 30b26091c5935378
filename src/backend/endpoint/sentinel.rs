//! The master that a set of Sentinels names (`redis+sentinel://`): the URL's form, and the
//! search, on every (re)connect, that asks the sentinels in turn
//! (`SENTINEL GET-MASTER-ADDR-BY-NAME`), starting with the one that answered last, and
//! accepts a server only when it says `ROLE` master: right after a failover a sentinel may
//! still name the old master, now a replica. Sending commands to the master, and dropping
//! its connection after a failure (including the `READONLY` a demoted master answers), is
//! `single.rs`'s part.

use std::time::Instant;

use anyhow::Result;
use redis::{ConnectionInfo, RedisResult, Role};

use super::url::{address, userinfo, MultiUrl, NodeUrl};
use super::{connect, role, Node};
use crate::backend::single::{describe_error, is_auth_error};
use crate::backend::BackendError;

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

    /// Asks the sentinels for the master and connects to it, all by `until`.
    pub(super) fn master(&mut self, until: Instant, display: &str) -> Result<Node> {
        let count = self.sentinels.len();
        let mut unknown = 0;
        let mut last = String::from("no sentinel answered");
        for step in 0..count {
            let index = (self.preferred + step) % count;
            let (sentinel, info) = &self.sentinels[index];
            let address = match ask_sentinel(info, &self.service, until) {
                Ok(Some(address)) => address,
                Ok(None) => {
                    unknown += 1;
                    last = format!("sentinel {sentinel} knows no master {:?}", self.service);
                    continue;
                }
                Err(err) => {
                    last = format!("sentinel {sentinel}: {err}");
                    continue;
                }
            };
            let opened = self.master.info(&address).and_then(|info| {
                let mut connection = connect(info, until)?;
                let role = role(&mut connection)?;
                Ok((connection, role))
            });
            match opened {
                Ok((connection, Role::Primary { replicas, .. })) => {
                    self.preferred = index;
                    return Ok(Node {
                        connection,
                        replicas: Some(replicas.len()),
                    });
                }
                Ok(_) => {
                    last = format!(
                        "{address}, which sentinel {sentinel} names as the master, is not a \
                         master (a failover is under way)"
                    );
                }
                Err(err) if is_auth_error(&err) => {
                    return Err(describe_error(
                        err,
                        &format!("{display} (master {address})"),
                    ));
                }
                Err(err) => last = format!("master {address} from sentinel {sentinel}: {err}"),
            }
        }
        let message = format!("cannot find the master of {display}: {last}");
        // Every sentinel answered and none knows the name: a typo, not an outage.
        let transient = unknown < count;
        Err(anyhow::Error::new(BackendError { message, transient }))
    }
}

/// The master's address by one sentinel; `None` when it knows no master by that name.
fn ask_sentinel(
    info: &ConnectionInfo,
    service: &str,
    until: Instant,
) -> RedisResult<Option<String>> {
    let mut connection = connect(info.clone(), until)?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(service)
        .query(&mut connection)?;
    Ok(reply.map(|(host, port)| address(&host, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
