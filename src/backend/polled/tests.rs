//! The subscription and the commands sent over it, against a server played by the test on
//! the other end of a socket pair.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::frames::MAX_MESSAGE;
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
        until: Instant::now() + Duration::from_secs(5),
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

/// Writes `bytes` to the server's end from a thread of its own: more than a socket holds
/// is written only as the other end reads.
fn send_later(server: &UnixStream, bytes: Vec<u8>) -> std::thread::JoinHandle<()> {
    let mut server = server.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = server.write_all(&bytes);
    })
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
fn a_refusal_that_repeats_the_password_is_not_repeated() {
    let (mut state, mut server) = wire(true);
    server
        .write_all(b"-ERR no such thing as HELLO 3 AUTH default s3cret-pw\r\n")
        .unwrap();
    let err = state.hello(None, Some("s3cret-pw")).unwrap_err();
    assert!(!format!("{err} {err:?}").contains("s3cret-pw"), "{err:?}");
    let (mut state, mut server) = wire(false);
    server
        .write_all(b"-ERR unknown thing 'AUTH' 's3cret-pw'\r\n")
        .unwrap();
    let err = state.authenticate(None, Some("s3cret-pw")).unwrap_err();
    assert!(!format!("{err} {err:?}").contains("s3cret-pw"), "{err:?}");
    // Cut short, and the line break made a space, as Redis repeats what it refuses.
    let (mut state, mut server) = wire(false);
    server
        .write_all(b"-ERR unknown command 'AUTH', with args beginning with: 'a b'\r\n")
        .unwrap();
    let err = state.authenticate(None, Some("a\nbcdefgh")).unwrap_err();
    assert!(!format!("{err} {err:?}").contains("a b"), "{err:?}");
    // What does not repeat it is kept, for the message.
    let (mut state, mut server) = wire(false);
    server
        .write_all(b"-WRONGPASS invalid username-password pair\r\n")
        .unwrap();
    let err = state.authenticate(None, Some("s3cret-pw")).unwrap_err();
    assert_eq!(err.code(), Some("WRONGPASS"));
    assert!(err.to_string().contains("invalid username-password pair"));
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
fn a_message_too_large_fails_a_command_as_a_connection_would_and_an_error_reply_does_not() {
    let (_subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = _subscription.commands().unwrap();
    // An error reply is a whole answer: the wire carries the next command.
    server
        .write_all(b"-LOADING Redis is loading\r\n+PONG\r\n")
        .unwrap();
    let err = redis::cmd("PING")
        .query::<String>(&mut *commands.lock())
        .unwrap_err();
    assert_eq!(err.code(), Some("LOADING"));
    let pong: String = redis::cmd("PING").query(&mut *commands.lock()).unwrap();
    assert_eq!(pong, "PONG");
    // Anyone who may publish on the channel can send a message too large to be ours: the
    // try fails as on a broken connection (worth another, on a connection of its own).
    let junk = "x".repeat(MAX_MESSAGE + 1);
    let sent = send_later(&server, pushed(&junk));
    let err = redis::cmd("EVALSHA")
        .query::<i64>(&mut *commands.lock())
        .unwrap_err();
    assert!(err.is_io_error(), "{err:?}");
    assert!(commands.lock().broken);
    drop(server);
    sent.join().unwrap();
    // A reply may be that large: it is the value of what holds the lock's key.
    let (_subscription, server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = _subscription.commands().unwrap();
    let sent = send_later(
        &server,
        format!("${}\r\n{junk}\r\n", junk.len()).into_bytes(),
    );
    let value: Vec<u8> = redis::cmd("GET").query(&mut *commands.lock()).unwrap();
    assert_eq!(value.len(), junk.len());
    sent.join().unwrap();
}

/// Until `until`, a few seconds from now.
fn soon() -> Instant {
    Instant::now() + Duration::from_secs(5)
}

#[test]
fn the_lock_taken_over_it_it_unsubscribes_and_carries_the_holders_commands() {
    use super::super::NoticeSource;
    let (mut subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    sent_to(&mut server);
    commands.unsubscribe();
    assert_eq!(
        String::from_utf8(sent_to(&mut server)).unwrap(),
        "*1\r\n$11\r\nUNSUBSCRIBE\r\n"
    );
    // What comes now is the unsubscription's: the loop leaves it alone.
    server
        .write_all(
            &[
                pushed("published meanwhile"),
                b">3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n".to_vec(),
                b">3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n".to_vec(),
            ]
            .concat(),
        )
        .unwrap();
    assert!(subscription.read().is_none());
    assert!(!subscription.has_read());
    drop(subscription);
    assert!(
        commands.carries_commands(soon()),
        "unsubscribed: the holder's"
    );
    server.write_all(b"+PONG\r\n").unwrap();
    let pong: String = redis::cmd("PING").query(&mut *commands.lock()).unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(
        String::from_utf8(sent_to(&mut server)).unwrap(),
        "*1\r\n$4\r\nPING\r\n"
    );
}

#[test]
fn a_subscription_that_cannot_be_left_carries_no_holders_command() {
    // Refused (an ACL without `unsubscribe`): what is published would keep coming.
    let (subscription, mut server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    commands.unsubscribe();
    drop(subscription);
    server
        .write_all(b"-NOPERM this user has no permissions to run the 'unsubscribe' command\r\n")
        .unwrap();
    assert!(!commands.carries_commands(soon()));
    assert!(commands.lock().broken, "ended: nobody reads it any more");
    // A message too large on the way.
    let (subscription, server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    commands.unsubscribe();
    drop(subscription);
    let sent = send_later(&server, pushed(&"x".repeat(MAX_MESSAGE + 1)));
    assert!(!commands.carries_commands(soon()));
    drop(server);
    sent.join().unwrap();
    // No answer in time.
    let (subscription, _server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    commands.unsubscribe();
    drop(subscription);
    assert!(!commands.carries_commands(Instant::now() + Duration::from_millis(20)));
    // The wait ended without the lock: still subscribed, and nobody reads it.
    let (subscription, _server) = subscribed(PUSHED_CONFIRMS, true);
    let commands = subscription.commands().unwrap();
    assert!(commands.carries_commands(soon()), "while the loop reads it");
    drop(subscription);
    assert!(!commands.carries_commands(soon()));
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
