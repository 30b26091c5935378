//! Entry points for the fuzz targets in `fuzz/` (cargo-fuzz), one per kind of input that
//! comes from outside: the command line, Redis URLs, durations, lock values and key names
//! read back from Redis, and Redis replies. Each takes the fuzzer's bytes, feeds them to the
//! parsers the program uses, and asserts what must hold for any input, so that a fuzzer
//! finds broken promises as well as panics: no password in a printed form of a URL or in an
//! error, lock names and holders shown as one line of plain text, bounded durations within
//! their bounds, key names that map back to their lock. Not part of the program's
//! interface; nothing else calls it.

use std::ffi::OsString;
use std::time::Instant;

use redis::Value;

use crate::backend::inspect::{read_peek, LockView, NodeView, Verdict};
use crate::backend::{
    colocates, holds_secret, identity_in, key_slot, lock_of_internal_key, mask_url, master_address,
    parse_slots, redact_url, shown, sibling_key, split_urls, Deployment, Holder, Key, Password,
    Sources,
};
use clap::CommandFactory;

use crate::cli::Cli;
use crate::config::{parse_duration, Task, Wait};
use crate::holder::{describe, Blocker};
use crate::lease;

/// The command line: the bytes are the arguments, separated by NUL bytes (`-k`, `job`, …).
/// Parsing never panics; an accepted command line gives a configuration within the limits;
/// no error, and no debug form of the configuration, holds a secret of a URL argument.
pub fn command_line(data: &[u8]) {
    let args = arguments(data);
    // `--password-file` reads a file: a fuzzer could name /dev/zero.
    if args.iter().any(|arg| arg.contains("password-file")) {
        return;
    }
    let first = parse_command_line(&args);
    // The secrets of the `--redis` values, each only where nothing else typed holds it too
    // (a key may be any text, and is shown).
    let urls = redis_values(&args);
    let typed = args.join("\0");
    let in_urls = urls.join("\0");
    let mut secrets = url_secrets(&urls);
    secrets.retain(|secret| {
        typed.matches(secret.as_str()).count() == in_urls.matches(secret.as_str()).count()
    });
    if secrets.is_empty() {
        return;
    }
    // Each URL with its secrets changed: what follows a secret into the output changes with
    // it; what merely looks like it (a word of a message) does not.
    let mut changed = args.clone();
    for url in &urls {
        let other_url: String = secret_chars(url)
            .map(|(ch, secret)| if secret { other_char(ch) } else { ch })
            .collect();
        for arg in &mut changed {
            *arg = arg.replace(url.as_str(), &other_url);
        }
    }
    let second = parse_command_line(&changed);
    for secret in &secrets {
        assert!(
            !first.contains(secret.as_str()) || second.contains(secret.as_str()),
            "the secret {secret:?} of {args:?} is in {first:?}"
        );
    }
}

/// The values clap takes as `--redis` URLs from `args`, longest first.
fn redis_values(args: &[String]) -> Vec<String> {
    let argv = std::iter::once("redlock-run").chain(args.iter().map(String::as_str));
    let Ok(matches) = Cli::command().try_get_matches_from(argv) else {
        return Vec::new();
    };
    let used = matches.subcommand().map_or(&matches, |(_, used)| used);
    let mut urls: Vec<String> = used
        .get_many::<String>("redis")
        .into_iter()
        .flatten()
        .filter(|url| !url.is_empty())
        .cloned()
        .collect();
    urls.sort_by_key(|url| std::cmp::Reverse(url.len()));
    urls
}

