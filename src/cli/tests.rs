use super::*;
use crate::config::{parse_duration, Config, Task, Wait};
use crate::lease;
use proptest::prelude::*;
use std::time::Duration;

/// Options, values of each kind, and stray text, as a command line may hold them.
fn argument() -> impl Strategy<Value = String> {
    const OPTIONS: [&str; 45] = [
        "-k",
        "--key",
        "-r",
        "--redis",
        "-t",
        "--ttl",
        "--renew-every",
        "-w",
        "--wait",
        "-n",
        "-E",
        "--kill-after",
        "--limit",
        "--fair",
        "--supersede",
        "--once",
        "--once-per",
        "--remember",
        "--min-hold",
        "--max-runtime",
        "--stop-timeout",
        "--label",
        "-c",
        "-q",
        "-v",
        "--",
        "status",
        "list",
        "release",
        "history",
        "--follow",
        "--lines",
        "--json",
        "--force",
        "--prefix",
        "--redis-timeout",
        "--pass-redis-env",
        "--ping",
        "--max-skips",
        "--dry-run",
        "metrics",
        "check",
        "--max-held",
        "--warn-skips",
        "--max-since-success",
    ];
    prop_oneof![
        prop::sample::select(&OPTIONS[..]).prop_map(String::from),
        "[0-9]{1,4}(ms|s|m|h)?",
        "(https?|HTTP|ftp)?(://)?[a-z0-9:@/.?=&#%]{0,16}",
        "redis(s)?(\\+sentinel|\\+cluster|\\+unix)?://[a-z0-9:@/,?=&.]{0,16}",
        "\\PC{0,12}",
    ]
}

/// A duration as someone may write one, or not quite.
fn duration() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{1,3}(ms|s|m|h)?",
        "[0-9]{1,25}(\\.[0-9]{0,3})?(ns|us|ms|s|m|h|d|w|y)?",
        "-?[0-9.e+]{1,8}|inf|NaN|forever|[0-9]+ ?(s|m) [0-9]+(s|ms)",
        "\\PC{0,8}",
    ]
}

type Documented = (String, String, String, Option<String>);

/// Every argument of every form of the command, with the command's name, as
/// (command, argument id, short help, long help); clap's own --help and --version left
/// out, since their text is clap's.
fn documented_arguments() -> Vec<Documented> {
    fn walk(command: &clap::Command, out: &mut Vec<Documented>) {
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") || arg.is_hide_set() {
                continue;
            }
            out.push((
                command.get_name().to_string(),
                id.to_string(),
                arg.get_help().map(ToString::to_string).unwrap_or_default(),
                arg.get_long_help().map(ToString::to_string),
            ));
        }
        for sub in command.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut command = Cli::command();
    command.build();
    let mut out = Vec::new();
    walk(&command, &mut out);
    out
}

/// The man page is the full option reference: every argument has, besides its one-line
/// help (what -h shows), a long help (what --help and the man page show) that says more.
#[test]
fn every_argument_has_a_long_help() {
    let arguments = documented_arguments();
    assert!(arguments.len() > 20, "{arguments:?}");
    for (command, id, short, long) in arguments {
        assert!(!short.trim().is_empty(), "{command} {id}: no help");
        let long = long.unwrap_or_else(|| panic!("{command} {id}: no long help"));
        assert!(
            long.starts_with(&short) && long.len() > short.len() + 20,
            "{command} {id}: the long help adds nothing to {short:?}:\n{long}"
        );
    }
}

/// The texts that list the subcommands a program after -- may be named like (the
/// COMMAND argument's help, the footer of --help) name every one of them.
#[test]
fn every_subcommand_is_named_where_the_subcommands_are_listed() {
    let mut command = Cli::command();
    command.build();
    let command_help = command
        .get_arguments()
        .find(|arg| arg.get_id() == "command")
        .and_then(|arg| arg.get_long_help())
        .map(ToString::to_string)
        .unwrap_or_default();
    let footer = command
        .get_after_help()
        .map(ToString::to_string)
        .unwrap_or_default();
    for sub in command.get_subcommands() {
        let name = sub.get_name();
        if name == "help" {
            continue;
        }
        for (what, text) in [("COMMAND's help", &command_help), ("the footer", &footer)] {
            assert!(
                text.contains(name),
                "{what} does not name the subcommand {name}:\n{text}"
            );
        }
    }
}

fn parse(args: &[String]) -> Option<Config> {
    let argv = std::iter::once("redlock-run").chain(args.iter().map(String::as_str));
    match Task::from_cli(Cli::parse_from_args(argv).ok()?).ok()? {
        Task::Run(config) => Some(*config),
        Task::Admin(_) | Task::Serve(_) => None,
    }
}

