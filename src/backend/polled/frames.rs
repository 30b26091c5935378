//! Where one value of Redis's protocol ends in what has been read, without parsing it:
//! a message is handed on only when all of it has come, and what is not Redis's protocol,
//! or too large or deep to be a notice or a reply of ours, is refused before memory is
//! spent on it.

use redis::{RedisError, RedisResult};

/// The most one message may take: a release notice names a holder in a few hundred bytes.
/// A larger one is not ours (a client that publishes junk on the channel): the
/// subscription is given up and made again, rather than memory spent on it.
pub(super) const MAX_MESSAGE: usize = 1 << 20;
/// How deep arrays may nest in what the server sends: a pub/sub message is one array.
const MAX_DEPTH: usize = 4;

/// The most a reply to a command of ours may take: what Redis itself allows a string
/// (`proto-max-bulk-len`). It is a reply to a question we asked (the acquisition's reply
/// carries the value of whatever holds the lock's key, another application's too); only
/// pushes, which anyone who may publish on the channel can send, are held to
/// `MAX_MESSAGE`.
pub(super) const MAX_REPLY: usize = 512 << 20;

/// How many bytes the first complete value in `buffer` takes; `None` when it is not all
/// there yet. An error for what is not Redis's protocol, too deep to be ours, or larger than
/// `largest` (a push: than `MAX_MESSAGE`).
pub(super) fn frame_length(buffer: &[u8], largest: usize) -> RedisResult<Option<usize>> {
    let largest = match buffer.first() {
        Some(b'>') => largest.min(MAX_MESSAGE),
        _ => largest,
    };
    value_end(buffer, 0, 0, largest)
}

fn value_end(buffer: &[u8], at: usize, depth: usize, largest: usize) -> RedisResult<Option<usize>> {
    let Some(kind) = buffer.get(at) else {
        return Ok(None);
    };
    let Some(line) = buffer[at..].windows(2).position(|pair| pair == b"\r\n") else {
        return if buffer.len() - at > MAX_MESSAGE.min(largest) {
            Err(not_ours("a line too long"))
        } else {
            Ok(None)
        };
    };
    if line == 0 {
        return Err(not_ours("a line with no type"));
    }
    let head = &buffer[at + 1..at + line];
    let next = at + line + 2;
    let number = || -> RedisResult<i64> {
        std::str::from_utf8(head)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| not_ours("a length that is not a number"))
    };
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(next)),
        b'$' | b'!' | b'=' => {
            let Ok(length) = usize::try_from(number()?) else {
                return Ok(Some(next)); // $-1: nil
            };
            if length > largest {
                return Err(not_ours("a message too large"));
            }
            let end = next + length + 2;
            if buffer.len() < end {
                return Ok(None);
            }
            if &buffer[end - 2..end] != b"\r\n" {
                return Err(not_ours("a string of the wrong length"));
            }
            Ok(Some(end))
        }
        b'*' | b'>' | b'~' | b'%' | b'|' => {
            let Ok(count) = usize::try_from(number()?) else {
                return Ok(Some(next)); // *-1: nil
            };
            if depth == MAX_DEPTH || count > largest {
                return Err(not_ours("arrays too deep or too long"));
            }
            let count = if matches!(kind, b'%' | b'|') {
                count * 2
            } else {
                count
            };
            let mut end = next;
            for _ in 0..count {
                match value_end(buffer, end, depth + 1, largest)? {
                    Some(after) => end = after,
                    None => return Ok(None),
                }
            }
            Ok(Some(end))
        }
        _ => Err(not_ours("a reply of an unknown kind")),
    }
}

pub(super) fn not_ours(what: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Parse,
        "not a pub/sub message",
        what.to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MESSAGE: &[u8] = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$5\r\nt#1:x\r\n";

    #[test]
    fn a_frame_is_complete_only_when_all_of_it_has_come() {
        for cut in 0..MESSAGE.len() {
            assert_eq!(
                frame_length(&MESSAGE[..cut], MAX_MESSAGE).unwrap(),
                None,
                "{cut}"
            );
        }
        assert_eq!(
            frame_length(MESSAGE, MAX_MESSAGE).unwrap(),
            Some(MESSAGE.len())
        );
        let two = [MESSAGE, MESSAGE].concat();
        assert_eq!(
            frame_length(&two, MAX_MESSAGE).unwrap(),
            Some(MESSAGE.len())
        );
        assert_eq!(frame_length(b"-ERR no\r\n", MAX_MESSAGE).unwrap(), Some(9));
        assert_eq!(frame_length(b"$-1\r\nX", MAX_MESSAGE).unwrap(), Some(5));
        assert_eq!(
            frame_length(b">3\r\n$7\r\nmessage\r\n:1\r\n", MAX_MESSAGE).unwrap(),
            None
        );
    }

    #[test]
    fn what_is_not_a_message_of_ours_is_refused() {
        assert!(frame_length(b"HTTP/1.1 400\r\n", MAX_MESSAGE).is_err());
        assert!(frame_length(b"$5\r\nabcdefg\r\n", MAX_MESSAGE).is_err());
        assert!(frame_length(format!("${}\r\n", MAX_MESSAGE + 1).as_bytes(), MAX_MESSAGE).is_err());
        assert!(frame_length(b"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", MAX_MESSAGE).is_err());
        assert!(frame_length(b"*x\r\n", MAX_MESSAGE).is_err());
        assert!(frame_length(b"\r\n", MAX_MESSAGE).is_err());
        assert!(frame_length(b"*1\r\n\r\n", MAX_MESSAGE).is_err());
    }

    #[test]
    fn a_reply_may_be_large_and_a_push_may_not() {
        let large = MAX_MESSAGE + 1;
        let reply = format!("${large}\r\n{}\r\n", "x".repeat(large));
        assert_eq!(
            frame_length(reply.as_bytes(), MAX_REPLY).unwrap(),
            Some(reply.len())
        );
        assert!(frame_length(reply.as_bytes(), MAX_MESSAGE).is_err());
        let push = format!(">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n{reply}");
        assert!(
            frame_length(push.as_bytes(), MAX_REPLY).is_err(),
            "a push is a message"
        );
        assert!(frame_length(format!("${}\r\n", MAX_REPLY + 1).as_bytes(), MAX_REPLY).is_err());
    }
}
