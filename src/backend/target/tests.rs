//! Unit tests of `target`.

use super::*;
use proptest::prelude::*;

#[test]
fn passwords_are_redacted() {
    assert_eq!(
        redact_url("rediss://user:pw@redis.internal:6380/2"),
        "rediss://user:***@redis.internal:6380/2"
    );
    assert_eq!(
        redact_url("redis://:p@ss@host:1"),
        "redis://:***@host:1",
        "an unescaped @ in the password still hides all of it"
    );
    for tricky in ["s3cr/et", "s3cr?et", "s3cr#et", "a@b/c?d"] {
        let url = format!("redis://user:{tricky}@127.0.0.1:6379/2");
        let shown = redact_url(&url);
        assert_eq!(shown, "redis://user:***@127.0.0.1:6379/2", "{url}");
    }
    assert_eq!(
        redact_url("redis+unix:///run/redis.sock?pass=se@cret"),
        "redis+unix:///run/redis.sock?pass=***"
    );
    assert_eq!(
        redact_url("redis+unix:///run/redis.sock?db=1&pass=secret"),
        "redis+unix:///run/redis.sock?db=1&pass=***"
    );
    assert_eq!(
        redact_url("redis://127.0.0.1:6379"),
        "redis://127.0.0.1:6379"
    );
    // Forms that once went through in clear.
    assert_eq!(
        redact_url("redis+unix://:s3cret@/run/redis.sock"),
        "redis+unix://:***@/run/redis.sock"
    );
    assert_eq!(redact_url("redis://s3cret@host:1"), "redis://***@host:1");
    assert_eq!(
        redact_url("unix://s3cret@/run/r.sock"),
        "unix://***@/run/r.sock"
    );
    assert_eq!(redact_url("s3cret@host"), "***@host");
    assert_eq!(redact_url("bogus://u:p@"), "bogus://u:***@");
    // An `@` in a query password is not the end of a user part.
    assert_eq!(
        redact_url("redis+sentinel://s1/m?sentinel_password=p@ss"),
        "redis+sentinel://s1/m?sentinel_password=***"
    );
    assert_eq!(
        redact_url("redis+sentinel://u:pw@s1,s2/m?db=1&sentinel_password=p@ss&x=1"),
        "redis+sentinel://u:***@s1,s2/m?db=1&sentinel_password=***&x=1"
    );
    assert_eq!(
        redact_url("redis+sentinel://:pw@s1:26379,s2/mymaster/1?sentinel_password=spw"),
        "redis+sentinel://:***@s1:26379,s2/mymaster/1?sentinel_password=***"
    );
    assert_eq!(
        redact_url("redis+sentinel://s1,s2/m?sentinel_username=u&sentinel_password=s/p"),
        "redis+sentinel://s1,s2/m?sentinel_username=u&sentinel_password=***"
    );
    assert_eq!(
        redact_url("rediss+cluster://app:p@ss/w?rd@h1:7000,h2:7001"),
        "rediss+cluster://app:***@h1:7000,h2:7001"
    );
    // Found by a property test: a parameter before the user part's `:` was shown.
    assert_eq!(redact_url("redis://?pass=Qx:Zv&@h"), "redis://?pass=***@h");
    assert_eq!(mask_url("redis://?pass=Qx:Zv&@h"), "redis://?pass=******@h");
}

#[test]
fn a_password_given_apart_goes_where_the_url_has_none() {
    let pw = "p@ss/w:rd";
    let escaped = "p%40ss%2Fw%3Ard";
    assert_eq!(
        with_password("redis://h:1/2", pw),
        format!("redis://:{escaped}@h:1/2")
    );
    assert_eq!(
        with_password("rediss://alice@h:1", pw),
        format!("rediss://alice:{escaped}@h:1")
    );
    assert_eq!(with_password("redis://a:own@h", pw), "redis://a:own@h");
    assert_eq!(
        with_password("redis+unix:///run/r.sock?db=1", pw),
        format!("redis+unix:///run/r.sock?db=1&pass={escaped}")
    );
    assert_eq!(
        with_password("redis+sentinel://s1,s2/m?sentinel_password=x", pw),
        format!("redis+sentinel://:{escaped}@s1,s2/m?sentinel_password=x")
    );
    let deployment = Deployment::parse(
        &["redis://h:1".into()],
        Sources {
            password: Some(Password(pw.into())),
            typed: false,
        },
    )
    .unwrap();
    assert_eq!(deployment.targets()[0].display, "redis://h:1");
    let info =
        redis::IntoConnectionInfo::into_connection_info(deployment.targets()[0].url.as_str())
            .unwrap();
    assert_eq!(info.redis_settings().password(), Some(pw));
    assert!(deployment
        .secrets()
        .contains(&(pw.to_string(), "***".to_string())));
}

#[test]
fn typed_urls_are_masked_in_place() {
    let typed = "redis://u:s3cr3t@h:1";
    assert_eq!(mask_url(typed), "redis://u:******@h:1");
    let deployment = Deployment::parse(
        &[typed.into(), "redis://other:2".into()],
        Sources {
            password: None,
            typed: true,
        },
    )
    .unwrap();
    assert_eq!(
        deployment.typed_secrets(),
        [(typed.to_string(), "redis://u:***@h:1".to_string())]
    );
    assert!(holds_secret(typed) && !holds_secret("redis://h:1"));
    // Found by fuzzing: the debug form once listed the typed URLs as they were.
    let debug = format!("{deployment:?}");
    assert!(!debug.contains("s3cr3t"), "{debug}");
}

