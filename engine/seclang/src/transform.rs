//! Transformations (`t:…`): each takes the bytes of a value and returns them changed or borrowed.
//!
//! Semantics follow ModSecurity v3 (the reference the CRS is written against). Values are bytes,
//! not strings: decoders may produce any byte, and the operators match bytes.

use std::borrow::Cow;

use crate::bestfit;

/// A transformation function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transform {
    Lowercase,
    Uppercase,
    UrlDecode,
    UrlDecodeUni,
    UrlEncode,
    HtmlEntityDecode,
    JsDecode,
    CssDecode,
    CmdLine,
    EscapeSeqDecode,
    RemoveNulls,
    ReplaceNulls,
    RemoveWhitespace,
    CompressWhitespace,
    RemoveComments,
    RemoveCommentsChar,
    ReplaceComments,
    NormalizePath,
    NormalizePathWin,
    Base64Decode,
    Base64DecodeExt,
    HexEncode,
    HexDecode,
    Length,
    Utf8ToUnicode,
    Trim,
    TrimLeft,
    TrimRight,
}

/// Byte classes of a value that decide whether a transformation can change it (other than in
/// ASCII case). A value none of whose classes a chain cares about reads the same after the chain,
/// up to case, so the literal prefilter can look at the raw value.
pub mod flags {
    pub const PCT: u16 = 1; // % +
    pub const AMP: u16 = 2; // &
    pub const BSL: u16 = 4; // backslash
    pub const NUL: u16 = 8;
    pub const HIGH: u16 = 16; // bytes >= 0x80
    pub const QUOTE: u16 = 32; // " ' ^
    pub const SEP: u16 = 64; // , ; tab CR LF VT FF
    pub const SPACE: u16 = 128;
    pub const COMMENT: u16 = 256; // / * - # <
    pub const PATH: u16 = 512; // . /
    /// Present in every value: transformations that may change any value (base64, hex, length)
    /// are sensitive to it.
    pub const ANY: u16 = 1024;
    pub const ALL: u16 = u16::MAX;

    /// The classes present in a value.
    pub fn of(v: &[u8]) -> u16 {
        let mut f = ANY;
        for &c in v {
            f |= match c {
                b'%' | b'+' => PCT,
                b'&' => AMP,
                b'\\' => BSL,
                0 => NUL,
                0x80..=0xff => HIGH,
                b'"' | b'\'' | b'^' => QUOTE,
                b',' | b';' | b'\t' | b'\r' | b'\n' | 0x0b | 0x0c => SEP,
                b' ' => SPACE,
                b'*' | b'-' | b'#' | b'<' => COMMENT,
                b'/' => COMMENT | PATH,
                b'.' => PATH,
                _ => 0,
            };
        }
        f
    }
}

impl Transform {
    /// The byte classes (see [`flags`]) whose presence lets this transformation change a value
    /// other than in ASCII case.
    pub fn sensitive(self) -> u16 {
        use flags::*;
        use Transform::*;
        match self {
            Lowercase | Uppercase => 0,
            UrlDecode | UrlDecodeUni => PCT,
            HtmlEntityDecode => AMP,
            JsDecode | CssDecode | EscapeSeqDecode => BSL,
            CmdLine => BSL | QUOTE | SEP | SPACE,
            RemoveNulls | ReplaceNulls => NUL,
            RemoveWhitespace | CompressWhitespace | Trim | TrimLeft | TrimRight => {
                SEP | SPACE | HIGH
            }
            RemoveComments | RemoveCommentsChar | ReplaceComments => COMMENT,
            NormalizePath => PATH,
            NormalizePathWin => PATH | BSL,
            Utf8ToUnicode => HIGH,
            UrlEncode | Base64Decode | Base64DecodeExt | HexEncode | HexDecode | Length => ALL,
        }
    }

