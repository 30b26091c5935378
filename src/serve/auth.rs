//! HTTP basic credentials (`--auth-file`): the `Authorization` header a client must send,
//! compared in constant time (every byte of the longer of the two, whatever differs first).

/// The header a client must send: `Basic ` and the base64 of `user:password`.
pub struct Credentials {
    expected: Vec<u8>,
}

impl Credentials {
    /// `pair`: `user:password`, as `--auth-file`'s first line gives it.
    pub fn new(pair: &str) -> Credentials {
        Credentials {
            expected: format!("Basic {}", base64(pair.as_bytes())).into_bytes(),
        }
    }

    /// Whether `given` (an `Authorization` header's value) is the one expected.
    pub fn accepts(&self, given: &[u8]) -> bool {
        let longest = self.expected.len().max(given.len());
        let mut differs = u8::from(self.expected.len() != given.len());
        for at in 0..longest {
            let a = self.expected.get(at).copied().unwrap_or(0);
            let b = given.get(at).copied().unwrap_or(0);
            differs |= a ^ b;
        }
        std::hint::black_box(differs) == 0
    }
}

/// Standard base64 with padding (RFC 4648), for the one header above.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (at, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if at <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> shift) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_rfc_4648() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(
            base64(b"Aladdin:open sesame"),
            "QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
    }

    #[test]
    fn only_the_exact_header_is_accepted() {
        let credentials = Credentials::new("Aladdin:open sesame");
        assert!(credentials.accepts(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="));
        assert!(!credentials.accepts(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ="));
        assert!(!credentials.accepts(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==x"));
        assert!(!credentials.accepts(b""));
    }
}
