//! Protocol-level attacks carried in values: CR/LF injection (header injection, response
//! splitting), a request line inside a parameter (smuggling), Apache `unix:` proxy targets,
//! legacy `$Version` cookies, LDAP filter injection, and server-side request forgery (cloud
//! metadata endpoints and loopback/private addresses, CRS `ssrf` list).

use std::net::Ipv4Addr;

use super::vocabulary;

/// Header names an injected line would set (CR/LF injection into a response or request).
const HEADERS: &[&str] = &[
    "set-cookie",
    "cookie",
    "location",
    "content-type",
    "content-length",
    "content-disposition",
    "content-encoding",
    "transfer-encoding",
    "host",
    "refresh",
    "connection",
    "cache-control",
    "authorization",
    "proxy-authorization",
    "referer",
    "user-agent",
    "origin",
    "link",
    "server",
    "www-authenticate",
    "access-control-allow-origin",
    "access-control-allow-credentials",
    "content-security-policy",
    "strict-transport-security",
    "expect",
    "upgrade",
    "te",
    "via",
    "forwarded",
    "etag",
    "last-modified",
    "pragma",
    "range",
    "if-modified-since",
    "accept",
];

const METHODS: &[&str] = &[
    "GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "CONNECT", "TRACE", "PATCH", "PROPFIND",
];

