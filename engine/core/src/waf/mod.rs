//! WAF payload detectors for edge rules.
//!
//! Each value is scanned as sent, URL-decoded (twice, for double encoding), with HTML character
//! references and JavaScript escapes decoded, and with code comments removed where a detector
//! reads code. The first detector that fires names the attack.
//!
//! - **SQL injection and XSS**: `libinjectionrs`, a Rust port of libinjection — a real tokeniser
//!   that classifies the token sequence of a value ("fingerprint") rather than matching substrings.
//!   Chosen because it is pure Rust (the C bindings download their sources at build time). Backed
//!   by [`sql`] (function calls, stacked statements, JSON operators, NoSQL operators) and
//!   [`markup`] (event handlers, obfuscated tags, DOM access, string evaluation).
//! - **Path traversal / LFI**: `..` segments after decoding (URL, double URL, `%u`, backslashes,
//!   Tomcat's `..;`), the OS files attackers probe for (OWASP CRS `lfi-os-files`, one
//!   Aho-Corasick pass), and in the path: hidden files and directories (`/.git/`, `/.env`,
//!   `/.claude/…`) and CRS `restricted-files` (backups, configs, logs).
//! - **Remote file inclusion**: a URL value whose host is an IP literal, that ends in `?` (the
//!   classic trick to cut off the including script's suffix), or that is given to a parameter
//!   named like an include path (`_CONF[path]=`, `mosConfig_absolute_path=`).
//! - **Command injection** ([`shell`]): a command line where data was expected.
//! - **PHP injection** ([`php`]): tags, wrappers, superglobals, risky and variable function calls,
//!   serialized objects, `php.ini` directives.
//! - **Java injection**: JNDI lookups (`${jndi:` also nested or escaped), OGNL/EL markers, the
//!   Java classes used by deserialisation and Struts RCEs (CRS `java-classes`), `Runtime` or
//!   `ProcessBuilder` next to deserialisation gadgets.
//! - **Protocol** ([`proto`]): CR/LF injection, request lines inside values, `unix:` proxy
//!   targets; **LDAP** filter injection; **SSRF** to metadata services and internal addresses;
//!   **Node.js** injection; **session fixation** (a session id given as a parameter).
//!
//! The vocabulary files come from the OWASP Core Rule Set (Apache License 2.0, see
//! `data/CRS-LICENSE.txt`); the detectors themselves are written here.

pub mod crs;
mod generic;
mod markup;
mod norm;
mod php;
mod proto;
mod shell;
mod sql;

use std::collections::HashSet;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};

pub use norm::{decode_escapes, strip_comments, url_decode};

/// What a detector found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Attack {
    Sqli,
    Xss,
    Traversal,
    Rfi,
    Cmdi,
    Php,
    Java,
    /// CR/LF injection, request smuggling and response splitting.
    Protocol,
    Ldap,
    Ssrf,
    Nodejs,
    SessionFixation,
    /// Server-side template injection.
    Ssti,
    PrototypePollution,
    /// Python, Ruby or Perl code.
    CodeInjection,
}

impl Attack {
    pub const ALL: [Attack; 15] = [
        Attack::Sqli,
        Attack::Xss,
        Attack::Traversal,
        Attack::Rfi,
        Attack::Cmdi,
        Attack::Php,
        Attack::Java,
        Attack::Protocol,
        Attack::Ldap,
        Attack::Ssrf,
        Attack::Nodejs,
        Attack::SessionFixation,
        Attack::Ssti,
        Attack::PrototypePollution,
        Attack::CodeInjection,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Attack::Sqli => "sqli",
            Attack::Xss => "xss",
            Attack::Traversal => "traversal",
            Attack::Rfi => "rfi",
            Attack::Cmdi => "cmdi",
            Attack::Php => "php",
            Attack::Java => "java",
            Attack::Protocol => "protocol",
            Attack::Ldap => "ldap",
            Attack::Ssrf => "ssrf",
            Attack::Nodejs => "nodejs",
            Attack::SessionFixation => "session_fixation",
            Attack::Ssti => "ssti",
            Attack::PrototypePollution => "prototype_pollution",
            Attack::CodeInjection => "code_injection",
        }
    }
}

