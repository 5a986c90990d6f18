//! Literal prefilters for `@rx`: the strings one of which every match must contain.
//!
//! Most CRS regexes cannot match a value that lacks some word (`union`, `<script`, `/etc/`, `(`),
//! and most values of benign traffic lack all of them. The set is derived from the pattern's
//! syntax tree (regex-syntax's HIR, the regex crate's own parser): a literal or a small class is
//! an exact piece, concatenation multiplies exact pieces and otherwise keeps the most selective
//! required set of its parts, an alternation needs a set from every branch, and anything optional
//! or unbounded contributes nothing. Literals are lower-cased and matched without ASCII case, so
//! `(?i)` needs no special handling. A pattern without a usable set (one that can match without
//! any fixed text) is always run.

use regex_syntax::hir::{Class, Hir, HirKind};

const MAX_SET: usize = 64;
/// Classes up to this many distinct (lower-cased) bytes are expanded into exact pieces.
const MAX_CLASS: usize = 4;

#[derive(Debug, Clone)]
enum Info {
    /// The sub-pattern matches exactly one of these strings (lower-cased).
    Exact(Vec<Vec<u8>>),
    /// Every match of the sub-pattern contains one of these strings.
    Contains(Vec<Vec<u8>>),
    Unknown,
}

/// The required literals of a (translated) pattern, or None if it has no usable set.
pub fn required(pattern: &str) -> Option<Vec<Vec<u8>>> {
    let hir = regex_syntax::ParserBuilder::new()
        .unicode(false)
        .utf8(false)
        .dot_matches_new_line(true)
        .multi_line(true)
        .build()
        .parse(pattern)
        .ok()?;
    let set = match info(&hir) {
        Info::Exact(s) | Info::Contains(s) => s,
        Info::Unknown => return None,
    };
    if set.is_empty() || set.iter().any(|l| l.is_empty()) {
        return None;
    }
    Some(minimal(set))
}

/// The required literals of a pattern only a backtracking engine runs (look-around,
/// back-references, atomic groups, possessive quantifiers): those of a relaxed pattern that
/// matches a superset of its strings — look-arounds dropped (they only restrict), a
/// back-reference read as "anything", atomic groups and possessive quantifiers as plain ones. A
/// literal every string of the superset contains, every string of the pattern contains.
pub fn required_backtracking(pattern: &str) -> Option<Vec<Vec<u8>>> {
    required(&relaxed(pattern)?)
}

