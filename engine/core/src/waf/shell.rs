//! Command injection: a shell command line where data was expected.
//!
//! Evidence, from strongest to weakest: shell variables and PowerShell cmdlets (by name); a
//! command named by its path (`/bin/sh`); a shell separator (`;`, `|`, `&`, `` ` ``, `$(`,
//! newline, here-string `<<<`) followed by a command word and an argument or redirection; a value
//! that *starts* with a command run through a wrapper (`time sh …`, `nohup …`), with an option
//! (`ls -la`), or with an unmistakable command; the Shellshock function prefix `() {`.
//! Quotes, backslashes and empty variables inside words (`w'h'o$@ami`, `sh$X`) are removed
//! first, since the shell removes them too.

use super::{vocabulary, Shape};

/// Commands that are evidence on their own after a shell separator.
const STRONG_COMMANDS: &[&str] = &[
    "id",
    "whoami",
    "uname",
    "ifconfig",
    "ipconfig",
    "netstat",
    "passwd",
    "sh",
    "bash",
    "zsh",
    "ksh",
    "csh",
    "dash",
    "busybox",
    "nc",
    "ncat",
    "netcat",
    "wget",
    "curl",
    "telnet",
    "reboot",
    "shutdown",
    "halt",
    "ps",
    "ls",
    "pwd",
    "env",
    "printenv",
    "sleep",
    "python",
    "python3",
    "perl",
    "ruby",
    "php",
    "lua",
    "nslookup",
    "dig",
    "ping",
    "hostname",
    "crontab",
    "sudo",
    "su",
    "chmod",
    "chown",
    "rm",
    "mkfifo",
    "xterm",
    "visudo",
    "irb",
    "gcc",
    "c99",
    "systeminfo",
    "tasklist",
];

/// Commands that are not English words, so a value starting with one and an argument is a
/// command line.
const UNMISTAKABLE_AT_START: &[&str] = &[
    "ls",
    "sh",
    "bash",
    "zsh",
    "ksh",
    "csh",
    "dash",
    "busybox",
    "nc",
    "ncat",
    "netcat",
    "wget",
    "curl",
    "whoami",
    "uname",
    "ifconfig",
    "ipconfig",
    "netstat",
    "nslookup",
    "crontab",
    "chmod",
    "chown",
    "mkfifo",
    "xterm",
    "telnet",
    "c99",
    "gcc",
    "irb",
    "visudo",
    "certutil",
    "mshta",
    "regedit",
    "powershell",
    "pwsh",
    "rundll32",
    "regsvr32",
    "bitsadmin",
    "wmic",
    "cscript",
    "wscript",
    "msiexec",
    "schtasks",
    "systeminfo",
    "tasklist",
    "taskkill",
    "vssadmin",
];

/// Commands that run the command after them: `time sh -c id`.
const WRAPPERS: &[&str] = &[
    "time", "nohup", "strace", "ltrace", "nice", "timeout", "env", "sudo", "doas", "exec", "xargs",
    "command", "builtin", "watch", "stdbuf", "chroot", "unbuffer", "setsid", "ionice",
];

/// Windows commands (cmd.exe and LOLBins) that follow a separator in Windows payloads.
const WINDOWS_COMMANDS: &[&str] = &[
    "cmd",
    "powershell",
    "pwsh",
    "certutil",
    "mshta",
    "regedit",
    "rundll32",
    "regsvr32",
    "bitsadmin",
    "wmic",
    "cscript",
    "wscript",
    "msiexec",
    "schtasks",
    "systeminfo",
    "tasklist",
    "taskkill",
    "net",
    "reg",
    "vssadmin",
    "bcdedit",
    "icacls",
    "takeown",
    "nltest",
    "wevtutil",
    "forfiles",
    "msbuild",
    "installutil",
    "whoami",
    "ipconfig",
];

/// Tools that ship as `family-subcommand` executables (`ansible-vault`, `ssh-keygen`).
const TOOL_FAMILIES: &[&str] = &[
    "ansible", "chef", "rmt", "aa", "apt", "dpkg", "docker", "git", "systemd", "update", "grub",
    "mysql", "pg", "ssh", "kubectl", "nmap", "msf", "openssl", "php", "python", "perl",
];

