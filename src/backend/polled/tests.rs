//! The subscription and the commands sent over it, against a server played by the test on
//! the other end of a socket pair.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::*;
use crate::backend::wire::Wire;

const MESSAGE: &[u8] = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nt#1:x\r\n";

fn message(payload: &str) -> Vec<u8> {
    format!(
        "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n${}\r\n{payload}\r\n",
        payload.len()
    )
    .into_bytes()
}

/// A subscription's state on one end of a socket pair; the other end is the server.
fn wire(resp3: bool) -> (WireState, UnixStream) {
    let (ours, server) = UnixStream::pair().unwrap();
    ours.set_nonblocking(true).unwrap();
    let state = WireState {
        stream: Stream::Unix(ours),
        buffer: Vec::new(),
        display: String::from("r"),
        resp3,
        db: 0,
        heard: None,
        read_by_loop: true,
        subscribed: false,
        unsubscribing: false,
        broken: false,
        until: Some(Instant::now() + Duration::from_secs(5)),
    };
    (state, server)
}

/// Subscribed, the server having sent `confirms` (and whatever follows them).
fn subscribed(confirms: &[u8], resp3: bool) -> (PolledSubscription, UnixStream) {
    let (mut state, mut server) = wire(resp3);
    server.write_all(confirms).unwrap();
    state.ask(b"SUBSCRIBE", 2).unwrap();
    state.subscribed = true;
    let fd = state.stream.fd();
    let shared = Arc::new(SharedWire(Mutex::new(state)));
    (PolledSubscription { shared, fd }, server)
}

const CONFIRMS: &[u8] = b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
                          *3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n";
const PUSHED_CONFIRMS: &[u8] = b">3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n\
                                 >3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n";

fn pushed(payload: &str) -> Vec<u8> {
    format!(
        ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n${}\r\n{payload}\r\n",
        payload.len()
    )
    .into_bytes()
}

/// What the server end has been sent so far.
fn sent_to(server: &mut UnixStream) -> Vec<u8> {
    server.set_nonblocking(true).unwrap();
    let mut sent = vec![0; 4096];
    let read = server.read(&mut sent).unwrap_or(0);
    sent.truncate(read);
    sent
}

#[test]
fn every_message_read_is_handed_on_and_a_burst_is_one_notice() {
    use super::super::NoticeSource;
    // A message that came with the confirmations waits in the buffer: the first read
    // hands it on although the socket has nothing more.
    let early = [CONFIRMS, &message("first")].concat();
    let (mut subscription, mut server) = subscribed(&early, false);
    assert!(subscription.has_read(), "a whole message is in the buffer");
    assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "first"));
    assert!(subscription.read().is_none(), "nothing more");
    assert!(!subscription.has_read());
    // Two in one write, and a third cut in two: the latest whole one is handed on, and
    // nothing whole is kept back.
    let burst = [message("a"), message("b"), message("c")].concat();
    let cut = burst.len() - 5;
    server.write_all(&burst[..cut]).unwrap();
    assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "b"));
    assert!(!subscription.has_read(), "only the start of one is kept");
    server.write_all(&burst[cut..]).unwrap();
    assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "c"));
    assert!(subscription.shared.lock().buffer.is_empty());
    // The server hangs up: the end, after what it sent last.
    server.write_all(&message("d")).unwrap();
    drop(server);
    assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "d"));
    assert!(matches!(subscription.read(), Some(Notice::Broken(_))));
}

#[test]
fn a_refused_subscription_is_the_servers_error() {
    let (mut state, mut server) = wire(false);
    server
        .write_all(b"-NOPERM this user has no permissions to access one of the channels\r\n")
        .unwrap();
    let err = state.ask(b"SUBSCRIBE", 2).unwrap_err();
    assert_eq!(err.code(), Some("NOPERM"));
}

#[test]
fn a_server_without_resp3_is_asked_the_old_way_and_carries_no_command() {
    let (mut state, mut server) = wire(false);
    server
        .write_all(b"-ERR unknown command 'HELLO', with args beginning with: '3'\r\n")
        .unwrap();
    assert!(!state.hello(None, None).unwrap(), "no RESP3");
    let (subscription, _server) = subscribed(CONFIRMS, false);
    assert!(subscription.commands().is_none());
    let (mut state, mut server) = wire(true);
    server.write_all(b"%1\r\n$5\r\nproto\r\n:3\r\n").unwrap();
    assert!(state.hello(Some("u"), Some("p")).unwrap(), "RESP3");
    let asked = String::from_utf8(sent_to(&mut server)).unwrap();
    assert!(
        asked.contains("HELLO") && asked.contains("AUTH"),
        "{asked:?}"
    );
}

