//! Attack classes that are not one language's injection: server-side template injection,
//! prototype pollution, code injection into Python, Ruby and Perl, `data:` documents, and code
//! that sets a cookie (session fixation).
//!
//! Each detector reads the lower-cased (and decoded) value and looks for the syntax the attack
//! needs, not for known payloads: a template expression must hold an operator, a call or an
//! attribute access (`{{7*7}}`, `${T(java.lang.Runtime)}`), not merely a name (`{{name}}` in a
//! newsletter draft); prototype pollution must reach `__proto__` or `constructor.prototype`.

/// `{{ expr }}`, `${ expr }`, `#{ expr }`, `*{ expr }`, `<%= expr %>`, `{% stmt %}`, FreeMarker and
/// Velocity directives: a template language asked to evaluate something.
pub(super) fn ssti(lower: &str) -> bool {
    let expression = |inner: &str| {
        let inner = inner.trim();
        !inner.is_empty()
            && (inner.contains(['*', '(', '|', '[', '~', '+', '%', '\'', '"'])
                || inner.contains("__")
                || inner.contains("..")
                || TEMPLATE_OBJECTS.iter().any(|o| {
                    inner == *o
                        || inner.starts_with(&format!("{o}."))
                        || inner.starts_with(&format!("{o}["))
                }))
    };
    let pairs: [(&str, &str); 6] = [
        ("{{", "}}"),
        ("${", "}"),
        ("#{", "}"),
        ("*{", "}"),
        ("@{", "}"),
        ("<%", "%>"),
    ];
    for (open, close) in pairs {
        let mut from = 0;
        while let Some(i) = lower[from..].find(open) {
            let start = from + i + open.len();
            let rest = &lower[start..];
            let end = rest.find(close).unwrap_or(rest.len()).min(512);
            let inner = &rest[..floor(rest, end)];
            let inner = if open == "<%" {
                inner.trim_start_matches(['=', '-', '#'])
            } else {
                inner
            };
            if rest.contains(close) && expression(inner) {
                return true;
            }
            from = start;
        }
    }
    // Statements: `{% if … %}`, `{% import os %}`, `{%print(…)%}`.
    if let Some(i) = lower.find("{%") {
        let rest = lower[i + 2..].trim_start_matches(['-', '+', ' ']);
        if rest.contains("%}")
            && TEMPLATE_STATEMENTS
                .iter()
                .any(|s| rest.starts_with(s) && rest[s.len()..].starts_with([' ', '(', '%', '-']))
        {
            return true;
        }
    }
    // FreeMarker (`<#assign ex="…"?new()>`) and Velocity (`#set($x = …)`).
    lower.contains("<#assign")
        || lower.contains("?new(")
        || lower.contains("freemarker.template")
        || lower.contains("#set(")
        || lower.contains("#set (")
        || lower.contains("$class.inspect")
        || lower.contains("{php}")
}

/// Names a template engine resolves to powerful objects.
const TEMPLATE_OBJECTS: &[&str] = &[
    "config",
    "self",
    "request",
    "settings",
    "lipsum",
    "cycler",
    "joiner",
    "namespace",
    "range",
    "url_for",
    "get_flashed_messages",
    "session",
    "g",
    "app",
    "_self",
    "env",
    "class",
    "runtime",
    "this",
    "smarty",
    "dump",
];

const TEMPLATE_STATEMENTS: &[&str] = &[
    "if",
    "for",
    "set",
    "import",
    "include",
    "extends",
    "raw",
    "print",
    "exec",
    "debug",
    "macro",
    "call",
    "with",
    "block",
    "from",
    "load",
    "now",
    "filter",
    "autoescape",
    "spaceless",
];

/// `__proto__` or `constructor.prototype` (any spelling of the property access) in a name or
/// value: writes that reach every object of a JavaScript application.
pub(super) fn prototype_pollution(lower: &str) -> bool {
    if lower.contains("__proto__") {
        return true;
    }
    lower.match_indices("constructor").any(|(i, m)| {
        let rest = &lower[i + m.len()..];
        let rest = rest.trim_start_matches(['.', '[', ']', '"', '\'', ' ']);
        rest.starts_with("prototype")
    })
}

/// Code of Python, Ruby or Perl where data was expected: the dunder walk of Python sandbox
/// escapes, the calls that run commands, Ruby's `%x` and evaluators, Perl's interpolation trick.
pub(super) fn code_injection(lower: &str) -> bool {
    static AC: std::sync::OnceLock<aho_corasick::AhoCorasick> = std::sync::OnceLock::new();
    AC.get_or_init(|| super::automaton(CODE_MARKERS))
        .is_match(lower)
}

