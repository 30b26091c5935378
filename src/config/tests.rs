//! `Cli` -> `Config` as users meet it: what is accepted, what is refused, the defaults.

use super::durations::parse_duration;
use super::*;
use crate::backend::MAX_KEY_LEN;
use clap::Parser;

fn config(args: &[&str]) -> Result<Config> {
    let mut argv = vec!["redlock-run"];
    argv.extend_from_slice(args);
    match Task::from_cli(Cli::try_parse_from(argv).expect("clap accepts"))? {
        Task::Run(config) => Ok(*config),
        Task::Admin(admin) => panic!("parsed as {admin:?}"),
        Task::Serve(serve) => panic!("parsed as {serve:?}"),
    }
}

#[test]
fn durations() {
    assert_eq!(parse_duration("30").unwrap(), Duration::from_secs(30));
    assert_eq!(parse_duration("0.5").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("1m 30s").unwrap(), Duration::from_secs(90));
    assert!(parse_duration("-1").is_err());
    assert!(parse_duration("abc").is_err());
    assert!(parse_duration("").is_err());
}

#[test]
fn sentinel_and_cluster_urls() {
    for good in [
        "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster",
        "redis+sentinel://:pw@s1/mymaster/2?sentinel_password=x",
        "rediss+sentinel://s1,s2,s3/mymaster",
        "redis+cluster://127.0.0.1:7000",
        "rediss+cluster://user:pw@h1:7000,h2:7001,[::1]:7002",
    ] {
        assert!(
            config(&["-k", "j", "-r", good, "--", "true"]).is_ok(),
            "refused {good}"
        );
    }
    for bad in [
        "redis+sentinel://s1:26379",
        "redis+sentinel://s1:port/m",
        "redis+sentinel://s1/m?db=2",
        "redis+cluster://h1/3",
        "redis+cluster://h1,,h2",
        "redis+replica://h1",
    ] {
        let err = config(&["-k", "j", "-r", bad, "--", "true"]).unwrap_err();
        assert!(
            format!("{err:#}").starts_with("invalid --redis URL"),
            "{bad}: {err:#}"
        );
    }
}

#[test]
fn defaults() {
    let config = config(&["-k", "job", "--", "true"]).unwrap();
    assert_eq!(config.key, Key::from("redlock:job"));
    assert_eq!(config.timing.ttl, Duration::from_secs(30));
    assert_eq!(config.timing.renew_every, Duration::from_secs(10));
    assert_eq!(config.wait, Wait::Forever);
    assert_eq!(config.conflict_exit_code, 75);
    assert_eq!(config.timing.kill_after, Duration::from_secs(10));
}

#[test]
fn stop_timeout_is_optional_and_may_be_zero() {
    let stop_timeout = |args: &[&str]| config(args).unwrap().stop_timeout;
    assert_eq!(stop_timeout(&["-k", "job", "--", "true"]), None);
    assert_eq!(
        stop_timeout(&["-k", "job", "--stop-timeout", "25", "--", "true"]),
        Some(Duration::from_secs(25))
    );
    assert_eq!(
        stop_timeout(&["-k", "job", "--stop-timeout", "0", "--", "true"]),
        Some(Duration::ZERO)
    );
}

#[test]
fn shell_and_prefix() {
    let config = config(&["-k", "job", "--prefix", "", "-c", "a | b"]).unwrap();
    assert_eq!(config.key, Key::from("job"));
    assert_eq!(config.command, ["/bin/sh", "-c", "a | b"]);
    assert_eq!(config.program_name(), "sh");
}

#[test]
fn bad_input_is_refused() {
    for args in [
        &["-k", "", "--", "true"][..],
        &["-k", "j", "-t", "0", "--", "true"],
        &["-k", "j", "-t", "50ms", "--", "true"],
        &["-k", "j", "-t", "1s", "--renew-every", "1s", "--", "true"],
        &["-k", "j", "-r", "http://x", "--", "true"],
        &["-k", "j", "-w", "soon", "--", "true"],
        &["-k", "j"],
    ] {
        assert!(config(args).is_err(), "accepted {args:?}");
    }
    let long_key = "k".repeat(MAX_KEY_LEN + 1);
    assert!(config(&["-k", &long_key, "--", "true"]).is_err());
    let longest_key = "k".repeat(MAX_KEY_LEN);
    assert!(config(&["-k", &longest_key, "--", "true"]).is_ok());
}

