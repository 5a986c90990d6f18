//! Operators (`@rx`, `@pm`, `@within`, `@detectSQLi`, …), compiled once at load.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::bytes::{Regex, RegexBuilder};

/// A parameter that may hold macros (`%{tx.allowed_methods}`), expanded per transaction.
#[derive(Debug, Clone)]
pub struct Param {
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone)]
pub enum Part {
    Lit(Vec<u8>),
    /// `%{collection.key}` or `%{VAR}`, lower-cased.
    Macro(String, Option<String>),
}

impl Param {
    pub fn parse(s: &str) -> Param {
        let mut parts = Vec::new();
        let mut rest = s;
        while let Some(p) = rest.find("%{") {
            let Some(end) = rest[p..].find('}') else {
                break;
            };
            if p > 0 {
                parts.push(Part::Lit(rest.as_bytes()[..p].to_vec()));
            }
            let inner = rest[p + 2..p + end].to_ascii_lowercase();
            let (c, k) = match inner.split_once('.') {
                Some((c, k)) => (c.to_string(), Some(k.to_string())),
                None => (inner, None),
            };
            parts.push(Part::Macro(c, k));
            rest = &rest[p + end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Lit(rest.as_bytes().to_vec()));
        }
        Param { parts }
    }

    /// The text if it holds no macro.
    pub fn literal(&self) -> Option<Vec<u8>> {
        let mut o = Vec::new();
        for p in &self.parts {
            match p {
                Part::Lit(l) => o.extend_from_slice(l),
                Part::Macro(..) => return None,
            }
        }
        Some(o)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrOp {
    Contains,
    ContainsWord,
    BeginsWith,
    EndsWith,
    Streq,
    Within,
    StrMatch,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NumOp {
    Eq,
    Ge,
    Gt,
    Le,
    Lt,
}

/// A compiled operator.
#[derive(Debug)]
pub enum Op {
    Rx(Rx),
    /// `@rx` with macros (`^%{tx.allowed_charsets}$`): compiled per distinct expansion, kept in
    /// a small cache (a few entries: the expansions come from configuration, not requests).
    RxMacro(Param, std::sync::Mutex<Vec<(Vec<u8>, std::sync::Arc<Rx>)>>),
    /// `@pm`, `@pmFromFile`: any of the phrases, ignoring ASCII case (the phrases lower-cased
    /// are kept for the prefilter).
    Pm(AhoCorasick, Vec<Vec<u8>>),
    Str(StrOp, Param),
    Num(NumOp, Param),
    DetectSqli,
    DetectXss,
    ValidateUrlEncoding,
    ValidateUtf8,
    /// Bytes allowed by `@validateByteRange`; the operator matches a value with any other byte.
    ValidateByteRange(Box<[bool; 256]>),
    IpMatch(Vec<(u128, u8, bool)>),
    Unconditional,
    NoMatch,
}

/// Operators this engine knows but cannot run here (they need the network or a database); a
/// rule that uses one never matches, and loading says so.
pub const NEVER: [&str; 4] = ["rbl", "geolookup", "inspectfile", "verifycc"];

impl Op {
    /// Builds an operator from its name and argument; `data` reads a data file for `…FromFile`.
    pub fn build(
        name: &str,
        arg: &str,
        data: &dyn Fn(&str) -> Result<String, String>,
    ) -> Result<Op, String> {
        let lname = name.to_ascii_lowercase();
        Ok(match lname.as_str() {
            "rx" if arg.contains("%{") => {
                // Checked now; compiled per expansion at run time.
                regex(
                    &Param::parse(arg)
                        .parts
                        .iter()
                        .map(|p| match p {
                            Part::Lit(l) => String::from_utf8_lossy(l).into_owned(),
                            Part::Macro(..) => "x".to_string(),
                        })
                        .collect::<String>(),
                )?;
                Op::RxMacro(Param::parse(arg), Default::default())
            }
            "rx" => Op::Rx(regex(arg)?),
            "pm" => phrases(arg.split_whitespace().map(str::as_bytes))?,
            "pmfromfile" | "pmf" => {
                let mut words: Vec<String> = Vec::new();
                for f in arg.split_whitespace() {
                    let text = data(f)?;
                    words.extend(
                        text.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty() && !l.starts_with('#'))
                            .map(String::from),
                    );
                }
                phrases(words.iter().map(|w| w.as_bytes()))?
            }
            "contains" => Op::Str(StrOp::Contains, Param::parse(arg)),
            "containsword" => Op::Str(StrOp::ContainsWord, Param::parse(arg)),
            "beginswith" => Op::Str(StrOp::BeginsWith, Param::parse(arg)),
            "endswith" => Op::Str(StrOp::EndsWith, Param::parse(arg)),
            "streq" => Op::Str(StrOp::Streq, Param::parse(arg)),
            "within" => Op::Str(StrOp::Within, Param::parse(arg)),
            "strmatch" => Op::Str(StrOp::StrMatch, Param::parse(arg)),
            "eq" => Op::Num(NumOp::Eq, Param::parse(arg)),
            "ge" => Op::Num(NumOp::Ge, Param::parse(arg)),
            "gt" => Op::Num(NumOp::Gt, Param::parse(arg)),
            "le" => Op::Num(NumOp::Le, Param::parse(arg)),
            "lt" => Op::Num(NumOp::Lt, Param::parse(arg)),
            "detectsqli" => Op::DetectSqli,
            "detectxss" => Op::DetectXss,
            "validateurlencoding" => Op::ValidateUrlEncoding,
            "validateutf8encoding" => Op::ValidateUtf8,
            "validatebyterange" => Op::ValidateByteRange(byte_ranges(arg)?),
            "ipmatch" => Op::IpMatch(cidrs(arg.split(|c: char| c == ',' || c.is_whitespace()))?),
            "ipmatchfromfile" | "ipmatchf" => {
                let mut v = Vec::new();
                for f in arg.split_whitespace() {
                    let text = data(f)?;
                    v.extend(cidrs(
                        text.lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty() && !l.starts_with('#')),
                    )?);
                }
                Op::IpMatch(v)
            }
            "unconditionalmatch" => Op::Unconditional,
            "nomatch" => Op::NoMatch,
            n if NEVER.contains(&n) => Op::NoMatch,
            _ => return Err(format!("unknown operator @{name}")),
        })
    }
}

/// A compiled `@rx`: the `regex` crate where it can read the pattern (nearly all of CRS), else
/// `fancy-regex` for the few patterns with look-around or back-references (it backtracks, so it
/// is kept to those).
#[derive(Debug)]
pub enum Rx {
    Fast(Regex),
    Backtracking(fancy_regex::Regex),
}

impl Rx {
    pub fn is_match(&self, v: &[u8]) -> bool {
        match self {
            Rx::Fast(r) => r.is_match(v),
            Rx::Backtracking(r) => r.is_match(&latin1(v)).unwrap_or(false),
        }
    }