const CODE_MARKERS: &[&str] = &[
    // Python
    "__import__(",
    "__builtins__",
    "__globals__",
    "__subclasses__",
    "__mro__",
    "__class__.__",
    "__getattribute__",
    "os.system(",
    "os.popen(",
    "subprocess.",
    "pty.spawn(",
    "exec(compile(",
    "importlib.import_module",
    // Ruby
    "%x(",
    "%x{",
    "%x[",
    "kernel.exec",
    "kernel.system",
    "kernel.spawn",
    "kernel.open",
    "io.popen",
    "open3.",
    "process.spawn",
    "instance_eval",
    "class_eval",
    "module_eval",
    ".send(:",
    "erb.new(",
    // Perl
    "@{[",
    "qx{",
    "qx(",
    "qx/",
    "perl -e",
    "system(\"",
    "exec(\"",
];

/// A `data:` URI carrying a document or script (`data:text/html;base64,…`,
/// `data:application/x-php,…`): content an inclusion or a frame would run.
pub(super) fn data_uri(lower: &str) -> bool {
    lower.match_indices("data:").any(|(i, m)| {
        let before = lower[..i].chars().last();
        if before.is_some_and(|c| c.is_ascii_alphanumeric()) {
            return false;
        }
        let rest = lower[i + m.len()..].trim_start_matches(['/', ' ']);
        let mime_end = rest.find([',', ';']).unwrap_or(rest.len());
        let mime = &rest[..mime_end];
        let risky = [
            "text/html",
            "text/javascript",
            "application/javascript",
            "application/x-javascript",
            "image/svg+xml",
            "application/x-php",
            "text/x-php",
            "application/xhtml+xml",
            "text/xml",
            "application/x-httpd-php",
        ]
        .contains(&mime);
        // `data://` is PHP's stream wrapper, which no browser URL uses; a base64 payload given
        // where a value was expected is an inclusion's content.
        let wrapper = lower[i + m.len()..].starts_with("//");
        let payload = rest[mime_end..].starts_with(";base64,") && before.is_none();
        risky || wrapper || payload
    })
}

/// Code that sets a cookie: `document.cookie=`, a `Set-Cookie` header or a `<meta
/// http-equiv="set-cookie">` inside a value (session fixation through the page).
pub(super) fn sets_cookie(lower: &str) -> bool {
    let assign = lower.match_indices(".cookie").any(|(i, m)| {
        lower[i + m.len()..].trim_start().starts_with('=')
            && !lower[i + m.len()..].trim_start().starts_with("==")
    });
    assign
        || lower.contains("set-cookie:")
        || lower.contains("set-cookie2:")
        || (lower.contains("http-equiv") && lower.contains("set-cookie"))
}

/// Upload file names that reconfigure the server or hold its secrets (`.htaccess`,
/// `web.config`, `.user.ini`, `wp-config.php`, `.env`).
pub(super) fn restricted_upload(lower: &str) -> bool {
    const FILES: &[&str] = &[
        ".htaccess",
        ".htdigest",
        ".htpasswd",
        "web.config",
        ".user.ini",
        "php.ini",
        "wp-config.php",
        "settings.php",
        "local.xml",
        ".env",
        ".bashrc",
        ".bash_profile",
        ".profile",
        "authorized_keys",
        ".git/config",
        "config.yml",
        "parameters.yml",
        "security.yml",
    ];
    let name = lower.trim().rsplit(['/', '\\']).next().unwrap_or("");
    FILES
        .iter()
        .any(|f| name == *f || name == f.rsplit('/').next().unwrap_or(f))
}

/// Upload names the server would run as a page: PHP, JSP, ASP and ASP.NET, ColdFusion and
/// server-side-include files (`shell.php`, `cmd.jsp`, `x.aspx.`, `a.php%00.jpg` once decoded,
/// `b.asp::$data`). No shop takes those as uploads; attackers send them to get code on the server.
/// Returns the attack family of the language.
pub(super) fn script_upload(lower: &str) -> Option<super::Attack> {
    use super::Attack;
    let name = lower.trim().rsplit(['/', '\\']).next().unwrap_or("");
    // What a file system keeps of the name: up to a NUL, without an NTFS stream or trailing dots.
    let name = name.split('\0').next().unwrap_or("");
    let name = name.split("::$").next().unwrap_or("");
    let name = name.trim_end_matches(['.', ' ']);
    let (_, ext) = name.rsplit_once('.')?;
    let php = ext.starts_with("php") && ext[3..].bytes().all(|b| b.is_ascii_digit());
    match ext {
        _ if php => Some(Attack::Php),
        "phtml" | "phar" | "phps" | "pht" | "phpt" => Some(Attack::Php),
        "jsp" | "jspx" | "jspf" | "jsw" | "jsv" | "jhtml" => Some(Attack::Java),
        "asp" | "aspx" | "ascx" | "ashx" | "asmx" | "asa" | "cshtml" | "vbhtml" | "cfm"
        | "cfml" | "cfc" | "shtml" | "shtm" | "stm" => Some(Attack::Cmdi),
        _ => None,
    }
}