/// Whether `word` (lower case) names a shell command: listed, or a listed family (`ansible-…`,
/// `chef-…`).
fn is_command(word: &str) -> bool {
    let vocab = vocabulary();
    if word.len() < 2 {
        return false;
    }
    if vocab.shell_commands.contains(word) || WINDOWS_COMMANDS.contains(&word) {
        return true;
    }
    if let Some(dash) = word.find('-') {
        let family = &word[..dash];
        return vocab.shell_commands.contains(&word[..=dash]) || TOOL_FAMILIES.contains(&family);
    }
    word.strip_suffix(".exe").is_some_and(is_command)
}

/// Removes what the shell removes before running a word: quotes, backslashes, empty variables.
fn shell_unquote(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = String::with_capacity(v.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\'' | b'"' | b'\\' => i += 1,
            b'$' if b.get(i + 1) == Some(&b'@') || b.get(i + 1) == Some(&b'*') => i += 2,
            b'$' if b
                .get(i + 1)
                .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
                && empty_expansion(b, i) =>
            {
                // `sh$XX`, `| $u wget`: an unset variable expands to nothing.
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
            _ => {
                let ch = v[i..].chars().next().expect("in bounds");
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    out
}

/// A `$name` at `i` that is glued to a word, or stands alone as the first word of a command.
fn empty_expansion(b: &[u8], i: usize) -> bool {
    let glued = i > 0 && b[i - 1].is_ascii_alphanumeric();
    let end = i
        + 1
        + b[i + 1..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
            .count();
    let before = b[..i].iter().rev().find(|c| !c.is_ascii_whitespace());
    let command_position = matches!(
        before,
        None | Some(b';') | Some(b'|') | Some(b'&') | Some(b'`')
    );
    glued || (command_position && b.get(end).is_some_and(|c| c.is_ascii_whitespace()))
}

/// `/???/??t`, `/e*c/pa*wd`: an absolute path whose segments are letters, digits and wildcards.
fn glob_path(word: &str) -> bool {
    let Some(rest) = word.strip_prefix('/') else {
        return false;
    };
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    segments.len() >= 2
        && word.contains(['?', '*'])
        && segments.iter().all(|s| {
            s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'?' || b == b'*' || b == b'.')
        })
}

/// Shell syntax that is evidence without a command name: `${IFS}`-style expansions, arithmetic
/// `$((…))`, process substitution `<(…)`, brace expansion of a command (`{cat,/etc/passwd}`),
/// history (`!-2`) and alias invocation, and Windows `FOR /F` / `IF EXIST` batch syntax.
///
/// `shape` is the [`Shape`] of `lower` (the caller's, shared with the other detectors): each
/// check that needs a kind of punctuation is skipped when the value holds none, which spares the
/// searches for the ten `${…` markers, the nine `%…%` variables and the like on plain values.
fn shell_syntax(lower: &str, shape: Shape) -> bool {
    const MARKERS: &[&str] = &[
        "${ifs", "$ifs$", "$((", "${path:", "${home:", "${shell", "${pwd", "${@", "${#", "${!",
    ];
    if shape.any(Shape::DOLLAR) && MARKERS.iter().any(|m| lower.contains(m)) {
        return true;
    }
    if shape.any(Shape::OPEN)
        && (lower.contains("<(") || lower.contains(">("))
        && lower.contains(')')
    {
        let inner = lower
            .split(['<', '>'])
            .skip(1)
            .any(|p| p.starts_with('(') && command_line(&p[1..], Sep::Code));
        if inner {
            return true;
        }
    }
    // `{cmd,arg}`: a brace list whose first item is a command.
    let brace = lower.match_indices('{').any(|(i, _)| {
        let rest = &lower[i + 1..];
        let Some(close) = rest.find('}') else {
            return false;
        };
        let list = &rest[..close];
        let items: Vec<&str> = list.split(',').collect();
        // The first word the shell runs is the first non-empty item (`{,ifconfig}`).
        let first = items.iter().find(|i| !i.is_empty()).copied().unwrap_or("");
        items.len() >= 2
            && !list.contains([' ', '"', ':'])
            && is_command(first.rsplit('/').next().unwrap_or(first))
    });
    if brace {
        return true;
    }
    // Tilde expansion to the directory stack (`cat ~+/x`, `cd ~-`): a word of its own.
    let tilde = shape.any(Shape::OTHER)
        && ["~+", "~-"].iter().any(|t| {
            lower.match_indices(t).any(|(i, _)| {
                let before = lower[..i].chars().last();
                let after = lower[i + 2..].chars().next();
                matches!(
                    before,
                    None | Some(' ' | '\t' | ';' | '|' | '&' | '`' | '(' | '=')
                ) && matches!(after, None | Some('/' | ' ' | '\t' | ';' | '|' | '&' | ')'))
            })
        });
    if tilde {
        return true;
    }
    // A path spelled with wildcards (`/???/??t /???/p?ss??`, `/e*c/pa*wd`): every segment letters,
    // digits and wildcards, at least two segments, at least one wildcard.
    if lower.contains(['?', '*'])
        && lower
            .split([' ', '\t', ';', '|', '&', '`', '(', '='])
            .any(glob_path)
    {
        return true;
    }
    // A shell function defined and run (`f(){ f|f& };f`, the fork bomb): a name, `()`, a brace.
    let function = shape.any(Shape::OPEN)
        && lower.match_indices("()").any(|(i, _)| {
            let name = lower[..i].trim_end();
            let name_ok = name
                .chars()
                .last()
                .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '.');
            let body = lower[i + 2..].trim_start();
            name_ok
                && body.starts_with('{')
                && body
                    .find('}')
                    .is_some_and(|end| body[1..end].contains(['|', '&', ';']))
        });
    if function {
        return true;
    }
    // History: `!-1`, `!!` or `!$` glued to separators/commands (`;!-2`, `|!!`).
    let history = lower.match_indices('!').any(|(i, _)| {
        let next = lower.as_bytes().get(i + 1).copied();
        let before = lower[..i].trim_end().chars().last();
        let sep_before = matches!(
            before,
            None | Some(';') | Some('|') | Some('&') | Some('`') | Some('(')
        );
        sep_before
            && (next == Some(b'-') && lower.as_bytes().get(i + 2).is_some_and(u8::is_ascii_digit)
                || next == Some(b'!')
                || next == Some(b'$'))
    });
    if history {
        return true;
    }
    // `alias x=…`, `unalias x` (the second holds the first: one search rules both out).
    let alias = lower.contains("alias ")
        && ["alias ", "unalias "].iter().any(|a| {
            lower.match_indices(a).any(|(i, m)| {
                let before = lower[..i].trim_end().chars().last();
                let word: String = lower[i + m.len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                matches!(
                    before,
                    None | Some(';') | Some('|') | Some('&') | Some('`') | Some('(')
                ) && !word.is_empty()
                    && (a.starts_with('u') || lower[i + m.len() + word.len()..].starts_with('='))
            })
        });
    if alias {
        return true;
    }
    // Windows batch: `for /f … in (…) do`, `if exist …`, `if not defined …`.
    let batch_for = shape.any(Shape::SLASH)
        && lower.match_indices("for /").any(|(i, m)| {
            lower
                .as_bytes()
                .get(i + m.len())
                .is_some_and(|c| matches!(c, b'f' | b'l' | b'r' | b'd'))
                && lower[i..].contains(" in (")
                && lower[i..].contains(" do ")
        });
    // Every form begins `if ` (one search rules them all out).
    let batch_if = lower.contains("if ")
        && [
            "if exist ",
            "if not exist ",
            "if defined ",
            "if not defined ",
            "if errorlevel ",
            "if %",
        ]
        .iter()
        .any(|p| {
            lower.match_indices(p).any(|(i, _)| {
                matches!(
                    lower[..i].trim_end().chars().last(),
                    None | Some('&') | Some('|') | Some(';') | Some('(')
                )
            })
        });
    if batch_for || batch_if {
        return true;
    }
    windows_command_line(lower, shape)
}

/// PowerShell aliases that run or fetch code (`iex`, `iwr`, `saps`), after a separator.
/// (Two-letter aliases such as `rv`, `sv`, `ni` are left out: user agents hold `; rv 1.8`.)
const POWERSHELL_ALIASES: &[&str] = &[
    "iex",
    "iwr",
    "irm",
    "saps",
    "start-process",
    "gwmi",
    "icm",
    "ipmo",
    "spps",
    "invoke-expression",
    "invoke-webrequest",
    "invoke-restmethod",
    "ipconfig",
    "nslookup",
    "systeminfo",
];

/// cmd.exe commands that are English words (`dir`, `type`, `copy`): evidence only with a
/// Windows-looking argument (`c:\`, `%windir%`, `\\host\share`).
const CMD_BUILTINS: &[&str] = &[
    "dir", "type", "copy", "del", "erase", "move", "ren", "echo", "set", "start", "call", "net",
    "cd", "more", "find", "findstr", "attrib", "tree",
];

/// A Windows command line after a separator: a PowerShell alias, or a cmd.exe built-in with a
/// Windows path or variable; `%comspec%`-style variables anywhere.
fn windows_command_line(lower: &str, shape: Shape) -> bool {
    const VARS: &[&str] = &[
        "%comspec%",
        "%systemroot%",
        "%windir%",
        "%programfiles%",
        "%userprofile%",
        "%appdata%",
        "%temp%",
        "%homedrive%",
        "%systemdrive%",
    ];
    if shape.any(Shape::ENCODED) && VARS.iter().any(|v| lower.contains(v)) {
        return true;
    }
    if !shape.any(Shape::SEP | Shape::NEWLINE) {
        return false; // no separator for a command to follow
    }
    let b = lower.as_bytes();
    (0..b.len()).any(|i| {
        if !matches!(b[i], b';' | b'|' | b'&' | b'\n') {
            return false;
        }
        let rest = lower[i + 1..].trim_start_matches([' ', '|', '&', '\t']);
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let arg = rest[word.len()..].trim_start();
        if POWERSHELL_ALIASES.contains(&word.as_str())
            && rest[word.len()..].starts_with([' ', '(', '\t'])
        {
            return true;
        }
        CMD_BUILTINS.contains(&word.as_str())
            && rest[word.len()..].starts_with([' ', '\t'])
            && (arg.len() > 2
                && arg.as_bytes()[1] == b':'
                && arg.as_bytes()[0].is_ascii_alphabetic()
                && matches!(arg.as_bytes()[2], b'\\' | b'/')
                || arg.starts_with("\\\\")
                || arg.starts_with('%') && arg[1..].contains('%'))
    })
}

/// Whether `v` is a shell command line. `shape` is [`Shape::of`] `v`: lower-casing changes
/// letters only and unquoting only removes characters, so punctuation `v` lacks, its lower-case
/// and unquoted forms lack too.
pub(super) fn cmdi(v: &str, shape: Shape) -> bool {
    let vocab = vocabulary();
    if vocab.shell_tokens.is_match(v) {
        return true;
    }
    if shape.any(Shape::OPEN) {
        let trimmed = v.trim_start();
        if trimmed.starts_with("() {")
            || trimmed.starts_with("(){")
            || v.contains("() { :;}")
            || v.contains("(){:;}")
        {
            return true; // Shellshock
        }
    }
    if shell_syntax(&v.to_ascii_lowercase(), shape) {
        return true;
    }
    let unquoted = if v.contains(['\'', '"', '\\', '$']) {
        std::borrow::Cow::Owned(shell_unquote(v))
    } else {
        std::borrow::Cow::Borrowed(v)
    };
    let v: &str = &unquoted;
    // A command named by its path: `/bin/sh`, `bin/ansible`, `/usr/bin/perl`.
    let slashed = if shape.any(Shape::SLASH) { v } else { "" };
    for (i, _) in slashed.match_indices("bin/") {
        let before = v[..i].chars().last();
        if matches!(before, None | Some('/')) || v[..i].ends_with("/s") {
            let word: String = v[i + 4..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
                .collect();
            if vocab.shell_commands.contains(&word.to_ascii_lowercase()) {
                return true;
            }
        }
    }
    if command_line(v, Sep::Start) {
        return true;
    }
    if !shape.any(Shape::SEP | Shape::NEWLINE | Shape::BACKTICK | Shape::DOLLAR | Shape::LT) {
        return false; // no separator: the loop below would find none
    }
    let bytes = v.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let (sep_len, sep) = match bytes[i] {
            b';' | b'|' | b'&' | b'\n' => (1, Sep::Plain),
            b'`' => (1, Sep::Code),
            b'$' if bytes.get(i + 1) == Some(&b'(') => (2, Sep::Code),
            b'<' if bytes[i..].starts_with(b"<<<") => (3, Sep::Code),
            _ => (0, Sep::Plain),
        };
        if sep_len == 0 {
            i += 1;
            continue;
        }
        i += sep_len;
        if command_line(&v[i..], sep) {
            return true;
        }
    }
    false
}

/// Whether `rest` (the text after a separator, or a whole value) begins with a command line.
fn command_line(rest: &str, sep: Sep) -> bool {
    let rest = rest.trim_start_matches([' ', '\t', '|', '&', '(', '{', '\'', '"', '\r', '\n']);
    let word_len = rest
        .find(|c: char| {
            c.is_whitespace() || matches!(c, ';' | '|' | '&' | '`' | ')' | '<' | '>' | ',')
        })
        .unwrap_or(rest.len());
    let word = &rest[..word_len];
    let cmd = word
        .rsplit(['/', '\\'])
        .next()
        .unwrap_or(word)
        .to_ascii_lowercase();
    let after = &rest[word_len..];
    let next_word = after
        .trim_start_matches([' ', '\t', ','])
        .split(|c: char| c.is_whitespace() || c == ',')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    if WRAPPERS.contains(&cmd.as_str()) && is_command(&next_word) {
        return true; // `time sh -c id`, `nohup ifconfig`
    }
    if !is_command(&cmd) {
        return false;
    }
    let has_arg = (after.starts_with([' ', '\t', ','])
        && after
            .trim_start_matches([' ', '\t', ','])
            .starts_with(|c: char| {
                c.is_ascii_alphanumeric()
                    || matches!(c, '/' | '-' | '$' | '.' | '~' | '*' | '\'' | '"')
            }))
        || after.trim_start().starts_with(['<', '>']);
    // An argument that is shell-like rather than a word of prose: an option, a path, a variable,
    // a quote, a number, a URL or host, a glob, a redirection, or another command.
    let arg_like = after.trim_start().starts_with(['<', '>'])
        || (has_arg
            && (next_word.starts_with(['-', '/', '$', '~', '.', '*', '\'', '"'])
                || next_word.starts_with(|c: char| c.is_ascii_digit())
                || next_word.contains(['/', '.', '=', '$'])
                || is_command(&next_word)));
    let option = next_word.len() >= 2
        && next_word.starts_with('-')
        && next_word[1..].starts_with(|c: char| c.is_ascii_alphabetic());
    let bare = !has_arg;
    let hyphenated = cmd.contains('-')
        && cmd
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c == b'-' || c == b'_');
    let non_word = UNMISTAKABLE_AT_START.contains(&cmd.as_str());
    match sep {
        // `` `cmd` ``, `$(cmd)`, `<<<`: shell syntax already; any argument makes a command line.
        Sep::Code => has_arg || STRONG_COMMANDS.contains(&cmd.as_str()) || hyphenated,
        // `;`, `|`, `&`, newline: prose uses these too ("; watch the video"), so a command that
        // is also an English word needs a shell-like argument.
        Sep::Plain => {
            arg_like
                || (bare && (STRONG_COMMANDS.contains(&cmd.as_str()) || hyphenated))
                || (non_word && has_arg)
        }
        Sep::Start => {
            option
                || (hyphenated && has_arg)
                || (non_word && (arg_like || (has_arg && !ENGLISH_LOOKING.contains(&cmd.as_str()))))
        }
    }
}

/// Where a possible command line begins.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sep {
    /// At the start of the value.
    Start,
    /// After `;`, `|`, `&` or a line break.
    Plain,
    /// After `` ` ``, `$(` or `<<<`.
    Code,
}

/// Non-word commands that still read as English at the start of a value ("curl cream").
const ENGLISH_LOOKING: &[&str] = &["curl", "dash", "telnet", "xterm"];
