//! Unit tests of `endpoint`.

use super::*;
use proptest::prelude::*;
use redis::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// A server on a loopback port that answers each command with `answer(its own address,
/// command)`, RESP text. Returns its address.
pub(in crate::backend::endpoint) fn fake_server(
    answer: impl Fn(&str, &[String]) -> String + Send + Sync + 'static,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let me = address.clone();
    let answer = Arc::new(answer);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (answer, me) = (Arc::clone(&answer), me.clone());
            std::thread::spawn(move || serve(stream, &me, &*answer));
        }
    });
    address
}

fn serve(stream: TcpStream, me: &str, answer: &dyn Fn(&str, &[String]) -> String) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    let mut read_line = |line: &mut String| {
        line.clear();
        reader.read_line(line).is_ok_and(|read| read > 0)
    };
    // Each command is an array of bulk strings: `*N`, then `$len` and the bytes N times.
    while read_line(&mut line) {
        let count: usize = line.trim().trim_start_matches('*').parse().unwrap();
        let mut command = Vec::new();
        for _ in 0..count {
            assert!(read_line(&mut line) && read_line(&mut line));
            command.push(line.trim_end().to_string());
        }
        if writer.write_all(answer(me, &command).as_bytes()).is_err() {
            return;
        }
    }
}

/// A host that accepts connections and never answers, as a blackholed or frozen server
/// does: the kernel completes the handshake for a listener that nobody accepts from.
/// Answers stay away for as long as the listener lives.
pub(in crate::backend::endpoint) fn blackhole() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    (listener, address)
}

/// A RESP bulk string.
pub(in crate::backend::endpoint) fn bulk(text: &str) -> String {
    format!("${}\r\n{text}\r\n", text.len())
}

/// Any reply a server may send, as the redis crate reads it: every kind of value, nested
/// a few levels, with numbers and texts near the edges that replies are read at.
pub(in crate::backend) fn redis_values() -> impl Strategy<Value = Value> {
    let text = prop_oneof![
        Just(String::new()),
        Just(String::from("master")),
        Just(String::from("slave")),
        Just(String::from("string")),
        Just(String::from("none")),
        "[0-9]{1,6}",
        "-?[0-9]{1,25}",
        any::<String>(),
    ];
    let leaf = prop_oneof![
        Just(Value::Nil),
        Just(Value::Okay),
        prop_oneof![
            any::<i64>(),
            -2i64..70_000,
            Just(i64::from(u16::MAX) + 1),
            Just(i64::from(u32::MAX) + 1)
        ]
        .prop_map(Value::Int),
        text.clone()
            .prop_map(|text| Value::BulkString(text.into_bytes())),
        any::<Vec<u8>>().prop_map(Value::BulkString),
        text.prop_map(Value::SimpleString),
        any::<f64>().prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
        // Kinds without a public constructor come from the wire.
        Just(parse(b"-ERR no such thing\r\n")),
        Just(parse(b"(3492890328409238509324850943850943825024385\r\n")),
        Just(parse(b"=15\r\ntxt:Some string\r\n")),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Set),
            prop::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            (
                inner.clone(),
                prop::collection::vec((inner.clone(), inner.clone()), 0..2)
            )
                .prop_map(|(data, attributes)| Value::Attribute {
                    data: Box::new(data),
                    attributes,
                }),
            prop::collection::vec(inner, 0..4).prop_map(|data| Value::Push {
                kind: redis::PushKind::Message,
                data,
            }),
        ]
    })
}

fn parse(resp: &[u8]) -> Value {
    redis::parse_redis_value(resp).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// ROLE is read by the redis crate: no reply makes it panic.
    #[test]
    fn any_role_reply_is_read_or_refused(reply in redis_values()) {
        let _ = redis::from_redis_value::<Role>(reply);
    }

    /// Whatever a URL holds, taking it apart ends in an endpoint or an error.
    #[test]
    fn any_url_is_taken_apart_or_refused(
        scheme in prop::sample::select(&["redis", "rediss+sentinel", "redis+cluster", "x"][..]),
        rest in "[a-z0-9:/?#@&=,.%\\[\\] -]{0,24}|\\PC{0,12}",
    ) {
        let _ = Endpoint::new(&format!("{scheme}://{rest}"), "");
    }
}