struct Vocabulary {
    os_files: AhoCorasick,
    shell_commands: HashSet<String>,
    php_functions: HashSet<String>,
    php_variables: AhoCorasick,
    java: AhoCorasick,
    /// Shell variables (`$IFS`, `${SHELL}`) and PowerShell cmdlets: command injection by name.
    shell_tokens: AhoCorasick,
    /// Files a web server must never serve (matched in the path only).
    restricted_files: AhoCorasick,
    /// Cloud metadata endpoints and loopback spellings.
    ssrf: AhoCorasick,
}

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

fn ac(patterns: Vec<String>) -> AhoCorasick {
    AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::LeftmostFirst)
        .kind(Some(AhoCorasickKind::DFA))
        .build(patterns)
        .expect("vocabulary builds")
}

/// A case-sensitive automaton for the detectors' fixed patterns. Every value of every request
/// goes through these, so they are built as DFAs: a table lookup per byte, against the default
/// NFA's chain of transitions (the vocabularies take a few MiB in all; see `warm_up`).
pub(crate) fn automaton<P: AsRef<[u8]>>(patterns: impl IntoIterator<Item = P>) -> AhoCorasick {
    AhoCorasickBuilder::new()
        .kind(Some(AhoCorasickKind::DFA))
        .build(patterns)
        .expect("patterns build")
}

fn vocabulary() -> &'static Vocabulary {
    static V: OnceLock<Vocabulary> = OnceLock::new();
    V.get_or_init(|| {
        let os_files: Vec<String> = entries(include_str!("data/crs-lfi-os-files.txt"))
            .map(|e| e.trim_start_matches('/').to_string())
            // Very short entries (".env", ".ssh") are too common in text to be evidence alone;
            // they count as a directory (`.ssh/`).
            .map(|e| {
                if e.len() < 6 && !e.ends_with('/') {
                    format!("{e}/")
                } else {
                    e
                }
            })
            .collect();
        let restricted_files: Vec<String> = entries(include_str!("data/crs-restricted-files.txt"))
            .map(|e| e.trim_start_matches('/').to_ascii_lowercase())
            .filter(|e| e.len() >= 4)
            .collect();
        let ssrf: Vec<String> = entries(include_str!("data/crs-ssrf.txt"))
            .map(|e| e.to_ascii_lowercase())
            .collect();
        let shell_commands = entries(include_str!("data/crs-unix-shell.txt"))
            .filter(|e| !e.starts_with('$'))
            .map(|e| e.rsplit('/').next().unwrap_or(e).to_ascii_lowercase())
            .filter(|e| !e.is_empty())
            .collect();
        let php_functions = entries(include_str!("data/crs-php-function-names-933150.txt"))
            .map(|e| e.to_ascii_lowercase())
            .collect();
        let php_variables = entries(include_str!("data/crs-php-variables.txt"))
            .filter(|e| e.starts_with('$'))
            .map(str::to_string)
            .collect();
        let mut java: Vec<String> = entries(include_str!("data/crs-java-classes.txt"))
            .filter(|e| e.contains('.') || e.len() >= 10)
            .map(str::to_string)
            .collect();
        java.extend(
            [
                "${jndi:",
                "${ctx:",
                "${env:",
                "${sys:",
                "%{(#",
                "#_memberaccess",
                "@java.lang",
                "${script:",
                "t(java.lang",
            ]
            .map(String::from),
        );
        let mut shell_tokens: Vec<String> = entries(include_str!("data/crs-unix-shell.txt"))
            .filter(|e| e.starts_with('$'))
            .map(str::to_string)
            .collect();
        shell_tokens.extend(
            entries(include_str!("data/crs-windows-powershell-commands.txt"))
                .filter(|e| e.contains('-') && e.len() >= 8)
                .map(str::to_string),
        );
        Vocabulary {
            shell_tokens: ac(shell_tokens),
            os_files: ac(os_files),
            shell_commands,
            php_functions,
            php_variables: ac(php_variables),
            java: ac(java),
            restricted_files: ac(restricted_files),
            ssrf: ac(ssrf),
        }
    })
}

