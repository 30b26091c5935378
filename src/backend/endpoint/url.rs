//! Taking `redis+sentinel://` and `redis+cluster://` URLs apart (`MultiUrl`), and the
//! `redis://` URL of each server they lead to (`NodeUrl`). What the parts mean (a master's
//! name, parameters, databases) is for `sentinel` and `cluster` to say.

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
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, format!("#{fragment}")),
            None => (rest, String::new()),
        };
        // The user part runs to the last `@`, as in `redact_url`.
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (format!("{userinfo}@"), rest),
            None => (String::new(), rest),
        };
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (hosts, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], rest[slash..].to_string()),
            None => (rest, String::new()),
        };
        let hosts = hosts
            .split(',')
            .map(|host| with_port(host, default_port))
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

/// `host:port` for a host written with or without its port (IPv6 in brackets).
fn with_port(host: &str, default_port: u16) -> Result<String, String> {
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
        _ => Err(format!("{host:?} is not host:port")),
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