#[test]
fn each_server_of_a_search_gets_its_share() {
    let ms = Duration::from_millis;
    assert_eq!(share(ms(3000), 3), ms(1000), "equal parts");
    assert_eq!(share(ms(3000), 1), ms(3000), "the last one gets the rest");
    assert_eq!(share(ms(3000), 0), ms(3000));
    assert_eq!(share(ms(120), 3), MIN_SHARE, "never less than MIN_SHARE…");
    assert_eq!(share(ms(30), 3), ms(30), "…unless less is left");
    let until = Instant::now() + ms(900);
    let by = share_until(until, 3).unwrap();
    assert!(by <= Instant::now() + ms(300) && by < until);
    assert!(share_until(Instant::now(), 3).unwrap_err().is_timeout());
}

#[test]
fn schemes_choose_the_deployment() {
    let kind = |url: &str| Endpoint::new(url, "").map(|endpoint| endpoint.kind);
    assert!(matches!(kind("redis://h:1/2"), Ok(Kind::Server(_))));
    assert!(matches!(
        kind("redis+sentinel://h/m"),
        Ok(Kind::Sentinel(_))
    ));
    assert!(matches!(
        kind("rediss+sentinel://h/m"),
        Ok(Kind::Sentinel(_))
    ));
    assert!(matches!(kind("redis+cluster://h"), Ok(Kind::Cluster(_))));
    assert!(matches!(kind("rediss+cluster://h"), Ok(Kind::Cluster(_))));
    assert!(kind("http+sentinel://a/m").is_err());
    assert!(kind("redis+cluster://").is_err());
}

#[test]
fn errors_never_repeat_a_password() {
    let broken = [
        "redis+sentinel://:{pw}@s1:x/m",
        "redis+sentinel://:{pw}@s1,,s2/m",
        "redis+sentinel://:{pw}@s1",
        "redis+sentinel://:{pw}@s1/m/x",
        "redis+sentinel://:{pw}@s1/m?bad=1",
        "redis+sentinel://u:{pw}@s1/m?sentinel_password=x&Qx=Zv",
        "rediss+sentinel://:{pw}@s1/m#bogus",
        "redis+cluster://u:{pw}@h:x",
        "redis+cluster://u:{pw}@h,,g",
        "redis+cluster://u:{pw}@h/1",
        "redis+cluster://u:{pw}@h?Qx=Zv",
        "rediss+cluster://u:{pw}@h#bogus",
    ];
    for password in url::tests::TRICKY {
        // The pieces between the characters that end a URL's parts.
        let pieces: Vec<&str> = password.split(|c: char| !c.is_alphanumeric()).collect();
        for form in broken {
            let url = form.replace("{pw}", password);
            let Err(err) = Endpoint::new(&url, "") else {
                panic!("accepted {url}");
            };
            for piece in &pieces {
                assert!(!err.contains(piece), "{url}: {err}");
            }
        }
        for form in ["redis+sentinel://:{pw}@s1/m", "rediss+cluster://u:{pw}@h"] {
            let url = form.replace("{pw}", password);
            assert!(Endpoint::new(&url, "").is_ok(), "refused {url}");
        }
    }
    // The reviewer's case: the `#` once cut the user part short and the rest was
    // quoted as a host.
    assert!(Endpoint::new("redis+sentinel://:s3cr#et@s1/m", "").is_ok());
    let err = Endpoint::new("redis+sentinel://:s3cr#et@s1:x/m", "")
        .err()
        .unwrap();
    assert!(!err.contains("s3cr"), "{err}");
}