#[test]
fn a_notice_read_by_a_command_is_handed_on_to_the_loop() {
    use super::super::NoticeSource;
    let (mut subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().expect("RESP3 carries commands");
    // A release before the reply, the reply, and one after it in the same read.
    let reply = [pushed("before"), b":7\r\n".to_vec(), pushed("after")].concat();
    server.write_all(&reply).unwrap();
    let got = redis::cmd("EVALSHA").query::<i64>(&mut *commands.lock());
    assert_eq!(got.unwrap(), 7);
    assert!(
        subscription.has_read(),
        "the loop is told to read before it polls"
    );
    assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "after"));
    assert!(!subscription.has_read());
    assert!(subscription.read().is_none());
    // Only what came before the reply: handed on all the same.
    server
        .write_all(&[pushed("early"), b"+OK\r\n".to_vec()].concat())
        .unwrap();
    redis::cmd("PING")
        .query::<()>(&mut *commands.lock())
        .unwrap();
    assert!(matches!(subscription.read(), Some(Notice::Released { by }) if by == "early"));
    assert!(SubscribedWire::from_weak(&commands.downgrade()).is_some());
}

#[test]
fn a_command_that_fails_ends_the_subscription() {
    use super::super::NoticeSource;
    let (mut subscription, _server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    let weak = commands.downgrade();
    {
        let mut state = commands.lock();
        state.set_limit(Duration::from_millis(20)).unwrap();
        let err = redis::cmd("PING").query::<()>(&mut *state).unwrap_err();
        assert!(err.is_timeout(), "{err}");
    }
    // Its reply may still come: nothing is sent over it again, and the loop hears
    // that it ended.
    assert!(SubscribedWire::from_weak(&weak).is_none());
    assert!(redis::cmd("PING")
        .query::<()>(&mut *commands.lock())
        .is_err());
    assert!(matches!(subscription.read(), Some(Notice::Broken(_))));
}

#[test]
fn a_reply_that_nothing_asked_for_ends_the_subscription() {
    use super::super::NoticeSource;
    let (mut subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    server.write_all(b":1\r\n").unwrap();
    assert!(matches!(subscription.read(), Some(Notice::Broken(_))));
    assert!(subscription.commands().unwrap().lock().broken);
}

#[test]
fn once_the_loop_stops_reading_the_next_command_unsubscribes_in_the_same_write() {
    let (subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    sent_to(&mut server);
    drop(subscription);
    // The unsubscription's confirmation is a push, passed over: the reply is the PING's.
    server
        .write_all(b">3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:0\r\n+PONG\r\n")
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut *commands.lock()).unwrap();
    assert_eq!(pong, "PONG");
    let sent = String::from_utf8(sent_to(&mut server)).unwrap();
    assert_eq!(sent, "*1\r\n$11\r\nUNSUBSCRIBE\r\n*1\r\n$4\r\nPING\r\n");
    server.write_all(b"+PONG\r\n").unwrap();
    let _: String = redis::cmd("PING").query(&mut *commands.lock()).unwrap();
    let sent = String::from_utf8(sent_to(&mut server)).unwrap();
    assert_eq!(sent, "*1\r\n$4\r\nPING\r\n", "once");
}

#[test]
fn an_unsubscription_refused_is_not_taken_for_the_reply_of_the_command_sent_with_it() {
    let (subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    drop(subscription);
    // A user whose ACL lacks `unsubscribe`: an error reply, then the command's own; a
    // release published meanwhile still comes (it stays subscribed), and is passed over.
    let refused = b"-NOPERM this user has no permissions to run the 'unsubscribe' command\r\n";
    server
        .write_all(&[refused.to_vec(), pushed("x"), b":1\r\n".to_vec()].concat())
        .unwrap();
    let released: i64 = redis::cmd("EVALSHA").query(&mut *commands.lock()).unwrap();
    assert_eq!(released, 1);
    // Two channels: done at the second push, whose count is 0.
    let (subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    drop(subscription);
    let done = b">3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n\
                 >3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n-ERR the command's\r\n";
    server.write_all(done).unwrap();
    let err = redis::cmd("EVALSHA")
        .query::<i64>(&mut *commands.lock())
        .unwrap_err();
    assert!(err.to_string().contains("the command's"), "{err}");
    assert!(!commands.is_broken(), "an error reply is not a broken wire");
}

#[test]
fn messages_are_releases_and_the_rest_is_not() {
    let value = redis::parse_redis_value(MESSAGE).unwrap();
    assert_eq!(released_by(value).as_deref(), Some("t#1:x"));
    let confirm = redis::parse_redis_value(b"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n");
    assert_eq!(released_by(confirm.unwrap()), None);
    assert_eq!(released_by(Value::Int(1)), None);
    let push = redis::parse_redis_value(&pushed("t#2:y")).unwrap();
    assert_eq!(released_by(push).as_deref(), Some("t#2:y"));
    let confirm = redis::parse_redis_value(PUSHED_CONFIRMS).unwrap();
    assert_eq!(released_by(confirm), None);
}