#[test]
fn several_urls_make_a_quorum() {
    let three = ["-r", "redis://a:1", "-r", "redis://b:1,redis://c:1"];
    let quorum = config(&[&three[..], &["-k", "j", "--", "true"]].concat()).unwrap();
    let shown: Vec<&str> = quorum
        .redis
        .targets()
        .iter()
        .map(|t| t.display.as_str())
        .collect();
    assert_eq!(shown, ["redis://a:1", "redis://b:1", "redis://c:1"]);
    for refused in [
        &[
            "-r",
            "redis://a:1",
            "-r",
            "redis://127.0.0.1:1",
            "-r",
            "redis://a:1/0",
        ][..],
        &["-r", "redis://a:1", "-r", "redis://b:1", "--limit", "2"],
        &["-r", "redis://a:1", "-r", "redis://b:1", "--fair"],
        // One server under two databases, or as localhost and 127.0.0.1.
        &["-r", "redis://127.0.0.1:1/0", "-r", "redis://127.0.0.1:1/1"],
        &["-r", "redis://localhost:7", "-r", "redis://127.0.0.1:7"],
        &["-r", "redis://[::1]:7", "-r", "redis://LOCALHOST:7"],
    ] {
        let args = [refused, &["-k", "j", "--", "true"]].concat();
        assert!(config(&args).is_err(), "accepted {refused:?}");
    }
    let distinct = ["-r", "redis://127.0.0.1:1", "-r", "redis://127.0.0.1:2"];
    assert!(config(&[&distinct[..], &["-k", "j", "--", "true"]].concat()).is_ok());
}

#[test]
fn waiting() {
    let no_wait = config(&["-k", "j", "-n", "--", "true"]).unwrap();
    assert_eq!(no_wait.wait, Wait::For(Duration::ZERO));
    let zero = config(&["-k", "j", "-w", "0", "--", "true"]).unwrap();
    assert_eq!(zero.wait, Wait::For(Duration::ZERO));
    let forever = config(&["-k", "j", "-w", "forever", "--", "true"]).unwrap();
    assert_eq!(forever.wait, Wait::Forever);
}

fn admin(args: &[&str]) -> Result<AdminConfig> {
    let mut argv = vec!["redlock-run"];
    argv.extend_from_slice(args);
    match Task::from_cli(Cli::try_parse_from(argv).expect("clap accepts"))? {
        Task::Admin(admin) => Ok(*admin),
        Task::Run(config) => panic!("parsed as {config:?}"),
        Task::Serve(serve) => panic!("parsed as {serve:?}"),
    }
}

#[test]
fn release_refuses_a_locks_bookkeeping() {
    for bookkeeping in [
        "job{a}:fence",
        "job{a}:limit",
        "job{a}:queue",
        "job{a}:slot:2",
    ] {
        let err = admin(&["release", "-k", bookkeeping, "--force"]).unwrap_err();
        assert_eq!(
            format!("{err:#}"),
            format!(
                "redlock:{bookkeeping} is bookkeeping of the lock redlock:job{{a}} (its fence \
                 counter, limit, queue or a slot), not a lock; deleting it could let fences \
                 repeat. Release redlock:job{{a}} instead"
            )
        );
    }
    assert!(admin(&["release", "-k", "job{a}"]).is_ok());
    // `status` only reads: it may look at any key.
    assert!(admin(&["status", "-k", "job{a}:fence"]).is_ok());
}

#[test]
fn supersede_needs_a_wait() {
    assert!(
        config(&["-k", "j", "--supersede", "--", "true"])
            .unwrap()
            .supersede
    );
    for no_wait in [&["--no-wait"][..], &["--wait", "0"]] {
        let mut args = vec!["-k", "j", "--supersede"];
        args.extend_from_slice(no_wait);
        args.extend(["--", "true"]);
        let err = config(&args).unwrap_err();
        assert!(format!("{err:#}").contains("--supersede cannot be used with --no-wait"));
    }
}

#[test]
fn replace_needs_a_wait_a_mutex_and_no_supersede() {
    let replace = config(&["-k", "j", "--replace", "--", "true"]).unwrap();
    assert!(replace.replace && !replace.supersede);
    // With --once it is fine: a run whose work is done replaces nobody.
    assert!(config(&["-k", "j", "--replace", "--once", "v1", "--", "true"]).is_ok());
    for refused in [
        &["--no-wait"][..],
        &["--wait", "0"],
        &["--limit", "2"],
        &["--supersede"],
    ] {
        let mut args = vec!["-k", "j", "--replace"];
        args.extend_from_slice(refused);
        args.extend(["--", "true"]);
        let err = format!("{:#}", config(&args).unwrap_err());
        assert!(err.contains("--replace"), "{refused:?}: {err}");
    }
}