/// Headers that carry an upload's file name (CRS reads the same ones).
pub(super) const FILENAME_HEADERS: &[&str] =
    &["x-filename", "x_filename", "x.filename", "x-file-name"];

/// Protocol commands after a line break: SMTP, IMAP and POP3 injection through a form field
/// that ends up in a mail session.
pub(super) fn mail_commands(v: &str) -> bool {
    v.split(['\r', '\n']).skip(1).any(|line| {
        let l = line.trim_start().to_ascii_uppercase();
        const SMTP: &[&str] = &[
            "MAIL FROM:",
            "RCPT TO:",
            "DATA",
            "HELO ",
            "EHLO ",
            "VRFY ",
            "EXPN ",
            "RSET",
            "QUIT",
            "AUTH ",
        ];
        const POP3: &[&str] = &[
            "USER ", "PASS ", "RETR ", "DELE ", "LIST", "STAT", "TOP ", "UIDL",
        ];
        let imap = {
            // `A1 LOGIN …`, `. SELECT INBOX`: a tag, then a command.
            let mut w = l.split_whitespace();
            let tag = w.next().unwrap_or("");
            let cmd = w.next().unwrap_or("");
            !tag.is_empty()
                && tag.len() <= 8
                && tag
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'*')
                && [
                    "LOGIN",
                    "SELECT",
                    "EXAMINE",
                    "FETCH",
                    "STORE",
                    "COPY",
                    "DELETE",
                    "RENAME",
                    "LIST",
                    "LSUB",
                    "STATUS",
                    "APPEND",
                    "CAPABILITY",
                    "LOGOUT",
                    "AUTHENTICATE",
                    "UID",
                    "SEARCH",
                    "CREATE",
                ]
                .contains(&cmd)
        };
        SMTP.iter()
            .chain(POP3)
            .any(|c| l == c.trim_end() || l.starts_with(c))
            || imap
    })
}

fn floor(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_expressions_not_placeholders() {
        for a in [
            "{{7*7}}",
            "{{config.items()}}",
            "{{''.__class__.__mro__}}",
            "${7*7}",
            "${T(java.lang.Runtime).getRuntime()}",
            "#{7*7}",
            "<%= 7*7 %>",
            "{% import os %}",
            "<#assign ex=\"freemarker.template.utility.Execute\"?new()>",
            "#set($x = 1)",
            "{{self}}",
            "*{7*7}",
        ] {
            assert!(ssti(&a.to_ascii_lowercase()), "{a}");
        }
        for b in [
            "hello {{name}}",
            "price ${price}",
            "see {x}",
            "50% off {{",
            "{{ first_name }}",
            "a } b ${",
            "#{order}",
        ] {
            assert!(!ssti(&b.to_ascii_lowercase()), "{b}");
        }
    }

    #[test]
    fn prototype_pollution_spellings() {
        for a in [
            "__proto__[admin]=1",
            "{\"__proto__\":{}}",
            "constructor[prototype][x]",
            "constructor.prototype.polluted",
        ] {
            assert!(prototype_pollution(a), "{a}");
        }
        assert!(!prototype_pollution("the constructor of the prototype car"));
    }

    #[test]
    fn code_data_cookies_and_mail() {
        assert!(code_injection("__import__('os').system('id')"));
        assert!(code_injection("%x(id)"));
        assert!(!code_injection("50% extra (xl) size"));
        assert!(data_uri("data:text/html;base64,PHNjcmlwdD4="));
        assert!(!data_uri("metadata: none") && !data_uri("data: 3 items"));
        assert!(sets_cookie("<script>document.cookie=\"sid=1\"</script>"));
        assert!(!sets_cookie("accept cookies?") && !sets_cookie("if (a.cookie == b)"));
        assert!(mail_commands("hi\r\nRCPT TO: <x@evil.example>"));
        assert!(mail_commands("x\r\nA1 LOGIN user pass"));
        assert!(!mail_commands("line one\nline two"));
    }

    #[test]
    fn script_uploads_are_named_by_language() {
        use super::super::Attack;
        for (name, want) in [
            ("shell.php", Some(Attack::Php)),
            ("a/b/shell.php5", Some(Attack::Php)),
            ("x.phtml", Some(Attack::Php)),
            ("cmd.jsp", Some(Attack::Java)),
            ("cmd.jspx..", Some(Attack::Java)),
            ("c:\\inetpub\\x.aspx", Some(Attack::Cmdi)),
            ("b.asp::$data", Some(Attack::Cmdi)),
            ("a.php\0.jpg", Some(Attack::Php)),
            ("photo.jpg", None),
            ("report.pdf", None),
            ("php", None),
            ("my.phpfile", None),
            ("notes.txt", None),
        ] {
            assert_eq!(script_upload(name), want, "{name}");
        }
    }
}