    /// The transformation named `name` (case-insensitive, as in `t:urlDecodeUni`).
    pub fn by_name(name: &str) -> Option<Transform> {
        use Transform::*;
        Some(match name.to_ascii_lowercase().as_str() {
            "lowercase" => Lowercase,
            "uppercase" => Uppercase,
            "urldecode" => UrlDecode,
            "urldecodeuni" => UrlDecodeUni,
            "urlencode" => UrlEncode,
            "htmlentitydecode" => HtmlEntityDecode,
            "jsdecode" => JsDecode,
            "cssdecode" => CssDecode,
            "cmdline" => CmdLine,
            "escapeseqdecode" => EscapeSeqDecode,
            "removenulls" => RemoveNulls,
            "replacenulls" => ReplaceNulls,
            "removewhitespace" => RemoveWhitespace,
            "compresswhitespace" => CompressWhitespace,
            "removecomments" => RemoveComments,
            "removecommentschar" => RemoveCommentsChar,
            "replacecomments" => ReplaceComments,
            "normalizepath" | "normalisepath" => NormalizePath,
            "normalizepathwin" | "normalisepathwin" => NormalizePathWin,
            "base64decode" => Base64Decode,
            "base64decodeext" => Base64DecodeExt,
            "hexencode" => HexEncode,
            "hexdecode" => HexDecode,
            "length" => Length,
            "utf8tounicode" => Utf8ToUnicode,
            "trim" => Trim,
            "trimleft" => TrimLeft,
            "trimright" => TrimRight,
            _ => return None,
        })
    }

    /// Applies the transformation.
    pub fn apply<'a>(self, v: &'a [u8]) -> Cow<'a, [u8]> {
        use Transform::*;
        match self {
            Lowercase => map_if(v, |c| c.is_ascii_uppercase(), |c| c.to_ascii_lowercase()),
            Uppercase => map_if(v, |c| c.is_ascii_lowercase(), |c| c.to_ascii_uppercase()),
            UrlDecode => url_decode(v, false),
            UrlDecodeUni => url_decode(v, true),
            UrlEncode => url_encode(v),
            HtmlEntityDecode => html_entity_decode(v),
            JsDecode => js_decode(v),
            CssDecode => css_decode(v),
            CmdLine => Cow::Owned(cmd_line(v)),
            EscapeSeqDecode => escape_seq_decode(v),
            RemoveNulls => remove_if(v, |c| c == 0),
            ReplaceNulls => map_if(v, |c| c == 0, |_| b' '),
            RemoveWhitespace => remove_if(v, is_space),
            CompressWhitespace => compress_whitespace(v),
            RemoveComments => remove_comments(v),
            RemoveCommentsChar => remove_comments_char(v),
            ReplaceComments => replace_comments(v),
            NormalizePath => normalize_path(v, false),
            NormalizePathWin => normalize_path(v, true),
            Base64Decode => Cow::Owned(base64_decode(v, false)),
            Base64DecodeExt => Cow::Owned(base64_decode(v, true)),
            HexEncode => Cow::Owned(hex_encode(v)),
            HexDecode => hex_decode(v),
            Length => Cow::Owned(v.len().to_string().into_bytes()),
            Utf8ToUnicode => utf8_to_unicode(v),
            Trim => Cow::Borrowed(trim_right(trim_left(v))),
            TrimLeft => Cow::Borrowed(trim_left(v)),
            TrimRight => Cow::Borrowed(trim_right(v)),
        }
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c | 0xa0)
}

fn map_if(v: &[u8], hit: impl Fn(u8) -> bool, f: impl Fn(u8) -> u8) -> Cow<'_, [u8]> {
    if v.iter().any(|&c| hit(c)) {
        Cow::Owned(v.iter().map(|&c| if hit(c) { f(c) } else { c }).collect())
    } else {
        Cow::Borrowed(v)
    }
}

fn remove_if(v: &[u8], hit: impl Fn(u8) -> bool) -> Cow<'_, [u8]> {
    if v.iter().any(|&c| hit(c)) {
        Cow::Owned(v.iter().copied().filter(|&c| !hit(c)).collect())
    } else {
        Cow::Borrowed(v)
    }
}

fn trim_left(v: &[u8]) -> &[u8] {
    let n = v.iter().take_while(|&&c| is_space(c)).count();
    &v[n..]
}

fn trim_right(v: &[u8]) -> &[u8] {
    let n = v.iter().rev().take_while(|&&c| is_space(c)).count();
    &v[..v.len() - n]
}

