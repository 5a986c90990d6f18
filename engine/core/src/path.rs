//! The judged request's method, path and query, checked and normalised before any step reads them.
//!
//! Clients and upstreams do not agree on what a path means: `/api//pay`, `/api/pay/`,
//! `/api/%70ay` and `/api/x/../pay` reach the same handler on most servers, but compared as strings
//! they are four routes — four route windows, four dedup fingerprints, four misses of a rule scoped
//! to `/api/pay`. So every step after this one reads the path in one normal form:
//!
//! 1. It starts with `/`. A raw control character (`0x00–0x1F`, `0x7F`) or backslash, a `%` not
//!    followed by two hex digits, an encoded control character, an encoded `/` (`%2F`) or `\`
//!    (`%5C`) is refused: each is either ambiguous (upstreams differ on whether `%2F` separates
//!    segments) or would make the canonical string ambiguous (a line break).
//! 2. Percent-encodings of unreserved characters (`A–Z a–z 0–9 - . _ ~`) are decoded; other
//!    encodings keep upper-case hex digits; characters that are not allowed raw in a path (space,
//!    `"`, `<`, non-ASCII bytes, …) are percent-encoded.
//! 3. Empty segments (`//`) and `.` segments are dropped, `..` removes the segment before it (a
//!    `..` above the root is refused).
//! 4. A trailing `/` is dropped (`/` itself stays).
//!
//! The method must be 1–32 token characters (RFC 9110: letters, digits, ``!#$%&'*+-.^_`|~``); the
//! query may not contain a raw control character. The signature still covers the path exactly as
//! the client sent it (the canonical string is unchanged): normalisation changes what the path is
//! matched as, never what was signed.

use std::borrow::Cow;

/// Why a judged request's method, path or query is refused (answered `400 INVALID_FIELD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("request.path must start with /")]
    NotAbsolute,
    #[error("request.path contains a control character or a backslash")]
    ControlChar,
    #[error("request.path contains a % not followed by two hex digits")]
    BadEscape,
    #[error("request.path contains an encoded control character")]
    EncodedControl,
    #[error(
        "request.path contains an encoded / or \\ (%2F, %5C), which upstreams route differently"
    )]
    EncodedSeparator,
    #[error("request.path climbs above the root with ..")]
    AboveRoot,
    #[error("request.method must be 1-32 token characters (letters, digits, !#$%&'*+-.^_`|~)")]
    BadMethod,
    #[error("request.query contains a control character")]
    QueryControl,
}