/// With the password in a file or REDLOCK_PASSWORD, a typed `user@host` names the user:
/// nothing typed is a password, so nothing is masked and no warning is due. A password
/// typed beside one given apart still is one.
#[test]
fn a_typed_user_name_is_no_password_when_one_is_given_apart() {
    let parse = |typed: &str| {
        Deployment::parse(
            &[typed.into()],
            Sources {
                password: Some(Password("from-a-file".into())),
                typed: true,
            },
        )
        .unwrap()
        .typed_secrets()
    };
    for typed in [
        "redis://alice@h:1",
        "redis://h:1",
        "rediss://alice@h:1/2",
        "redis+unix:///run/redis.sock",
        "redis://alice@h:1,redis://bob@g:2",
    ] {
        assert_eq!(parse(typed), [], "{typed}");
    }
    for typed in [
        "redis://alice:typed@h:1",
        "redis+unix:///run/redis.sock?pass=typed",
        "redis://alice@h:1,redis://:typed@g:2",
    ] {
        assert_eq!(parse(typed).len(), 1, "{typed}");
        assert!(!parse(typed)[0].1.contains("typed"), "{typed}");
    }
}

#[test]
fn urls_split_where_a_new_one_starts() {
    assert_eq!(
        split_urls("redis://a:1,rediss://:p,w@b:2/1, redis://c:3"),
        ["redis://a:1", "rediss://:p,w@b:2/1", "redis://c:3"]
    );
    // A comma inside one URL (a host list) does not split it.
    assert_eq!(
        split_urls("redis+sentinel://h1:26379,h2:26379/m"),
        ["redis+sentinel://h1:26379,h2:26379/m"]
    );
}

/// Pieces of URLs: every character that ends or starts a part, some text beyond ASCII.
const PIECE: &str = "[a-z0-9:/?#@&=,.%é+_ \\[\\]-]{0,10}";
const SCHEMES: [&str; 10] = [
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "bogus",
    "",
];

/// A password: marked, so that no other part of a URL or of a message can hold it, with
/// what may end a part in the middle. What the redaction rule reads otherwise is left
/// out: a `pass=` parameter inside the password itself; `://` (an entry is split where
/// another URL seems to start); `*` (the masking character).
fn password(forbidden: &'static str) -> impl Strategy<Value = String> {
    PIECE
        .prop_filter("a password the rule can tell", move |middle| {
            !middle.contains("pass=")
                && !middle.contains("password=")
                && !middle.contains("://")
                && !middle.contains(|c| forbidden.contains(c))
        })
        .prop_map(|middle| format!("Qx{middle}Zv"))
}

/// Where a password sits in `url`, it is masked byte for byte, left out of the
/// redacted form, and in no error or debug form that `Deployment::parse` gives.
fn assert_hidden(url: &str, password: &str) -> Result<(), TestCaseError> {
    let at = url.find(password).expect("the password is in the URL");
    let masked = mask_url(url);
    prop_assert!(
        masked.as_bytes()[at..at + password.len()]
            .iter()
            .all(|&b| b == b'*'),
        "{} masked as {}",
        url,
        masked
    );
    prop_assert!(holds_secret(url));
    let redacted = redact_url(url);
    prop_assert!(
        !redacted.contains(password),
        "{} shown as {}",
        url,
        redacted
    );
    let sources = Sources {
        password: None,
        typed: true,
    };
    let shown = match Deployment::parse(&[url.to_string()], sources) {
        Ok(deployment) => format!("{deployment:?} {:?}", deployment.typed_secrets()[0].1),
        Err(err) => format!("{err:#}"),
    };
    prop_assert!(!shown.contains(password), "{} gave {}", url, shown);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_text_is_redacted_or_refused_without_a_panic(text in "\\PC{0,40}|[a-z:/?@&=,]{0,40}") {
        let masked = mask_url(&text);
        prop_assert_eq!(masked.len(), text.len());
        prop_assert!(holds_secret(&text) || (redact_url(&text) == text && masked == text));
        let _ = Deployment::parse(std::slice::from_ref(&text), Sources::default());
        for url in split_urls(&text) {
            prop_assert!(text.contains(&url));
        }
    }

    #[test]
    fn a_user_part_password_is_hidden(
        scheme in prop::sample::select(&SCHEMES[..]),
        user in PIECE,
        password in password(""),
        rest in PIECE,
    ) {
        assert_hidden(&format!("{scheme}://{user}:{password}@{rest}"), &password)?;
    }

    /// (Unless a `:` and another `@` follow: the user part then runs on to that `@`, and
    /// the text before its `:` is a user name.)
    #[test]
    fn a_user_part_without_a_colon_is_hidden(
        scheme in prop::sample::select(&SCHEMES[..]),
        secret in password(":"),
        rest in PIECE.prop_filter("no user name", |rest| {
            rest.rsplit_once('@').is_none_or(|(before, _)| !before.contains(':'))
        }),
    ) {
        assert_hidden(&format!("{scheme}://{secret}@{rest}"), &secret)?;
    }

    #[test]
    fn a_password_parameter_is_hidden(
        scheme in prop::sample::select(&SCHEMES[..]),
        before in PIECE,
        name in prop::sample::select(&["pass", "password", "sentinel_password"][..]),
        password in password("&"),
        after in PIECE,
    ) {
        let url = format!("{scheme}://{before}?{name}={password}&{after}");
        assert_hidden(&url, &password)?;
    }

    #[test]
    fn a_password_given_apart_is_never_shown(
        scheme in prop::sample::select(&SCHEMES[..]),
        rest in PIECE,
        password in password(""),
    ) {
        let sources = Sources {
            password: Some(Password(password.clone())),
            typed: true,
        };
        let shown = match Deployment::parse(&[format!("{scheme}://{rest}")], sources) {
            Ok(deployment) => format!("{deployment:?}"),
            Err(err) => format!("{err:#}"),
        };
        prop_assert!(!shown.contains(&password), "{}", shown);
    }
}