/// What the program may print of a command line: the error, or the configuration's debug
/// form. Checks the limits of what it accepts.
fn parse_command_line(args: &[String]) -> String {
    let argv = std::iter::once(OsString::from("redlock-run"))
        .chain(args.iter().map(OsString::from))
        .collect::<Vec<_>>();
    let cli = match Cli::parse_from_args(argv) {
        Ok(cli) => cli,
        // clap's own errors quote what was typed where it does not fit, on purpose.
        Err(err) => {
            let _ = err.render().to_string();
            return String::new();
        }
    };
    match Task::from_cli(cli) {
        Ok(task) => {
            if let Task::Run(config) = &task {
                check_config_limits(config);
            }
            let redis = match &task {
                Task::Run(config) => &config.redis,
                Task::Admin(config) => &config.redis,
            };
            for (typed, masked) in redis.typed_secrets() {
                assert_eq!(typed.len(), masked.len(), "{typed:?} masked as {masked:?}");
            }
            let displays: Vec<&str> = redis.targets().iter().map(|t| &*t.display).collect();
            format!("{task:?} {displays:?}")
        }
        Err(err) => format!("{err:#}"),
    }
}

fn check_config_limits(config: &crate::config::Config) {
    let timing = config.timing;
    assert!((lease::MIN_TTL..=lease::MAX_TTL).contains(&timing.ttl));
    assert!(!timing.renew_every.is_zero());
    assert!(timing.renew_every <= lease::max_renewal_period(timing.ttl));
    assert!(timing.kill_after <= lease::MAX_DURATION);
    assert!((lease::MIN_REDIS_TIMEOUT..=lease::MAX_REDIS_TIMEOUT).contains(&config.redis_timeout));
    if let Wait::For(wait) = config.wait {
        assert!(wait <= lease::MAX_DURATION);
    }
    for bound in [config.min_hold, config.max_runtime].into_iter().flatten() {
        assert!(!bound.is_zero() && bound <= lease::MAX_DURATION);
    }
    assert!((1..=crate::backend::MAX_LIMIT).contains(&config.limit));
    assert!(!config.command.is_empty());
    // Every time computed from them stays in range.
    let now = Instant::now();
    let mut lease = timing.lease_from(now);
    assert!(lease.give_up_at() <= lease.valid_until());
    assert!(lease.renewal_due() < lease.valid_until());
    lease.renewed_until(now + timing.ttl);
    let _ = lease::renewal_retry(now, u32::MAX, lease.give_up_at());
    let _ = lease::kill_deadline(now, timing.kill_after, lease.valid_until());
    let _ = lease::release_deadline(now, lease.valid_until(), config.redis_timeout);
    let _ = lease::min_hold_left(config.min_hold, now, now);
    let _ = lease::replica_wait(timing.ttl, config.redis_timeout);
}