    /// The whole match and up to nine groups.
    pub fn captures(&self, v: &[u8]) -> Option<Vec<Vec<u8>>> {
        match self {
            Rx::Fast(r) => r.captures(v).map(|c| {
                c.iter()
                    .take(10)
                    .map(|m| m.map(|m| m.as_bytes().to_vec()).unwrap_or_default())
                    .collect()
            }),
            Rx::Backtracking(r) => {
                let s = latin1(v);
                let c = r.captures(&s).ok()??;
                Some(
                    c.iter()
                        .take(10)
                        .map(|m| {
                            m.map(|m| m.as_str().chars().map(|ch| ch as u32 as u8).collect())
                                .unwrap_or_default()
                        })
                        .collect(),
                )
            }
        }
    }
}

/// Bytes as Latin-1 text: one char per byte, so a backtracking match sees what PCRE sees.
fn latin1(v: &[u8]) -> String {
    v.iter().map(|&c| c as char).collect()
}

/// Compiles a rule's regex as ModSecurity v3 does (dot matches newline, `^`/`$` at line ends)
/// over bytes with ASCII classes (`\w`, `\d`, `\s`), like PCRE without UTF mode.
pub fn regex(pattern: &str) -> Result<Rx, String> {
    let t = translate(pattern);
    match RegexBuilder::new(&t)
        .unicode(false)
        .dot_matches_new_line(true)
        .multi_line(true)
        .size_limit(64 << 20)
        .dfa_size_limit(16 << 20)
        .build()
    {
        Ok(r) => Ok(Rx::Fast(r)),
        Err(e) => {
            let fancy =
                fancy_regex::RegexBuilder::new(&format!("(?sm){}", translate_fancy(pattern)))
                    .backtrack_limit(100_000)
                    .build();
            fancy
                .map(Rx::Backtracking)
                .map_err(|f| format!("regex not supported: {} ({f})", last_line(&e.to_string())))
        }
    }
}

/// The regex crate's message without its multi-line drawing of the pattern.
fn last_line(s: &str) -> &str {
    s.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(s)
}

/// Characters the regex crate lets (and sometimes needs) `\` escape.
fn is_meta(c: u8) -> bool {
    matches!(
        c,
        b'\\'
            | b'.'
            | b'+'
            | b'*'
            | b'?'
            | b'('
            | b')'
            | b'|'
            | b'['
            | b']'
            | b'{'
            | b'}'
            | b'^'
            | b'$'
            | b'#'
            | b'&'
            | b'-'
            | b'~'
    )
}

/// Rewrites PCRE spellings the `regex` crate reads differently or not at all:
/// - `\Z` is `\z`; `\<`, `\>`, `\'`, `\!` and other escaped punctuation are literals;
/// - a `{` that does not start a counted repetition is a literal, as is a `[` (not `[:`) inside a
///   class, and `&`, `~` inside a class (set operators for the regex crate);
/// - possessive quantifiers (`*+`, `++`, `?+`, `{n}+`) and atomic groups `(?>…)` lose their
///   no-backtracking promise (they then match a superset, never less);
/// - bytes outside ASCII are written as `\xHH`, one per byte, as PCRE reads them without UTF.
fn translate(p: &str) -> String {
    let b = p.as_bytes();
    let mut o = String::with_capacity(p.len() + 16);
    let mut i = 0;
    let mut in_class = false;
    let mut class_start = false;
    let mut in_rep = false;
    let mut after_quant = false;
    while i < b.len() {
        let c = b[i];
        let was_quant = std::mem::replace(&mut after_quant, false);
        let first_in_class = std::mem::replace(&mut class_start, false);
        if c >= 0x80 {
            o.push_str(&format!(r"\x{c:02X}"));
            i += 1;
            continue;
        }
        if c == b'\\' && i + 1 < b.len() {
            let n = b[i + 1];
            i += 2;
            if n >= 0x80 {
                o.push_str(&format!(r"\x{n:02X}"));
            } else if n == b'Z' && !in_class {
                o.push_str(r"\z");
            } else if n == b'x' && b.get(i) == Some(&b'{') {
                // `\x{HH}`: the byte (the braced form would mean a code point); a code point
                // above 0xFF outside a class is written as its UTF-8 bytes.
                let e = p[i..].find('}').map(|e| i + e + 1).unwrap_or(b.len());
                match u32::from_str_radix(&p[i + 1..e.saturating_sub(1).max(i + 1)], 16) {
                    Ok(n) if n <= 0xff => o.push_str(&format!(r"\x{n:02X}")),
                    Ok(n) if !in_class => match char::from_u32(n) {
                        Some(ch) => {
                            for byte in ch.to_string().bytes() {
                                o.push_str(&format!(r"\x{byte:02X}"));
                            }
                        }
                        None => o.push_str(&p[i - 2..e]),
                    },
                    _ => o.push_str(&p[i - 2..e]),
                }
                i = e;
            } else if n.is_ascii_alphanumeric() || is_meta(n) {
                // (`&` and `~`, which a class needs escaped, are among the meta characters.)
                o.push('\\');
                o.push(n as char);
            } else {
                o.push(n as char);
            }
            continue;
        }
        if in_class {
            match c {
                b']' if !first_in_class => in_class = false,
                b']' => {
                    o.push_str(r"\]");
                    i += 1;
                    continue;
                }
                b'[' if b.get(i + 1) != Some(&b':') => {
                    o.push_str(r"\[");
                    i += 1;
                    continue;
                }
                b'[' => {
                    // A POSIX class `[:alpha:]` is copied whole.
                    if let Some(e) = p[i..].find(":]") {
                        o.push_str(&p[i..i + e + 2]);
                        i += e + 2;
                        continue;
                    }
                }
                b'&' | b'~' => {
                    o.push('\\');
                    o.push(c as char);
                    i += 1;
                    continue;
                }
                _ => {}
            }
            o.push(c as char);
            i += 1;
            continue;
        }
        match c {
            b'[' => {
                in_class = true;
                o.push('[');
                i += 1;
                if b.get(i) == Some(&b'^') {
                    o.push('^');
                    i += 1;
                }
                class_start = true;
                continue;
            }
            b'{' => {
                if is_repetition(&b[i..]) {
                    in_rep = true;
                } else {
                    o.push_str(r"\{");
                    i += 1;
                    continue;
                }
            }
            b'}' => {
                if !in_rep {
                    o.push_str(r"\}");
                    i += 1;
                    continue;
                }
                in_rep = false;
                after_quant = true;
            }
            b'*' | b'?' => after_quant = true,
            b'+' => {
                if was_quant {
                    // possessive: drop the `+`
                    i += 1;
                    continue;
                }
                after_quant = true;
            }
            b'(' if p[i..].starts_with("(?>") => {
                o.push_str("(?:");
                i += 3;
                continue;
            }
            _ => {}
        }
        // A `?` right after a quantifier makes it lazy; it is not itself a quantifier.
        if c == b'?' && was_quant {
            after_quant = false;
        }
        o.push(c as char);
        i += 1;
    }
    o
}

/// For the backtracking engine: the same rewrites; values are matched there as Latin-1 text,
/// so `\xHH` above 0x7F reads as the byte it stands for.
fn translate_fancy(p: &str) -> String {
    translate(p)
}

fn is_repetition(s: &[u8]) -> bool {
    let end = match s.iter().position(|&c| c == b'}') {
        Some(e) => e,
        None => return false,
    };
    let inner = &s[1..end];
    !inner.is_empty()
        && inner[0].is_ascii_digit()
        && inner.iter().all(|&c| c.is_ascii_digit() || c == b',')
        && inner.iter().filter(|&&c| c == b',').count() <= 1
}

fn phrases<'a>(words: impl Iterator<Item = &'a [u8]>) -> Result<Op, String> {
    let words: Vec<Vec<u8>> = words
        .filter(|w| !w.is_empty())
        .map(<[u8]>::to_ascii_lowercase)
        .collect();
    let ac = AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::LeftmostFirst)
        .build(&words)
        .map_err(|e| e.to_string())?;
    Ok(Op::Pm(ac, words))
}

