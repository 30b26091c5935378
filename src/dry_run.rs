//! `--dry-run`: look before you leap. Connects to every node, makes the checks a real run
//! makes before it takes a lock (credentials, a master, a server that keeps keys, the
//! user's ACL permissions, the nested-run rule) and reads the lock's state and its
//! `--once` records, then says what a real run would do. It only reads: `INFO` and `TIME`,
//! the read-only `peek.lua` of `status` and `dry_run.lua` (loading them in the server's
//! script cache, as any run does, is no write to the data). No queue entry, fence, record,
//! counter or notice is written, nothing is run and no ping is sent.
//!
//! The ACL is asked by `redis.acl_check_cmd` (Redis 7, Valkey), which judges a command
//! without running it. Redis 6.2 cannot be asked without running the commands, which
//! write: there the permissions are not checked, and the output says so (a user refused
//! `SET` or `PUBLISH` is then found by the real run, before its command starts).

use anyhow::Result;

use crate::backend::inspect::{DryAsk, Inspector, LockView, Verdict};
use crate::config::{Config, Wait};
use crate::describe::{lock_line, verdict_line};
use crate::exit::Outcome;
use crate::report;

/// Checks, looks, and says what would happen; the outcome is the exit status a real run
/// would have before its command: 0 would run, the `--conflict-exit-code` busy, 125 refused.
pub fn run(config: &Config) -> Outcome {
    report::set_verbosity(config.verbosity);
    report::set_key(&config.key);
    run_checked(config).unwrap_or_else(|err| {
        report::error(&err.context("dry run"));
        Outcome::Failed
    })
}

fn run_checked(config: &Config) -> Result<Outcome> {
    let mut inspector = Inspector::open(&config.redis, config.redis_timeout)?;
    let mut refused = Vec::new();
    for (display, vetted) in inspector.vet(config.eviction, config.redis.has_cluster()) {
        match vetted {
            Ok(facts) => report::verbose(format_args!(
                "dry run: {} answers: {facts}",
                report::escape(&display)
            )),
            Err(err) => refused.push(format!("{err:#}")),
        }
    }
    // Every node must be fit, as a real run refuses a quorum with one unfit node.
    if !refused.is_empty() {
        anyhow::bail!("{}", refused.join("; "));
    }
    let done = check_acl_and_records(config, &mut inspector)?;
    let view = inspector.read(&config.key);
    let state = if view.is_quorum() {
        verdict_line(&view)
    } else {
        lock_line(&view)
    };
    say(format_args!("{state}"));
    // As acquire.lua: work already done ends the run (exit 0) whether the lock is free or
    // not.
    if let Some(record) = done {
        let (_, by) = crate::holder::done_by(&record);
        let what = match &config.once.id {
            Some(id) => format!("--once {}", report::escape(id)),
            None => String::from("--once-per"),
        };
        say(format_args!(
            "would not run: already done ({what}) {by}; a real run would exit 0 without \
             running the command"
        ));
        return Ok(Outcome::AlreadyDone);
    }
    decide(config, &view)
}

