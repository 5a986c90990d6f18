//! Request parsing into the collections rules read: query and form arguments, JSON bodies
//! (`json.a.b` names, as ModSecurity v3 and Coraza name them), multipart parts, cookies and the
//! text of XML bodies.

use std::borrow::Cow;

use crate::transform::url_decode;

/// Values without keys.
pub type Values = Vec<Vec<u8>>;

/// A name and its value (bytes, decoded), borrowed from the request where they are as sent.
pub type Pair<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// Name/value pairs.
pub type Pairs<'a> = Vec<Pair<'a>>;

/// `a=1&b=2`: names and values URL-decoded (`+` is a space). A part without `=` is a name with an
/// empty value.
pub fn urlencoded<'a>(s: &'a [u8], out: &mut Pairs<'a>) {
    for part in s.split(|&c| c == b'&') {
        if part.is_empty() {
            continue;
        }
        let (k, v) = match part.iter().position(|&c| c == b'=') {
            Some(p) => (&part[..p], &part[p + 1..]),
            None => (part, &b""[..]),
        };
        out.push((url_decode(k, false), url_decode(v, false)));
    }
}

/// `Cookie: a=1; b=2`: names and values as sent.
pub fn cookies<'a>(s: &'a [u8], out: &mut Pairs<'a>) {
    for part in s.split(|&c| c == b';') {
        let part = trim(part);
        if part.is_empty() {
            continue;
        }
        let (k, v) = match part.iter().position(|&c| c == b'=') {
            Some(p) => (&part[..p], &part[p + 1..]),
            None => (part, &b""[..]),
        };
        out.push((Cow::Borrowed(trim(k)), Cow::Borrowed(v)));
    }
}

fn trim(s: &[u8]) -> &[u8] {
    let a = s.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let b = s
        .iter()
        .rev()
        .take_while(|c| c.is_ascii_whitespace())
        .count();
    if a >= s.len() {
        return &s[..0];
    }
    &s[a..s.len() - b]
}

/// A JSON document flattened into `json.path.to.leaf` = value pairs (arrays by index). Returns
/// false if the body is not JSON. Depth and leaf count are bounded.
pub fn json(body: &[u8], out: &mut Pairs<'_>) -> bool {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    let mut name = b"json".to_vec();
    flatten(&v, &mut name, out, 0);
    true
}

fn flatten(v: &serde_json::Value, name: &mut Vec<u8>, out: &mut Pairs<'_>, depth: usize) {
    use serde_json::Value;
    if depth > 32 || out.len() > 4096 {
        return;
    }
    let len = name.len();
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                name.push(b'.');
                name.extend_from_slice(k.as_bytes());
                flatten(x, name, out, depth + 1);
                name.truncate(len);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                name.push(b'.');
                name.extend_from_slice(i.to_string().as_bytes());
                flatten(x, name, out, depth + 1);
                name.truncate(len);
            }
        }
        Value::String(s) => out.push((name.clone().into(), s.as_bytes().to_vec().into())),
        Value::Null => out.push((name.clone().into(), Cow::Borrowed(&b""[..]))),
        other => out.push((name.clone().into(), other.to_string().into_bytes().into())),
    }
}

/// What a multipart body holds.
#[derive(Default, Debug)]
pub struct Multipart {
    pub args: Pairs<'static>,
    /// (field name, file name) of each file part.
    pub files: Pairs<'static>,
    /// Every part header line, as `Name: value`.
    pub part_headers: Vec<Vec<u8>>,
    pub strict_error: bool,
}

