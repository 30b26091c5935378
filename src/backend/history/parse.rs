//! Parsing stream replies into entries, RESP2 or RESP3: what is not an entry is skipped,
//! never an error. Not the commands that fetch them (`read`).

use redis::Value;

use super::Entry;

/// The pairs of an `XREAD` reply (stream name, its entries): an array of pairs (RESP2) or
/// a map (RESP3).
pub(super) fn pairs(reply: Value) -> Vec<(Value, Value)> {
    match reply {
        Value::Map(pairs) => pairs,
        Value::Array(items) => items
            .into_iter()
            .filter_map(|item| match item {
                Value::Array(pair) => {
                    let mut pair = pair.into_iter();
                    Some((pair.next()?, pair.next()?))
                }
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// The entries of a stream reply (`[[id, [field, value, …]], …]`); what is not one is
/// skipped.
pub(super) fn entries_of(reply: Value) -> Vec<Entry> {
    let Value::Array(items) = reply else {
        return Vec::new();
    };
    items.into_iter().filter_map(entry_of).collect()
}

fn entry_of(item: Value) -> Option<Entry> {
    let Value::Array(parts) = item else {
        return None;
    };
    let mut parts = parts.into_iter();
    let id = String::from_utf8_lossy(&bytes_of(parts.next()?)?).into_owned();
    let flat: Vec<Vec<u8>> = match parts.next() {
        Some(Value::Array(flat)) => flat.into_iter().filter_map(bytes_of).collect(),
        Some(Value::Map(map)) => map
            .into_iter()
            .flat_map(|(field, value)| [bytes_of(field), bytes_of(value)])
            .flatten()
            .collect(),
        _ => Vec::new(),
    };
    let mut flat = flat.into_iter();
    let mut fields = Vec::new();
    while let (Some(field), Some(value)) = (flat.next(), flat.next()) {
        fields.push((field, value));
    }
    let (ms, seq) = match id.split_once('-') {
        Some((ms, seq)) => (ms.parse().ok(), seq.parse().unwrap_or(0)),
        None => (id.parse().ok(), 0),
    };
    Some(Entry {
        id,
        ms,
        seq,
        fields,
    })
}

fn bytes_of(value: Value) -> Option<Vec<u8>> {
    match value {
        Value::BulkString(bytes) => Some(bytes),
        Value::SimpleString(text) => Some(text.into_bytes()),
        Value::Int(number) => Some(number.to_string().into_bytes()),
        _ => None,
    }
}
