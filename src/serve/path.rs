//! A lock's name in a URL path: any bytes, percent-encoded for the links the API gives
//! (`path`) and decoded from `/lock/NAME` and `/api/locks/NAME`.

/// A lock's name as a path segment: every byte but the unreserved ones (RFC 3986) as `%XX`,
/// so that a name that is not UTF-8, or holds `/`, `%` or a control character, comes back
/// whole through `percent_decoded` (the API's `name` is escaped for reading, not for this).
pub fn percent_encoded(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &byte in bytes {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// `%XX` decoded; `None` for a `%` not followed by two hex digits.
pub fn percent_decoded(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = std::str::from_utf8(bytes.get(at + 1..at + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_percent_decoded_to_bytes() {
        assert_eq!(percent_decoded("a%2Fb").unwrap(), b"a/b");
        assert_eq!(percent_decoded("%3Cscript%3E").unwrap(), b"<script>");
        assert_eq!(percent_decoded("%ff").unwrap(), b"\xff");
        assert_eq!(percent_decoded("%f"), None);
        assert_eq!(percent_decoded("%zz"), None);
    }

    #[test]
    fn any_name_comes_back_whole_through_its_path() {
        assert_eq!(
            percent_encoded(b"nightly-report_1.x~"),
            "nightly-report_1.x~"
        );
        assert_eq!(percent_encoded(b"a/b %\n\xff"), "a%2Fb%20%25%0A%FF");
        for name in [&b"a\\n"[..], b"\xff\x00<img>", "ünï".as_bytes()] {
            assert_eq!(percent_decoded(&percent_encoded(name)).unwrap(), name);
        }
    }
}