fn byte_ranges(arg: &str) -> Result<Box<[bool; 256]>, String> {
    let mut ok = Box::new([false; 256]);
    for part in arg.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a.trim(), b.trim()),
            None => (part, part),
        };
        let a: u8 = a.parse().map_err(|_| format!("bad byte range {part}"))?;
        let b: u8 = b.parse().map_err(|_| format!("bad byte range {part}"))?;
        for c in a..=b {
            ok[c as usize] = true;
        }
    }
    Ok(ok)
}

/// An address as a 128-bit number (IPv4 mapped into `::ffff:0:0/96`).
pub fn ip_number(s: &str) -> Option<u128> {
    match s.trim().parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(a) => Some(u128::from(a.to_ipv6_mapped())),
        std::net::IpAddr::V6(a) => Some(u128::from(a)),
    }
}

fn cidrs<'a>(items: impl Iterator<Item = &'a str>) -> Result<Vec<(u128, u8, bool)>, String> {
    let mut v = Vec::new();
    for it in items.map(str::trim).filter(|s| !s.is_empty()) {
        let (addr, len) = match it.split_once('/') {
            Some((a, l)) => (
                a,
                Some(l.parse::<u8>().map_err(|_| format!("bad network {it}"))?),
            ),
            None => (it, None),
        };
        let v4 = addr.contains('.') && !addr.contains(':');
        let n = ip_number(addr).ok_or_else(|| format!("bad address {it}"))?;
        let bits = match (len, v4) {
            (Some(l), true) => 96 + l.min(32),
            (Some(l), false) => l.min(128),
            (None, _) => 128,
        };
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - bits as u32)
        };
        v.push((n & mask, bits, v4));
    }
    Ok(v)
}

