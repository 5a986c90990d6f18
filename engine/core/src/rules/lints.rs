//! Checks of a rule set beyond compiling: rules a higher-priority rule always shadows, calls of
//! functions no helper or script defines, properties of `req` it does not have (`req.cleard`),
//! and lists the set does not hold (`in_list("bad-methds", …)`). Each would otherwise fail at run
//! time, fall to the tier's error default and never fire, with nobody told.

use super::helpers::{EDGE_REFUSED, HELPERS};
use super::source::{meta_error, Mode, Rule, RuleError, RuleMeta, Source};

/// A token of Rhai source as the lints see it.
enum Tok<'a> {
    /// An identifier or keyword, with its byte offset.
    Ident(usize, &'a str),
    /// A string or character literal.
    Str,
    /// Any other non-whitespace byte.
    Punct(u8),
}

/// The tokens of a script, comments and whitespace skipped: the small scanner behind the lints.
fn tokens(text: &str) -> impl Iterator<Item = Tok<'_>> {
    let bytes = text.as_bytes();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < bytes.len() {
            let c = bytes[i];
            if c == b'/' && bytes.get(i + 1) == Some(&b'/') {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            } else if c == b'/' && bytes.get(i + 1) == Some(&b'*') {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 2;
            } else if c == b'"' || c == b'`' || c == b'\'' {
                i += 1;
                while i < bytes.len() && bytes[i] != c {
                    i += 1 + (bytes[i] == b'\\') as usize;
                }
                i += 1;
                return Some(Tok::Str);
            } else if c.is_ascii_alphabetic() || c == b'_' {
                let start = i;
                while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                    i += 1;
                }
                return Some(Tok::Ident(start, &text[start..i]));
            } else {
                i += 1;
                if !c.is_ascii_whitespace() {
                    return Some(Tok::Punct(c));
                }
            }
        }
        None
    })
}

/// Whether the identifier at `start..start + len` is called: `(` follows, spaces allowed.
pub(super) fn called(text: &str, start: usize, len: usize) -> bool {
    text[start + len..].trim_start().starts_with('(')
}

/// Whether a script ends its tier on every run: a call of `allow`, `deny`, `challenge` or
/// `review` at the top level, outside any block (Rhai's `if` and `switch` bodies are blocks).
pub(super) fn always_terminal(text: &str) -> bool {
    let (mut depth, mut prev_dot) = (0i32, false);
    for t in tokens(text) {
        match t {
            Tok::Ident(start, name) => {
                if depth == 0
                    && !prev_dot
                    && matches!(name, "allow" | "deny" | "challenge" | "review")
                    && called(text, start, name.len())
                {
                    return true;
                }
                prev_dot = false;
            }
            Tok::Str => prev_dot = false,
            Tok::Punct(c) => {
                match c {
                    b'{' | b'(' | b'[' => depth += 1,
                    b'}' | b')' | b']' => depth -= 1,
                    _ => {}
                }
                prev_dot = c == b'.';
            }
        }
    }
    false
}

/// Whether every request `later` applies to also reaches `earlier`.
pub(super) fn covers(earlier: &RuleMeta, later: &RuleMeta) -> bool {
    let apps = match (&earlier.apps, &later.apps) {
        (None, _) => true,
        (Some(_), None) => false,
        (Some(e), Some(l)) => l.iter().all(|a| e.contains(a)),
    };
    let route_covers = |e: &str, r: &str| match e.strip_suffix('*') {
        Some(prefix) => r.starts_with(prefix),
        None => e == r,
    };
    let routes = earlier.routes.is_empty()
        || (!later.routes.is_empty()
            && later
                .routes
                .iter()
                .all(|r| earlier.routes.iter().any(|e| route_covers(e, r))));
    apps && routes
}

/// Lint: rules that can never run because an earlier enforced rule of the same tier answers every
/// request they apply to.
pub(super) fn unreachable_rules(rules: &mut [Rule]) -> Vec<RuleError> {
    rules.sort_by(|a, b| {
        a.meta
            .priority
            .cmp(&b.meta.priority)
            .then_with(|| a.meta.name.cmp(&b.meta.name))
    });
    let mut errs = Vec::new();
    for (j, later) in rules.iter().enumerate() {
        let blocker = rules[..j].iter().find(|r| {
            r.always_terminal && r.meta.mode == Mode::Enforce && covers(&r.meta, &later.meta)
        });
        if let Some(b) = blocker {
            errs.push(meta_error(
                &later.meta.file,
                1,
                format!(
                    "unreachable rule: {:?} ({}, priority {}) answers every request this rule applies to, first",
                    b.meta.name, b.meta.file, b.meta.priority
                ),
            ));
        }
    }
    errs
}

