//! Fixtures for the Sentinel and Cluster tests: sets of real `redis-server` processes on
//! free loopback ports, each in its own temp dir, all killed on drop. A Sentinel set is one
//! master, one replica and three sentinels with a short `down-after-milliseconds`; a
//! cluster is three masters joined by `redis-cli --cluster create`. Each is returned only
//! once it is ready to fail over or to serve every slot, so tests wait on nothing else.
//!
//! What this module does not own: any knowledge of how redlock-run finds servers; tests
//! inspect the deployment over direct connections to each process.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::{default_server_program, free_port, require, signal, wait_until, TempDir, Wrapper};

/// The master's name in the sentinels' configuration.
pub const SERVICE: &str = "mymaster";

/// How long a deployment may take to become ready, or to fail over, on a loaded machine.
pub const SETTLE: Duration = Duration::from_secs(45);

fn program(name: &str, package: &str) -> PathBuf {
    require(
        name,
        "the Sentinel and Cluster tests need it",
        &format!("`apt-get install -y {package}` on Debian/Ubuntu, `brew install redis` on macOS"),
    )
}

/// The major version of the server binary the tests start (`redis-server --version` says
/// `v=7.0.15`; Valkey's says `v=9.1.2`).
fn server_major_version() -> u32 {
    let out = Command::new(default_server_program())
        .arg("--version")
        .output()
        .expect("running the server for its version");
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .and_then(|version| version.split('.').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no version in {text:?}"))
}

/// One `redis-server` process (a data node or a sentinel) on a loopback port.
pub struct Process {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    /// Stopped with SIGSTOP: it accepts connections (the kernel does) and never answers.
    frozen: bool,
}

impl Process {
    /// Starts `redis-server` with `config` (lines of a config file; `{port}`, `{dir}` and
    /// `{port2}`, a second free port, are filled in) and `args`, and waits until it answers
    /// PING.
    fn start(tag: &str, config: &str, args: &[&str]) -> Process {
        Process::start_on(None, tag, config, args)
    }

    /// Like `start`, trying `port` first (a port the caller has already written into other
    /// servers' configuration).
    fn start_on(port: Option<u16>, tag: &str, config: &str, args: &[&str]) -> Process {
        let mut last = String::new();
        let mut first = port;
        for _ in 0..5 {
            let dir = TempDir::new(tag);
            let port = first.take().unwrap_or_else(free_port);
            let text = config
                .replace("{port}", &port.to_string())
                .replace("{port2}", &free_port().to_string())
                .replace("{dir}", &dir.path().display().to_string());
            let conf = dir.join("redis.conf");
            fs::write(&conf, text).unwrap();
            // `$REDLOCK_TEST_REDIS_SERVER` when set, as for the single-server tests.
            let child = Command::new(default_server_program())
                .arg(&conf)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawning redis-server");
            let mut process = Process {
                child: Some(child),
                port,
                dir,
                frozen: false,
            };
            match process.until_ready() {
                Ok(()) => return process,
                Err(err) => {
                    last = err;
                    process.kill();
                }
            }
        }
        panic!("{tag}: redis-server did not start after 5 attempts: {last}");
    }

    fn until_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                return Err(format!("exited with {status}; log:\n{}", self.log()));
            }
            if self.try_query::<String>(&["PING"]).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("not ready after 10s; log:\n{}", self.log()));
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:PORT`
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn try_query<T: redis::FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let client = redis::Client::open(format!("redis://{}", self.address()))?;
        let mut con = client.get_connection_with_timeout(Duration::from_secs(5))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        con.set_write_timeout(Some(Duration::from_secs(5)))?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut con)
    }

    /// Runs a command on this process directly, failing the test if it errs.
    #[track_caller]
    pub fn query<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_query(args)
            .unwrap_or_else(|e| panic!("{args:?} on {}: {e}", self.address()))
    }

    /// One field of `INFO section`.
    pub fn info_field(&self, section: &str, field: &str) -> Option<String> {
        let info: String = self.try_query(&["INFO", section]).ok()?;
        info.lines()
            .find_map(|line| line.strip_prefix(&format!("{field}:")))
            .map(|value| value.trim().to_string())
    }

    /// How many times this server ran `command` (from INFO commandstats).
    pub fn calls(&self, command: &str) -> u64 {
        self.info_field("commandstats", &format!("cmdstat_{command}"))
            .and_then(|stats| {
                let calls = stats.strip_prefix("calls=")?;
                calls.split(',').next()?.parse().ok()
            })
            .unwrap_or(0)
    }

    /// SIGSTOP: what a blackholed host looks like from outside. The kill on drop still
    /// works.
    pub fn freeze(&mut self) {
        let pid = self.child.as_ref().expect("a running process").id();
        signal(pid as i32, libc::SIGSTOP);
        self.frozen = true;
    }

    /// SIGKILL: gone at once, with no chance to hand anything over.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A data node's configuration. A replica's first sync starts at once: by default a master
/// waits 5s for more replicas to share it.
const DATA_NODE: &str = "\
port {port}
bind 127.0.0.1
dir {dir}
logfile {dir}/log
save \"\"
appendonly no
repl-diskless-sync-delay 0
";

// ---------------------------------------------------------------------------------------------
// Sentinel

/// One master, one replica, three sentinels watching them with quorum 2.
pub struct SentinelSet {
    pub master: Process,
    pub replica: Process,
    pub sentinels: Vec<Process>,
}

impl SentinelSet {
    /// Starts the set and returns once every sentinel sees the replica and the other two
    /// sentinels, and the replica is in sync: a failover can happen from then on.
    pub fn start() -> SentinelSet {
        let master = Process::start("sentinel-master", DATA_NODE, &[]);
        // Writable, so a test can delete a key on it alone: what a write the master never
        // replicated before dying looks like after the failover.
        let replica_config = format!(
            "{DATA_NODE}replicaof 127.0.0.1 {}\nreplica-read-only no\n",
            master.port()
        );
        let replica = Process::start("sentinel-replica", &replica_config, &[]);
        // 1s of silence marks a server down: short enough for a quick test, long enough
        // that a loaded machine does not fail over a healthy master.
        let monitor = format!(
            "port {{port}}\nbind 127.0.0.1\ndir {{dir}}\nlogfile {{dir}}/log\n\
             sentinel monitor {SERVICE} 127.0.0.1 {} 2\n\
             sentinel down-after-milliseconds {SERVICE} 1000\n\
             sentinel failover-timeout {SERVICE} 3000\n\
             sentinel known-replica {SERVICE} 127.0.0.1 {}\n",
            master.port(),
            replica.port()
        );
        // Each sentinel is told of the replica and of the others (by id) up front: found by
        // themselves, through INFO and hello messages, that takes seconds.
        let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let id = |n: usize| format!("{n}").repeat(40);
        let sentinels = (0..3)
            .map(|me| {
                let mut config = format!("{monitor}sentinel myid {}\n", id(me));
                for other in (0..3).filter(|&other| other != me) {
                    config.push_str(&format!(
                        "sentinel known-sentinel {SERVICE} 127.0.0.1 {} {}\n",
                        ports[other],
                        id(other)
                    ));
                }
                Process::start_on(Some(ports[me]), "sentinel", &config, &["--sentinel"])
            })
            .collect();
        let set = SentinelSet {
            master,
            replica,
            sentinels,
        };
        // Online as the master sees it, which is what its ROLE lists.
        wait_until(SETTLE, "the replica to be in sync", || {
            set.master
                .info_field("replication", "slave0")
                .is_some_and(|replica| replica.contains("state=online"))
        });
        for sentinel in &set.sentinels {
            wait_until(
                SETTLE,
                "each sentinel to know the replica and the others",
                || {
                    let Ok(info) =
                        sentinel.try_query::<Vec<String>>(&["SENTINEL", "MASTER", SERVICE])
                    else {
                        return false;
                    };
                    let field = |name: &str| {
                        info.iter()
                            .position(|item| item == name)
                            .and_then(|at| info.get(at + 1))
                            .cloned()
                            .unwrap_or_default()
                    };
                    field("num-slaves") == "1" && field("num-other-sentinels") == "2"
                },
            );
        }
        set
    }

    /// `redis+sentinel://` with every sentinel.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.sentinels.iter().map(Process::address).collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    pub fn cmd(&self) -> Wrapper {
        Wrapper::new(&self.url())
    }

    /// Waits until every sentinel (but a frozen one) names the replica as the master and it
    /// says so itself.
    #[track_caller]
    pub fn wait_for_promotion(&self) {
        let port = self.replica.port();
        wait_until(SETTLE, "the sentinels to promote the replica", || {
            let awake = self.sentinels.iter().filter(|sentinel| !sentinel.frozen);
            awake.into_iter().all(|sentinel| {
                sentinel
                    .try_query::<Option<(String, u16)>>(&[
                        "SENTINEL",
                        "GET-MASTER-ADDR-BY-NAME",
                        SERVICE,
                    ])
                    .ok()
                    .flatten()
                    .is_some_and(|(_, named)| named == port)
            }) && self.replica.info_field("replication", "role") == Some("master".into())
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Cluster

/// Three masters that serve every slot between them, no replicas.
pub struct Cluster {
    pub nodes: Vec<Process>,
}

impl Cluster {
    /// Starts three nodes, joins them with `redis-cli --cluster create` and returns once
    /// every node reports the cluster ok.
    pub fn start() -> Cluster {
        // The bus port is chosen like the data port (the default, port + 10000, may be
        // taken), where the server lets it be (Redis 7 and later); a node timeout of 5s keeps
        // a loaded machine from failing a live node.
        let bus_port = if server_major_version() >= 7 {
            "cluster-port {port2}\n"
        } else {
            ""
        };
        let config = format!(
            "{DATA_NODE}cluster-enabled yes\ncluster-config-file {{dir}}/nodes.conf\n\
             {bus_port}cluster-node-timeout 5000\n"
        );
        let nodes: Vec<Process> = (0..3)
            .map(|_| Process::start("cluster", &config, &[]))
            .collect();
        let mut create = Command::new(program("redis-cli", "redis-tools"));
        create.args(["--cluster", "create"]);
        create.args(nodes.iter().map(Process::address));
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = create
            .stdin(Stdio::null())
            .output()
            .expect("running redis-cli");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Cluster { nodes };
        for node in &cluster.nodes {
            wait_until(SETTLE, "every node to see the cluster ok", || {
                node.try_query::<String>(&["CLUSTER", "INFO"])
                    .is_ok_and(|info| {
                        info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:3")
                    })
            });
        }
        cluster
    }

    /// `redis+cluster://` naming only the first node: the others are found through it.
    pub fn url(&self) -> String {
        format!("redis+cluster://{}", self.nodes[0].address())
    }

    pub fn cmd(&self) -> Wrapper {
        Wrapper::new(&self.url())
    }

    /// The index of the node that serves `key` (the others answer MOVED).
    #[track_caller]
    pub fn owner_of(&self, key: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.try_query::<i64>(&["EXISTS", key]).is_ok())
            .unwrap_or_else(|| panic!("no node serves {key}"))
    }

    /// The value of `key`, read from the node that serves it.
    pub fn get(&self, key: &str) -> Option<String> {
        self.nodes[self.owner_of(key)].query(&["GET", key])
    }

    /// Every key on every node, but the locks' histories and counters (see `is_record`).
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .nodes
            .iter()
            .flat_map(|node| node.query::<Vec<String>>(&["KEYS", "*"]))
            .filter(|key| !super::is_record(key))
            .collect();
        keys.sort();
        keys
    }

    /// Lock names (after the default prefix) whose keys live on different nodes, one for
    /// each node, in node order.
    pub fn names_on_each_node(&self) -> Vec<String> {
        let mut names: Vec<Option<String>> = vec![None; self.nodes.len()];
        for n in 0.. {
            let name = format!("job-{n}");
            let owner = self.owner_of(&format!("redlock:{name}"));
            names[owner].get_or_insert(name);
            if names.iter().all(Option::is_some) {
                break;
            }
        }
        names.into_iter().map(Option::unwrap).collect()
    }

    pub fn node_id(&self, node: usize) -> String {
        self.nodes[node].query(&["CLUSTER", "MYID"])
    }

    /// Starts moving the slot of `key` from its master to the next node, as `redis-cli
    /// --cluster reshard` does: the slot is marked importing and migrating, and every key in
    /// it is sent over (`MIGRATE`); it stays the old master's until `finish_moving`.
    pub fn start_moving(&self, key: &str) -> SlotMove {
        let from = self.owner_of(key);
        let to = (from + 1) % self.nodes.len();
        let (source, target) = (&self.nodes[from], &self.nodes[to]);
        let slot: i64 = source.query(&["CLUSTER", "KEYSLOT", key]);
        let slot = slot.to_string();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        target.query::<()>(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
        source.query::<()>(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
        let keys: Vec<String> = source.query(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"]);
        if !keys.is_empty() {
            let port = target.port().to_string();
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            migrate.extend(keys.iter().map(String::as_str));
            source.query::<String>(&migrate);
        }
        SlotMove {
            slot,
            from,
            to,
            to_id,
        }
    }

    /// Ends a move: every node learns that the slot is the new master's (the new master
    /// first, then the old one, which then answers `MOVED`).
    pub fn finish_moving(&self, moving: &SlotMove) {
        let third = 3 - moving.from - moving.to;
        for node in [moving.to, moving.from, third] {
            self.nodes[node].query::<()>(&[
                "CLUSTER",
                "SETSLOT",
                &moving.slot,
                "NODE",
                &moving.to_id,
            ]);
        }
    }
}

/// A slot on its way from one master to another (`Cluster::start_moving`).
pub struct SlotMove {
    pub slot: String,
    /// The old master's index, and the new one's.
    pub from: usize,
    pub to: usize,
    to_id: String,
}