pub fn ip_in(list: &[(u128, u8, bool)], value: &[u8]) -> bool {
    let Some(n) = std::str::from_utf8(value).ok().and_then(ip_number) else {
        return false;
    };
    list.iter().any(|&(net, bits, _)| {
        let mask = if bits == 0 {
            0
        } else {
            u128::MAX << (128 - bits as u32)
        };
        n & mask == net
    })
}

/// `@validateUrlEncoding`: a `%` not followed by two hex digits.
pub fn bad_url_encoding(v: &[u8]) -> bool {
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' {
            match (v.get(i + 1), v.get(i + 2)) {
                (Some(a), Some(b)) if a.is_ascii_hexdigit() && b.is_ascii_hexdigit() => i += 3,
                _ => return true,
            }
        } else {
            i += 1;
        }
    }
    false
}

/// libinjection's SQLi verdict, with a fast and exact answer for a value libinjection reads as a
/// single word: it starts with a letter or `_`, holds none of the tokeniser's word delimiters
/// (spaces, quotes, operators, brackets, `\`, `#`, control bytes) nor a backtick, and no part
/// before a `.` is a SQL keyword (libinjection splits `SELECT.x` there). One token is never on
/// libinjection's fingerprint list (the only one-token fingerprint is the "evil" token, which a
/// word cannot be), so such a value is not SQLi. The port's tokeniser costs a microsecond or more
/// even for `session` or an analytics cookie; everything else still goes to it.
pub fn sqli(v: &[u8]) -> (bool, Option<Vec<u8>>) {
    if one_word(v) || (!v.is_empty() && v.iter().all(u8::is_ascii_digit)) {
        return (false, None);
    }
    memo([&SQLI_MEMO, &SQLI_SHORT], v, |v| {
        // The verdict alone first: `detect_sqli` fingerprints the value a second time after its
        // verdict (to report the fingerprint), which doubled the cost of every benign value. The
        // fingerprint is only read on a match (`capture` sets TX.0 to it), so only a match pays
        // for it, through `detect_sqli` itself: same verdict, same fingerprint as before.
        if !libinjectionrs::SqliState::new(v, libinjectionrs::SqliFlags::FLAG_NONE).detect() {
            return (false, None);
        }
        let d = libinjectionrs::detect_sqli(v);
        (
            d.is_injection(),
            d.fingerprint
                .as_ref()
                .map(|f| f.as_str().as_bytes().to_vec()),
        )
    })
}