/// Characters allowed raw in a normal path besides `/`: RFC 3986 `pchar` minus `%`.
#[inline]
fn plain(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

#[inline]
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

#[inline]
fn control(b: u8) -> bool {
    b < 0x20 || b == 0x7f
}

/// Whether `p` is already in normal form (the common case: no allocation).
fn is_normal(p: &[u8]) -> bool {
    if p.first() != Some(&b'/') {
        return false;
    }
    if p.len() == 1 {
        return true;
    }
    if p.last() == Some(&b'/') {
        return false;
    }
    // Every segment non-empty, not `.` or `..`, of plain characters.
    p[1..]
        .split(|b| *b == b'/')
        .all(|seg| !seg.is_empty() && seg != b"." && seg != b".." && seg.iter().all(|b| plain(*b)))
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// The normal form of a path (see the module docs), or why it is refused.
pub fn normalize_path(path: &str) -> Result<Cow<'_, str>, PathError> {
    let p = path.as_bytes();
    if is_normal(p) {
        return Ok(Cow::Borrowed(path));
    }
    if p.first() != Some(&b'/') {
        return Err(PathError::NotAbsolute);
    }
    // Pass 1: escapes and raw characters, segment by segment; pass 2: dot segments.
    let mut segments: Vec<String> = Vec::new();
    for raw in path[1..].split('/') {
        let r = raw.as_bytes();
        let mut seg = String::with_capacity(r.len());
        let mut i = 0;
        while i < r.len() {
            let b = r[i];
            if control(b) || b == b'\\' {
                return Err(PathError::ControlChar);
            }
            if b == b'%' {
                let (Some(h), Some(l)) = (
                    r.get(i + 1).copied().and_then(hex),
                    r.get(i + 2).copied().and_then(hex),
                ) else {
                    return Err(PathError::BadEscape);
                };
                let v = h * 16 + l;
                if control(v) {
                    return Err(PathError::EncodedControl);
                }
                if v == b'/' || v == b'\\' {
                    return Err(PathError::EncodedSeparator);
                }
                if unreserved(v) {
                    seg.push(v as char);
                } else {
                    seg.push_str(&format!("%{v:02X}"));
                }
                i += 3;
                continue;
            }
            if plain(b) {
                seg.push(b as char);
            } else {
                seg.push_str(&format!("%{b:02X}"));
            }
            i += 1;
        }
        match seg.as_str() {
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
            }
            _ => segments.push(seg),
        }
    }
    let mut out = String::with_capacity(path.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if out.is_empty() {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

/// Checks the method: 1–32 token characters.
pub fn check_method(method: &str) -> Result<(), PathError> {
    let ok = (1..=32).contains(&method.len())
        && method.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        });
    if ok {
        Ok(())
    } else {
        Err(PathError::BadMethod)
    }
}

/// Checks the raw query: no control characters (a line break would make the canonical string
/// ambiguous).
pub fn check_query(query: &str) -> Result<(), PathError> {
    if query.bytes().any(control) {
        Err(PathError::QueryControl)
    } else {
        Ok(())
    }
}

/// Whether a configured route (an exact path, or a prefix ending in `*`) is written in the normal
/// form requests are matched in: otherwise it could never match.
pub fn route_is_normal(route: &str) -> bool {
    let base = route.strip_suffix('*').unwrap_or(route);
    let trimmed = if route.ends_with('*') && base.len() > 1 {
        base.strip_suffix('/').unwrap_or(base)
    } else {
        base
    };
    matches!(normalize_path(trimmed), Ok(Cow::Borrowed(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_form_of_one_route_normalises_to_it() {
        for p in [
            "/api/pay",
            "/api//pay",
            "/api/pay/",
            "/api/pay//",
            "//api/pay",
            "/api/%70ay",
            "/api/%70%61%79",
            "/api/./pay",
            "/api/x/../pay",
            "/api/%2E/pay",
            "/api/x/%2e%2e/pay",
        ] {
            assert_eq!(normalize_path(p).unwrap(), "/api/pay", "{p}");
        }
        assert!(matches!(normalize_path("/api/pay"), Ok(Cow::Borrowed(_))));
        assert_eq!(normalize_path("/").unwrap(), "/");
        assert_eq!(normalize_path("//").unwrap(), "/");
        assert_eq!(normalize_path("/a/..").unwrap(), "/");
        // Encodings that are not unreserved stay encoded, with upper-case hex; raw characters
        // outside a path's alphabet are encoded.
        assert_eq!(normalize_path("/s/a%3ab").unwrap(), "/s/a%3Ab");
        assert_eq!(normalize_path("/s/a b").unwrap(), "/s/a%20b");
        assert_eq!(normalize_path("/s/a%20b").unwrap(), "/s/a%20b");
        assert_eq!(normalize_path("/s/ü").unwrap(), "/s/%C3%BC");
        assert_eq!(normalize_path("/s/a:b@c;d=e").unwrap(), "/s/a:b@c;d=e");
    }

    #[test]
    fn ambiguous_paths_are_refused() {
        for (p, e) in [
            ("", PathError::NotAbsolute),
            ("api/pay", PathError::NotAbsolute),
            ("/api/pay\n", PathError::ControlChar),
            ("/api\r\n/pay", PathError::ControlChar),
            ("/api\\pay", PathError::ControlChar),
            ("/api/%0a", PathError::EncodedControl),
            ("/api/%00", PathError::EncodedControl),
            ("/api%2Fpay", PathError::EncodedSeparator),
            ("/api%5cpay", PathError::EncodedSeparator),
            ("/api/%7", PathError::BadEscape),
            ("/api/%zz", PathError::BadEscape),
            ("/..", PathError::AboveRoot),
            ("/a/../..", PathError::AboveRoot),
        ] {
            assert_eq!(normalize_path(p), Err(e), "{p:?}");
        }
    }

    #[test]
    fn methods_and_queries_with_line_breaks_are_refused() {
        assert!(check_method("POST").is_ok());
        assert!(check_method("get").is_ok());
        for m in ["", "PO ST", "POST\n", "GET\n/x", &"A".repeat(33)] {
            assert_eq!(check_method(m), Err(PathError::BadMethod), "{m:?}");
        }
        assert!(check_query("a=1&b=%0A").is_ok());
        assert_eq!(check_query("a=1\nb=2"), Err(PathError::QueryControl));
        assert_eq!(check_query("a=\u{7f}"), Err(PathError::QueryControl));
    }

    #[test]
    fn normalising_is_idempotent() {
        for p in ["/a//b/", "/%41/./c/../d", "/s/a b/ü", "/x/%3a"] {
            let once = normalize_path(p).unwrap().into_owned();
            assert_eq!(normalize_path(&once).unwrap(), once.as_str(), "{p}");
        }
    }

    #[test]
    fn routes_must_be_written_in_normal_form() {
        for r in [
            "/",
            "/api/pay",
            "/api/flash-sale/*",
            "/api/*",
            "/*",
            "/api/pay*",
        ] {
            assert!(route_is_normal(r), "{r}");
        }
        for r in [
            "/api/pay/",
            "/api//pay",
            "/api/%70ay",
            "api/pay",
            "/api/./pay/*",
        ] {
            assert!(!route_is_normal(r), "{r}");
        }
    }
}
