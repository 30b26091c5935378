//! How the many-waiters section looks at the servers and the waiting processes from the
//! outside, never trusting a tool's account of itself: Redis requests through MONITOR
//! (attributed per connection, with markers in the stream so that counts split exactly
//! at phase boundaries), etcd's gRPC message counter, TCP connections to a server port from
//! /proc/net/tcp, and peak RSS of process trees from /proc. It owns taking these readings;
//! which phase they bound is `case.rs`'s business.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::procs::{locked, wait_until};
use crate::resp::Redis;

use crate::Result;

/// Requests seen by a server up to some point.
#[derive(Clone, Default)]
pub struct Counts {
    /// Sent by clients other than the harness and the holders.
    pub waiters: u64,
    /// Sent by the holders (renewals, the release).
    pub holders: u64,
    /// Redis only: commands run by scripts (MONITOR's "lua" source), not requests.
    pub scripted: u64,
    /// Per command, with holders' as "holder:CMD"; Redis only.
    pub by_command: BTreeMap<String, u64>,
}

impl Counts {
    pub fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            waiters: self.waiters - earlier.waiters,
            holders: self.holders - earlier.holders,
            scripted: self.scripted - earlier.scripted,
            by_command: self
                .by_command
                .iter()
                .map(|(cmd, n)| (cmd.clone(), n - earlier.by_command.get(cmd).unwrap_or(&0)))
                .filter(|(_, n)| *n > 0)
                .collect(),
        }
    }

    pub fn requests(&self) -> u64 {
        self.waiters + self.holders
    }
}

#[derive(Default)]
struct Shared {
    harness: HashSet<String>,
    holders: HashSet<String>,
    counts: Counts,
    marks: HashMap<u64, Counts>,
}

/// A MONITOR connection read by its own thread, and the harness's command connection that
/// writes markers (`ECHO many-mark-K`) into the same ordered stream.
pub struct Monitor {
    pub redis: Redis,
    stopper: TcpStream,
    reader: Option<JoinHandle<()>>,
    shared: Arc<Mutex<Shared>>,
    next_mark: u64,
}

const MARK: &str = "many-mark-";

impl Monitor {
    pub fn start(port: u16) -> Result<Monitor> {
        let redis = Redis::connect(port).map_err(|err| format!("redis: {err}"))?;
        let mut monitor = Redis::connect(port).map_err(|err| format!("redis: {err}"))?;
        monitor.writer.set_read_timeout(None).ok();
        let shared = Arc::new(Mutex::new(Shared {
            harness: [redis.local_addr(), monitor.local_addr()].into(),
            ..Shared::default()
        }));
        monitor
            .call(&["MONITOR"])
            .map_err(|err| format!("MONITOR: {err}"))?;
        let stopper = monitor.writer.try_clone().map_err(|err| err.to_string())?;
        let sink = Arc::clone(&shared);
        let reader = thread::spawn(move || {
            while let Ok(line) = monitor.line() {
                if let Some((addr, command, arg)) = parse(&line) {
                    count(&mut locked(&sink), addr, &command, arg);
                }
            }
        });
        Ok(Monitor {
            redis,
            stopper,
            reader: Some(reader),
            shared,
            next_mark: 0,
        })
    }

    /// From now on, requests from the connections open now (other than the harness's)
    /// are the holders'.
    pub fn holders_are_connected_now(&mut self) -> Result<()> {
        let list = self
            .redis
            .call(&["CLIENT", "LIST"])
            .map_err(|err| format!("CLIENT LIST: {err}"))?;
        let mut shared = locked(&self.shared);
        let harness = shared.harness.clone();
        shared.holders = list
            .lines()
            .filter_map(|line| line.split(' ').find_map(|f| f.strip_prefix("addr=")))
            .filter(|addr| !harness.contains(*addr))
            .map(str::to_string)
            .collect();
        Ok(())
    }

    /// The counts at this point of the server's command stream.
    pub fn mark(&mut self) -> Result<Counts> {
        let id = self.next_mark;
        self.next_mark += 1;
        self.redis
            .call(&["ECHO", &format!("{MARK}{id}")])
            .map_err(|err| format!("ECHO: {err}"))?;
        let mut counts = None;
        wait_until(Duration::from_secs(30), Duration::from_millis(2), || {
            counts = locked(&self.shared).marks.remove(&id);
            counts.is_some()
        });
        counts.ok_or_else(|| "MONITOR fell behind by more than 30 s".into())
    }

