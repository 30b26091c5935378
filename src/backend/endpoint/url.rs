//! Taking `redis+sentinel://` and `redis+cluster://` URLs apart (`MultiUrl`), and the
//! `redis://` URL of each server they lead to (`NodeUrl`). What the parts mean (a master's
//! name, parameters, databases) is for `sentinel` and `cluster` to say.
//!
//! The user part runs to the *last* `@`, as `target::redact_url` has it: a password may hold
//! `#`, `/`, `?` and `@` unescaped, so it is split off before anything else, and escaped
//! again for the redis crate. No error here quotes the URL's text: the caller prints the
//! redacted URL next to it, and anything else read from the URL may hold a secret.

use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};

use super::tune;

/// How to reach a server at some address with the scheme, credentials, database and options
/// the URL gave: a URL for the redis crate to parse, so that TLS and percent-escapes work as
/// they do for a `redis://` URL.
#[derive(Clone)]
pub(super) struct NodeUrl {
    pub(super) scheme: &'static str,
    /// `user:password@`, or empty.
    pub(super) userinfo: String,
    /// `/db`, or empty.
    pub(super) path: String,
    /// `#insecure` and the like, or empty.
    pub(super) fragment: String,
}

impl NodeUrl {
    pub(super) fn info(&self, address: &str) -> RedisResult<ConnectionInfo> {
        let url = format!(
            "{}://{}{}{}{}",
            self.scheme, self.userinfo, address, self.path, self.fragment
        );
        url.as_str().into_connection_info().map(tune)
    }
}

/// A `redis+sentinel://` or `redis+cluster://` URL taken apart.
pub(super) struct MultiUrl {
    tls: bool,
    userinfo: String,
    /// `host:port` of each server listed.
    pub(super) hosts: Vec<String>,
    pub(super) path: String,
    pub(super) query: Vec<(String, String)>,
    fragment: String,
}

impl MultiUrl {
    pub(super) fn parse(rest: &str, tls: bool, default_port: u16) -> Result<MultiUrl, String> {
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => match userinfo.split_once(':') {
                Some((user, password)) => (self::userinfo(user, Some(password)), rest),
                None => (self::userinfo(userinfo, None), rest),
            },
            None => (String::new(), rest),
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, format!("#{fragment}")),
            None => (rest, String::new()),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], rest[slash..].to_string()),
            None => (rest, String::new()),
        };
        let hosts = hosts
            .split(',')
            .enumerate()
            .map(|(at, host)| with_port(host, default_port, at + 1))
            .collect::<Result<Vec<_>, _>>()?;
        let query = query
            .split('&')
            .filter(|param| !param.is_empty())
            .map(|param| {
                let (name, value) = param.split_once('=').unwrap_or((param, ""));
                (name.to_string(), value.to_string())
            })
            .collect();
        Ok(MultiUrl {
            tls,
            userinfo,
            hosts,
            path,
            query,
            fragment,
        })
    }

    pub(super) fn node_url(&self, path: String) -> NodeUrl {
        NodeUrl {
            scheme: if self.tls { "rediss" } else { "redis" },
            userinfo: self.userinfo.clone(),
            path,
            fragment: self.fragment.clone(),
        }
    }
}

/// `host:port` for a host written with or without its port (IPv6 in brackets). The error
/// names the host by its place in the list, `number`, not by its text.
fn with_port(host: &str, default_port: u16, number: usize) -> Result<String, String> {
    if host.is_empty() {
        return Err(String::from("a host is missing from the list"));
    }
    let has_port = match host.rfind(']') {
        Some(bracket) => host[bracket..].contains(':'),
        None => host.contains(':'),
    };
    if !has_port {
        return Ok(format!("{host}:{default_port}"));
    }
    let (name, port) = host.rsplit_once(':').unwrap_or((host, ""));
    match port.parse::<u16>() {
        Ok(_) if !name.is_empty() => Ok(host.to_string()),
        _ => Err(format!(
            "host {number} of the list is not HOST or HOST:PORT"
        )),
    }
}

/// `user:password@` (or `user@`, or nothing) for a `redis://` URL, with what would end the
/// user part early (`/`, `?`, `#`, `@`) or move the split between name and password (`:`
/// in the name) percent-escaped. Escapes already there are kept: the redis crate decodes
/// them, as it does in any `redis://` URL.
pub(super) fn userinfo(user: &str, password: Option<&str>) -> String {
    let escape = |text: &str, colon: bool| {
        let mut escaped = String::with_capacity(text.len());
        for ch in text.chars() {
            match ch {
                '/' | '?' | '#' | '@' => escaped.push_str(&format!("%{:02X}", ch as u32)),
                ':' if colon => escaped.push_str("%3A"),
                ch => escaped.push(ch),
            }
        }
        escaped
    };
    match password {
        Some(password) => format!("{}:{}@", escape(user, true), escape(password, false)),
        None if !user.is_empty() => format!("{}@", escape(user, true)),
        None => String::new(),
    }
}

