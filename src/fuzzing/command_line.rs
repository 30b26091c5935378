//! The command line: parsed as the program parses it, checked against the limits and for
//! secrets in what it may print.

use super::*;

/// The command line: the bytes are the arguments, separated by NUL bytes (`-k`, `job`, …).
/// Parsing never panics; an accepted command line gives a configuration within the limits;
/// no error, and no debug form of the configuration, holds a secret of a URL argument.
pub fn command_line(data: &[u8]) {
    let args = arguments(data);
    // `--password-file` reads a file: a fuzzer could name /dev/zero.
    if args
        .iter()
        .any(|arg| arg.contains("password-file") || arg.contains("auth-file"))
    {
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
pub(super) fn redis_values(args: &[String]) -> Vec<String> {
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
pub(super) fn parse_command_line(args: &[String]) -> String {
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
                Task::Serve(config) => &config.redis,
            };
            // What `ps` shows instead is the redacted form, whose hiding of every password
            // the backend's property tests check.
            for (typed, shown) in redis.typed_secrets() {
                assert_eq!(shown, redact_url(&typed), "{typed:?} shown as {shown:?}");
            }
            let displays: Vec<&str> = redis.targets().iter().map(|t| &*t.display).collect();
            format!("{task:?} {displays:?}")
        }
        Err(err) => format!("{err:#}"),
    }
}

pub(super) fn check_config_limits(config: &crate::config::Config) {
    let timing = config.timing;
    assert!((lease::MIN_TTL..=lease::MAX_TTL).contains(&timing.ttl));
    assert!(timing.renew_every >= lease::MIN_RENEWAL_PERIOD);
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
pub(super) fn arguments(data: &[u8]) -> Vec<String> {
    if data.is_empty() {
        return Vec::new();
    }
    data.split(|&byte| byte == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// The secret runs of `urls`, as `mask_url` finds them.
pub(super) fn url_secrets(urls: &[String]) -> Vec<String> {
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
pub(super) fn secret_chars(text: &str) -> impl Iterator<Item = (char, bool)> + '_ {
    let masked = mask_url(text).into_bytes();
    text.char_indices()
        .map(move |(at, ch)| (ch, ch != '*' && masked.get(at) == Some(&b'*')))
}

/// `text` with each ASCII letter and digit replaced by another of its kind (hex digits stay
/// hex digits), so that it parses the same way.
pub(super) fn other(text: &str) -> String {
    text.chars().map(other_char).collect()
}

pub(super) fn other_char(ch: char) -> char {
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