fn assert_within_limits(config: &Config) {
    if let Some(ping) = &config.ping {
        let skips = 1..=crate::config::MAX_SKIPS;
        assert!(ping.max_skips.is_none_or(|max| skips.contains(&max)));
        assert_eq!(format!("{:?}", ping.url), "PingUrl(***)");
    }
    let timing = config.timing;
    assert!((lease::MIN_TTL..=lease::MAX_TTL).contains(&timing.ttl));
    assert!(timing.renew_every >= lease::MIN_RENEWAL_PERIOD);
    assert!(timing.renew_every <= lease::max_renewal_period(timing.ttl));
    assert!(timing.kill_after <= lease::MAX_DURATION);
    let redis_timeout = lease::MIN_REDIS_TIMEOUT..=lease::MAX_REDIS_TIMEOUT;
    assert!(redis_timeout.contains(&config.redis_timeout));
    if let Wait::For(wait) = config.wait {
        assert!(wait <= lease::MAX_DURATION);
    }
    for bound in [config.min_hold, config.max_runtime].into_iter().flatten() {
        assert!(!bound.is_zero() && bound <= lease::MAX_DURATION);
    }
    assert!(config
        .stop_timeout
        .is_none_or(|dur| dur <= lease::MAX_DURATION));
    // The lease's arithmetic stays in range.
    let now = std::time::Instant::now();
    let lease = timing.lease_from(now);
    assert!(lease.renewal_due() < lease.valid_until());
    assert!(lease.give_up_at() <= lease.valid_until());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_command_line_is_parsed_or_refused(args in prop::collection::vec(argument(), 0..10)) {
        if let Some(config) = parse(&args) {
            assert_within_limits(&config);
        }
    }

    #[test]
    fn any_duration_is_parsed_or_refused(text in duration()) {
        if let Ok(duration) = parse_duration(&text) {
            prop_assert!(duration < Duration::MAX);
        }
    }

    /// `--ping`, `--max-skips` and `--dry-run` with values of every kind: accepted only
    /// with an http(s) URL and a count in range; no error quotes the URL's path.
    #[test]
    fn ping_options_are_parsed_or_refused(
        scheme in "(https?|HTTPS|ftp|)(://)?",
        rest in "[a-z0-9:@/.?=&#% ]{0,12}",
        skips in prop::option::of("-?[0-9]{0,9}|\\PC{0,4}"),
        dry_run in any::<bool>(),
    ) {
        let url = format!("{scheme}h.example/s3cret{rest}");
        let mut args: Vec<String> = vec!["-k".into(), "job".into(), "--ping".into(), url.clone()];
        if let Some(skips) = &skips {
            args.extend(["--max-skips".into(), skips.clone()]);
        }
        if dry_run {
            args.push("--dry-run".into());
        }
        args.extend(["--".into(), "true".into()]);
        let argv = std::iter::once("redlock-run").chain(args.iter().map(String::as_str));
        let parsed = Cli::parse_from_args(argv).map_err(|err| err.to_string());
        match parsed.and_then(|cli| Task::from_cli(cli).map_err(|err| format!("{err:#}"))) {
            Ok(Task::Run(config)) => {
                assert_within_limits(&config);
                prop_assert!(config.ping.is_some());
                prop_assert!(url.to_ascii_lowercase().starts_with("http"));
                prop_assert_eq!(config.dry_run, dry_run);
            }
            Ok(Task::Admin(_) | Task::Serve(_)) => {
                prop_assert!(false, "{args:?} is not an admin command")
            }
            // clap quotes a value that does not fit its type (--max-skips), never the URL.
            Err(err) => prop_assert!(!err.contains("s3cret"), "{err}"),
        }
    }

    /// Every duration option keeps what it accepts within its limits.
    #[test]
    fn accepted_durations_are_within_their_limits(values in prop::collection::vec(duration(), 8)) {
        let flags = [
            "--ttl", "--renew-every", "--wait", "--kill-after", "--min-hold", "--max-runtime",
            "--redis-timeout", "--stop-timeout",
        ];
        let mut args: Vec<String> = vec!["-k".into(), "job".into()];
        for (flag, value) in flags.iter().zip(&values) {
            args.push(format!("{flag}={value}"));
        }
        args.extend(["--".into(), "true".into()]);
        if let Some(config) = parse(&args) {
            assert_within_limits(&config);
        }
    }
}