/// Splits a `multipart/form-data` body on its boundary.
pub fn multipart(content_type: &str, body: &[u8]) -> Multipart {
    let mut m = Multipart::default();
    let Some(b) = content_type.split(';').find_map(|p| {
        p.trim()
            .strip_prefix("boundary=")
            .or_else(|| p.trim().strip_prefix("BOUNDARY="))
    }) else {
        m.strict_error = true;
        return m;
    };
    let boundary = format!("--{}", b.trim_matches('"'));
    let bb = boundary.as_bytes();
    let mut parts = Vec::new();
    let mut i = match find(body, bb) {
        Some(p) => p + bb.len(),
        None => {
            m.strict_error = true;
            return m;
        }
    };
    while i < body.len() {
        if body[i..].starts_with(b"--") {
            break;
        }
        let start = skip_eol(body, i);
        match find(&body[start..], bb) {
            Some(p) => {
                let mut end = start + p;
                if end >= 2 && &body[end - 2..end] == b"\r\n" {
                    end -= 2;
                } else if end >= 1 && body[end - 1] == b'\n' {
                    end -= 1;
                }
                parts.push(&body[start..end]);
                i = start + p + bb.len();
            }
            None => {
                m.strict_error = true;
                parts.push(&body[start..]);
                break;
            }
        }
    }
    for part in parts {
        let (head, data) = match find(part, b"\r\n\r\n") {
            Some(p) => (&part[..p], &part[p + 4..]),
            None => match find(part, b"\n\n") {
                Some(p) => (&part[..p], &part[p + 2..]),
                None => (part, &b""[..]),
            },
        };
        let mut name = Vec::new();
        let mut filename = None;
        for line in head.split(|&c| c == b'\n') {
            let line = trim(line);
            if line.is_empty() {
                continue;
            }
            m.part_headers.push(line.to_vec());
            let lower = line.to_ascii_lowercase();
            if lower.starts_with(b"content-disposition:") {
                name = disposition_param(line, b"name").unwrap_or_default();
                filename = disposition_param(line, b"filename");
            }
        }
        match filename {
            Some(f) => m.files.push((name.into(), f.into())),
            None => m.args.push((name.into(), data.to_vec().into())),
        }
    }
    m
}

fn disposition_param(line: &[u8], key: &[u8]) -> Option<Vec<u8>> {
    for p in line.split(|&c| c == b';').skip(1) {
        let p = trim(p);
        let eq = p.iter().position(|&c| c == b'=')?;
        if p[..eq].eq_ignore_ascii_case(key) {
            let v = trim(&p[eq + 1..]);
            let v = v.strip_prefix(b"\"").unwrap_or(v);
            let v = v.strip_suffix(b"\"").unwrap_or(v);
            return Some(v.to_vec());
        }
    }
    None
}

fn skip_eol(b: &[u8], mut i: usize) -> usize {
    if b.get(i) == Some(&b'\r') {
        i += 1;
    }
    if b.get(i) == Some(&b'\n') {
        i += 1;
    }
    i
}

pub fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    if n.is_empty() || h.len() < n.len() {
        return None;
    }
    h.windows(n.len()).position(|w| w == n)
}

/// The text nodes (`XML:/*`) and attribute values (`XML://@*`) of an XML document, entities
/// decoded. Returns None for a document that is not well formed enough to read.
pub fn xml(body: &[u8]) -> Option<(Values, Values)> {
    let mut texts = Vec::new();
    let mut attrs = Vec::new();
    let mut i = 0;
    let mut saw_tag = false;
    while i < body.len() {
        if body[i..].starts_with(b"<![CDATA[") {
            let s = i + 9;
            let e = find(&body[s..], b"]]>").map(|p| s + p)?;
            texts.push(body[s..e].to_vec());
            i = e + 3;
        } else if body[i..].starts_with(b"<!--") {
            i = find(&body[i..], b"-->").map(|p| i + p + 3)?;
        } else if body[i] == b'<' {
            let e = i + body[i..].iter().position(|&c| c == b'>')?;
            let tag = &body[i + 1..e];
            saw_tag = true;
            if !matches!(tag.first(), Some(b'?') | Some(b'!') | Some(b'/')) {
                attributes(tag, &mut attrs);
            }
            i = e + 1;
        } else {
            let e = body[i..]
                .iter()
                .position(|&c| c == b'<')
                .map(|p| i + p)
                .unwrap_or(body.len());
            let t = &body[i..e];
            if !t.iter().all(|c| c.is_ascii_whitespace()) {
                texts.push(entities(t));
            }
            i = e;
        }
    }
    saw_tag.then_some((texts, attrs))
}