fn traversal(v: &str) -> bool {
    let norm = if v.contains('\\') {
        std::borrow::Cow::Owned(v.replace('\\', "/"))
    } else {
        std::borrow::Cow::Borrowed(v)
    };
    let dotdot = norm.contains("../")
        || norm.contains("..;")
        || norm.ends_with("/..")
        || norm == ".."
        || norm.contains("/./.");
    if dotdot {
        return true;
    }
    // An OS file probed by name, as a path (not merely a word in a sentence).
    let norm: &str = &norm;
    vocabulary().os_files.find_iter(norm).any(|m| {
        let before = norm[..m.start()].chars().last();
        matches!(before, None | Some('/') | Some('=') | Some(':'))
    })
}

/// Checks of the request path only: hidden files and directories, restricted files, line breaks.
fn path_attack(path: &str) -> Option<Attack> {
    let decoded = url_decode(path);
    if decoded.contains(['\r', '\n']) {
        return Some(Attack::Protocol);
    }
    let lower = decoded.to_ascii_lowercase().replace('\\', "/");
    let hidden = lower.split('/').any(|seg| {
        seg.len() > 1
            && seg.starts_with('.')
            && seg != ".well-known"
            && seg[1..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    });
    let restricted = vocabulary().restricted_files.find_iter(&lower).any(|m| {
        let before = lower[..m.start()].chars().last();
        let after = lower[m.end()..].chars().next();
        matches!(before, None | Some('/'))
            && (lower[m.start()..m.end()].ends_with('/')
                || matches!(after, None | Some('/') | Some('?') | Some(';')))
    });
    (hidden || restricted).then_some(Attack::Traversal)
}

fn rfi(lower: &str) -> bool {
    let lower = lower.trim();
    // `file?`, `http?`: a scheme word and a trailing `?` to cut off the including script's suffix.
    if ["file", "ftp", "ftps", "http", "https"]
        .iter()
        .any(|s| lower.starts_with(s))
        && lower.ends_with('?')
    {
        return true;
    }
    let Some(rest) = ["http://", "https://", "ftp://", "ftps://", "file://"]
        .iter()
        .find_map(|p| lower.strip_prefix(p))
    else {
        return false;
    };
    let host = rest
        .split(['/', '?', '#'])
        .next()
        .unwrap_or("")
        .rsplit('@')
        .next()
        .unwrap_or("");
    let host = host.split(':').next().unwrap_or("");
    host.parse::<std::net::Ipv4Addr>().is_ok() || lower.starts_with("file://")
}

/// Parameter names that PHP applications pass to `include`: a remote URL there is RFI.
fn include_parameter(name: &str) -> bool {
    const NAMES: [&str; 9] = [
        "absolute_path",
        "[path]",
        "basedir",
        "root_dir",
        "[docroot]",
        "document_root",
        "appserv_root",
        "include_path",
        "[root]",
    ];
    const SHORTEST: usize = {
        let (mut m, mut i) = (usize::MAX, 0);
        while i < NAMES.len() {
            if NAMES[i].len() < m {
                m = NAMES[i].len();
            }
            i += 1;
        }
        m
    };
    // Most parameter names (`q`, `page`, `sort`) are shorter than any of these, and decoding only
    // shortens a name: nine searches per name were about 5% of the own detectors' instructions
    // on the load test's requests.
    if name.len() < SHORTEST {
        return false;
    }
    let n = norm::decoded_lower(name);
    NAMES.iter().any(|p| n.contains(p))
}

/// Session cookie names: sent as a parameter, they fix the victim's session.
fn session_parameter(name: &str) -> bool {
    let n = norm::decoded_lower(name);
    let n = n.trim();
    // Server platforms' session cookie names, also with a prefix (`x_phpsessid`).
    const NAMES: &[&str] = &[
        "jsessionid",
        "phpsessid",
        "phpsession",
        "aspsessionid",
        "asp.net_sessionid",
        "cfid",
        "cftoken",
        "cfsid",
        "sessionid",
        "session_id",
        "session-id",
        "weblogicsession",
        "jservsession",
        "jwsession",
        "zendsessid",
        "ci_session",
        "laravel_session",
        "connect.sid",
    ];
    n == "sid" || n.starts_with("aspsessionid") || NAMES.iter().any(|s| n.ends_with(s))
}

/// Deserialisation gadgets that make `Runtime`/`ProcessBuilder` run commands.
const JAVA_GADGETS: &[&str] = &[
    "clonetransformer",
    "forclosure",
    "instantiatefactory",
    "instantiatetransformer",
    "invokertransformer",
    "prototypeclonefactory",
    "prototypeserializationfactory",
    "whileclosure",
    "getproperty",
    "filewriter",
    "xmldecoder",
    "unmarshaller",
    "base64data",
    "java.",
];

fn java(v: &str, lower: &str, shape: Shape) -> bool {
    if vocabulary().java.is_match(v) {
        return true;
    }
    if (lower.contains("runtime") || lower.contains("processbuilder"))
        && JAVA_GADGETS.iter().any(|g| lower.contains(g))
    {
        return true;
    }
    // Log4Shell lookups, also nested to hide `jndi` (`${${::-j}ndi:…}`, `${lower:j}`).
    shape.has(Shape::DOLLAR | Shape::BRACE)
        && lower.match_indices("${").any(|(i, _)| {
            let rest = &lower[i + 2..];
            let mut end = rest.len().min(256);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let window = &rest[..end];
            window.contains("jndi")
                || window.contains("${")
                || window.starts_with("::-")
                || [
                    "lower:", "upper:", "env:", "sys:", "java:", "main:", "base64:", "date:",
                    "ctx:",
                ]
                .iter()
                .any(|l| window.starts_with(l))
        })
}

/// Builds the detectors' vocabularies and automata now, so the first request does not pay for it
/// (a few milliseconds); the server calls this at start-up.
pub fn warm_up() {
    let _ = vocabulary();
    let _ =
        scan_value("warm-up: a <b onclick=x> '1' OR 1=1; ls -la /etc/passwd $(id) document.cookie");
}

/// Which kinds of characters a value contains, found in one pass: detectors that need a kind
/// the value lacks are skipped (most values are plain words, numbers and ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape(u32);

impl Shape {
    pub(crate) const QUOTE: u32 = 1; // ' "
    pub(crate) const OPEN: u32 = 1 << 1; // (
    pub(crate) const CLOSE: u32 = 1 << 2; // )
    pub(crate) const LT: u32 = 1 << 3;
    pub(crate) const GT: u32 = 1 << 4;
    pub(crate) const SEP: u32 = 1 << 5; // ; | &
    pub(crate) const BACKTICK: u32 = 1 << 6;
    pub(crate) const DOLLAR: u32 = 1 << 7;
    pub(crate) const ENCODED: u32 = 1 << 8; // % +
    pub(crate) const BACKSLASH: u32 = 1 << 9;
    pub(crate) const DOT: u32 = 1 << 10;
    pub(crate) const SLASH: u32 = 1 << 11;
    pub(crate) const COLON: u32 = 1 << 12;
    pub(crate) const EQ: u32 = 1 << 13;
    pub(crate) const HASH: u32 = 1 << 14;
    pub(crate) const BRACE: u32 = 1 << 15; // { }
    pub(crate) const BRACKET: u32 = 1 << 16; // [ ]
    pub(crate) const NEWLINE: u32 = 1 << 17;
    pub(crate) const SPACE: u32 = 1 << 18; // space, tab, comma
    pub(crate) const DASH: u32 = 1 << 19;
    pub(crate) const UNDERSCORE: u32 = 1 << 20;
    pub(crate) const OTHER: u32 = 1 << 21; // ! * @ ? ~ ^ and control bytes
    pub(crate) const AMP: u32 = 1 << 22;

    pub(crate) fn of(v: &str) -> Shape {
        let mut bits = 0;
        for b in v.bytes() {
            bits |= match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => 0,
                b'\'' | b'"' => Self::QUOTE,
                b'(' => Self::OPEN,
                b')' => Self::CLOSE,
                b'<' => Self::LT,
                b'>' => Self::GT,
                b';' | b'|' => Self::SEP,
                b'&' => Self::SEP | Self::AMP,
                b'`' => Self::BACKTICK,
                b'$' => Self::DOLLAR,
                b'%' | b'+' => Self::ENCODED,
                b'\\' => Self::BACKSLASH,
                b'.' => Self::DOT,
                b'/' => Self::SLASH,
                b':' => Self::COLON,
                b'=' => Self::EQ,
                b'#' => Self::HASH,
                b'{' | b'}' => Self::BRACE,
                b'[' | b']' => Self::BRACKET,
                b'\n' | b'\r' => Self::NEWLINE,
                b' ' | b'\t' | b',' => Self::SPACE,
                b'-' => Self::DASH,
                b'_' => Self::UNDERSCORE,
                0x80.. => 0,
                _ => Self::OTHER,
            };
        }
        Shape(bits)
    }

    pub(crate) fn any(self, mask: u32) -> bool {
        self.0 & mask != 0
    }

    pub(crate) fn has(self, mask: u32) -> bool {
        self.0 & mask == mask
    }
}