pub(crate) fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The byte a `%uHHHH` or `\uHHHH` escape stands for: its best-fit ASCII character where it has
/// one (full-width ASCII, accented letters, look-alike punctuation), the byte itself below 0x100,
/// else `?` — the "no best fit" character of the Windows code-page conversion these escapes come
/// from. (Taking the low byte instead, as ModSecurity does without a unicode map, turns Chinese
/// or Hindi text into random ASCII punctuation, which the SQL tokeniser then reads as an
/// injection: `杭` is U+676D, whose low byte is `m`; `圧` is U+5727, whose low byte is a quote.)
fn uni_byte(cp: u32) -> u8 {
    if let Some(b) = bestfit::ascii(cp) {
        return b;
    }
    if cp < 0x100 {
        return cp as u8;
    }
    let low = (cp & 0xff) as u8;
    if (cp & 0xff00) == 0xff00 && low > 0 && low < 0x5f {
        low + 0x20
    } else {
        b'?'
    }
}

fn hex4(v: &[u8]) -> Option<u32> {
    if v.len() < 4 {
        return None;
    }
    let mut n = 0u32;
    for &c in &v[..4] {
        n = n << 4 | hex(c)? as u32;
    }
    Some(n)
}

/// `urlDecode` / `urlDecodeUni`: `+` is a space, `%HH` a byte, and (uni) `%uHHHH` a best-fit byte.
/// Invalid escapes are kept as they are.
pub fn url_decode(v: &[u8], uni: bool) -> Cow<'_, [u8]> {
    if !v.iter().any(|&c| c == b'%' || c == b'+') {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        match v[i] {
            b'+' => {
                o.push(b' ');
                i += 1;
            }
            b'%' => {
                if uni && i + 1 < v.len() && (v[i + 1] == b'u' || v[i + 1] == b'U') {
                    if let Some(cp) = hex4(&v[i + 2..]) {
                        o.push(uni_byte(cp));
                        i += 6;
                    } else {
                        o.extend_from_slice(&v[i..i + 2]);
                        i += 2;
                    }
                    continue;
                }
                match (
                    v.get(i + 1).and_then(|&c| hex(c)),
                    v.get(i + 2).and_then(|&c| hex(c)),
                ) {
                    (Some(a), Some(b)) => {
                        o.push(a << 4 | b);
                        i += 3;
                    }
                    _ => {
                        o.push(b'%');
                        i += 1;
                    }
                }
            }
            c => {
                o.push(c);
                i += 1;
            }
        }
    }
    Cow::Owned(o)
}

fn url_encode(v: &[u8]) -> Cow<'_, [u8]> {
    let safe = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'*');
    if v.iter().all(|&c| safe(c)) {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len() * 3);
    for &c in v {
        if safe(c) {
            o.push(c);
        } else if c == b' ' {
            o.push(b'+');
        } else {
            o.push(b'%');
            push_hex(&mut o, c as u32, 2);
        }
    }
    Cow::Owned(o)
}

/// `htmlEntityDecode`: `&#DDD;`, `&#xHH;` (the low byte; `;` optional) and the entities `quot`,
/// `amp`, `lt`, `gt`, `nbsp` (any case).
pub fn html_entity_decode(v: &[u8]) -> Cow<'_, [u8]> {
    if !v.contains(&b'&') {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] != b'&' {
            o.push(v[i]);
            i += 1;
            continue;
        }
        let rest = &v[i + 1..];
        if rest.first() == Some(&b'#') {
            let (hexa, start) = match rest.get(1) {
                Some(b'x') | Some(b'X') => (true, 2),
                _ => (false, 1),
            };
            let digits = rest[start..]
                .iter()
                .take_while(|&&c| {
                    if hexa {
                        hex(c).is_some()
                    } else {
                        c.is_ascii_digit()
                    }
                })
                .count();
            if digits > 0 {
                let mut n: u32 = 0;
                for &c in &rest[start..start + digits] {
                    let d = if hexa {
                        hex(c).unwrap() as u32
                    } else {
                        (c - b'0') as u32
                    };
                    n = n.wrapping_mul(if hexa { 16 } else { 10 }).wrapping_add(d);
                }
                o.push(n as u8);
                i += 1 + start + digits;
                if v.get(i) == Some(&b';') {
                    i += 1;
                }
                continue;
            }
        } else {
            let name_len = rest.iter().take_while(|c| c.is_ascii_alphabetic()).count();
            let name = rest[..name_len].to_ascii_lowercase();
            let c = match name.as_slice() {
                b"quot" => Some(b'"'),
                b"amp" => Some(b'&'),
                b"lt" => Some(b'<'),
                b"gt" => Some(b'>'),
                b"nbsp" => Some(0xa0),
                _ => None,
            };
            if let Some(c) = c {
                o.push(c);
                i += 1 + name_len;
                if v.get(i) == Some(&b';') {
                    i += 1;
                }
                continue;
            }
        }
        o.push(b'&');
        i += 1;
    }
    Cow::Owned(o)
}

