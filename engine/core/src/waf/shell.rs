//! Command injection: a shell command line where data was expected.
//!
//! Evidence, from strongest to weakest: shell variables and PowerShell cmdlets (by name); a
//! command named by its path (`/bin/sh`); a shell separator (`;`, `|`, `&`, `` ` ``, `$(`,
//! newline, here-string `<<<`) followed by a command word and an argument or redirection; a value
//! that *starts* with a command run through a wrapper (`time sh …`, `nohup …`), with an option
//! (`ls -la`), or with an unmistakable command; the Shellshock function prefix `() {`.
//! Quotes, backslashes and empty variables inside words (`w'h'o$@ami`, `sh$X`) are removed
//! first, since the shell removes them too.

use super::vocabulary;

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

pub(super) fn cmdi(v: &str) -> bool {
    let vocab = vocabulary();
    if vocab.shell_tokens.is_match(v) {
        return true;
    }
    let trimmed = v.trim_start();
    if trimmed.starts_with("() {") || trimmed.starts_with("(){") {
        return true; // Shellshock
    }
    let unquoted = if v.contains(['\'', '"', '\\', '$']) {
        std::borrow::Cow::Owned(shell_unquote(v))
    } else {
        std::borrow::Cow::Borrowed(v)
    };
    let v: &str = &unquoted;
    // A command named by its path: `/bin/sh`, `bin/ansible`, `/usr/bin/perl`.
    for (i, _) in v.match_indices("bin/") {
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
