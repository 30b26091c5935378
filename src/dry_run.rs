//! `--dry-run`: look before you leap. Connects to every node, makes the checks a real run
//! makes before it takes a lock (credentials, a master, a server that keeps keys, the
//! nested-run rule) and reads the lock's state, then says what a real run would do. It
//! only reads: `INFO` and `PING`, and the read-only `peek.lua` of `status` (loading it in
//! the server's script cache, as any run does, is no write to the data). No queue entry,
//! fence, record, counter or notice is written, nothing is run and no ping is sent.
//!
//! Not checked: ACL permissions beyond those the reads need (a user refused `SET` or
//! `PUBLISH` is found by the real run, before its command starts), and `--once` records.

use anyhow::Result;

use crate::admin::{lock_line, verdict_line};
use crate::backend::inspect::{Inspector, LockView, Verdict};
use crate::config::{Config, Wait};
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
    let view = inspector.read(&config.key);
    let state = if view.is_quorum() {
        verdict_line(&view)
    } else {
        lock_line(&view)
    };
    say(format_args!("{state}"));
    decide(config, &view)
}

/// What a real run would do with the lock as `view` has it.
fn decide(config: &Config, view: &LockView) -> Result<Outcome> {
    if let [node] = view.nodes.as_slice() {
        let slots = match &node.slots {
            Ok(slots) => slots,
            Err(err) => anyhow::bail!("cannot read {}: {err}", config.key),
        };
        if slots.len() < config.limit as usize {
            say(format_args!("would run now: {} is free", config.key));
            return Ok(Outcome::Done);
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
        Verdict::Free { .. } => {
            say(format_args!("would run now: {} is free", config.key));
            Ok(Outcome::Done)
        }
        Verdict::Held { .. } => Ok(busy(config)),
        Verdict::Unknown => anyhow::bail!(
            "cannot tell whether {} is held: too few of the {} nodes answered",
            config.key,
            view.nodes.len()
        ),
    }
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