/// Scans one value with every detector; the first that fires wins.
pub fn scan_value(v: &str) -> Option<Attack> {
    if v.len() < 2 {
        return None;
    }
    let shape = Shape::of(v);
    let once = shape
        .any(Shape::ENCODED)
        .then(|| url_decode(v))
        .filter(|once| once != v);
    // A value that URL-decodes to something else is given to libinjection's SQL tokeniser decoded
    // only, as the Core Rule Set does (`t:urlDecodeUni` before `@detectSQLi`): the escapes
    // themselves are no SQL, and the port's tokeniser spends up to 100× longer on them (170 µs for
    // a 140-byte encoded search term, against 7 µs for its decoded form). Every other detector
    // still reads the value as sent.
    if let Some(a) = scan_decoded(v, shape, once.is_none()) {
        return Some(a);
    }
    let mut last = std::borrow::Cow::Borrowed(v);
    if let Some(once) = once {
        if let Some(a) = scan_decoded(&once, Shape::of(&once), true) {
            return Some(a);
        }
        last = std::borrow::Cow::Owned(once);
        if last.contains('%') {
            let twice = url_decode(&last);
            if twice != *last {
                if let Some(a) = scan_decoded(&twice, Shape::of(&twice), true) {
                    return Some(a);
                }
                last = std::borrow::Cow::Owned(twice);
            }
        }
    }
    if last.contains(['&', '\\']) {
        let escaped = decode_escapes(&last);
        let escaped = match decode_escapes(&escaped) {
            std::borrow::Cow::Owned(o) => o,
            std::borrow::Cow::Borrowed(_) => escaped.into_owned(),
        };
        if escaped != *last {
            return scan_decoded(&escaped, Shape::of(&escaped), true);
        }
    }
    None
}

