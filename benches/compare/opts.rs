//! The harness's command line: the flags `scripts/bench` passes through, their defaults,
//! and the caps that keep a run bounded. It owns no measuring and no output beyond `--help`.

use std::path::PathBuf;
use std::time::Duration;

use crate::Result;

pub const USAGE: &str = "\
usage: scripts/bench [OPTIONS]      (or: cargo bench --bench compare -- [OPTIONS])

  --quick                 fewer samples and a shorter waiting window (a smoke run); with
                          --many-waiters: N = 10,100 and a 10 s window
  --overhead-samples N    runs of each `TOOL -- true` and of bare `true` [200]
  --handoff-samples N     handoffs measured per tool, at least 30 [60]
  --hold-ms MS            how long the holder holds in each handoff sample [120]
  --clients N             contending clients [8]
  --cycles N              lock/run/unlock cycles per client [25]
  --waiters N             clients waiting behind a holder in the waiting test [8]
  --wait-window SECS      how long the waiting test counts server requests [30]
  --many-waiters          run only the many-waiters section (below), not the rest
  --all                   the usual sections, then the many-waiters section
                          (without either: the usual sections only, about 2 minutes;
                          the many-waiters section alone takes up to 10)
  --many-n LIST           many-waiters: the numbers of waiters, comma-separated
                          [10,100,300,1000]
  --many-window SECS      many-waiters: how long the waiting figures are counted, at the
                          largest N of each tool and mode [30]
  --many-etcd-max N       many-waiters: largest N run with etcdctl lock, whose waiters
                          take about 25 MB each [300]
  --many-budget SECS      many-waiters: start no new case after this long [560]
  --target TRIPLE         bench only the build for this target (cargo build --target);
                          without it and --redlock-bin: the musl build, which the packages
                          ship (x86_64-unknown-linux-musl; every target is judged on it),
                          and beside it the host build that .cargo/config.toml sets up
                          (static-pie on glibc), each against flock and etcdctl in this run
  --no-glibc              bench the shipped build alone, without the glibc build beside it
  --redlock-bin PATH      bench this binary instead of building the shipped one
  --glibc-bin PATH        bench this binary as the glibc build instead of building one
  --json PATH             where to write the JSON [TARGET_DIR/bench/compare.json; the
                          many-waiters section: TARGET_DIR/bench/waiters.json]
  -h, --help              this text";

pub struct Opts {
    pub overhead_samples: usize,
    pub handoff_samples: usize,
    pub hold: Duration,
    pub clients: usize,
    pub cycles: usize,
    pub waiters: usize,
    pub wait_window: Duration,
    pub target: Option<String>,
    pub redlock_bin: Option<PathBuf>,
    pub glibc_bin: Option<PathBuf>,
    /// Bench the glibc build beside the shipped one.
    pub glibc: bool,
    pub json: Option<PathBuf>,
    /// Run the usual sections (overhead ... waiting).
    pub compare: bool,
    /// Run the many-waiters section.
    pub many: bool,
    pub many_n: Vec<usize>,
    pub many_window: Duration,
    pub many_etcd_max: usize,
    pub many_budget: Duration,
}

/// The largest number of waiters `--many-n` accepts: each is a process (an etcdctl waiter
/// about 25 MB), and the Redis server needs a few connections for each.
/// The target of the build that the packages, the tarball and the container image ship.
pub const SHIPPED_TARGET: &str = "x86_64-unknown-linux-musl";

pub const MANY_MAX: usize = 2000;