fn attributes(tag: &[u8], out: &mut Vec<Vec<u8>>) {
    let mut i = 0;
    while i < tag.len() {
        match tag[i] {
            q @ (b'"' | b'\'')
                if i > 0
                    && tag[..i].iter().rev().find(|c| !c.is_ascii_whitespace()) == Some(&b'=') =>
            {
                let e = tag[i + 1..]
                    .iter()
                    .position(|&c| c == q)
                    .map(|p| i + 1 + p)
                    .unwrap_or(tag.len());
                out.push(entities(&tag[i + 1..e]));
                i = e + 1;
            }
            _ => i += 1,
        }
    }
}

/// The five predefined XML entities and character references.
fn entities(v: &[u8]) -> Vec<u8> {
    if !v.contains(&b'&') {
        return v.to_vec();
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'&' {
            if let Some(e) = v[i..].iter().take(12).position(|&c| c == b';') {
                let name = &v[i + 1..i + e];
                let rep: Option<Vec<u8>> = match name {
                    b"lt" => Some(b"<".to_vec()),
                    b"gt" => Some(b">".to_vec()),
                    b"amp" => Some(b"&".to_vec()),
                    b"quot" => Some(b"\"".to_vec()),
                    b"apos" => Some(b"'".to_vec()),
                    [b'#', b'x' | b'X', h @ ..] => std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .and_then(char::from_u32)
                        .map(|c| c.to_string().into_bytes()),
                    [b'#', d @ ..] => std::str::from_utf8(d)
                        .ok()
                        .and_then(|d| d.parse().ok())
                        .and_then(char::from_u32)
                        .map(|c| c.to_string().into_bytes()),
                    _ => None,
                };
                if let Some(r) = rep {
                    o.extend_from_slice(&r);
                    i += e + 1;
                    continue;
                }
            }
        }
        o.push(v[i]);
        i += 1;
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(p: &Pairs<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
        p.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }

    #[test]
    fn forms_and_cookies() {
        let mut p = Pairs::new();
        urlencoded(b"a=1+2&b=%27x&&flag", &mut p);
        assert_eq!(
            owned(&p),
            vec![
                (b"a".to_vec(), b"1 2".to_vec()),
                (b"b".to_vec(), b"'x".to_vec()),
                (b"flag".to_vec(), vec![])
            ]
        );
        let mut c = Pairs::new();
        cookies(b"s=abc; t = 1;x", &mut c);
        assert_eq!(owned(&c)[1], (b"t".to_vec(), b" 1".to_vec()));
        assert_eq!(&*c[2].0, b"x");
        // As sent: borrowed from the header, not copied.
        assert!(c
            .iter()
            .all(|(k, v)| matches!((k, v), (Cow::Borrowed(_), Cow::Borrowed(_)))));
    }

    #[test]
    fn json_is_flattened() {
        let mut p = Pairs::new();
        assert!(json(br#"{"a":{"b":["x",2]},"c":null}"#, &mut p));
        assert_eq!(owned(&p)[0], (b"json.a.b.0".to_vec(), b"x".to_vec()));
        assert_eq!(owned(&p)[1], (b"json.a.b.1".to_vec(), b"2".to_vec()));
        assert!(!json(b"a=1", &mut p));
    }

    #[test]
    fn multipart_parts() {
        let body = b"--XX\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nval\r\n--XX\r\nContent-Disposition: form-data; name=\"f\"; filename=\"x.php\"\r\nContent-Type: text/plain\r\n\r\n<?php\r\n--XX--\r\n";
        let m = multipart("multipart/form-data; boundary=XX", body);
        assert_eq!(owned(&m.args), vec![(b"a".to_vec(), b"val".to_vec())]);
        assert_eq!(owned(&m.files), vec![(b"f".to_vec(), b"x.php".to_vec())]);
        assert_eq!(m.part_headers.len(), 3);
    }

    #[test]
    fn xml_texts_and_attributes() {
        let (t, a) = xml(b"<?xml version=\"1.0\"?><a x=\"1 &lt;b\" y='2'>hi &amp; bye<b><![CDATA[<x>]]></b><!-- c --></a>").unwrap();
        assert_eq!(t, vec![b"hi & bye".to_vec(), b"<x>".to_vec()]);
        assert_eq!(a, vec![b"1 <b".to_vec(), b"2".to_vec()]);
        assert!(xml(b"just text").is_none());
    }
}
