//! XSS beyond libinjection: event-handler attributes, tags spelled with spaces or namespaces
//! (`<f o r m`, `<x:script`), tags with attributes, dangerous attributes and URL schemes, XML
//! entities and server-side includes, and script that reaches for the DOM or evaluates strings
//! (`document.cookie`, `self["alert"]`, `setTimeout(`, `` [].sort.call`${alert}` ``).
//! Also server-side JavaScript injection (Node.js `process`/`child_process`, prototype pollution).

use std::sync::OnceLock;

use aho_corasick::AhoCorasick;

use super::norm::called_names;
use super::Shape;

/// Tags that run script, load content or submit data.
const TAGS: &[&str] = &[
    "script", "iframe", "frame", "frameset", "object", "embed", "applet", "form", "svg", "math",
    "img", "image", "body", "style", "link", "meta", "base", "dialog", "details", "marquee",
    "video", "audio", "source", "isindex", "input", "button", "textarea", "keygen", "template",
    "portal", "vmlframe", "animate", "handler", "listener", "bgsound", "layer", "ilayer", "html",
    "xml", "import", "xss", "set",
];

/// Attributes that take a URL or markup to load or run.
const ATTRIBUTES: &[&str] = &[
    "formaction",
    "srcdoc",
    "xlink:href",
    "dynsrc",
    "lowsrc",
    "fscommand",
    "seeksegmenttime",
    "background",
    "poster",
    "codebase",
    "data-bind",
    "ng-bind-html",
];

/// Browser functions that evaluate a string or show a dialog: the usual XSS proof.
const EVALUATORS: &[&str] = &[
    "eval",
    "settimeout",
    "setinterval",
    "setimmediate",
    "execscript",
    "alert",
    "prompt",
    "confirm",
    "atob",
    "btoa",
    "fromcharcode",
    "importscripts",
    "postmessage",
];

/// DOM properties and objects an injected script reaches for.
const DOM: &[&str] = &[
    "document.cookie",
    "document.domain",
    "document.write",
    "document.location",
    "document.body",
    "document.createelement",
    "document.queryselector",
    "document.getelementby",
    "document.forms",
    "document.url",
    "document.referrer",
    "window.location",
    "window.open",
    "window.name",
    "location.href",
    "location.hash",
    "location.replace",
    "location.assign",
    "(document)",
    "document[",
    "window[",
    "self[",
    "top[",
    "parent[",
    "frames[",
    "globalthis[",
    "content[",
    ".innerhtml",
    ".outerhtml",
    "constructor.constructor",
    ".constructor(",
    "reflect.apply",
    "reflect.construct",
    "reflect.get",
    ".call`",
    ".apply`",
    ".bind`",
    "${alert",
    "${eval",
    "${prompt",
    "${confirm",
    "newfunction(",
    "-moz-binding",
    "javascript:",
    "vbscript:",
    "livescript:",
    "!entity",
    "<!--#exec",
    "<!--#include",
    "<!--#echo",
    "<!--#set",
    "<!--#config",
    "<!--#printenv",
];

/// `lower`: the value in lower case, comments removed.
pub(super) fn xss(lower: &str, shape: Shape) -> bool {
    use Shape as S;
    (shape.any(S::EQ) && event_handler(lower))
        || (shape.any(S::LT) && tag(lower))
        || (shape.any(S::EQ | S::COLON) && attribute(lower))
        || (shape.any(
            S::DOT
                | S::BRACKET
                | S::OPEN
                | S::BACKTICK
                | S::COLON
                | S::OTHER
                | S::DASH
                | S::LT
                | S::DOLLAR,
        ) && dom(lower))
        || (shape.any(S::OPEN) && evaluator(lower))
}

fn automaton(patterns: &[&str]) -> AhoCorasick {
    super::automaton(patterns)
}

/// ` onload=`, `"onx=`: an event-handler attribute (`on` + letters + `=`), after a character that
/// can end the previous attribute or token.
fn event_handler(lower: &str) -> bool {
    let b = lower.as_bytes();
    lower.match_indices("on").any(|(i, _)| {
        let before_ok = i > 0
            && matches!(
                b[i - 1],
                b' ' | b'\t'
                    | b'\n'
                    | b'\r'
                    | 0x0b
                    | 0x0c
                    | b'"'
                    | b'\''
                    | b'`'
                    | b';'
                    | b'/'
                    | b','
                    | b'('
                    | b'='
                    | b'+'
                    | b'0'..=b'9'
            );
        if !before_ok {
            return false;
        }
        let letters = b[i + 2..]
            .iter()
            .take_while(|c| c.is_ascii_lowercase())
            .count();
        (3..=40).contains(&letters)
            && b.get(i + 2 + letters) == Some(&b'=')
            && b.get(i + 3 + letters) != Some(&b'=')
    })
}