/// See [`required_backtracking`]; None when the pattern cannot be read (unbalanced groups).
/// Works on bytes and copies every byte it keeps as it is (a multi-byte character stays whole).
fn relaxed(p: &str) -> Option<String> {
    let b = p.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(p.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                let next = *b.get(i + 1)?;
                if next.is_ascii_digit() && next != b'0' {
                    out.extend_from_slice(b"(?:.*)");
                    i += 2;
                } else {
                    // The escape and the whole character it escapes.
                    let len = p.get(i + 1..)?.chars().next()?.len_utf8();
                    out.extend_from_slice(&b[i..i + 1 + len]);
                    i += 1 + len;
                }
            }
            b'[' => {
                let end = class_end(b, i);
                out.extend_from_slice(&b[i..end]);
                i = end;
            }
            b'(' if b[i..].starts_with(b"(?=")
                || b[i..].starts_with(b"(?!")
                || b[i..].starts_with(b"(?<=")
                || b[i..].starts_with(b"(?<!") =>
            {
                i = group_end(b, i)?;
            }
            b'(' if b[i..].starts_with(b"(?>") => {
                out.extend_from_slice(b"(?:");
                i += 3;
            }
            c @ (b'+' | b'*' | b'?' | b'}') if b.get(i + 1) == Some(&b'+') => {
                out.push(c);
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The index just past the character class that opens at `i` (a `]` right after `[` or `[^` is a
/// member; escapes are skipped); the pattern's end if it never closes.
fn class_end(b: &[u8], mut i: usize) -> usize {
    i += 1;
    if b.get(i) == Some(&b'^') {
        i += 1;
    }
    if b.get(i) == Some(&b']') {
        i += 1;
    }
    while i < b.len() && b[i] != b']' {
        i += if b[i] == b'\\' { 2 } else { 1 };
    }
    (i + 1).min(b.len())
}

/// The index just past the group that opens at `i` (escapes and classes respected).
fn group_end(b: &[u8], mut i: usize) -> Option<usize> {
    let mut depth = 0usize;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'[' => i = class_end(b, i),
            b'(' => {
                depth += 1;
                i += 1;
            }
            b')' => {
                depth = depth.checked_sub(1)?;
                i += 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => i += 1,
        }
    }
    None
}

/// Drops literals that contain another literal of the set (the shorter one suffices).
fn minimal(mut set: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    set.sort_by_key(|l| l.len());
    set.dedup();
    let mut out: Vec<Vec<u8>> = Vec::new();
    for l in set {
        if !out.iter().any(|o| l.windows(o.len()).any(|w| w == &o[..])) {
            out.push(l);
        }
    }
    out
}

fn class_bytes(c: &Class) -> Option<Vec<u8>> {
    let mut out: Vec<u8> = Vec::new();
    match c {
        Class::Bytes(b) => {
            for r in b.ranges() {
                if (r.end() as usize) - (r.start() as usize) >= MAX_CLASS * 2 {
                    return None;
                }
                for x in r.start()..=r.end() {
                    let l = x.to_ascii_lowercase();
                    if !out.contains(&l) {
                        out.push(l);
                    }
                }
            }
        }
        Class::Unicode(u) => {
            for r in u.ranges() {
                if (r.end() as u32) - (r.start() as u32) >= (MAX_CLASS * 2) as u32 {
                    return None;
                }
                for x in (r.start() as u32)..=(r.end() as u32) {
                    if x > 0x7f {
                        return None;
                    }
                    let l = (x as u8).to_ascii_lowercase();
                    if !out.contains(&l) {
                        out.push(l);
                    }
                }
            }
        }
    }
    if out.is_empty() || out.len() > MAX_CLASS {
        return None;
    }
    Some(out)
}

/// Quality of a candidate set: the length of its shortest literal, then fewer literals.
fn better(a: &[Vec<u8>], b: &[Vec<u8>]) -> bool {
    let ma = a.iter().map(Vec::len).min().unwrap_or(0);
    let mb = b.iter().map(Vec::len).min().unwrap_or(0);
    (ma.min(4), std::cmp::Reverse(a.len())) > (mb.min(4), std::cmp::Reverse(b.len()))
}

fn cross(a: &[Vec<u8>], b: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    if a.len() * b.len() > MAX_SET {
        return None;
    }
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            let mut z = x.clone();
            z.extend_from_slice(y);
            out.push(z);
        }
    }
    Some(out)
}

