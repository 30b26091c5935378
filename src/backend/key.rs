//! A Redis key (or channel, or value) as the bytes it is: Redis names need not be UTF-8,
//! and a name from outside (another client's key under the prefix, a name given on the
//! command line) must work, and print, whatever bytes it holds. Shown with anything that is
//! not printable UTF-8 escaped (`\xff`, `\n`, `\x1b`), so it can neither break a line nor
//! reach a terminal as a control sequence.

use std::fmt;

use crate::report;

/// Bytes that name a key, a channel, or hold a value.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Vec<u8>);

impl Key {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Key {
        Key(bytes.into())
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn starts_with(&self, prefix: &[u8]) -> bool {
        self.0.starts_with(prefix)
    }

    /// This key with `suffix` after it.
    pub fn followed_by(&self, suffix: &[u8]) -> Key {
        let mut bytes = Vec::with_capacity(self.0.len() + suffix.len());
        bytes.extend_from_slice(&self.0);
        bytes.extend_from_slice(suffix);
        Key(bytes)
    }
}

impl From<&str> for Key {
    fn from(text: &str) -> Key {
        Key(text.as_bytes().to_vec())
    }
}

impl From<Vec<u8>> for Key {
    fn from(bytes: Vec<u8>) -> Key {
        Key(bytes)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&shown(&self.0))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", shown(&self.0))
    }
}

impl redis::ToRedisArgs for Key {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg(&self.0);
    }
}

/// `bytes` as text to show: UTF-8 runs as they are (their control characters escaped), any
/// other byte as `\xNN`.
pub fn shown(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&report::escape(chunk.valid()));
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn any_bytes_show_as_one_line_of_plain_text() {
        assert_eq!(Key::from("redlock:job").to_string(), "redlock:job");
        assert_eq!(
            Key::new(b"a\xffb\n\x1b[2J".to_vec()).to_string(),
            "a\\xffb\\n\\x1b[2J"
        );
        assert_eq!(shown("ünïcode".as_bytes()), "ünïcode");
        let key = Key::from("k").followed_by(b":fence");
        assert_eq!(key.as_bytes(), b"k:fence");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn any_bytes_show_as_plain_text(bytes in any::<Vec<u8>>()) {
            let text = shown(&bytes);
            prop_assert!(!text.chars().any(char::is_control), "{:?}", text);
        }

        #[test]
        fn plain_text_shows_as_it_is(text in "\\PC*") {
            prop_assert_eq!(shown(text.as_bytes()), text);
        }
    }
}