    /// `INFO` field -> value for one section.
    pub fn info(&mut self, section: &str) -> Result<BTreeMap<String, String>> {
        let text = self
            .redis
            .call(&["INFO", section])
            .map_err(|err| format!("INFO: {err}"))?;
        Ok(text
            .lines()
            .filter_map(|line| line.split_once(':'))
            .map(|(key, value)| (key.to_string(), value.trim().to_string()))
            .collect())
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        let _ = self.stopper.shutdown(Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

/// Sum of `calls=` over `INFO commandstats`: every command run, scripts' included.
pub fn commandstats_calls(info: &BTreeMap<String, String>) -> u64 {
    info.iter()
        .filter(|(key, _)| key.starts_with("cmdstat_"))
        .filter_map(|(_, value)| {
            value
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

fn count(shared: &mut Shared, addr: &str, command: &str, arg: &str) {
    if shared.harness.contains(addr) {
        if let Some(id) = arg.strip_prefix(MARK).and_then(|id| id.parse().ok()) {
            let counts = shared.counts.clone();
            shared.marks.insert(id, counts);
        }
        return;
    }
    let counts = &mut shared.counts;
    if addr == "lua" {
        counts.scripted += 1;
    } else if shared.holders.contains(addr) {
        counts.holders += 1;
        *counts
            .by_command
            .entry(format!("holder:{command}"))
            .or_default() += 1;
    } else {
        counts.waiters += 1;
        match counts.by_command.get_mut(command) {
            Some(n) => *n += 1,
            None => {
                counts.by_command.insert(command.to_string(), 1);
            }
        }
    }
}

/// `TIME [DB ADDR] "command" "arg" ...` -> (ADDR, command lowercased, first arg); ADDR is
/// "lua" for commands run by a script.
fn parse(line: &str) -> Option<(&str, String, &str)> {
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let addr = line[open + 1..close].split_once(' ')?.1;
    let mut quoted = line[close + 1..].split('"').skip(1).step_by(2);
    let command = quoted.next()?.to_ascii_lowercase();
    Some((addr, command, quoted.next().unwrap_or("")))
}

/// etcd's `grpc_server_msg_received_total`, summed over methods: gRPC messages from every
/// client (the harness reads /metrics over plain HTTP, which is not counted).
pub fn etcd_messages(port: u16) -> Result<Counts> {
    let (_, by_method) = crate::measure::waiting::etcd_messages(port)?;
    let mut counts = Counts::default();
    for (method, value) in by_method {
        counts.waiters += value as u64;
        *counts.by_command.entry(method).or_default() += value as u64;
    }
    Ok(counts)
}

/// Established TCP connections from a client to 127.0.0.1:`port` (the client's side of
/// each, so the server's own sockets are not counted twice).
pub fn connections_to(port: u16) -> usize {
    let table = fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port_of = |field: &str| {
                field
                    .rsplit(':')
                    .next()
                    .and_then(|hex| u16::from_str_radix(hex, 16).ok())
            };
            fields.len() > 3
                && fields[3] == "01"
                && port_of(fields[2]) == Some(port)
                && port_of(fields[1]) != Some(port)
        })
        .count()
}

/// Memory of some processes and all their descendants, in KiB.
#[derive(Clone, Copy, Default)]
pub struct TreeMemory {
    pub processes: usize,
    /// Sum of each process's VmHWM (peak resident set).
    pub peak_rss_kib: u64,
    /// Sum of each process's current Pss (shared pages divided among their sharers).
    pub pss_kib: u64,
}

pub fn tree_memory(roots: &[u32]) -> TreeMemory {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // The fields after the command name, which may hold spaces and parentheses.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let field = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut memory = TreeMemory::default();
    let mut stack: Vec<u32> = roots.to_vec();
    let mut seen = HashSet::new();
    while let Some(pid) = stack.pop() {
        if !seen.insert(pid) {
            continue;
        }
        let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
            continue;
        };
        memory.processes += 1;
        memory.peak_rss_kib += field(&status, "VmHWM:");
        let rollup = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
        memory.pss_kib += field(&rollup, "Pss:");
        stack.extend(children.get(&pid).into_iter().flatten());
    }
    memory
}
