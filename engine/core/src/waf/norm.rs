//! Normalisations applied before the detectors look at a value: attackers encode payloads so that
//! a naive matcher misses them, so each value is also scanned in its decoded forms.

use std::borrow::Cow;

/// Percent-decoding (`+` as space, `%uXXXX` too); invalid escapes are kept as they are.
pub fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b'%' => {
                if i + 6 <= b.len() && (b[i + 1] == b'u' || b[i + 1] == b'U') {
                    let c = std::str::from_utf8(&b[i + 2..i + 6])
                        .ok()
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .and_then(char::from_u32);
                    if let Some(c) = c {
                        let mut buf = [0u8; 4];
                        out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        i += 6;
                        continue;
                    }
                }
                if i + 2 < b.len() {
                    if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                        out.push(h * 16 + l);
                        i += 3;
                        continue;
                    }
                }
                out.push(b'%');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url_decode(s).to_ascii_lowercase()`, without a copy when that is `s` itself (nothing to
/// decode, nothing upper-case): most parameter names.
pub fn decoded_lower(s: &str) -> Cow<'_, str> {
    if s.bytes()
        .any(|b| b == b'%' || b == b'+' || b.is_ascii_uppercase())
    {
        Cow::Owned(url_decode(s).to_ascii_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

/// Named HTML entities that matter for payloads (browsers and Log4j-style parsers accept them,
/// some even without the closing `;`).
const ENTITIES: &[(&str, char)] = &[
    ("lbrace", '{'),
    ("lcub", '{'),
    ("rbrace", '}'),
    ("rcub", '}'),
    ("dollar", '$'),
    ("colon", ':'),
    ("lpar", '('),
    ("rpar", ')'),
    ("lsqb", '['),
    ("rsqb", ']'),
    ("lbrack", '['),
    ("rbrack", ']'),
    ("lt", '<'),
    ("gt", '>'),
    ("quot", '"'),
    ("apos", '\''),
    ("amp", '&'),
    ("sol", '/'),
    ("bsol", '\\'),
    ("num", '#'),
    ("semi", ';'),
    ("equals", '='),
    ("period", '.'),
    ("grave", '`'),
    ("tab", '\t'),
    ("newline", '\n'),
];

/// Decodes HTML character references (`&#36;`, `&#x24;`, `&lbrace;`, with or without `;`) and
/// JavaScript/Java escapes (`\u007B`, `\u{7b}`, `\x24`). Returns the input when there is nothing
/// to decode.
pub fn decode_escapes(v: &str) -> Cow<'_, str> {
    if !v.contains(['&', '\\']) {
        return Cow::Borrowed(v);
    }
    let b = v.as_bytes();
    let mut out = String::with_capacity(v.len());
    let mut i = 0;
    let mut changed = false;
    while i < b.len() {
        let c = b[i];
        if c == b'&' {
            if let Some((ch, len)) = entity(&v[i + 1..]) {
                out.push(ch);
                i += 1 + len;
                changed = true;
                continue;
            }
        } else if c == b'\\' {
            if let Some((ch, len)) = js_escape(&v[i + 1..]) {
                out.push(ch);
                i += 1 + len;
                changed = true;
                continue;
            }
        }
        let ch = v[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    if changed {
        Cow::Owned(out)
    } else {
        Cow::Borrowed(v)
    }
}

fn entity(rest: &str) -> Option<(char, usize)> {
    let b = rest.as_bytes();
    if b.first() == Some(&b'#') {
        let (radix, start) = match b.get(1) {
            Some(b'x') | Some(b'X') => (16, 2),
            _ => (10, 1),
        };
        let digits = rest[start..]
            .bytes()
            .take_while(|d| (*d as char).is_digit(radix))
            .count();
        if digits == 0 || digits > 64 {
            return None;
        }
        let significant = rest[start..start + digits].trim_start_matches('0');
        let n = if significant.is_empty() {
            0
        } else {
            u32::from_str_radix(significant, radix).ok()?
        };
        let ch = char::from_u32(n)?;
        let mut len = start + digits;
        if b.get(len) == Some(&b';') {
            len += 1;
        }
        return Some((ch, len));
    }
    // The longest known name at this point (the `;` is optional, as in legacy HTML parsing).
    let (name, ch) = ENTITIES
        .iter()
        .filter(|(n, _)| {
            rest.get(..n.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(n))
        })
        .max_by_key(|(n, _)| n.len())?;
    let mut len = name.len();
    if b.get(len) == Some(&b';') {
        len += 1;
    }
    Some((*ch, len))
}

fn js_escape(rest: &str) -> Option<(char, usize)> {
    let b = rest.as_bytes();
    let hex_at = |from: usize, n: usize| -> Option<u32> {
        let s = rest.get(from..from + n)?;
        if s.bytes().all(|c| c.is_ascii_hexdigit()) {
            u32::from_str_radix(s, 16).ok()
        } else {
            None
        }
    };
    match b.first()? {
        b'u' | b'U' if b.get(1) == Some(&b'{') => {
            let close = rest[2..].find('}')?;
            if close == 0 || close > 6 {
                return None;
            }
            let n = u32::from_str_radix(&rest[2..2 + close], 16).ok()?;
            Some((char::from_u32(n)?, 3 + close))
        }
        b'u' | b'U' => Some((char::from_u32(hex_at(1, 4)?)?, 5)),
        b'x' | b'X' => Some((char::from_u32(hex_at(1, 2)?)?, 3)),
        _ => None,
    }
}

/// Replaces code comments (`/* … */`, and `// …` or `# …` up to a line break) with a space, so
/// that `exec/**/(` and `exec #x⏎ (` read as `exec (`. Returns the input when it has none.
pub fn strip_comments(v: &str) -> Cow<'_, str> {
    let line_comments = v.contains(['#', '/']) && v.contains(['\n', '\r']);
    if !(v.contains("/*") || line_comments) {
        return Cow::Borrowed(v);
    }
    let b = v.as_bytes();
    let mut out = String::with_capacity(v.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            match v[i + 2..].find("*/") {
                Some(end) => {
                    out.push(' ');
                    i += 2 + end + 2;
                    continue;
                }
                None => {
                    out.push(' ');
                    break;
                }
            }
        }
        let line_comment = (b[i] == b'/' && b.get(i + 1) == Some(&b'/')) || b[i] == b'#';
        if line_comment {
            if let Some(end) = v[i..].find(['\n', '\r']) {
                out.push(' ');
                i += end;
                continue;
            }
        }
        let ch = v[i..].chars().next().expect("in bounds");
        out.push(ch);
        i += ch.len_utf8();
    }
    Cow::Owned(out)
}

