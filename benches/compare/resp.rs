//! The harness's own look at Redis (PING for readiness, INFO, CLIENT LIST, MONITOR): a
//! minimal RESP client over one loopback connection. It owns the wire format only; which
//! requests are counted, and how, is `measure/waiting.rs`'s business.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A minimal RESP client for the harness's own look at Redis (PING, INFO, CLIENT LIST,
/// MONITOR).
pub struct Redis {
    reader: BufReader<TcpStream>,
    pub writer: TcpStream,
}

impl Redis {
    pub fn connect(port: u16) -> io::Result<Redis> {
        let stream = TcpStream::connect_timeout(&loopback(port), Duration::from_secs(2))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.set_nodelay(true)?;
        Ok(Redis {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    fn send(&mut self, args: &[&str]) -> io::Result<()> {
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            let _ = write!(request, "${}\r\n{arg}\r\n", arg.len());
        }
        self.writer.write_all(request.as_bytes())
    }

    pub fn line(&mut self) -> io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "redis closed"));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    fn reply(&mut self) -> io::Result<String> {
        let line = self.line()?;
        let (kind, rest) = line.split_at(line.len().min(1));
        match kind {
            "+" | ":" => Ok(rest.to_string()),
            "-" => Err(io::Error::other(format!("redis: {rest}"))),
            "$" => {
                let len: i64 = rest.parse().map_err(io::Error::other)?;
                if len < 0 {
                    return Ok(String::new());
                }
                let mut body = vec![0u8; len as usize + 2];
                self.reader.read_exact(&mut body)?;
                body.truncate(len as usize);
                Ok(String::from_utf8_lossy(&body).into_owned())
            }
            "*" => {
                let count: i64 = rest.parse().map_err(io::Error::other)?;
                let items = (0..count.max(0))
                    .map(|_| self.reply())
                    .collect::<io::Result<Vec<_>>>()?;
                Ok(items.join("\n"))
            }
            _ => Err(io::Error::other(format!("bad RESP line {line:?}"))),
        }
    }

    pub fn call(&mut self, args: &[&str]) -> io::Result<String> {
        self.send(args)?;
        self.reply()
    }

    pub fn local_addr(&self) -> String {
        self.writer
            .local_addr()
            .map(|addr| addr.to_string())
            .unwrap_or_default()
    }

    /// `INFO stats commandstats` as field -> value.
    pub fn info(&mut self) -> io::Result<BTreeMap<String, String>> {
        let text = self.call(&["INFO", "stats", "commandstats"])?;
        Ok(text
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(key, value)| (key.to_string(), value.trim().to_string()))
            .collect())
    }
}

/// Port `port` on 127.0.0.1: every server the harness starts listens there, and nowhere else.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