/// Every detector on one form of a value; `libinjection_sql` says whether libinjection's SQL
/// tokeniser reads this form too (see [`scan_value`]).
fn scan_decoded(v: &str, shape: Shape, libinjection_sql: bool) -> Option<Attack> {
    use Shape as S;
    let plain = !shape.any(!(S::SPACE | S::DASH | S::UNDERSCORE));
    let lower = v.to_ascii_lowercase();
    if plain {
        // Words, numbers and ids: only keyword-only SQL (`Xunionselectfrom`, `pg_sleep`) and a
        // command at the start of the value (`ls foo bar`, `time sh -c`) can be attacks.
        if sql::sql_statements(&lower) {
            return Some(Attack::Sqli);
        }
        if shape.any(S::SPACE) && shell::cmdi(v, shape) {
            return Some(Attack::Cmdi);
        }
        return None;
    }
    let stripped = if shape.any(S::SLASH | S::HASH) {
        strip_comments(v)
    } else {
        std::borrow::Cow::Borrowed(v)
    };
    let stripped_lower = match &stripped {
        std::borrow::Cow::Borrowed(_) => std::borrow::Cow::Borrowed(lower.as_str()),
        std::borrow::Cow::Owned(o) => std::borrow::Cow::Owned(o.to_ascii_lowercase()),
    };
    if java(v, &lower, shape) {
        return Some(Attack::Java);
    }
    if shape.any(S::DOT | S::UNDERSCORE | S::OPEN) && markup::nodejs(&lower) {
        return Some(Attack::Nodejs);
    }
    if shape.any(S::LT | S::COLON | S::DOLLAR | S::OPEN | S::EQ)
        && php::php(v, &lower, &stripped, &stripped_lower)
    {
        return Some(Attack::Php);
    }
    if shape.any(S::DOT | S::SLASH | S::BACKSLASH) && traversal(v) {
        return Some(Attack::Traversal);
    }
    if shape.any(S::COLON) && proto::ssrf(&lower) {
        return Some(Attack::Ssrf);
    }
    if shape.any(S::COLON | S::SLASH) && proto::schemeless_ssrf(&lower) {
        return Some(Attack::Ssrf);
    }
    if shape.any(S::COLON | S::OTHER) && rfi(&lower) {
        return Some(Attack::Rfi);
    }
    let sql_tokens = S::QUOTE
        | S::OPEN
        | S::CLOSE
        | S::SEP
        | S::HASH
        | S::DASH
        | S::SLASH
        | S::EQ
        | S::LT
        | S::GT
        | S::BACKTICK
        | S::OTHER
        | S::BACKSLASH;
    if (libinjection_sql && shape.any(sql_tokens) && rampart_seclang::ops::sqli(v.as_bytes()).0)
        || (shape.any(S::OPEN) && sql::sql_function_call(&stripped_lower))
        || sql::sql_statements(&stripped_lower)
        || (shape.has(S::QUOTE) && shape.any(S::BRACE | S::BRACKET) && sql::json_operand(v))
        || (shape.any(S::DOLLAR) && sql::nosql_operator(&lower))
    {
        return Some(Attack::Sqli);
    }
    if (shape.any(S::LT | S::GT | S::EQ | S::COLON | S::QUOTE | S::BACKTICK)
        && rampart_seclang::ops::xss(v.as_bytes()))
        || markup::xss(&stripped_lower, shape)
    {
        return Some(Attack::Xss);
    }
    if shape.any(S::BRACE | S::LT | S::HASH) && generic::ssti(&lower) {
        return Some(Attack::Ssti);
    }
    if shape.any(S::UNDERSCORE | S::BRACKET | S::DOT) && generic::prototype_pollution(&lower) {
        return Some(Attack::PrototypePollution);
    }
    if shape.any(S::OPEN | S::UNDERSCORE | S::DOT | S::BRACE | S::OTHER)
        && generic::code_injection(&lower)
    {
        return Some(Attack::CodeInjection);
    }
    if shape.any(S::DOT | S::COLON) && generic::sets_cookie(&lower) {
        return Some(Attack::SessionFixation);
    }
    if shape.any(S::COLON) && generic::data_uri(&lower) {
        return Some(Attack::Rfi);
    }
    if shape.any(S::NEWLINE) && generic::mail_commands(v) {
        return Some(Attack::Protocol);
    }
    if shell::cmdi(v, shape) {
        return Some(Attack::Cmdi);
    }
    if shape.any(S::NEWLINE | S::SLASH | S::COLON | S::DOLLAR) && proto::protocol(v) {
        return Some(Attack::Protocol);
    }
    if shape.has(S::OPEN | S::CLOSE) && proto::ldap(v) {
        return Some(Attack::Ldap);
    }
    None
}