/// Lint: calls of functions that are neither helpers, standard-library functions nor defined in
/// the script. A small scanner that skips strings and comments and looks for `ident(` not preceded
/// by `.` (method calls resolve against the value's type) or `fn `.
pub(super) fn unknown_calls(src: &Source, engine: &rhai::Engine) -> Vec<RuleError> {
    let text = &src.text;
    let mut defined: Vec<&str> = Vec::new();
    let mut calls: Vec<(usize, &str)> = Vec::new();
    let (mut prev_dot, mut prev_fn) = (false, false);
    for t in tokens(text) {
        match t {
            Tok::Ident(start, ident) => {
                if prev_fn {
                    defined.push(ident);
                } else if !prev_dot && called(text, start, ident.len()) {
                    calls.push((start, ident));
                }
                prev_fn = ident == "fn";
                prev_dot = false;
            }
            Tok::Str => prev_dot = false,
            Tok::Punct(c) => {
                prev_dot = c == b'.';
                prev_fn = false;
            }
        }
    }
    const KEYWORDS: &[&str] = &[
        "if",
        "else",
        "while",
        "loop",
        "for",
        "in",
        "return",
        "switch",
        "fn",
        "let",
        "const",
        "throw",
        "try",
        "catch",
        "break",
        "continue",
        "do",
        "until",
        "print",
        "debug",
        "type_of",
        "is_def_var",
        "is_def_fn",
        "Fn",
        "call",
        "curry",
        "eval",
        "this",
    ];
    let known_std: std::collections::HashSet<String> = engine
        .gen_fn_signatures(true)
        .into_iter()
        .filter_map(|sig| sig.split('(').next().map(|n| n.trim().to_string()))
        .collect();
    calls
        .into_iter()
        .filter(|(_, name)| {
            !KEYWORDS.contains(name)
                && !HELPERS.contains(name)
                && !defined.contains(name)
                && !known_std.contains(*name)
        })
        .map(|(offset, name)| {
            let line = text[..offset].matches('\n').count() + 1;
            let column = offset - text[..offset].rfind('\n').map(|p| p + 1).unwrap_or(0) + 1;
            RuleError {
                file: src.path.clone(),
                line,
                column,
                message: format!("unknown helper or function `{name}`"),
            }
        })
        .collect()
}

fn located(src: &Source, offset: usize, message: String) -> RuleError {
    let text = &src.text;
    let line = text[..offset].matches('\n').count() + 1;
    let column = offset - text[..offset].rfind('\n').map(|p| p + 1).unwrap_or(0) + 1;
    RuleError {
        file: src.path.clone(),
        line,
        column,
        message,
    }
}

/// Lint: `req.<name>` where the request has no such property (`fields`: the getters).
pub(super) fn unknown_properties(src: &Source, fields: &[&str]) -> Vec<RuleError> {
    let text = &src.text;
    let toks: Vec<Tok> = tokens(text).collect();
    let mut errs = Vec::new();
    for w in toks.windows(3) {
        let (Tok::Ident(_, "req"), Tok::Punct(b'.'), Tok::Ident(start, name)) =
            (&w[0], &w[1], &w[2])
        else {
            continue;
        };
        if called(text, *start, name.len()) || fields.contains(name) {
            continue;
        }
        errs.push(located(
            src,
            *start,
            format!(
                "req has no property `{name}` (it has: {})",
                fields.join(", ")
            ),
        ));
    }
    errs
}

/// Lint: a list helper (`in_list`, `contains_any`, `ip_in`) naming, as a literal, a list the set
/// does not hold.
pub(super) fn unknown_lists(src: &Source, lists: &dyn Fn(&str) -> bool) -> Vec<RuleError> {
    let text = &src.text;
    let mut errs = Vec::new();
    for helper in ["in_list", "contains_any", "ip_in"] {
        for (i, _) in text.match_indices(helper) {
            let before = text[..i].chars().last();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.') {
                continue;
            }
            let rest = text[i + helper.len()..].trim_start();
            let Some(args) = rest.strip_prefix('(') else {
                continue;
            };
            let args = args.trim_start();
            let Some(q) = args.chars().next().filter(|c| *c == '"' || *c == '`') else {
                continue;
            };
            let Some(end) = args[1..].find(q) else {
                continue;
            };
            let name = &args[1..1 + end];
            if !lists(name) {
                let offset = text.len() - args.len() + 1;
                errs.push(located(
                    src,
                    offset,
                    format!("{helper}: no list named {name:?} in lists/"),
                ));
            }
        }
    }
    errs
}

/// Lint of the edge tier: calls of the helpers that write state keyed by rule-chosen data
/// ([`EDGE_REFUSED`]), located at the call. The edge tier runs before the signature is checked,
/// so such a write would let unsigned requests create state keyed by what they claim.
pub(super) fn edge_writes(src: &Source) -> Vec<RuleError> {
    let text = &src.text;
    let mut out = Vec::new();
    let mut prev_dot = false;
    for t in tokens(text) {
        match t {
            Tok::Ident(start, ident) => {
                if !prev_dot && EDGE_REFUSED.contains(&ident) && called(text, start, ident.len()) {
                    let line = text[..start].matches('\n').count() + 1;
                    let column = start - text[..start].rfind('\n').map(|p| p + 1).unwrap_or(0) + 1;
                    out.push(RuleError {
                        file: src.path.clone(),
                        line,
                        column,
                        message: format!(
                            "`{ident}` writes state keyed by what the client claims, and edge \
                             rules run before the signature is checked: count the client IP with \
                             rate_limit_ip(req, rate, burst) or count_ip(req, window_ms), or move \
                             the rule to gateway/"
                        ),
                    });
                }
                prev_dot = false;
            }
            Tok::Str => prev_dot = false,
            Tok::Punct(c) => prev_dot = c == b'.',
        }
    }
    out
}
