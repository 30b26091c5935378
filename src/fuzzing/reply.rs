//! Redis replies, as the redis crate reads them off the wire, given to every reader.

use super::*;
use crate::holder;

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

pub(super) fn read_script_replies(value: Value) {
    // PEEK, as `status`, `list` and `release` read each slot.
    if let Ok(reply) = redis::from_redis_value::<PeekReply>(value.clone()) {
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
    // ACQUIRE: acquired, busy with a holder's value, superseded by a newer run (`--supersede`),
    // or already done (`--once`): what is said of each is one line.
    if let Ok(reply) = redis::from_redis_value::<AcquireReply>(value.clone()) {
        match reply.outcome {
            Acquisition::Busy {
                holder: Some(holder),
                ..
            } => lock_value(&holder),
            Acquisition::Superseded { newer } => {
                assert_plain_line(&holder::newer_run(newer.as_deref()));
            }
            Acquisition::Done { record } => assert_plain_line(&holder::done_by(&record).1),
            _ => {}
        }
    }
    // RENEW: extended or not, with the takeover another run asked for (`--replace`): what is
    // said of that run is one line.
    if let Ok(Extended(_, Some(request))) = redis::from_redis_value::<Extended>(value.clone()) {
        assert_plain_line(&holder::replacing_run(&request));
    }
    // SCAN: a cursor and key names.
    if let Ok((_, names)) = redis::from_redis_value::<(u64, Vec<Vec<u8>>)>(value) {
        for name in names {
            let _ = lock_of_internal_key(&Key::new(name));
        }
    }
}

/// Text shown to people: one line, no control characters.
pub(super) fn assert_plain_line(text: &str) {
    assert!(!text.chars().any(char::is_control), "{text:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_points_take_any_bytes() {
        let inputs: [&[u8]; 7] = [
            b"",
            b"\0",
            b"-k\0job\0-r\0redis://u:Qx7pw@h:1\0--\0true",
            b"\x00redis\0u\0Qx7pw\0h:1/0",
            b"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$0\r\n\r\n:7000\r\n",
            b"{\"token\":\"t\",\"host\":\"h\\n\"}",
            // renew.lua's reply with a takeover asked for (`--replace`).
            b"*2\r\n:1\r\n$26\r\n{\"token\":\"t\",\"host\":\"h\\n\"}\r\n",
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