/// Splits a query string or form body into names and values (both scanned).
pub fn form_parts(s: &str) -> impl Iterator<Item = &str> {
    s.split('&')
        .flat_map(|kv| kv.splitn(2, '='))
        .filter(|p| !p.is_empty())
}

/// Checks that need a parameter's name and value together.
fn scan_pair(name: &str, value: Option<&str>) -> Option<Attack> {
    if session_parameter(name) {
        return Some(Attack::SessionFixation);
    }
    // The name first: it is cheaper, and most names are not include parameters.
    if !include_parameter(name) {
        return None;
    }
    let value = norm::decoded_lower(value?);
    let remote = ["http://", "https://", "ftp://", "ftps://"]
        .iter()
        .any(|p| value.trim_start().starts_with(p));
    remote.then_some(Attack::Rfi)
}

fn scan_form(s: &str) -> Option<Attack> {
    for kv in s.split('&') {
        let (name, value) = match kv.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (kv, None),
        };
        if let Some(a) = scan_pair(name, value) {
            return Some(a);
        }
    }
    form_parts(s).find_map(scan_value)
}

/// Headers whose values are not scanned: protocol plumbing, Rampart's own anti-replay headers,
/// and its proof-of-work solution and clearance (verified by their MAC before any rule runs: a
/// value that does not verify is `CHALLENGE_FAILED` first, so what the rules see is Rampart's own
/// token; scanned, its random MAC and `:<counter>` looked like an SSRF target in 8% of
/// solutions). Every other header value is attacker-chosen text.
pub const UNSCANNED_HEADERS: &[&str] = &[
    crate::challenge::SOLUTION_HEADER,
    crate::challenge::CLEARANCE_HEADER,
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "accept",
    "accept-encoding",
    "accept-language",
    "x-timestamp",
    "x-nonce",
    "x-signature",
    "x-content-sha256",
    "x-app",
    "x-request-id",
];