/// `host:port`, with an IPv6 host in brackets, as URLs and our connection map write it.
pub(super) fn address(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A query parameter that the URL's scheme does not take (`?foo=bar`, a misspelt `protocol`)
/// is an error, not ignored as the redis crate would. The name is not repeated: text from
/// the URL may hold a secret.
pub(super) fn known_parameters_only(scheme: &str, rest: &str) -> Result<(), String> {
    let known: &[&str] = match scheme {
        "unix" | "redis+unix" | "valkey+unix" => &["protocol", "db", "user", "pass"],
        _ => &["protocol"],
    };
    let query = rest.split('#').next().unwrap_or("");
    let Some((_, query)) = query.split_once('?') else {
        return Ok(());
    };
    let unknown = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .any(|pair| !known.contains(&pair.split('=').next().unwrap_or(pair)));
    if unknown {
        return Err(format!(
            "unknown parameter: the only ones a {scheme}:// URL takes are {}",
            known.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Passwords that hold what ends a URL's parts, each in pieces that no message has.
    pub(in crate::backend::endpoint) const TRICKY: [&str; 7] = [
        "Qx#Zv",
        "Qx/Zv",
        "Qx?Zv",
        "Qx@Zv",
        "Qx:Zv",
        "Qx#Zv/Wk?Jp@Yb",
        "Qx@Zv#Wk,Jp@Yb",
    ];

    #[test]
    fn the_user_part_runs_to_the_last_at_and_survives_intact() {
        for password in TRICKY {
            let rest = format!("me:{password}@h1,h2:7/m?a=1#insecure");
            let url = MultiUrl::parse(&rest, true, 1).unwrap();
            assert_eq!(url.hosts, ["h1:1", "h2:7"], "{password}");
            assert_eq!(url.path, "/m");
            assert_eq!(url.query, [(String::from("a"), String::from("1"))]);
            let info = url.node_url(String::new()).info("h1:1").unwrap();
            assert_eq!(info.redis_settings().username(), Some("me"));
            assert_eq!(info.redis_settings().password(), Some(password));
        }
        // Escapes written in the URL are the redis crate's to decode, as in redis://.
        let url = MultiUrl::parse(":a%2Fb@h", false, 1).unwrap();
        let info = url.node_url(String::new()).info("h:1").unwrap();
        assert_eq!(info.redis_settings().password(), Some("a/b"));
    }

    #[test]
    fn user_parts_are_escaped_for_the_redis_crate() {
        assert_eq!(userinfo("", None), "");
        assert_eq!(userinfo("u", None), "u@");
        assert_eq!(userinfo("", Some("p")), ":p@");
        assert_eq!(
            userinfo("a:b", Some("c:d/e?f#g@h")),
            "a%3Ab:c:d%2Fe%3Ff%23g%40h@"
        );
    }

    #[test]
    fn bad_hosts_are_named_by_place() {
        let err = MultiUrl::parse("Qx:Zv,h", false, 1).err().unwrap();
        assert_eq!(err, "host 1 of the list is not HOST or HOST:PORT");
        assert!(MultiUrl::parse("h,,g", false, 1).is_err());
        assert!(MultiUrl::parse("h:70000", false, 1).is_err());
        let url = MultiUrl::parse("[::1]:3,[::1]", false, 1).unwrap();
        assert_eq!(url.hosts, ["[::1]:3", "[::1]:1"]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn any_multi_server_url_is_taken_apart_or_refused(
            rest in "[a-z0-9:/?#@&=,.%_\\[\\]-]{0,32}|\\PC{0,16}",
            port in any::<u16>(),
        ) {
            if let Ok(url) = MultiUrl::parse(&rest, false, port) {
                prop_assert!(!url.hosts.is_empty());
                let _ = url.node_url(url.path.clone()).info(&url.hosts[0]);
            }
        }

        /// The password reaches the redis crate as it was written.
        #[test]
        fn a_password_survives_the_user_part(
            user in "[a-z0-9]{0,6}",
            password in "[a-zA-Z0-9:/?#@,._~-]{1,12}",
        ) {
            let url = MultiUrl::parse(&format!("{user}:{password}@h1,h2:7/m?a=1"), false, 1).unwrap();
            prop_assert_eq!(&url.hosts, &["h1:1", "h2:7"]);
            let info = url.node_url(String::new()).info("h1:1").unwrap();
            prop_assert_eq!(info.redis_settings().password(), Some(password.as_str()));
        }
    }
}