/// `<script`, `<f o r m`, `< x: script`, `<svg/onload`, or any `<tag attr=`.
fn tag(lower: &str) -> bool {
    lower.match_indices('<').any(|(i, _)| {
        let rest = &lower[i + 1..];
        let head: String = rest.chars().take(48).collect();
        let tokens: Vec<&str> = head
            .split(|c: char| c.is_whitespace())
            .filter(|t| !t.is_empty())
            .collect();
        // Letters spaced out one by one: `<f o r m`.
        let spaced: String = tokens
            .iter()
            .take_while(|t| t.len() <= 2 && t.chars().all(|c| c.is_ascii_alphabetic() || c == ':'))
            .flat_map(|t| t.chars())
            .collect();
        let first = tokens.first().copied().unwrap_or("");
        let name_of = |t: &str| -> String {
            let t: String = t
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == ':' || *c == '-')
                .collect();
            t.rsplit(':').next().unwrap_or("").to_string()
        };
        let spaced_name = spaced.rsplit(':').next().unwrap_or("");
        // `< x: script`, `<:vmlframe`: a namespace prefix, then the tag after the colon.
        let namespaced = match tokens.as_slice() {
            [first, next, ..] if first.ends_with(':') => name_of(next),
            [first, ..] if first.contains(':') => name_of(first),
            _ => String::new(),
        };
        let direct = rest.starts_with(|c: char| c.is_ascii_alphabetic());
        (direct && TAGS.contains(&name_of(first).as_str()))
            || (spaced.len() >= 3 && TAGS.contains(&spaced_name))
            || (!namespaced.is_empty() && TAGS.contains(&namespaced.as_str()))
            || (direct && tag_with_attribute(rest))
    })
}

/// `input pattern="…"`: a tag name, whitespace or `/`, an attribute name and `=`.
fn tag_with_attribute(rest: &str) -> bool {
    let b = rest.as_bytes();
    let mut i = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b':' || **c == b'-')
        .count();
    let sep = b[i..]
        .iter()
        .take_while(|c| c.is_ascii_whitespace() || **c == b'/')
        .count();
    if sep == 0 {
        return false;
    }
    i += sep;
    let attr = b[i..]
        .iter()
        .take_while(|c| c.is_ascii_alphabetic() || **c == b'-' || **c == b':')
        .count();
    attr > 0 && {
        let after = rest[i + attr..].trim_start();
        after.starts_with('=')
    }
}

fn attribute(lower: &str) -> bool {
    ATTRIBUTES.iter().any(|a| {
        lower.match_indices(a).any(|(i, _)| {
            let before_ok =
                i == 0 || !lower[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '-');
            before_ok && lower[i + a.len()..].trim_start().starts_with('=')
        })
    }) || data_uri(lower)
}

/// `data:text/html,…` or `data: , <x>`: markup smuggled in a data URI.
fn data_uri(lower: &str) -> bool {
    lower.match_indices("data:").any(|(i, _)| {
        let rest = &lower[i + 5..];
        let Some(comma) = rest.find(',') else {
            return false;
        };
        comma <= 64 && {
            let media = &rest[..comma];
            let payload = &rest[comma + 1..];
            media.contains("html")
                || media.contains("svg")
                || media.contains("script")
                || payload.trim_start().starts_with('<')
        }
    })
}

fn dom(lower: &str) -> bool {
    static AC: OnceLock<AhoCorasick> = OnceLock::new();
    let ac = AC.get_or_init(|| automaton(DOM));
    if lower.contains(char::is_whitespace) {
        let compact: String = lower.chars().filter(|c| !c.is_whitespace()).collect();
        ac.is_match(&compact)
    } else {
        ac.is_match(lower)
    }
}

fn evaluator(lower: &str) -> bool {
    let found = called_names(lower).any(|call| {
        if !EVALUATORS.contains(&call.name) {
            return false;
        }
        if matches!(call.before(lower), Some(c) if c.is_ascii_alphanumeric() || c == '_') {
            return false;
        }
        !call.gap || call.code_like_args()
    });
    found || lower.contains("new function") && lower.contains('(')
}