/// The user's ACL permissions for every command a real run would send, on every node (a
/// refusal is an error naming the command), and the `--once` record a real run would
/// find: the one a majority of the nodes has (any, of a single deployment).
fn check_acl_and_records(config: &Config, inspector: &mut Inspector) -> Result<Option<Vec<u8>>> {
    let ask = DryAsk {
        key: config.key.clone(),
        limit: config.limit,
        ttl: config.timing.ttl,
        once: (*config.once).clone(),
        supersede: config.supersede,
        replace: config.replace,
    };
    let mut refused = Vec::new();
    let mut unchecked = 0;
    let mut records = Vec::new();
    let mut other_limit = None;
    let nodes = inspector.majority().max(1);
    for answer in inspector.dry_check(&ask) {
        match answer {
            Ok(answer) => {
                unchecked += usize::from(!answer.acl_checked);
                records.extend(answer.done);
                other_limit = other_limit.or(answer.other_limit);
            }
            Err(err) => refused.push(format!("{err:#}")),
        }
    }
    if !refused.is_empty() {
        anyhow::bail!("{}", refused.join("; "));
    }
    // As acquire.lua, before anything else: a lock in use with another --limit refuses the
    // run (exit 125), free slots or not, work done or not.
    if let Some(other) = other_limit {
        let other = match other {
            0 => String::from("a value redlock-run did not write"),
            n => format!("--limit {n}"),
        };
        anyhow::bail!(
            "{} is in use with {other}, not --limit {}; every user of a lock must pass the \
             same --limit: a real run would be refused",
            config.key,
            config.limit
        );
    }
    if unchecked > 0 {
        say(format_args!(
            "the user's ACL permissions were not checked{}: a server before Redis 7 cannot \
             judge a command without running it, and running them would write; a command \
             it refuses stops the real run before its command starts",
            if inspector.is_quorum() {
                format!(" on {unchecked} of the nodes")
            } else {
                String::new()
            }
        ));
    } else {
        report::verbose(format_args!(
            "dry run: the user's ACL allows every command a run sends"
        ));
    }
    // A record counts where a majority of the nodes found one (the real run's acquisition
    // needs the same majority to say "done").
    Ok((records.len() >= nodes).then(|| records.swap_remove(0)))
}

/// What a real run would do with the lock as `view` has it.
fn decide(config: &Config, view: &LockView) -> Result<Outcome> {
    if let [node] = view.nodes.as_slice() {
        let slots = match &node.slots {
            Ok(slots) => slots,
            Err(err) => anyhow::bail!("cannot read {}: {err}", config.key),
        };
        if slots.len() < config.limit as usize {
            return Ok(would_run(config));
        }
        let first = slots.first().and_then(|slot| slot.holder.as_ref());
        if let (Some(outer), Some(token)) =
            (&config.outer_token, first.and_then(|h| h.token.as_ref()))
        {
            if outer == token {
                anyhow::bail!(
                    "{} is held by the run whose command started this one (REDLOCK_TOKEN): a \
                     nested run of the same lock would be refused",
                    config.key
                );
            }
        }
        return Ok(busy(config));
    }
    match view.verdict() {
        Verdict::Free { .. } => Ok(would_run(config)),
        Verdict::Held { .. } => Ok(busy(config)),
        Verdict::Unknown => anyhow::bail!(
            "cannot tell whether {} is held: too few of the {} nodes answered",
            config.key,
            view.nodes.len()
        ),
    }
}

/// Free: a run would take the lock and start its command, if the command can be found and
/// executed; otherwise it would exit 127 or 126 as a real run does, with its message.
fn would_run(config: &Config) -> Outcome {
    let program = &config.command[0];
    let Err(err) = crate::process::find_program(program) else {
        say(format_args!("would run now: {} is free", config.key));
        return Outcome::Done;
    };
    let outcome = if err.kind() == std::io::ErrorKind::NotFound {
        Outcome::NotFound
    } else {
        Outcome::CannotExecute
    };
    say(format_args!("{} is free", config.key));
    report::error(&anyhow::anyhow!(
        "would not run: cannot run {}: {err}",
        program.to_string_lossy()
    ));
    outcome
}

/// Busy: a run would wait (`--wait`) or give up at once (`--no-wait`).
fn busy(config: &Config) -> Outcome {
    match config.wait {
        Wait::For(limit) if limit.is_zero() => say(format_args!(
            "would not run: {} is busy (--no-wait)",
            config.key
        )),
        Wait::For(limit) => say(format_args!(
            "would wait up to {} for {}",
            humantime::format_duration(limit),
            config.key
        )),
        Wait::Forever => say(format_args!("would wait for {}", config.key)),
    }
    Outcome::NotAcquired {
        exit_code: config.conflict_exit_code,
    }
}

/// One line, as the run's other news: shown unless `-q`.
fn say(message: std::fmt::Arguments<'_>) {
    report::info_as(
        report::LogEvent::Info,
        &[],
        format_args!("dry run: {message}"),
    );
}