/// `jsDecode`: `\uHHHH` (best-fit byte), `\xHH`, `\OOO`, `\n` and friends, other `\C` as `C`.
pub fn js_decode(v: &[u8]) -> Cow<'_, [u8]> {
    if !v.contains(&b'\\') {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] != b'\\' || i + 1 >= v.len() {
            o.push(v[i]);
            i += 1;
            continue;
        }
        let n = v[i + 1];
        if n == b'u' {
            if let Some(cp) = hex4(&v[i + 2..]) {
                o.push(uni_byte(cp));
                i += 6;
                continue;
            }
        }
        if n == b'x' {
            if let (Some(a), Some(b)) = (
                v.get(i + 2).and_then(|&c| hex(c)),
                v.get(i + 3).and_then(|&c| hex(c)),
            ) {
                o.push(a << 4 | b);
                i += 4;
                continue;
            }
        }
        if (b'0'..=b'7').contains(&n) {
            let mut j = 0;
            while j < 3 && i + 1 + j < v.len() && (b'0'..=b'7').contains(&v[i + 1 + j]) {
                j += 1;
            }
            if j == 3 && v[i + 1] > b'3' {
                j = 2;
            }
            let mut x: u32 = 0;
            for &c in &v[i + 1..i + 1 + j] {
                x = x * 8 + (c - b'0') as u32;
            }
            o.push(x as u8);
            i += 1 + j;
            continue;
        }
        o.push(match n {
            b'a' => 7,
            b'b' => 8,
            b'f' => 12,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'v' => 11,
            c => c,
        });
        i += 2;
    }
    Cow::Owned(o)
}

/// `cssDecode`: `\` followed by 1–6 hex digits is that code point (best-fit byte for non-ASCII;
/// one following whitespace is eaten), `\` newline is removed, `\C` is `C`.
pub fn css_decode(v: &[u8]) -> Cow<'_, [u8]> {
    if !v.contains(&b'\\') {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] != b'\\' {
            o.push(v[i]);
            i += 1;
            continue;
        }
        if i + 1 >= v.len() {
            i += 1;
            continue;
        }
        i += 1;
        let j = v[i..]
            .iter()
            .take(6)
            .take_while(|&&c| hex(c).is_some())
            .count();
        if j > 0 {
            let mut cp: u32 = 0;
            for &c in &v[i..i + j] {
                cp = cp << 4 | hex(c).unwrap() as u32;
            }
            if cp < 0x80 {
                o.push(cp as u8);
            } else {
                o.push(uni_byte(cp));
            }
            i += j;
            if i < v.len() && is_space(v[i]) {
                i += 1;
            }
        } else if v[i] == b'\n' {
            i += 1;
        } else {
            o.push(v[i]);
            i += 1;
        }
    }
    Cow::Owned(o)
}

/// `cmdLine`: drops `\ " ' ^`, turns runs of spaces, commas and semicolons into one space, drops
/// a space before `/` or `(`, lower-cases.
pub fn cmd_line(v: &[u8]) -> Vec<u8> {
    let mut o = Vec::with_capacity(v.len());
    let mut space = false;
    for &c in v {
        match c {
            b'"' | b'\'' | b'\\' | b'^' => {}
            b' ' | b',' | b';' | b'\t' | b'\r' | b'\n' => {
                if !space {
                    o.push(b' ');
                    space = true;
                }
            }
            b'/' | b'(' => {
                if space {
                    o.pop();
                }
                space = false;
                o.push(c);
            }
            c => {
                o.push(c.to_ascii_lowercase());
                space = false;
            }
        }
    }
    o
}