/// Server-side JavaScript: Node's `process`/`child_process`, `require('…')`, prototype pollution.
pub(super) fn nodejs(lower: &str) -> bool {
    const MARKERS: &[&str] = &[
        "child_process",
        "process.mainmodule",
        "process.binding",
        "process.dlopen",
        "process.spawn",
        "process.exec",
        "process.kill",
        "process.env",
        "__proto__",
        "constructor.prototype",
        "require('",
        "require(\"",
        "require(`",
        "global.process",
        "this.constructor",
        // Denial of service by an endless loop or exit in evaluated JavaScript.
        "while(true)",
        "while (true)",
        "while(1)",
        "while (1)",
        "for(;;)",
        "for (;;)",
        "process.exit(",
        "process.abort(",
        "setinterval(",
        "res.end(",
        "fs.readfilesync(",
        "fs.writefilesync(",
        "new function(",
        "function(\"return",
        // Serialised functions that node-serialize and funcster run on load.
        "_$$nd_func$$_",
        "__js_function",
        // Building code from character codes, and reaching the module system.
        "string.fromcharcode(",
        "module.exports",
        "module.constructor",
        "module.require(",
        "require.main",
        "process[",
        "process.argv",
        "process.cwd(",
        "process.chdir(",
        "process.setuid(",
        "process.getuid(",
        "process.umask(",
        "process.stdout",
        "process.openstdin(",
        "fs.readfile(",
        "fs.writefile(",
        "fs.appendfile",
        "fs.unlink",
        "fs.rmdir",
        "fs.rm(",
        "fs.readdir",
        "fs.createreadstream(",
        "fs.createwritestream(",
        "fs.symlink",
        "fs.chmod",
    ];
    static AC: OnceLock<AhoCorasick> = OnceLock::new();
    AC.get_or_init(|| automaton(MARKERS)).is_match(lower) || endless_loop(lower)
}

/// JavaScript that never ends: `while` on a condition that is always true (`while(true)`,
/// `while (!0)`, `while(!!"a")`, `while ( 1 )`, `while([])`, `while(new Date)`) or a `for` with no
/// condition (`for (;;)`, `for(let i=0;;i++)`): one request that blocks a Node.js event loop.
fn endless_loop(lower: &str) -> bool {
    let b = lower.as_bytes();
    let skip_ws = |mut i: usize| {
        while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == 0x0b) {
            i += 1;
        }
        i
    };
    for (at, kw) in lower
        .match_indices("while")
        .chain(lower.match_indices("for"))
    {
        // A keyword, not the end of another word (`meanwhile (…)`, `therefor (…)`).
        if at > 0 && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b'$') {
            continue;
        }
        let mut i = skip_ws(at + kw.len());
        if i >= b.len() || b[i] != b'(' {
            continue;
        }
        i += 1;
        if kw == "for" {
            // `for (init; cond; step)` with an empty condition.
            let Some(close) = lower[i..].find(')') else {
                continue;
            };
            let parts: Vec<&str> = lower[i..i + close].split(';').collect();
            if parts.len() == 3 && parts[1].trim().is_empty() {
                return true;
            }
            continue;
        }
        // Drop the condition's opening parentheses and read to the first closing one.
        while i < b.len() && (b[i] == b'(' || b[i].is_ascii_whitespace()) {
            i += 1;
        }
        let Some(close) = lower[i..].find(')') else {
            continue;
        };
        if always_true(lower[i..i + close].trim()) {
            return true;
        }
    }
    false
}

/// A JavaScript condition that is a constant truthy value.
fn always_true(cond: &str) -> bool {
    let nots = cond.bytes().take_while(|&c| c == b'!').count();
    let rest = cond[nots..].trim();
    let falsy = matches!(
        rest,
        "false" | "null" | "undefined" | "nan" | "0" | "-0" | "+0" | "\"\"" | "''" | "``"
    );
    let truthy = matches!(
        rest,
        "true"
            | "this"
            | "infinity"
            | "-infinity"
            | "[]"
            | "{}"
            | "string"
            | "object"
            | "number"
            | "boolean"
            | "symbol"
            | "date"
            | "math"
            | "json"
            | "map"
            | "set"
            | "array"
            | "function"
    ) || rest.strip_prefix("new ").is_some_and(|c| {
        // A constructor call and nothing else: `new Date`, `new Date(` (the condition was cut at
        // the first `)`), not prose in parentheses (`while (new shoes arrived)`).
        let c = c.trim();
        let call = c.ends_with('(');
        let c = c.trim_end_matches('(');
        let builtin = matches!(
            c,
            "date"
                | "object"
                | "array"
                | "map"
                | "set"
                | "error"
                | "function"
                | "promise"
                | "string"
                | "number"
                | "boolean"
                | "regexp"
                | "weakmap"
                | "weakset"
                | "proxy"
        );
        !c.is_empty()
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$')
            && !c.as_bytes()[0].is_ascii_digit()
            && (call || builtin)
    }) || (!rest.is_empty()
        && rest
            .trim_start_matches(['-', '+'])
            .bytes()
            .all(|c| c.is_ascii_digit())
        && rest
            .trim_start_matches(['-', '+'])
            .bytes()
            .any(|c| c != b'0'))
        || (rest.len() >= 3
            && (rest.starts_with('"') && rest.ends_with('"')
                || rest.starts_with('\'') && rest.ends_with('\'')
                || rest.starts_with('`') && rest.ends_with('`')));
    if nots % 2 == 1 {
        falsy
    } else {
        truthy
    }
}
