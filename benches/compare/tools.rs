//! The tools compared (redlock-run as the packages ship it, the musl build; flock; etcdctl;
//! and redlock-run's glibc build beside them) and `Bench`, what every measurement
//! needs to start them: the argv that runs a command under each tool's lock in its plain
//! documented form, per-tool logs, and the helper command. It owns no timing and no
//! figures; those are `measure/`'s.

use std::ffi::OsString;
use std::fs::{self, OpenOptions};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use crate::helper::HELPER;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Tool {
    /// The build that ships (the musl build, unless `--target` or `--redlock-bin` named
    /// another): every target is judged on it.
    Redlock,
    Flock,
    Etcd,
    /// The default (static glibc) build, measured beside the shipped one in the same run.
    RedlockGlibc,
}

pub const TOOLS: [Tool; 4] = [Tool::Redlock, Tool::Flock, Tool::Etcd, Tool::RedlockGlibc];

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Redlock => "redlock-run",
            Tool::Flock => "flock",
            Tool::Etcd => "etcdctl",
            Tool::RedlockGlibc => "redlock-run-glibc",
        }
    }

    /// Either build of redlock-run.
    pub fn is_redlock(self) -> bool {
        matches!(self, Tool::Redlock | Tool::RedlockGlibc)
    }
}

/// Everything the phases need to start the tools.
pub struct Bench {
    pub exe: PathBuf,
    pub dir: PathBuf,
    pub redlock: PathBuf,
    /// The glibc build, benched beside `redlock`; None when only one build is benched.
    pub redlock_glibc: Option<PathBuf>,
    pub redis_port: u16,
    /// None when etcd or etcdctl is missing or etcd would not start (column shows n/a).
    pub etcd_port: Option<u16>,
    pub etcd_missing: String,
    pub have_time: bool,
}

impl Bench {
    pub fn available(&self, tool: Tool) -> bool {
        match tool {
            Tool::Etcd => self.etcd_port.is_some(),
            Tool::RedlockGlibc => self.redlock_glibc.is_some(),
            Tool::Redlock | Tool::Flock => true,
        }
    }

    pub fn tools(&self) -> Vec<Tool> {
        TOOLS.into_iter().filter(|&t| self.available(t)).collect()
    }

    fn log(&self, tool: Tool) -> Stdio {
        let path = self.dir.join(format!("{}.log", tool.name()));
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_or_else(|_| Stdio::null(), Stdio::from)
    }

    pub fn log_tail(&self, tool: Tool) -> String {
        let text =
            fs::read_to_string(self.dir.join(format!("{}.log", tool.name()))).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n    ")
    }

    /// The argv that runs `command` under `tool`'s lock named `key`, in each tool's plain
    /// documented form.
    pub fn argv(&self, tool: Tool, key: &str, command: &[OsString]) -> Vec<OsString> {
        self.argv_with(tool, key, &[], command)
    }

    /// `argv` with redlock-run's own options (`--limit 3`, `--fair`) before the `--`; the
    /// peers take none.
    pub fn argv_with(
        &self,
        tool: Tool,
        key: &str,
        options: &[&str],
        command: &[OsString],
    ) -> Vec<OsString> {
        let mut argv: Vec<OsString> = match tool {
            Tool::Redlock | Tool::RedlockGlibc => [
                self.binary(tool).into(),
                "-r".into(),
                format!("redis://127.0.0.1:{}", self.redis_port).into(),
                "-k".into(),
                key.into(),
            ]
            .into_iter()
            .chain(options.iter().map(OsString::from))
            .chain(["--".into()])
            .collect(),
            Tool::Flock => vec!["flock".into(), self.dir.join(format!("{key}.flock")).into()],
            Tool::Etcd => vec![
                "etcdctl".into(),
                format!("--endpoints=127.0.0.1:{}", self.etcd_port.unwrap_or(0)).into(),
                "lock".into(),
                key.into(),
                "--".into(),
            ],
        };
        argv.extend(command.iter().cloned());
        argv
    }

    /// The redlock-run executable of `tool` (the shipped build for any other tool).
    pub fn binary(&self, tool: Tool) -> PathBuf {
        match (tool, &self.redlock_glibc) {
            (Tool::RedlockGlibc, Some(glibc)) => glibc.clone(),
            _ => self.redlock.clone(),
        }
    }

    pub fn command(&self, tool: Tool, key: &str, command: &[OsString]) -> Command {
        self.plain(tool, &self.argv(tool, key, command))
    }

    /// A Command for argv with the tool's log as stderr and stdout discarded.
    pub fn plain(&self, tool: Tool, argv: &[OsString]) -> Command {
        let mut command = Command::new(&argv[0]);
        if tool == Tool::Etcd {
            command.env("ETCDCTL_API", "3");
        }
        command
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log(tool));
        command
    }

    /// argv of the helper command: this executable in helper mode.
    pub fn helper(&self, args: &[&str]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![self.exe.clone().into(), HELPER.into()];
        argv.extend(args.iter().map(OsString::from));
        argv
    }

    pub fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }
}

pub fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}