/// `escapeSeqDecode`: ANSI C escapes (`\n`, `\xHH`, `\OOO`, `\\`, …).
fn escape_seq_decode(v: &[u8]) -> Cow<'_, [u8]> {
    if !v.contains(&b'\\') {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] != b'\\' || i + 1 >= v.len() {
            o.push(v[i]);
            i += 1;
            continue;
        }
        let n = v[i + 1];
        let simple = match n {
            b'a' => Some(7),
            b'b' => Some(8),
            b'f' => Some(12),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(11),
            b'\\' | b'?' | b'\'' | b'"' => Some(n),
            _ => None,
        };
        if let Some(c) = simple {
            o.push(c);
            i += 2;
            continue;
        }
        if n == b'x' || n == b'X' {
            if let (Some(a), Some(b)) = (
                v.get(i + 2).and_then(|&c| hex(c)),
                v.get(i + 3).and_then(|&c| hex(c)),
            ) {
                o.push(a << 4 | b);
                i += 4;
                continue;
            }
        }
        if (b'0'..=b'7').contains(&n) {
            let j = v[i + 1..]
                .iter()
                .take(3)
                .take_while(|c| (b'0'..=b'7').contains(c))
                .count();
            let mut x: u32 = 0;
            for &c in &v[i + 1..i + 1 + j] {
                x = x * 8 + (c - b'0') as u32;
            }
            o.push(x as u8);
            i += 1 + j;
            continue;
        }
        o.push(v[i]);
        i += 1;
    }
    Cow::Owned(o)
}

fn compress_whitespace(v: &[u8]) -> Cow<'_, [u8]> {
    let needs = v.windows(2).any(|w| is_space(w[0]) && is_space(w[1]))
        || v.iter().any(|&c| is_space(c) && c != b' ');
    if !needs {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut space = false;
    for &c in v {
        if is_space(c) {
            if !space {
                o.push(b' ');
                space = true;
            }
        } else {
            o.push(c);
            space = false;
        }
    }
    Cow::Owned(o)
}

/// `removeComments`: drops `/* … */` (also unterminated), `<!-- … -->`, and `--` or `#` to the
/// end of the value.
fn remove_comments(v: &[u8]) -> Cow<'_, [u8]> {
    if !v.iter().any(|&c| matches!(c, b'/' | b'<' | b'-' | b'#')) {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let rest = &v[i..];
        if rest.starts_with(b"/*") {
            match find(&rest[2..], b"*/") {
                Some(p) => i += 2 + p + 2,
                None => break,
            }
        } else if rest.starts_with(b"<!--") {
            match find(&rest[4..], b"-->") {
                Some(p) => i += 4 + p + 3,
                None => break,
            }
        } else if rest.starts_with(b"--") || rest[0] == b'#' {
            break;
        } else {
            o.push(v[i]);
            i += 1;
        }
    }
    Cow::Owned(o)
}

/// `removeCommentsChar`: drops the comment markers `/*`, `*/`, `<!--`, `-->`, `--` and `#`.
fn remove_comments_char(v: &[u8]) -> Cow<'_, [u8]> {
    if !v
        .iter()
        .any(|&c| matches!(c, b'/' | b'*' | b'<' | b'-' | b'#'))
    {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        let rest = &v[i..];
        if rest.starts_with(b"/*") || rest.starts_with(b"*/") || rest.starts_with(b"--") {
            i += 2;
        } else if rest.starts_with(b"<!--") {
            i += 4;
        } else if rest.starts_with(b"-->") {
            i += 3;
        } else if rest[0] == b'#' {
            i += 1;
        } else {
            o.push(v[i]);
            i += 1;
        }
    }
    Cow::Owned(o)
}