pub(super) fn protocol(v: &str) -> bool {
    // A line break followed by something an HTTP parser would read as a header, a status or
    // request line, or a body of markup (response splitting).
    let after_break = v.split(['\r', '\n']).skip(1).any(|line| {
        let l = line.trim_start();
        l.contains("HTTP/")
            || l.split_once(':').is_some_and(|(name, _)| {
                let n = name.trim_end().to_ascii_lowercase();
                HEADERS.contains(&n.as_str())
                    || (n.starts_with("x-")
                        && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
            })
    });
    // A blank line, then markup: a second response body (response splitting).
    let split_body = ["\r\n\r\n", "\n\n", "\r\r"].iter().any(|b| {
        v.match_indices(b).any(|(i, _)| {
            let rest = v[i + b.len()..].trim_start();
            rest.starts_with('<')
                && rest[1..].starts_with(|c: char| c.is_ascii_alphabetic() || c == '!')
        })
    });
    after_break
        || split_body
        || request_line(v)
        || unix_socket(v)
        || v.trim_start().starts_with("$Version=")
}

/// `GET http://host/ HTTP/1.1` inside a value.
fn request_line(v: &str) -> bool {
    v.match_indices("HTTP/").any(|(i, _)| {
        let head = v[..i].trim_end();
        let mut words = head.rsplit(' ');
        let _target = words.next();
        words
            .next()
            .is_some_and(|m| METHODS.iter().any(|x| m.eq_ignore_ascii_case(x)))
            && v[i + 5..].starts_with(|c: char| c.is_ascii_digit())
    })
}

/// `unix:/path|http://…`: Apache mod_proxy's Unix-socket syntax, abused for SSRF.
fn unix_socket(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    lower
        .find("unix:")
        .is_some_and(|i| lower[i..].contains('|'))
}

/// LDAP filter injection: a value that closes the application's filter and opens another,
/// `)(uid=*)`, `)(|(…`, `*)!(sn=*`, `)&(cn=admin`.
pub(super) fn ldap(v: &str) -> bool {
    let b = v.as_bytes();
    v.match_indices(')').any(|(i, _)| {
        let mut j = i + 1;
        let skip_ws = |j: &mut usize| {
            while *j < b.len() && b[*j].is_ascii_whitespace() {
                *j += 1;
            }
        };
        skip_ws(&mut j);
        let mut op = false;
        if matches!(b.get(j), Some(b'&') | Some(b'|') | Some(b'!')) {
            op = true;
            j += 1;
            skip_ws(&mut j);
        }
        if b.get(j) != Some(&b'(') {
            return false;
        }
        j += 1;
        skip_ws(&mut j);
        match b.get(j) {
            Some(b'&') | Some(b'|') | Some(b'!') => true,
            None => op,
            Some(c) if c.is_ascii_alphabetic() => {
                let name = b[j..]
                    .iter()
                    .take_while(|c| c.is_ascii_alphanumeric() || **c == b'-' || **c == b'.')
                    .count();
                let rest = &b[j + name..];
                let rest = &rest[rest.iter().take_while(|c| c.is_ascii_whitespace()).count()..];
                rest.starts_with(b"=")
                    || rest.starts_with(b">=")
                    || rest.starts_with(b"<=")
                    || rest.starts_with(b"~=")
            }
            _ => false,
        }
    })
}

/// Server-side request forgery: a URL to a cloud metadata service (CRS list) or to a loopback,
/// link-local or private address, also in the numeric spellings that evade naive checks.
pub(super) fn ssrf(v: &str) -> bool {
    let lower = v.trim().to_ascii_lowercase();
    let Some(colon) = lower.find(':') else {
        return false;
    };
    let scheme = &lower[..colon];
    if !matches!(
        scheme,
        "http" | "https" | "ftp" | "gopher" | "dict" | "ldap" | "file" | "tftp" | "jar" | "netdoc"
    ) {
        return false;
    }
    if vocabulary().ssrf.is_match(&lower) {
        return true;
    }
    let rest = lower[colon + 1..].trim_start_matches('/');
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let host = if host.starts_with('[') {
        host.split(']').next().unwrap_or("").trim_start_matches('[')
    } else {
        host.split(':').next().unwrap_or("")
    };
    internal_host(host)
}

/// An internal address without a scheme (`localhost:8080/admin`, `//169.254.169.254/latest`,
/// `127.0.0.1:6379`): what a server-side fetch that prepends its own scheme reaches.
pub(super) fn schemeless_ssrf(lower: &str) -> bool {
    let v = lower.trim().trim_start_matches("//");
    let end = v.find(['/', '?', '#']).unwrap_or(v.len());
    let authority = &v[..end];
    if authority.is_empty() || authority.contains(' ') {
        return false;
    }
    let host = authority.rsplit('@').next().unwrap_or("");
    let (host, port) = if host.starts_with('[') {
        let h = host.split(']').next().unwrap_or("").trim_start_matches('[');
        (h, host.rsplit_once("]:").map(|(_, p)| p))
    } else {
        match host.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (host, None),
        }
    };
    let port_ok = port.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    // A bare word is not an address: it needs a port, a path, or to be unmistakable.
    let addressed = port_ok || end < v.len() || lower.trim().starts_with("//");
    let unmistakable = host.parse::<Ipv4Addr>().is_ok()
        || host.contains("metadata")
        || host.ends_with(".internal");
    (addressed || unmistakable)
        && host.len() >= 3
        && internal_host(host)
        && !host.bytes().all(|b| b.is_ascii_digit())
        || vocabulary_metadata(host)
}

fn vocabulary_metadata(host: &str) -> bool {
    matches!(
        host,
        "169.254.169.254"
            | "metadata.google.internal"
            | "100.100.100.200"
            | "fd00:ec2::254"
            | "169.254.170.2"
    )
}

fn internal_host(host: &str) -> bool {
    if matches!(
        host,
        "localhost" | "0" | "::1" | "::" | "metadata" | "instance-data"
    ) || host.ends_with(".localhost")
        || host.ends_with(".internal")
        || host.ends_with(".nip.io")
        || host.starts_with("::ffff:")
    {
        return true;
    }
    // Decimal (`2130706433`), hex (`0x7f000001`) and octal dotted forms all reach an address.
    if !host.is_empty() && host.bytes().all(|c| c.is_ascii_digit()) {
        return host.parse::<u64>().is_ok_and(|n| n <= u32::MAX as u64);
    }
    if host.starts_with("0x") || host.split('.').any(|p| p.len() > 1 && p.starts_with('0')) {
        return true;
    }
    match host.parse::<Ipv4Addr>() {
        Ok(ip) => ip.is_loopback() || ip.is_private() || ip.is_link_local() || ip.is_unspecified(),
        Err(_) => false,
    }
}