/// Identifiers followed by `(`, possibly after whitespace (any kind), with the byte range of the
/// identifier and whether there was a gap between the name and the parenthesis.
pub fn called_names(text: &str) -> impl Iterator<Item = Call<'_>> {
    let b = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < b.len() {
            if b[i].is_ascii_alphabetic() || b[i] == b'_' {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let mut j = i;
                while j < b.len() && (b[j].is_ascii_whitespace() || b[j] == 0x0b) {
                    j += 1;
                }
                if b.get(j) == Some(&b'(') {
                    return Some(Call {
                        name: &text[start..i],
                        start,
                        gap: j > i,
                        after: &text[j + 1..],
                    });
                }
            } else {
                i += 1;
            }
        }
        None
    })
}

/// One `name(` found by [`called_names`].
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub name: &'a str,
    /// Byte offset of the name.
    pub start: usize,
    /// Whitespace between the name and `(`.
    pub gap: bool,
    /// The text after `(`.
    pub after: &'a str,
}

impl Call<'_> {
    /// The character before the name, if any.
    pub fn before(&self, text: &str) -> Option<char> {
        text[..self.start].chars().next_back()
    }

    /// What follows `(` looks like code (an argument list) rather than prose.
    pub fn code_like_args(&self) -> bool {
        let a = self.after.trim_start();
        a.is_empty()
            || a.starts_with([')', '\'', '"', '$', '@', '(', '`', '[', '*', '-'])
            || a.starts_with(|c: char| c.is_ascii_digit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_decoding() {
        assert_eq!(url_decode("a%20b+c"), "a b c");
        assert_eq!(url_decode("%u003cscript"), "<script");
        assert_eq!(url_decode("100%"), "100%");
        assert_eq!(url_decode("%zz"), "%zz");
        assert_eq!(url_decode("%2"), "%2");
    }

    #[test]
    fn escapes() {
        assert_eq!(decode_escapes("$&lbrace;jndi"), "${jndi");
        assert_eq!(decode_escapes("&#36;{x}"), "${x}");
        assert_eq!(decode_escapes("&#x24;&#000000123;"), "${");
        assert_eq!(decode_escapes("$\\u007Bjndi"), "${jndi");
        assert_eq!(decode_escapes("\\u{61}lert\\x28"), "alert(");
        assert_eq!(decode_escapes("$&LBRACEjndi"), "${jndi");
        assert_eq!(decode_escapes("Tom & Jerry"), "Tom & Jerry");
        assert_eq!(decode_escapes("C:\\users"), "C:\\users");
        assert_eq!(decode_escapes("&#99999999999;"), "&#99999999999;");
    }

    #[test]
    fn comments() {
        assert_eq!(strip_comments("exec/*x*/("), "exec (");
        assert_eq!(strip_comments("exec #c\r\n ("), "exec  \r\n (");
        assert_eq!(strip_comments("a /* open"), "a  ");
        assert_eq!(strip_comments("no comments"), "no comments");
        assert_eq!(strip_comments("issue #12 fixed"), "issue #12 fixed");
    }

    #[test]
    fn calls() {
        let names: Vec<_> = called_names("eval($x) + exec \n (1) + f")
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["eval", "exec"]);
    }
}