/// The arguments in `data`: NUL-separated, each as text (the checks compare text).
fn arguments(data: &[u8]) -> Vec<String> {
    if data.is_empty() {
        return Vec::new();
    }
    data.split(|&byte| byte == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// The secret runs of `urls`, as `mask_url` finds them.
fn url_secrets(urls: &[String]) -> Vec<String> {
    let mut secrets = Vec::new();
    for arg in urls {
        let mut run = String::new();
        for (ch, secret) in secret_chars(arg) {
            if secret {
                run.push(ch);
            } else if !run.is_empty() {
                secrets.push(std::mem::take(&mut run));
            }
        }
        if !run.is_empty() {
            secrets.push(run);
        }
    }
    // A run without a letter or digit cannot be told from the text around it.
    secrets.retain(|secret| secret.chars().any(|ch| ch.is_ascii_alphanumeric()));
    secrets
}

/// Each character of `text` (a URL, or several), and whether `mask_url` hides it. A `*` is
/// taken as not hidden: it cannot be told from its mask.
fn secret_chars(text: &str) -> impl Iterator<Item = (char, bool)> + '_ {
    let masked = mask_url(text).into_bytes();
    text.char_indices()
        .map(move |(at, ch)| (ch, ch != '*' && masked.get(at) == Some(&b'*')))
}

/// `text` with each ASCII letter and digit replaced by another of its kind (hex digits stay
/// hex digits), so that it parses the same way.
fn other(text: &str) -> String {
    text.chars().map(other_char).collect()
}

fn other_char(ch: char) -> char {
    let rotate = |ch: char, first: char, count: u8| {
        char::from(first as u8 + (ch as u8 - first as u8 + 1) % count)
    };
    match ch {
        '0'..='9' => rotate(ch, '0', 10),
        'a'..='f' => rotate(ch, 'a', 6),
        'g'..='z' => rotate(ch, 'g', 20),
        'A'..='F' => rotate(ch, 'A', 6),
        'G'..='Z' => rotate(ch, 'G', 20),
        ch => ch,
    }
}

/// The URL schemes a built URL may start with; the fuzzer picks one by number.
const SCHEMES: [&str; 9] = [
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "",
];

/// A Redis URL, or several. The first byte picks a form and a scheme; the rest is
/// NUL-separated parts. The whole text is parsed as `--redis` is, and a URL is built with a
/// password where each form puts one (`user:PW@`, `PW@`, `?pass=PW`, and the like, or given
/// apart as `--password-file` gives it): the password is masked byte for byte by
/// `mask_url`, missing from `redact_url`'s form, and in no error of `Deployment::parse`.
pub fn url(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    any_url(&text);
    let mut parts = text.split('\0');
    let mut part = || parts.next().unwrap_or_default();
    let scheme = match SCHEMES[usize::from(form >> 4) % SCHEMES.len()] {
        "" => part(),
        scheme => scheme,
    };
    let (before, password, after) = (part(), part(), part());
    let url = match form % 5 {
        0 => UrlWithPassword::new(
            format!("{scheme}://{before}:"),
            password,
            format!("@{after}"),
        ),
        1 => UrlWithPassword::new(format!("{scheme}://"), password, format!("@{after}")),
        form => {
            let name = ["pass", "password", "sentinel_password"][usize::from(form - 2)];
            let separator = if before.contains('?') { '&' } else { '?' };
            let after = if after.is_empty() {
                String::new()
            } else {
                format!("&{after}")
            };
            UrlWithPassword::new(
                format!("{scheme}://{before}{separator}{name}="),
                password,
                after,
            )
        }
    };
    if let Some(url) = url {
        url.check();
    }
    password_apart(&format!("{scheme}://{before}"), password);
}

/// Whatever the text, the URL functions neither panic nor disagree.
fn any_url(text: &str) {
    let masked = mask_url(text);
    assert_eq!(masked.len(), text.len(), "{text:?}");
    // A secret may be empty (`redis://@h`: nothing to mask, still shown as `***`) or be
    // `***` itself.
    let redacted = redact_url(text);
    assert!(
        holds_secret(text) || (redacted == text && masked == text),
        "{text:?}"
    );
    let _ = split_urls(text);
    if let Ok(deployment) = Deployment::parse(&[text.to_string()], Sources::default()) {
        let _ = (deployment.has_cluster(), deployment.secrets());
    }
}

/// A URL built around a password, and where the password is in it.
struct UrlWithPassword<'a> {
    url: String,
    password: &'a str,
    at: usize,
}