/// `replaceComments`: each `/* … */` (also unterminated) becomes one space; a lone `*/` stays.
fn replace_comments(v: &[u8]) -> Cow<'_, [u8]> {
    if find(v, b"/*").is_none() {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i..].starts_with(b"/*") {
            o.push(b' ');
            match find(&v[i + 2..], b"*/") {
                Some(p) => i += 2 + p + 2,
                None => break,
            }
        } else {
            o.push(v[i]);
            i += 1;
        }
    }
    Cow::Owned(o)
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// `normalizePath`: collapses `//`, removes `./` segments and resolves `../` against the
/// preceding segment (never above the start); `Win` first turns `\` into `/`.
fn normalize_path(v: &[u8], win: bool) -> Cow<'_, [u8]> {
    let src: Cow<[u8]> = if win && v.contains(&b'\\') {
        Cow::Owned(
            v.iter()
                .map(|&c| if c == b'\\' { b'/' } else { c })
                .collect(),
        )
    } else {
        Cow::Borrowed(v)
    };
    let s = &src[..];
    if !(find(s, b"//").is_some()
        || find(s, b"./").is_some()
        || s.ends_with(b"/.")
        || s.ends_with(b"/..")
        || s == b"."
        || s == b"..")
    {
        return src;
    }
    let absolute = s.first() == Some(&b'/');
    let trailing = s.last() == Some(&b'/') || s.ends_with(b"/.") || s.ends_with(b"/..");
    let mut out: Vec<&[u8]> = Vec::new();
    let mut leading_up = 0usize;
    for seg in s.split(|&c| c == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => {
                if out.pop().is_none() && !absolute {
                    leading_up += 1;
                }
            }
            s => out.push(s),
        }
    }
    let mut o = Vec::with_capacity(s.len());
    if absolute {
        o.push(b'/');
    }
    for _ in 0..leading_up {
        o.extend_from_slice(b"../");
    }
    for (k, seg) in out.iter().enumerate() {
        if k > 0 {
            o.push(b'/');
        }
        o.extend_from_slice(seg);
    }
    if trailing && !out.is_empty() {
        o.push(b'/');
    }
    Cow::Owned(o)
}

fn b64(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    }
}

/// `base64Decode` decodes up to the first character outside the alphabet (or `=`);
/// `base64DecodeExt` skips such characters instead.
fn base64_decode(v: &[u8], ext: bool) -> Vec<u8> {
    let mut o = Vec::with_capacity(v.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for &c in v {
        let Some(d) = b64(c) else {
            if ext && c != b'=' {
                continue;
            }
            break;
        };
        acc = acc << 6 | d as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            o.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    o
}

/// Appends `n` in lower-case hexadecimal, zero-padded to at least `width` digits (what
/// `format!("{n:0width$x}")` writes, without the formatter: `hexEncode` runs on whole values).
fn push_hex(o: &mut Vec<u8>, n: u32, width: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let digits = ((32 - n.leading_zeros() as usize).div_ceil(4)).max(width);
    for i in (0..digits).rev() {
        o.push(DIGITS[(n >> (4 * i)) as usize & 15]);
    }
}

fn hex_encode(v: &[u8]) -> Vec<u8> {
    let mut o = Vec::with_capacity(v.len() * 2);
    for &c in v {
        push_hex(&mut o, c as u32, 2);
    }
    o
}

fn hex_decode(v: &[u8]) -> Cow<'_, [u8]> {
    let mut o = Vec::with_capacity(v.len() / 2);
    for p in v.chunks(2) {
        match (
            p.first().and_then(|&c| hex(c)),
            p.get(1).and_then(|&c| hex(c)),
        ) {
            (Some(a), Some(b)) => o.push(a << 4 | b),
            _ => return Cow::Borrowed(v),
        }
    }
    Cow::Owned(o)
}

/// `utf8toUnicode`: each non-ASCII UTF-8 character becomes `%uHHHH`; invalid bytes stay.
fn utf8_to_unicode(v: &[u8]) -> Cow<'_, [u8]> {
    if v.is_ascii() {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len() * 2);
    let mut rest = v;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                push_unicode(&mut o, s);
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                push_unicode(&mut o, std::str::from_utf8(good).unwrap_or(""));
                let n = e.error_len().unwrap_or(bad.len());
                o.extend_from_slice(&bad[..n]);
                rest = &bad[n..];
            }
        }
    }
    Cow::Owned(o)
}