/// libinjection's XSS verdict (memoised like SQLi).
pub fn xss(v: &[u8]) -> bool {
    memo([&XSS_MEMO, &XSS_SHORT], v, |v| {
        (libinjectionrs::detect_xss(v).is_injection(), None)
    })
    .0
}

type Memo = std::cell::RefCell<Vec<(u64, Vec<u8>, bool, Option<Vec<u8>>)>>;

/// Empties this thread's libinjection memo (benchmarks measure the cold cost with it).
pub fn clear_memo() {
    for t in [&SQLI_MEMO, &XSS_MEMO, &SQLI_SHORT, &XSS_SHORT] {
        t.with(|t| t.borrow_mut().clear());
    }
}

thread_local! {
    static SQLI_MEMO: Memo = const { std::cell::RefCell::new(Vec::new()) };
    static XSS_MEMO: Memo = const { std::cell::RefCell::new(Vec::new()) };
    static SQLI_SHORT: Memo = const { std::cell::RefCell::new(Vec::new()) };
    static XSS_SHORT: Memo = const { std::cell::RefCell::new(Vec::new()) };
}

/// Verdicts on values of up to 512 bytes, per thread, 256 of 24 bytes and more and 256 shorter
/// ones (two tables, so that short parameter values do not evict user agents): the same user
/// agents, referrers, cookies and parameter values recur across requests, and the port's
/// tokeniser costs 3-5 µs on a user agent and about one on a short search. The value is compared
/// whole, so a hash collision cannot change a verdict; an attacker filling the table only evicts
/// (bounded memory, same answers).
fn memo(
    [long, short]: [&'static std::thread::LocalKey<Memo>; 2],
    v: &[u8],
    f: impl FnOnce(&[u8]) -> (bool, Option<Vec<u8>>),
) -> (bool, Option<Vec<u8>>) {
    if v.is_empty() || v.len() > 512 {
        return f(v);
    }
    let table = if v.len() >= 24 { long } else { short };
    let h = fnv(v);
    let slot = (h % 256) as usize;
    let hit = table.with(|t| {
        let t = t.borrow();
        t.get(slot)
            .filter(|e| e.0 == h && e.1 == v)
            .map(|e| (e.2, e.3.clone()))
    });
    if let Some(r) = hit {
        return r;
    }
    let r = f(v);
    table.with(|t| {
        let mut t = t.borrow_mut();
        if t.len() < 256 {
            t.resize(256, (u64::MAX, Vec::new(), false, None));
        }
        t[slot] = (h, v.to_vec(), r.0, r.1.clone());
    });
    r
}

fn fnv(v: &[u8]) -> u64 {
    // FNV-1a: the table index only; entries are checked against the whole value.
    v.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// libinjection's word delimiters (`parse_word`), plus the backtick it splits on.
fn sql_delimiter(c: u8) -> bool {
    matches!(
        c,
        b' ' | b'['
            | b']'
            | b'{'
            | b'}'
            | b'<'
            | b'>'
            | b':'
            | b'\\'
            | b'?'
            | b'='
            | b'@'
            | b'!'
            | b'#'
            | b'~'
            | b'+'
            | b'-'
            | b'*'
            | b'/'
            | b'&'
            | b'|'
            | b'^'
            | b'%'
            | b'('
            | b')'
            | b','
            | b'\''
            | b';'
            | b'\t'
            | b'\n'
            | 0x0b
            | 0x0c
            | b'\r'
            | b'"'
            | 0xa0
            | 0
            | 0x1b
            | b'`'
    )
}

fn one_word(v: &[u8]) -> bool {
    let Some(&first) = v.first() else {
        return false;
    };
    if !(first.is_ascii_alphabetic() || first == b'_') || v.iter().any(|&c| sql_delimiter(c)) {
        return false;
    }
    v.iter()
        .enumerate()
        .filter(|(_, &c)| c == b'.')
        .all(|(i, _)| {
            let prefix = String::from_utf8_lossy(&v[..i]);
            libinjectionrs::sqli::sqli_data::lookup_word(&prefix)
                == libinjectionrs::sqli::TokenType::Bareword
        })
}

pub fn num(v: &[u8]) -> i64 {
    let s = std::str::from_utf8(v).unwrap_or("").trim();
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    s[..end].parse().unwrap_or(0)
}

pub fn str_op(op: StrOp, value: &[u8], param: &[u8]) -> bool {
    match op {
        StrOp::Contains => param.is_empty() || value.windows(param.len()).any(|w| w == param),
        StrOp::ContainsWord => {
            if param.is_empty() {
                return true;
            }
            let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
            let mut i = 0;
            while i + param.len() <= value.len() {
                if &value[i..i + param.len()] == param
                    && (i == 0 || !word(value[i - 1]))
                    && value.get(i + param.len()).is_none_or(|&c| !word(c))
                {
                    return true;
                }
                i += 1;
            }
            false
        }
        StrOp::BeginsWith => value.starts_with(param),
        StrOp::EndsWith => value.ends_with(param),
        StrOp::Streq => value == param,
        // The value is one of the parameter's words (or any substring of it, as in ModSecurity).
        StrOp::Within => !value.is_empty() && param.windows(value.len()).any(|w| w == value),
        StrOp::StrMatch => !param.is_empty() && value.windows(param.len()).any(|w| w == param),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcre_spellings_translate() {
        assert!(regex(r"a{ b").unwrap().is_match(b"a{ b"));
        assert!(regex(r"x{2}").unwrap().is_match(b"xx"));
        assert!(regex(r"[]a]").unwrap().is_match(b"]"));
        assert!(regex(r"[^]a]").unwrap().is_match(b"b"));
        assert!(regex(r"ab\Z").unwrap().is_match(b"xab"));
        assert!(regex(r"(?i)\bselect\b").unwrap().is_match(b"SELECT 1"));
        // ASCII classes and dot-all
        assert!(!regex(r"^\w+$").unwrap().is_match("é".as_bytes()));
        assert!(regex(r"a.b").unwrap().is_match(b"a\nb"));
    }

    #[test]
    fn phrase_lists_ignore_case() {
        let Op::Pm(ac, _) = Op::build("pm", "union select", &|_| Err(String::new())).unwrap()
        else {
            panic!()
        };
        assert!(ac.is_match(b"xx UNION yy"));
    }

    #[test]
    fn numbers_ranges_and_addresses() {
        assert_eq!(num(b"12abc"), 12);
        assert_eq!(num(b"-3"), -3);
        assert_eq!(num(b"x"), 0);
        let Op::ValidateByteRange(ok) =
            Op::build("validateByteRange", "32-126, 9", &|_| Err(String::new())).unwrap()
        else {
            panic!()
        };
        assert!(ok[b'a' as usize] && ok[9] && !ok[0]);
        let Op::IpMatch(l) = Op::build("ipMatch", "127.0.0.1,10.0.0.0/8,::1", &|_| {
            Err(String::new())
        })
        .unwrap() else {
            panic!()
        };
        assert!(ip_in(&l, b"10.2.3.4") && ip_in(&l, b"::1") && !ip_in(&l, b"11.0.0.1"));
        assert!(bad_url_encoding(b"a%2") && bad_url_encoding(b"%zz") && !bad_url_encoding(b"%20a"));
    }

    /// `n` strings of 1 to `most` parts each, drawn from `parts` by a fixed-seed LCG.
    fn generated(parts: &[&str], seed: u64, most: u64, n: usize) -> Vec<String> {
        let mut seed = seed;
        (0..n)
            .map(|_| {
                let mut w = String::new();
                for _ in 0..(seed % most + 1) {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    w.push_str(parts[(seed >> 33) as usize % parts.len()]);
                }
                w
            })
            .collect()
    }

    #[test]
    fn the_one_word_shortcut_agrees_with_libinjection() {
        for w in [
            "session",
            "select",
            "union",
            "sleep",
            "OR",
            "and",
            "_ga",
            "cart_id",
            "abc123",
            "x",
            "GA1.2.599660491.1636039789",
            "select.x",
            "union.select",
            "a.b.c",
            "UNION.1",
            "x.union",
        ] {
            assert_eq!(
                sqli(w.as_bytes()).0,
                libinjectionrs::detect_sqli(w.as_bytes()).is_injection(),
                "{w}"
            );
        }
        assert!(
            one_word(b"GA1.2.599660491.1636039789")
                && !one_word(b"select.x")
                && !one_word(b"1union")
        );
        assert!(sqli(b"1' or '1'='1").0);
        // Generated words over letters, digits, dots, underscores and SQL keywords.
        let parts = [
            "a", "b", "1", "0x", ".", "_", "select", "union", "or", "and", "sleep", "from", "e",
            "$", "9",
        ];
        for w in generated(&parts, 7, 6, 20000) {
            if one_word(w.as_bytes()) {
                assert!(
                    !libinjectionrs::detect_sqli(w.as_bytes()).is_injection(),
                    "{w}"
                );
            }
        }
    }

    #[test]
    fn the_verdict_first_sqli_path_agrees_with_detect_sqli() {
        // Verdict and fingerprint (what `capture` puts in TX.0) as `detect_sqli` gives them, on
        // generated mixes of SQL tokens, quotes, comments and plain words: hits and misses.
        let parts = [
            "1",
            "'",
            "\"",
            " ",
            "or",
            "and",
            "union",
            "select",
            "from",
            "--",
            "#",
            "/*",
            "*/",
            "=",
            "(",
            ")",
            ",",
            "x",
            "sleep",
            "0x1f",
            "-",
            ";",
            "@@version",
            "c-3f9a",
            "2b",
        ];
        let mut hits = 0;
        for w in generated(&parts, 11, 9, 20000) {
            let d = libinjectionrs::detect_sqli(w.as_bytes());
            let (hit, fp) = sqli(w.as_bytes());
            assert_eq!(hit, d.is_injection(), "{w}");
            if hit {
                hits += 1;
                let want = d.fingerprint.map(|f| f.as_str().as_bytes().to_vec());
                assert_eq!(fp, want, "{w}");
            }
        }
        assert!(hits > 1000, "{hits}");
    }

    #[test]
    fn string_operators() {
        assert!(str_op(StrOp::Within, b"GET", b"GET HEAD POST"));
        assert!(!str_op(StrOp::Within, b"PUT", b"GET HEAD POST"));
        assert!(str_op(StrOp::ContainsWord, b"a select b", b"select"));
        assert!(!str_op(StrOp::ContainsWord, b"selection", b"select"));
        assert!(str_op(StrOp::EndsWith, b"/x.php", b".php"));
    }
}
#[cfg(test)]
mod byte_tests {
    #[test]
    fn byte_escapes() {
        let r = super::regex(r"\x{e2}\x80[\x98\x99]").unwrap();
        assert!(r.is_match(b"a\xe2\x80\x99b"), "{r:?}");
        let r = super::regex(r"((?:(?:[!-\+\-:->@\[\]\^`\{-~]|\x{c2}\x{b4}|\x{e2}\x80[\x98\x99])[^!-\+\-:->@\[\]\^`\{-~]*?){12})").unwrap();
        assert!(r.is_match("1’ OR ’1’=’x’#;--()".as_bytes()), "{r:?}");
    }
}
