//! PHP injection: code tags and stream wrappers, superglobals, calls of high-risk functions
//! (also through quoted names, comments and variable functions), variable variables, serialized
//! objects and `php.ini` directives.

use super::norm::{called_names, Call};
use super::vocabulary;

/// Functions that run code, commands or touch files: calling one by name is the point of a PHP
/// injection. Names that are also English words are judged more strictly (see [`english`]).
const RISKY_FUNCTIONS: &[&str] = &[
    "eval",
    "assert",
    "assert_options",
    "exec",
    "system",
    "passthru",
    "shell_exec",
    "popen",
    "proc_open",
    "pcntl_exec",
    "create_function",
    "call_user_func",
    "call_user_func_array",
    "preg_replace",
    "include",
    "include_once",
    "require",
    "require_once",
    "fopen",
    "fread",
    "fwrite",
    "fputs",
    "file",
    "file_get_contents",
    "file_put_contents",
    "readfile",
    "highlight_file",
    "show_source",
    "phpinfo",
    "unserialize",
    "base64_decode",
    "gzinflate",
    "gzuncompress",
    "str_rot13",
    "unpack",
    "filegroup",
    "fileowner",
    "fileperms",
    "chmod",
    "chown",
    "unlink",
    "rmdir",
    "mkdir",
    "move_uploaded_file",
    "copy",
    "symlink",
    "ini_set",
    "ini_get",
    "ini_restore",
    "putenv",
    "getenv",
    "dl",
    "mail",
    "ob_start",
    "array_map",
    "array_filter",
    "usort",
    "uasort",
    "register_shutdown_function",
    "register_tick_function",
    "set_error_handler",
    "extract",
    "parse_str",
    "printf",
    "sprintf",
    "vprintf",
    "intval",
    "strip_tags",
    "var_dump",
    "print_r",
    "var_export",
    "debug_zval_dump",
    "posix_getpwuid",
    "posix_kill",
    "posix_setuid",
    "escapeshellcmd",
    "escapeshellarg",
    "curl_exec",
    "curl_init",
    "fsockopen",
    "pfsockopen",
    "stream_socket_client",
    "socket_create",
    "glob",
    "scandir",
    "opendir",
    "readdir",
    "get_defined_vars",
    "get_defined_functions",
    "phpversion",
    "php_uname",
    "getcwd",
    "chdir",
    "touch",
    "tempnam",
    "tmpfile",
    "header",
    "serialize",
    "md5_file",
    "hash_file",
    "simplexml_load_file",
    "simplexml_load_string",
    "libxml_disable_entity_loader",
    "mb_ereg_replace",
    "array_walk",
    "iterator_apply",
    "forward_static_call",
];

/// Function names that are also ordinary words in free text.
fn english(name: &str) -> bool {
    matches!(
        name,
        "file"
            | "copy"
            | "header"
            | "mail"
            | "system"
            | "include"
            | "require"
            | "extract"
            | "glob"
            | "touch"
            | "assert"
            | "exec"
            | "eval"
            | "unpack"
            | "serialize"
    )
}

/// `php.ini` directives that change what the interpreter may do; `name=value` of one of these in
/// a parameter is an attempt to reconfigure PHP (through `PHP_VALUE`, `.user.ini` or `ini_set`).
const INI_DIRECTIVES: &[&str] = &[
    "allow_url_fopen",
    "allow_url_include",
    "auto_prepend_file",
    "auto_append_file",
    "disable_functions",
    "disable_classes",
    "open_basedir",
    "include_path",
    "extension",
    "extension_dir",
    "zend_extension",
    "engine",
    "memory_limit",
    "max_execution_time",
    "safe_mode",
    "register_globals",
    "display_errors",
    "log_errors",
    "error_log",
    "error_reporting",
    "file_uploads",
    "upload_tmp_dir",
    "sendmail_path",
    "smtp",
    "smtp_port",
    "precision",
    "serialize_precision",
    "unserialize_max_depth",
    "unserialize_callback_func",
    "short_open_tag",
    "output_handler",
    "output_buffering",
    "doc_root",
    "expose_php",
];

/// Directive families (`opcache.jit=…`).
const INI_PREFIXES: &[&str] = &[
    "opcache.",
    "mbstring.",
    "pcre.",
    "xdebug.",
    "session.",
    "zend.",
    "apc.",
    "phar.",
    "cgi.",
    "assert.",
    "mail.",
    "user_ini.",
    "zlib.",
    "suhosin.",
];

pub(super) fn php(v: &str, lower: &str, stripped: &str, stripped_lower: &str) -> bool {
    if lower.contains("<?php") || lower.contains("<?=") || lower.contains("php://") {
        return true;
    }
    let vocab = vocabulary();
    if v.contains('$') && vocab.php_variables.is_match(v) {
        return true;
    }
    let has_dollar = v.contains('$');
    (stripped.contains('(')
        && (risky_call(stripped_lower)
            || quoted_call(stripped_lower)
            || (has_dollar && variable_call(stripped))))
        || (has_dollar && variable_variable(v))
        || (v.contains(':') && serialized_object(v))
        || (v.contains('=') && ini_directive(lower))
}