impl Opts {
    pub fn parse(args: &[String]) -> Result<Option<Opts>> {
        let mut opts = Opts {
            overhead_samples: 200,
            handoff_samples: 60,
            hold: Duration::from_millis(120),
            clients: 8,
            cycles: 25,
            waiters: 8,
            wait_window: Duration::from_secs(30),
            target: None,
            redlock_bin: None,
            glibc_bin: None,
            glibc: true,
            json: None,
            compare: true,
            many: false,
            many_n: vec![10, 100, 300, 1000],
            many_window: Duration::from_secs(30),
            many_etcd_max: 300,
            many_budget: Duration::from_secs(560),
        };
        let (mut quick, mut n_given, mut window_given) = (false, false, false);
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                // cargo bench passes --bench to every bench target.
                "--bench" => {}
                "-h" | "--help" => {
                    println!("{USAGE}");
                    return Ok(None);
                }
                "--quick" => {
                    quick = true;
                    opts.overhead_samples = 50;
                    opts.handoff_samples = 30;
                    opts.wait_window = Duration::from_secs(10);
                }
                "--overhead-samples" => opts.overhead_samples = number(arg, &value(arg)?, 1)?,
                "--handoff-samples" => opts.handoff_samples = number(arg, &value(arg)?, 30)?,
                "--hold-ms" => {
                    opts.hold = Duration::from_millis(number(arg, &value(arg)?, 20)? as u64)
                }
                "--clients" => opts.clients = number(arg, &value(arg)?, 2)?,
                "--cycles" => opts.cycles = number(arg, &value(arg)?, 1)?,
                "--waiters" => opts.waiters = number(arg, &value(arg)?, 1)?,
                "--wait-window" => {
                    opts.wait_window = Duration::from_secs(number(arg, &value(arg)?, 1)? as u64)
                }
                "--target" => opts.target = Some(value(arg)?),
                "--redlock-bin" => opts.redlock_bin = Some(PathBuf::from(value(arg)?)),
                "--glibc-bin" => opts.glibc_bin = Some(PathBuf::from(value(arg)?)),
                "--no-glibc" => opts.glibc = false,
                "--json" => opts.json = Some(PathBuf::from(value(arg)?)),
                "--many-waiters" => (opts.compare, opts.many) = (false, true),
                "--all" => (opts.compare, opts.many) = (true, true),
                "--many-n" => {
                    n_given = true;
                    opts.many_n = value(arg)?
                        .split(',')
                        .map(|n| number(arg, n.trim(), 1))
                        .collect::<Result<_>>()?;
                    if opts.many_n.iter().any(|&n| n > MANY_MAX) {
                        return Err(format!("{arg}: at most {MANY_MAX} waiters"));
                    }
                    opts.many_n.sort_unstable();
                    opts.many_n.dedup();
                }
                "--many-window" => {
                    window_given = true;
                    opts.many_window =
                        Duration::from_secs(number(arg, &value(arg)?, 1)?.min(120) as u64)
                }
                "--many-etcd-max" => opts.many_etcd_max = number(arg, &value(arg)?, 0)?,
                "--many-budget" => {
                    opts.many_budget = Duration::from_secs(number(arg, &value(arg)?, 10)? as u64)
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if quick && !n_given {
            opts.many_n = vec![10, 100];
        }
        if quick && !window_given {
            opts.many_window = Duration::from_secs(10);
        }
        // Keep the whole run bounded: these caps hold it well under five minutes.
        opts.overhead_samples = opts.overhead_samples.min(2000);
        opts.handoff_samples = opts.handoff_samples.min(500);
        opts.hold = opts.hold.min(Duration::from_secs(2));
        opts.clients = opts.clients.min(32);
        opts.cycles = opts.cycles.min(200);
        opts.waiters = opts.waiters.min(64);
        opts.wait_window = opts.wait_window.min(Duration::from_secs(120));
        // A named target or binary is benched alone, unless a glibc binary is named too.
        if opts.target.is_some() || opts.redlock_bin.is_some() {
            opts.glibc = opts.glibc && opts.glibc_bin.is_some();
        }
        Ok(Some(opts))
    }
}

fn number(name: &str, text: &str, min: usize) -> Result<usize> {
    match text.parse::<usize>() {
        Ok(n) if n >= min => Ok(n),
        _ => Err(format!(
            "{name} wants a whole number >= {min}, not {text:?}"
        )),
    }
}