fn info(h: &Hir) -> Info {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Info::Exact(vec![Vec::new()]),
        HirKind::Literal(l) => Info::Exact(vec![l.0.to_ascii_lowercase()]),
        HirKind::Class(c) => match class_bytes(c) {
            Some(bs) => Info::Exact(bs.into_iter().map(|b| vec![b]).collect()),
            None => Info::Unknown,
        },
        HirKind::Capture(c) => info(&c.sub),
        HirKind::Repetition(r) => {
            if r.min == 0 {
                return Info::Unknown;
            }
            match info(&r.sub) {
                Info::Exact(s) if r.max == Some(r.min) && r.min <= 4 => {
                    let mut acc = vec![Vec::new()];
                    for _ in 0..r.min {
                        match cross(&acc, &s) {
                            Some(x) => acc = x,
                            None => return Info::Contains(s),
                        }
                    }
                    Info::Exact(acc)
                }
                Info::Exact(s) | Info::Contains(s) => Info::Contains(s),
                Info::Unknown => Info::Unknown,
            }
        }
        HirKind::Concat(xs) => {
            let mut run: Vec<Vec<u8>> = vec![Vec::new()];
            let mut best: Option<Vec<Vec<u8>>> = None;
            let mut exact = true;
            let offer = |set: Vec<Vec<u8>>, best: &mut Option<Vec<Vec<u8>>>| {
                if set.iter().all(|l| !l.is_empty())
                    && best.as_ref().is_none_or(|b| better(&set, b))
                {
                    *best = Some(set);
                }
            };
            for x in xs {
                match info(x) {
                    Info::Exact(s) => match cross(&run, &s) {
                        Some(r) => run = r,
                        None => {
                            exact = false;
                            offer(std::mem::replace(&mut run, s), &mut best);
                        }
                    },
                    Info::Contains(s) => {
                        exact = false;
                        offer(std::mem::replace(&mut run, vec![Vec::new()]), &mut best);
                        offer(s, &mut best);
                    }
                    Info::Unknown => {
                        exact = false;
                        offer(std::mem::replace(&mut run, vec![Vec::new()]), &mut best);
                    }
                }
            }
            if exact {
                return Info::Exact(run);
            }
            offer(run, &mut best);
            best.map(Info::Contains).unwrap_or(Info::Unknown)
        }
        HirKind::Alternation(xs) => {
            let mut all_exact = true;
            let mut union: Vec<Vec<u8>> = Vec::new();
            for x in xs {
                match info(x) {
                    Info::Exact(s) => union.extend(s),
                    Info::Contains(s) => {
                        all_exact = false;
                        union.extend(s);
                    }
                    Info::Unknown => return Info::Unknown,
                }
                if union.len() > MAX_SET * 4 {
                    return Info::Unknown;
                }
            }
            if all_exact && union.len() <= MAX_SET {
                Info::Exact(union)
            } else {
                Info::Contains(union)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::required;

    fn req(p: &str) -> Option<Vec<String>> {
        required(p).map(|s| {
            s.into_iter()
                .map(|l| String::from_utf8(l).unwrap())
                .collect()
        })
    }

    #[test]
    fn words_alternations_and_case() {
        assert_eq!(
            req(r"(?i)\bunion\b.{1,100}?\bselect\b"),
            Some(vec!["union".into()])
        );
        let mut s = req(r"(?i:sleep|benchmark)\s*\(").unwrap();
        s.sort();
        assert_eq!(s, vec!["benchmark".to_string(), "sleep".into()]);
        assert_eq!(req(r"<script[^>]*>"), Some(vec!["<script".into()]));
    }

    #[test]
    fn patterns_that_need_no_fixed_text_have_none() {
        assert_eq!(req(r"^\d+$"), None);
        assert_eq!(req(r"a?b?"), None);
        assert_eq!(req(r"(?:x|\w+)"), None);
    }

    #[test]
    fn small_classes_expand() {
        let mut s = req(r"['`]\s*or").unwrap();
        s.sort();
        assert_eq!(s, vec!["or".to_string()]);
        let mut s = req(r"\.{2}[/\\]").unwrap();
        s.sort();
        assert_eq!(s, vec!["../".to_string(), "..\\".into()]);
    }
}

#[cfg(test)]
mod backtracking_tests {
    use super::*;

    #[test]
    fn a_relaxed_pattern_drops_look_around_and_reads_back_references_as_anything() {
        assert_eq!(
            relaxed(r"a(?!b\))c\1(?>d)e++[(?!]").as_deref(),
            Some(r"ac(?:.*)(?:d)e+[(?!]")
        );
        // Multi-byte characters are copied whole, escaped or not.
        assert_eq!(relaxed("é\\é(?=ü)ß").as_deref(), Some("é\\éß"));
        assert_eq!(
            required_backtracking("(?!x)préfixe").as_deref(),
            Some(&["préfixe".as_bytes().to_vec()][..])
        );
        // CRS 942130: a tautology needs a comparison or a keyword.
        let lits = required_backtracking(
            r#"(?i:[\s'\"`()]*?\b([\d\w]+)\b[\s'\"`()]*?(?:<(?:=(?:[\s'\"`()]*?(?!\b\1\b)[\d\w]+|>[\s'\"`()]*?(?:\b\1\b))|>?[\s'\"`()]*?(?!\b\1\b)[\d\w]+)|(?:not\s+(?:regexp|like)|is\s+not|>=?|!=|\^)[\s'\"`()]*?(?!\b\1\b)[\d\w]+|(?:(?:sounds\s+)?like|r(?:egexp|like)|=)[\s'\"`()]*?(?:\b\1\b)))"#,
        )
        .expect("a literal set");
        for must in ["<", ">", "=", "!=", "^", "is not", "rlike", "sounds like"] {
            assert!(
                lits.iter()
                    .any(|l| must.as_bytes().windows(l.len()).any(|w| w == &l[..])),
                "{must}: {lits:?}"
            );
        }
        assert!(lits.iter().all(|l| !l.is_empty()));
    }
}