impl<'a> UrlWithPassword<'a> {
    /// `None` when the password is not one that the form can hold: empty, holding `*` (the
    /// masking character), or what would end it or be read otherwise by the rule the
    /// redaction follows (a `pass=` parameter inside it, a `:` in a user part without one,
    /// a `&` in a parameter).
    fn new(before: String, password: &'a str, after: String) -> Option<UrlWithPassword<'a>> {
        let user_part_only = after.starts_with('@') && !before.ends_with(':');
        // A `:` then an `@` after it: the user part runs on to that `@`, and what is
        // before its `:` (the password here) is a user name.
        let named = after[1.min(after.len())..]
            .rsplit_once('@')
            .is_some_and(|(before, _)| before.contains(':'));
        let in_query = !after.starts_with('@');
        let refused = password.is_empty()
            || password.contains('*')
            || password.contains("pass=")
            || password.contains("password=")
            || (user_part_only && (password.contains(':') || named))
            || (in_query && password.contains('&'));
        (!refused).then(|| UrlWithPassword {
            url: format!("{before}{password}{after}"),
            password,
            at: before.len(),
        })
    }

    fn check(&self) {
        let UrlWithPassword { url, password, at } = self;
        let end = at + password.len();
        let masked = mask_url(url);
        assert!(
            masked.as_bytes()[*at..end].iter().all(|&byte| byte == b'*'),
            "{url:?} masked as {masked:?}"
        );
        assert!(holds_secret(url), "{url:?}");
        let elsewhere = url[..*at].contains(password) || url[end..].contains(password);
        if !elsewhere {
            let redacted = redact_url(url);
            assert!(
                !redacted.contains(password),
                "{url:?} redacted as {redacted:?}"
            );
        }
        let changed = format!("{}{}{}", &url[..*at], other(password), &url[end..]);
        if password.contains("://") || other(password) == **password {
            // Cut where another URL seems to start, a password is no longer one; and one
            // that the change leaves as it was cannot be told apart.
            return;
        }
        let first = parsed(url, None);
        if first.contains(password) {
            assert!(
                parsed(&changed, None).contains(password),
                "{url:?}: {first}"
            );
        }
    }
}

/// A password given apart (`--password-file`, `REDLOCK_PASSWORD`) is never shown either.
fn password_apart(url: &str, password: &str) {
    if password.is_empty() || other(password) == password {
        return;
    }
    let first = parsed(url, Some(password));
    if first.contains(password) {
        let second = parsed(url, Some(&other(password)));
        assert!(
            second.contains(password),
            "{url:?} with {password:?}: {first}"
        );
    }
}

/// What the program may print after parsing `url`: the error, or every display form.
fn parsed(url: &str, password: Option<&str>) -> String {
    let sources = Sources {
        password: password.map(|password| Password(password.to_string())),
        typed: true,
    };
    match Deployment::parse(&[url.to_string()], sources) {
        Ok(deployment) => {
            let typed: Vec<String> = deployment
                .typed_secrets()
                .into_iter()
                .map(|t| t.1)
                .collect();
            let secrets: Vec<String> = deployment.secrets().into_iter().map(|t| t.1).collect();
            format!("{deployment:?} {typed:?} {secrets:?}")
        }
        Err(err) => format!("{err:#}"),
    }
}

/// A duration as every duration option takes it: parsing never panics, and an accepted one
/// is within the option's limits (`--ttl`, `--renew-every`, `--wait`, `--kill-after`,
/// `--min-hold`, `--max-runtime`, `--redis-timeout`, one for each NUL-separated part).
pub fn duration(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for part in text.split('\0') {
        let _ = parse_duration(part);
    }
    let mut parts = text.split('\0');
    let mut args: Vec<String> = vec!["-k".into(), "job".into()];
    for flag in [
        "--ttl",
        "--renew-every",
        "--wait",
        "--kill-after",
        "--min-hold",
        "--max-runtime",
        "--redis-timeout",
    ] {
        match parts.next() {
            Some(value) => args.push(format!("{flag}={value}")),
            None => break,
        }
    }
    args.extend(["--".into(), "true".into()]);
    let _ = parse_command_line(&args);
}

/// A lock value, or a key name, read back from Redis: a holder's value is read without a
/// panic and shown on one line; any bytes as a key name show as one line of plain text,
/// and a bookkeeping key maps back to a lock whose sibling it is.
pub fn lock_value(data: &[u8]) {
    let holder = Holder::parse(data);
    if let Some(holder) = &holder {
        assert_plain_line(&holder.to_string());
        let _ = holder.held_for();
    }
    assert_plain_line(&describe(Some(data)));
    let blocker = Blocker {
        holder: Some(data.to_vec()),
        ahead: 0,
    };
    assert_plain_line(&blocker.phrase());
    assert_eq!(blocker.identity().0, holder.and_then(|holder| holder.token));
    assert!(data.starts_with(identity_in(data)));

    assert_plain_line(&shown(data));
    let key = Key::new(data);
    if let Some(lock) = lock_of_internal_key(&key) {
        assert!(lock.len() < key.len(), "{key:?} is a key of {lock:?}");
    }
    // The bookkeeping keys of `key` as a lock lead back to a lock with the same keys (to
    // `key` itself unless it is `{K}`, whose keys are `K`'s).
    for suffix in [
        &b":fence"[..],
        b":limit",
        b":queue",
        b":queue:alive",
        b":slot:2",
    ] {
        let sibling = sibling_key(&key, suffix);
        let lock = lock_of_internal_key(&sibling);
        let lock = lock.unwrap_or_else(|| panic!("{sibling:?} is a key of no lock"));
        assert_eq!(sibling_key(&lock, suffix), sibling, "{key:?}");
    }
    if colocates(&key) && !data.is_empty() {
        let slot = key_slot(data);
        for suffix in [&b":fence"[..], b":limit", b":slot:2", b":queue"] {
            assert_eq!(
                key_slot(sibling_key(&key, suffix).as_bytes()),
                slot,
                "{key:?}"
            );
        }
    }
}

/// A Redis reply (RESP2 or RESP3, as the redis crate reads it off the wire), given to
/// every reader of a reply: `CLUSTER SLOTS`, `SENTINEL GET-MASTER-ADDR-BY-NAME`, `ROLE`, and
/// the replies of our scripts and of `SCAN`. None panics; a slot map is in range and sorted;
/// what is shown of a lock is one line per holder.
pub fn redis_reply(data: &[u8]) {
    let Ok(value) = redis::parse_redis_value(data) else {
        return;
    };
    if let Some(slots) = parse_slots(value.clone(), "h:1") {
        assert!(slots.is_sorted());
        for (first, last, address) in &slots {
            assert!(first <= last && *last < 16384, "{slots:?}");
            assert!(!address.is_empty());
        }
    }
    let _ = master_address(value.clone());
    if let Ok(redis::Role::Primary { replicas, .. }) = redis::from_redis_value(value.clone()) {
        let _ = replicas.len();
    }
    read_script_replies(value);
}

fn read_script_replies(value: Value) {
    // PEEK, as `status`, `list` and `release` read each slot.
    if let Ok(reply) = redis::from_redis_value(value.clone()) {
        let key = Key::from("redlock:job");
        let slot = read_peek(&key, reply);
        if let Some(holder) = slot.as_ref().and_then(|slot| slot.holder.as_ref()) {
            assert_plain_line(&holder.to_string());
        }
        let view = LockView {
            key: key.clone(),
            nodes: (0..3)
                .map(|node| NodeView {
                    display: format!("redis://n{node}"),
                    slots: Ok(slot.iter().cloned().collect()),
                })
                .collect(),
        };
        if let Verdict::Held { identity, .. } = view.verdict() {
            assert!(view.holder_slot(&identity).is_some());
        }
    }
    // ACQUIRE: acquired or busy, with the fence and a holder's value.
    if let Ok((_, _, third, _)) = redis::from_redis_value::<(i64, i64, Value, u32)>(value.clone()) {
        let _ = redis::from_redis_value::<u64>(third.clone());
        if let Ok(holder) = redis::from_redis_value::<Vec<u8>>(third) {
            lock_value(&holder);
        }
    }
    // SCAN: a cursor and key names.
    if let Ok((_, names)) = redis::from_redis_value::<(u64, Vec<Vec<u8>>)>(value) {
        for name in names {
            let _ = lock_of_internal_key(&Key::new(name));
        }
    }
}

/// Text shown to people: one line, no control characters.
fn assert_plain_line(text: &str) {
    assert!(!text.chars().any(char::is_control), "{text:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_points_take_any_bytes() {
        let inputs: [&[u8]; 6] = [
            b"",
            b"\0",
            b"-k\0job\0-r\0redis://u:Qx7pw@h:1\0--\0true",
            b"\x00redis\0u\0Qx7pw\0h:1/0",
            b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$0\r\n\r\n:7000\r\n",
            b"{\"token\":\"t\",\"host\":\"h\\n\"}",
        ];
        for input in inputs {
            command_line(input);
            url(input);
            duration(input);
            lock_value(input);
            redis_reply(input);
        }
    }

    #[test]
    fn changed_secrets_keep_their_kind() {
        assert_eq!(other("az09AZ%2F"), "bg10BG%3A");
        assert_eq!(other(":/@"), ":/@");
    }
}
