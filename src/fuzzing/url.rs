//! Redis URLs: built around a password, which no printed form or error may show.

use super::*;

/// The URL schemes a built URL may start with; the fuzzer picks one by number.
pub(super) const SCHEMES: [&str; 9] = [
    "redis",
    "rediss",
    "redis+unix",
    "unix",
    "redis+sentinel",
    "rediss+sentinel",
    "redis+cluster",
    "rediss+cluster",
    "",
];

/// A Redis URL, or several. The first byte picks a form and a scheme; the rest is
/// NUL-separated parts. The whole text is parsed as `--redis` is, and a URL is built with a
/// password where each form puts one (`user:PW@`, `PW@`, `?pass=PW`, and the like, or given
/// apart as `--password-file` gives it): the password is masked byte for byte by
/// `mask_url`, missing from `redact_url`'s form, and in no error of `Deployment::parse`.
pub fn url(data: &[u8]) {
    let Some((&form, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    any_url(&text);
    let mut parts = text.split('\0');
    let mut part = || parts.next().unwrap_or_default();
    let scheme = match SCHEMES[usize::from(form >> 4) % SCHEMES.len()] {
        "" => part(),
        scheme => scheme,
    };
    let (before, password, after) = (part(), part(), part());
    let url = match form % 5 {
        0 => UrlWithPassword::new(
            format!("{scheme}://{before}:"),
            password,
            format!("@{after}"),
        ),
        1 => UrlWithPassword::new(format!("{scheme}://"), password, format!("@{after}")),
        form => {
            let name = ["pass", "password", "sentinel_password"][usize::from(form - 2)];
            let separator = if before.contains('?') { '&' } else { '?' };
            let after = if after.is_empty() {
                String::new()
            } else {
                format!("&{after}")
            };
            UrlWithPassword::new(
                format!("{scheme}://{before}{separator}{name}="),
                password,
                after,
            )
        }
    };
    if let Some(url) = url {
        url.check();
    }
    password_apart(&format!("{scheme}://{before}"), password);
}

/// Whatever the text, the URL functions neither panic nor disagree.
pub(super) fn any_url(text: &str) {
    let masked = mask_url(text);
    assert_eq!(masked.len(), text.len(), "{text:?}");
    // A secret may be empty (`redis://@h`: nothing to mask, still shown as `***`) or be
    // `***` itself.
    let redacted = redact_url(text);
    assert!(
        holds_secret(text) || (redacted == text && masked == text),
        "{text:?}"
    );
    let _ = split_urls(text);
    if let Ok(deployment) = Deployment::parse(&[text.to_string()], Sources::default()) {
        let _ = (deployment.has_cluster(), deployment.secrets());
    }
}

/// A URL built around a password, and where the password is in it.
struct UrlWithPassword<'a> {
    url: String,
    password: &'a str,
    at: usize,
}

impl<'a> UrlWithPassword<'a> {
    /// `None` when the password is not one that the form can hold: empty, holding `*` (the
    /// masking character), or what would end it or be read otherwise by the rule the
    /// redaction follows (a `pass=` parameter inside it, a `:` in a user part without one,
    /// a `&` in a parameter).
    fn new(before: String, password: &'a str, after: String) -> Option<UrlWithPassword<'a>> {
        let user_part_only = after.starts_with('@') && !before.ends_with(':');
        // A `:` then an `@` after it: the user part runs on to that `@`, and what is
        // before its `:` (the password here) is a user name.
        let named = after[1.min(after.len())..]
            .rsplit_once('@')
            .is_some_and(|(before, _)| before.contains(':'));
        let in_query = !after.starts_with('@');
        let refused = password.is_empty()
            || password.contains('*')
            || password.contains("pass=")
            || password.contains("password=")
            || (user_part_only && (password.contains(':') || named))
            || (in_query && password.contains('&'));
        (!refused).then(|| UrlWithPassword {
            url: format!("{before}{password}{after}"),
            password,
            at: before.len(),
        })
    }

    fn check(&self) {
        let UrlWithPassword { url, password, at } = self;
        let end = at + password.len();
        let masked = mask_url(url);
        assert!(
            masked.as_bytes()[*at..end].iter().all(|&byte| byte == b'*'),
            "{url:?} masked as {masked:?}"
        );
        assert!(holds_secret(url), "{url:?}");
        let elsewhere = url[..*at].contains(password) || url[end..].contains(password);
        if !elsewhere {
            let redacted = redact_url(url);
            assert!(
                !redacted.contains(password),
                "{url:?} redacted as {redacted:?}"
            );
        }
        let changed = format!("{}{}{}", &url[..*at], other(password), &url[end..]);
        if password.contains("://") || other(password) == **password {
            // Cut where another URL seems to start, a password is no longer one; and one
            // that the change leaves as it was cannot be told apart.
            return;
        }
        let first = parsed(url, None);
        if first.contains(password) {
            assert!(
                parsed(&changed, None).contains(password),
                "{url:?}: {first}"
            );
        }
    }
}

/// A password given apart (`--password-file`, `REDLOCK_PASSWORD`) is never shown either.
pub(super) fn password_apart(url: &str, password: &str) {
    if password.is_empty() || other(password) == password {
        return;
    }
    let first = parsed(url, Some(password));
    if first.contains(password) {
        let second = parsed(url, Some(&other(password)));
        assert!(
            second.contains(password),
            "{url:?} with {password:?}: {first}"
        );
    }
}

/// What the program may print after parsing `url`: the error, or every display form.
pub(super) fn parsed(url: &str, password: Option<&str>) -> String {
    let sources = Sources {
        password: password.map(|password| Password(password.to_string())),
        typed: true,
    };
    match Deployment::parse(&[url.to_string()], sources) {
        Ok(deployment) => {
            let typed: Vec<String> = deployment
                .typed_secrets()
                .into_iter()
                .map(|t| t.1)
                .collect();
            let secrets: Vec<String> = deployment.secrets().into_iter().map(|t| t.1).collect();
            format!("{deployment:?} {typed:?} {secrets:?}")
        }
        Err(err) => format!("{err:#}"),
    }
}