/// Scans every attacker-controlled part of a request: path, query names and values, body (form
/// fields, JSON strings, or the raw text), the JSON params, and every header value except the
/// plumbing listed in [`UNSCANNED_HEADERS`]. Returns the attack and where it was found.
pub fn scan_request<'a>(
    path: &str,
    query: &str,
    body: &str,
    params: Option<&serde_json::Value>,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
) -> Option<(Attack, &'static str)> {
    // Paths repeat as much as user agents do (one per route): their scans are cached too.
    let path_scan = |p: &str| path_attack(p).or_else(|| scan_value(p));
    let found = if path.len() <= MAX_CACHED_LEN {
        cached(&PATH_CACHE, path, path_scan)
    } else {
        path_scan(path)
    };
    if let Some(a) = found {
        return Some((a, "path"));
    }
    if let Some(a) = scan_form(query) {
        return Some((a, "query"));
    }
    let body_json = if body.is_empty() {
        None
    } else {
        serde_json::from_str::<serde_json::Value>(body).ok()
    };
    // Callers often send the body's JSON again as `params`, whole or in part: each string of the
    // body that scanned clean is not scanned again there.
    let mut clean = Clean {
        strings: Vec::new(),
        record: true,
    };
    let headers: Vec<(&str, &str)> = headers.collect();
    let multipart = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| *v)
        .filter(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/")
        });
    if let (Some(ctype), false) = (multipart, body.is_empty()) {
        // A multipart body is its parts: each field's value, and each file's name (the file's
        // bytes are the application's business, and its line breaks are the format's own).
        let m = rampart_seclang::body::multipart(ctype, body.as_bytes());
        let found = m
            .args
            .iter()
            .find_map(|(k, v)| {
                scan_value(&String::from_utf8_lossy(k))
                    .or_else(|| scan_value(&String::from_utf8_lossy(v)))
            })
            .or_else(|| {
                m.files.iter().find_map(|(_, f)| {
                    let f = String::from_utf8_lossy(f);
                    let lower = f.to_ascii_lowercase();
                    if generic::restricted_upload(&lower) {
                        return Some(Attack::Cmdi);
                    }
                    if let Some(a) = generic::script_upload(&lower) {
                        return Some(a);
                    }
                    scan_value(&f)
                })
            });
        if let Some(a) = found {
            return Some((a, "body"));
        }
    } else if !body.is_empty() {
        let found = match &body_json {
            Some(v) if v.is_object() || v.is_array() => scan_json(v, &mut clean),
            _ if body.contains('=') && !body.trim_start().starts_with('<') => {
                scan_form(body).or_else(|| scan_value(body))
            }
            _ => scan_value(body),
        };
        if let Some(a) = found {
            return Some((a, "body"));
        }
    }
    clean.record = false;
    let params = params.filter(|p| body_json.as_ref() != Some(*p));
    if let Some(a) = params.and_then(|p| scan_json(p, &mut clean)) {
        return Some((a, "params"));
    }
    for &(name, value) in &headers {
        // A line break in a header value is header injection, whatever the header.
        if value.contains(['\r', '\n']) {
            return Some((Attack::Protocol, "header"));
        }
        if UNSCANNED_HEADERS
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
        {
            continue;
        }
        if generic::FILENAME_HEADERS
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
        {
            let lower = value.to_ascii_lowercase();
            let upload = generic::script_upload(&lower)
                .or_else(|| generic::restricted_upload(&lower).then_some(Attack::Cmdi));
            if let Some(a) = upload {
                return Some((a, "header"));
            }
        }
        let found = if name.eq_ignore_ascii_case("cookie") {
            if value.trim_start().starts_with("$Version") {
                Some(Attack::Protocol) // RFC 2109 cookies: parser confusion, long obsolete
            } else {
                value
                    .split(';')
                    .flat_map(|kv| kv.splitn(2, '='))
                    .map(str::trim)
                    .find_map(scan_value)
            }
        } else if value.len() <= MAX_CACHED_LEN
            && CACHED_HEADERS.iter().any(|h| h.eq_ignore_ascii_case(name))
        {
            scan_cached(value)
        } else {
            scan_value(value)
        };
        if let Some(a) = found {
            return Some((a, "header"));
        }
    }
    None
}