fn push_unicode(o: &mut Vec<u8>, s: &str) {
    for ch in s.chars() {
        if ch.is_ascii() {
            o.push(ch as u8);
        } else {
            o.extend_from_slice(b"%u");
            push_hex(o, ch as u32, 4);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Transform::*;
    use super::*;

    fn t(x: Transform, v: &str) -> String {
        String::from_utf8_lossy(&x.apply(v.as_bytes())).into_owned()
    }

    #[test]
    fn hex_digits_are_what_the_formatter_writes() {
        for n in [
            0u32, 1, 9, 10, 15, 16, 0x7f, 0xff, 0x100, 0xfff, 0x1000, 0xffff, 0x10000, 0x10ffff,
        ] {
            for width in [2, 4] {
                let mut o = Vec::new();
                push_hex(&mut o, n, width);
                assert_eq!(String::from_utf8(o).unwrap(), format!("{n:0width$x}"));
            }
        }
        assert_eq!(t(UrlEncode, "a b/é"), "a+b%2f%c3%a9");
        assert_eq!(t(HexEncode, "a\n"), "610a");
        assert_eq!(t(Utf8ToUnicode, "aé😀"), "a%u00e9%u1f600");
    }

    #[test]
    fn url_decoding() {
        assert_eq!(t(UrlDecode, "a%20b+c%2"), "a b c%2");
        assert_eq!(t(UrlDecodeUni, "%u0027or%uFF11=1"), "'or1=1");
        assert_eq!(t(UrlDecodeUni, "%u2215etc%u2215passwd"), "/etc/passwd");
        assert_eq!(t(UrlDecodeUni, "%uZZ"), "%uZZ");
        // No best fit: `?`, never the low byte (U+5727's is a quote).
        assert_eq!(
            UrlDecodeUni.apply(b"%u5727%u676D%u00e9%u00b5").into_owned(),
            b"??e\xb5".to_vec()
        );
        assert!(matches!(UrlDecode.apply(b"plain"), Cow::Borrowed(_)));
    }

    #[test]
    fn entities_and_escapes() {
        assert_eq!(
            t(HtmlEntityDecode, "&lt;script&GT;&#x61;&#98;c&amp"),
            "<script>abc&"
        );
        assert_eq!(t(HtmlEntityDecode, "AT&T"), "AT&T");
        assert_eq!(t(JsDecode, r"\x3cscript\u003e\141\n\z"), "<script>a\nz");
        assert_eq!(t(CssDecode, r"\6a avascript\3a"), "javascript:");
        assert_eq!(t(EscapeSeqDecode, r"a\x41\101\n\q"), "aAA\n\\q");
    }

    #[test]
    fn command_lines() {
        assert_eq!(t(CmdLine, "C^at  /etc/pass'w'd ; ID"), "cat/etc/passwd id");
        assert_eq!(t(CmdLine, "ping ,,, (x)"), "ping(x)");
    }

    #[test]
    fn comments_and_whitespace() {
        assert_eq!(t(ReplaceComments, "UNION/**/SELECT/*x"), "UNION SELECT ");
        assert_eq!(t(RemoveComments, "a/*b*/c-- d"), "ac");
        assert_eq!(t(RemoveCommentsChar, "a/*b*/c--d#"), "abcd");
        assert_eq!(t(CompressWhitespace, "a \t\n b"), "a b");
        assert_eq!(t(RemoveWhitespace, " a b "), "ab");
        assert_eq!(t(RemoveNulls, "a\0b"), "ab");
    }

    #[test]
    fn paths() {
        assert_eq!(
            t(NormalizePath, "/a/./b/../../../etc//passwd"),
            "/etc/passwd"
        );
        assert_eq!(t(NormalizePath, "../../x"), "../../x");
        assert_eq!(t(NormalizePathWin, r"C:\a\..\b\"), "C:/b/");
    }

    #[test]
    fn encodings() {
        assert_eq!(t(Base64Decode, "YWJj"), "abc");
        assert_eq!(t(Base64Decode, "YWJj!ZGVm"), "abc");
        assert_eq!(t(Base64DecodeExt, "YW!Jj"), "abc");
        assert_eq!(t(HexEncode, "a\n"), "610a");
        assert_eq!(t(HexDecode, "6162"), "ab");
        assert_eq!(t(Length, "abc"), "3");
        assert_eq!(t(Utf8ToUnicode, "é<"), "%u00e9<");
        assert_eq!(t(Lowercase, "SeLeCt"), "select");
        assert_eq!(t(Trim, "  x \t"), "x");
    }
}