fn risky_call(lower: &str) -> bool {
    let vocab = vocabulary();
    let found = called_names(lower).any(|call: Call<'_>| {
        if vocab.php_functions.contains(call.name) {
            return true;
        }
        if !RISKY_FUNCTIONS.contains(&call.name) {
            return false;
        }
        if matches!(call.before(lower), Some(c) if c.is_ascii_alphanumeric() || c == '.' || c == '-')
        {
            return false;
        }
        let at_start = lower[..call.start]
            .trim_start()
            .trim_start_matches(['@', '(', '\'', '"'])
            .is_empty();
        let plural = ["s)", "es)", "ies)"]
            .iter()
            .any(|p| call.after.starts_with(p));
        if !english(call.name) {
            return !call.gap || call.code_like_args() || at_start;
        }
        (!call.gap && !plural) || call.code_like_args() || at_start
    });
    found
}

/// `("system")("id")`, `'exec'('ls')`, `(system)(id)`: a function name as a string or in
/// parentheses, then called.
fn quoted_call(lower: &str) -> bool {
    for (i, opener) in lower.match_indices(['"', '\'', '(']) {
        let rest = &lower[i + 1..];
        let name_len = rest
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        if name_len == 0 {
            continue;
        }
        let name = &rest[..name_len];
        if !RISKY_FUNCTIONS.contains(&name) && !vocabulary().php_functions.contains(name) {
            continue;
        }
        let after = rest[name_len..].trim_start_matches([' ', '\t']);
        let after = match (opener, after.strip_prefix(['"', '\''])) {
            (_, Some(a)) if opener != "(" => a,
            ("(", _) if after.starts_with(')') => after,
            _ => continue,
        };
        if after
            .trim_start_matches([' ', '\t', ')'])
            .trim_start()
            .starts_with('(')
        {
            return true;
        }
    }
    false
}

/// `$f(…)`, `$$b(…)`, `$__['o'](…)`, `${'a'}(…)`, `$obj->$m(…)`, `Foo::$v()`: calling a variable.
fn variable_call(v: &str) -> bool {
    let b = v.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'$' {
            i += 1;
            continue;
        }
        let mut j = i + 1;
        while j < b.len() && (b[j] == b'$' || b[j] == b'@') {
            j += 1;
        }
        // The variable: a name or a `{…}` expression.
        match b.get(j) {
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' || *c >= 0x80 => {
                while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] >= 0x80)
                {
                    j += 1;
                }
            }
            Some(b'{') => match skip_group(b, j) {
                Some(end) => j = end,
                None => {
                    i += 1;
                    continue;
                }
            },
            _ => {
                i += 1;
                continue;
            }
        }
        // Then any chain of `[…]`, `{…}` and `->name`, with whitespace between.
        loop {
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            match b.get(j) {
                Some(b'[') | Some(b'{') => match skip_group(b, j) {
                    Some(end) => j = end,
                    None => break,
                },
                Some(b'-') if b.get(j + 1) == Some(&b'>') => {
                    j += 2;
                    while j < b.len()
                        && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b'$')
                    {
                        j += 1;
                    }
                }
                _ => break,
            }
        }
        if b.get(j) == Some(&b'(') {
            return true;
        }
        i += 1;
    }
    false
}

/// Skips a bracketed group starting at `open` (nesting allowed); returns the index after it.
fn skip_group(b: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (k, c) in b.iter().enumerate().skip(open) {
        match c {
            b'[' | b'{' => depth += 1,
            b']' | b'}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(k + 1);
                }
            }
            _ => {}
        }
        if k - open > 256 {
            return None;
        }
    }
    None
}

/// `${'name'}`, `$ {$a}`: a variable variable.
fn variable_variable(v: &str) -> bool {
    v.match_indices('$').any(|(i, _)| {
        v[i + 1..]
            .trim_start_matches([' ', '\t'])
            .strip_prefix('{')
            .is_some_and(|rest| rest.contains('}'))
    })
}

/// `O:8:"stdClass":…` or `C:…`: a serialized PHP object, the vehicle of object injection.
fn serialized_object(v: &str) -> bool {
    let b = v.as_bytes();
    (0..b.len().saturating_sub(3)).any(|i| {
        matches!(b[i], b'O' | b'C')
            && b[i + 1] == b':'
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric())
            && {
                let digits = b[i + 2..].iter().take_while(|c| c.is_ascii_digit()).count();
                digits > 0 && b[i + 2 + digits..].starts_with(b":\"")
            }
    })
}

fn ini_directive(lower: &str) -> bool {
    let Some(eq) = lower.find('=') else {
        return false;
    };
    let name = lower[..eq].trim();
    INI_DIRECTIVES.contains(&name)
        || INI_PREFIXES.iter().any(|p| {
            name.starts_with(p)
                && name
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'.')
        })
}
