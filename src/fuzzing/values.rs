//! Durations, lock values and key names: within their bounds, shown on one line.

use super::*;

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