/// Headers whose values repeat across many requests (a few hundred user agents make up most
/// traffic): their scan results are cached per thread.
const CACHED_HEADERS: &[&str] = &[
    "user-agent",
    "referer",
    "origin",
    "content-type",
    "sec-ch-ua",
];

/// Longer values are scanned every time (a cache of them would hold too much memory).
const MAX_CACHED_LEN: usize = 1024;

type ScanCache = std::cell::RefCell<crate::memo::Memo<Option<Attack>>>;

thread_local! {
    /// [`scan_value`] of header values (bounded by `memo::WAF_VALUES`).
    static SCAN_CACHE: ScanCache =
        std::cell::RefCell::new(crate::memo::Memo::new(&crate::memo::WAF_VALUES));
    /// The path's own checks ([`path_attack`]) and then [`scan_value`], of paths (bounded by
    /// `memo::WAF_PATHS`).
    static PATH_CACHE: ScanCache =
        std::cell::RefCell::new(crate::memo::Memo::new(&crate::memo::WAF_PATHS));
}

/// [`scan_value`] through a per-thread cache keyed by the whole value (no hash-collision risk).
fn scan_cached(v: &str) -> Option<Attack> {
    cached(&SCAN_CACHE, v, scan_value)
}

/// `scan(v)` through `cache`, keyed by the whole value.
fn cached(
    cache: &'static std::thread::LocalKey<ScanCache>,
    v: &str,
    scan: impl FnOnce(&str) -> Option<Attack>,
) -> Option<Attack> {
    if let Some(hit) = cache.with(|c| c.borrow().get(v)) {
        return hit;
    }
    let found = scan(v);
    cache.with(|c| c.borrow_mut().insert(v, found));
    found
}

/// Strings of one request that [`scan_value`] found clean: recorded while the body is scanned
/// (the first [`CLEAN_MAX`]), then skipped in `params`.
struct Clean<'s> {
    strings: Vec<&'s str>,
    record: bool,
}

/// Clean strings remembered per request: enough for the usual JSON body, and a bound on the
/// lookups a huge `params` costs.
const CLEAN_MAX: usize = 32;

impl<'s> Clean<'s> {
    /// `scan_value(s)`, or `None` when `s` is known clean.
    fn scan(&mut self, s: &'s str) -> Option<Attack> {
        if !self.record && self.strings.contains(&s) {
            return None;
        }
        let found = scan_value(s);
        if self.record && found.is_none() && self.strings.len() < CLEAN_MAX {
            self.strings.push(s);
        }
        found
    }
}

/// Every key and string of a JSON document; keys also as parameter names.
fn scan_json<'s>(v: &'s serde_json::Value, clean: &mut Clean<'s>) -> Option<Attack> {
    match v {
        serde_json::Value::String(s) => clean.scan(s),
        serde_json::Value::Array(a) => a.iter().find_map(|x| scan_json(x, clean)),
        serde_json::Value::Object(m) => m.iter().find_map(|(k, x)| {
            scan_pair(k, x.as_str())
                .or_else(|| clean.scan(k))
                .or_else(|| scan_json(x, clean))
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
