//! SQL injection beyond libinjection's token fingerprints: calls of SQL functions, statements
//! stacked after `;`, `UNION … SELECT … FROM` however it is spaced, JSON operators applied to a
//! quoted JSON literal (PostgreSQL/MySQL/SQLite JSON syntax that tokenisers do not know), MySQL's
//! `1.e(` evasion, time-based probes, and NoSQL (MongoDB) query operators.

use std::sync::OnceLock;

use aho_corasick::AhoCorasick;

use super::norm::called_names;

/// SQL functions that show up in injection payloads but rarely in form text as `name(`.
pub(super) const SQL_FUNCTIONS: &[&str] = &[
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
    "json_extract",
    "json_value",
    "json_query",
    "json_contains",
    "json_keys",
    "json_object",
    "json_array",
    "jsonb_path_query",
    "json_each",
    "json_search",
    "decode",
    "encode",
    "insert",
    "trim",
    "ltrim",
    "rtrim",
    "pow",
    "power",
    "sin",
    "cos",
    "tan",
    "atan",
    "sqrt",
    "strcmp",
    "sysdate",
    "now",
    "curdate",
    "user",
    "lower",
    "upper",
    "length",
    "len",
    "instr",
    "locate",
    "position",
    "replace",
    "reverse",
    "lpad",
    "rpad",
    "space",
    "repeat",
    "abs",
    "ceil",
    "ceiling",
    "round",
    "mod",
    "log",
    "ln",
    "bin",
    "oct",
    "conv",
    "field",
    "least",
    "greatest",
    "soundex",
    "difference",
    "quotename",
    "db_name",
    "user_name",
    "host_name",
    "object_id",
    "object_name",
    "has_dbaccess",
    "is_srvrolemember",
    "is_member",
    "suser_name",
    "sys_context",
    "utl_http.request",
    "to_char",
    "to_number",
    "to_date",
    "nvl",
    "nvl2",
    "regexp_substr",
    "regexp_like",
    "regexp_replace",
    "collation",
    "charset",
    "crc32",
    "sha2",
    "aes_encrypt",
    "aes_decrypt",
    "des_encrypt",
    "encrypt",
    "password",
    "old_password",
    "uuid",
    "last_insert_id",
    "connection_id",
    "found_rows",
    "load_extension",
    "randomblob",
    "zeroblob",
    "typeof",
    "glob",
    "likelihood",
    "printf",
    "quote",
    "string_agg",
    "array_agg",
    "xmlagg",
    "listagg",
    "pg_read_binary_file",
    "pg_ls_dir",
    "pg_stat_file",
    "current_setting",
    "set_config",
    "query_to_xml",
    "lo_export",
    "dblink",
    "dblink_exec",
    "xp_dirtree",
    "xp_regread",
    "xp_fileexist",
    "sp_oacreate",
    "sp_execute_external_script",
    "openquery",
    "opendatasource",
    "bulk",
];

/// Short or common names: a call of one is SQL only with code-like arguments or SQL nearby.
fn common_name(word: &str) -> bool {
    word.len() <= 4
        || matches!(
            word,
            "version"
                | "database"
                | "schema"
                | "insert"
                | "replace"
                | "decode"
                | "encode"
                | "field"
                | "space"
                | "repeat"
                | "round"
                | "length"
                | "lower"
                | "upper"
                | "reverse"
                | "position"
                | "password"
                | "quote"
                | "printf"
                | "charset"
                | "collation"
                | "difference"
                | "greatest"
                | "least"
                | "locate"
                | "ceiling"
                | "power"
                | "bulk"
        )
}

fn sql_context(lower: &str) -> bool {
    lower.contains("select") || lower.contains("--") || lower.contains('\'')
}

pub(super) fn sql_function_call(lower: &str) -> bool {
    let found = called_names(lower).any(|call| {
        if !SQL_FUNCTIONS.contains(&call.name) {
            return false;
        }
        if matches!(call.before(lower), Some(c) if c.is_ascii_alphanumeric() || c == '.' || c == '-')
        {
            return false;
        }
        if !common_name(call.name) {
            return true;
        }
        let a = call.after.trim_start();
        let bare = a.is_empty() || a.starts_with(')');
        bare || (!call.gap && call.code_like_args()) || sql_context(lower)
    });
    found || escaped_call(lower)
}

/// `md5\(`, `encode=(`: a function name, a stray `\` or `=`, then `(` at the end of the value.
fn escaped_call(lower: &str) -> bool {
    let t = lower.trim_end();
    let Some(head) = t.strip_suffix('(') else {
        return false;
    };
    let name = head.trim_end_matches(['\\', '=', ' ', '\t']);
    let word_start = name
        .char_indices()
        .rev()
        .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_'))
        .map_or(0, |(i, c)| i + c.len_utf8());
    let word = &name[word_start..];
    name.len() < head.len() && SQL_FUNCTIONS.contains(&word)
}

/// Collapses whitespace runs to one space (the input already lower case, comments stripped).
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn word_at(s: &str, i: usize, w: &str) -> bool {
    s[i..].starts_with(w)
        && !s[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && !s[i + w.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
}

/// Phrases that only SQL uses.
const PHRASES: &[&str] = &[
    "execute immediate",
    "waitfor delay",
    "waitfor time",
    "pg_sleep",
    "dbms_pipe.receive_message",
    "create table ",
    "information_schema.",
    "sysobjects",
    "@@version",
    "into outfile",
    "into dumpfile",
    "load data infile",
];

/// Statement keywords and what must follow each for a stacked query.
const STACKED: &[(&str, &[&str])] = &[
    ("insert", &["into"]),
    (
        "drop",
        &[
            "table",
            "database",
            "schema",
            "view",
            "index",
            "user",
            "procedure",
            "function",
        ],
    ),
    ("delete", &["from"]),
    (
        "create",
        &[
            "table",
            "database",
            "user",
            "procedure",
            "function",
            "view",
            "index",
            "trigger",
        ],
    ),
    ("alter", &["table", "user", "database", "login"]),
    ("truncate", &[""]),
    ("replace", &["values", "into"]),
    ("update", &["set"]),
    ("exec", &["xp_", "sp_", "master", "(", "immediate"]),
    ("execute", &["xp_", "sp_", "master", "(", "immediate"]),
    ("declare", &["@"]),
    ("shutdown", &[""]),
    ("grant", &["all", "select", "insert", "execute"]),
];

/// Keyword sequences that are SQL and not prose. `lower` is lower case with comments stripped.
pub(super) fn sql_statements(lower: &str) -> bool {
    // One pass for "could this be SQL at all": any of these words, or a phrase.
    static AC: OnceLock<AhoCorasick> = OnceLock::new();
    let maybe = AC.get_or_init(|| {
        let words = [
            ";", "union", "from", "regexp", "rlike", "sounds", ".e", "waitfor", "sleep",
        ];
        super::automaton(words.iter().chain(PHRASES))
    });
    if !maybe.is_match(lower) {
        return false;
    }
    let s = squeeze(lower);
    // Stacked queries: `; DROP TABLE …`.
    for (i, _) in s.match_indices(';') {
        let rest = s[i + 1..].trim_start();
        for (kw, follow) in STACKED {
            if word_at(rest, 0, kw) {
                let tail = &rest[kw.len()..];
                if follow
                    .iter()
                    .any(|f| f.is_empty() || tail.find(f).is_some_and(|p| p < 64))
                {
                    return true;
                }
            }
        }
    }
    // `UNION [ALL|DISTINCT] SELECT … FROM`, spaced or not.
    if let Some(u) = s.find("union") {
        let after = &s[u + 5..];
        if let Some(sel) = after.find("select") {
            let between = after[..sel].trim();
            let tail = after[sel + 6..].trim_start();
            if matches!(
                between,
                "" | "all" | "distinct" | "(" | "all (" | "distinct ("
            ) && (tail.contains("from") || tail.starts_with("null"))
            {
                return true;
            }
        }
    }

    if PHRASES.iter().any(|p| s.contains(p)) {
        return true;
    }
    // `` ` REGEXP ``, `' RLIKE `: an operator right after a closing quote.
    for op in ["regexp", "rlike", "sounds like"] {
        for (i, _) in s.match_indices(op) {
            let before = s[..i].trim_end();
            if before.ends_with(['`', '\'', '"']) && word_at(&s, i, op) {
                return true;
            }
        }
    }
    alias_from(&s) || scientific_evasion(&s)
}

/// `1234 AS "foobar" FROM`, `` ` AS `id` from ``: a column alias followed by FROM.
fn alias_from(s: &str) -> bool {
    s.match_indices("as").any(|(i, _)| {
        if !word_at(s, i, "as") {
            return false;
        }
        let before = s[..i].trim_end();
        if !before.ends_with(|c: char| c.is_ascii_digit() || matches!(c, '`' | '\'' | '"' | ')')) {
            return false;
        }
        let rest = s[i + 2..].trim_start();
        let quoted = rest.starts_with(['`', '\'', '"']);
        let rest = rest.trim_start_matches(['`', '\'', '"']);
        let ident = rest
            .bytes()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == b'_')
            .count();
        let rest = rest[ident..]
            .trim_start_matches(['`', '\'', '"'])
            .trim_start();
        (quoted || ident > 0) && word_at(rest, 0, "from")
    })
}

/// MySQL reads `1.e(` and `1.e.tables` as a number followed by an identifier: a WAF evasion.
fn scientific_evasion(s: &str) -> bool {
    let b = s.as_bytes();
    s.match_indices(".e").any(|(i, _)| {
        i > 0
            && b[i - 1].is_ascii_digit()
            && (b.get(i + 2) == Some(&b'(')
                || (b.get(i + 2) == Some(&b'.')
                    && b.get(i + 3).is_some_and(|c| c.is_ascii_alphabetic())
                    && b.get(i + 4).is_some_and(|c| c.is_ascii_alphabetic())))
    })
}

const JSON_OPERATORS: &[&str] = &[
    "::", "->>", "->", "#>>", "#>", "#-", "@>", "<@", "?|", "?&", "@?", "@@", "||", "?", "<", ">",
    "=", "-",
];

/// `'{"b":2}'::jsonb <@ …`, `'[1,2]' ? '1'`: a quoted JSON literal used as an SQL operand.
pub(super) fn json_operand(v: &str) -> bool {
    for (i, _) in v.match_indices('\'') {
        let rest = &v[i + 1..];
        if !rest.starts_with(['{', '[']) {
            continue;
        }
        let Some(close) = rest.find('\'') else {
            continue;
        };
        let after = rest[close + 1..].trim_start();
        if JSON_OPERATORS.iter().any(|op| after.starts_with(op)) {
            return true;
        }
    }
    false
}

/// MongoDB query operators, as sent by injection through `param[$ne]=` or JSON keys.
const MONGO_OPERATORS: &[&str] = &[
    "ne",
    "eq",
    "gt",
    "gte",
    "lt",
    "lte",
    "in",
    "nin",
    "not",
    "nor",
    "or",
    "and",
    "where",
    "regex",
    "exists",
    "elemmatch",
    "text",
    "expr",
    "jsonschema",
    "type",
    "all",
    "size",
    "mod",
    "function",
    "accumulator",
    "lookup",
    "group",
    "match",
];

/// `$ne` as a whole value (a JSON key), or `[$ne]` inside a parameter name.
pub(super) fn nosql_operator(v: &str) -> bool {
    let lower = v.trim().to_ascii_lowercase();
    let op_at = |s: &str| {
        s.strip_prefix('$').is_some_and(|op| {
            let len = op.bytes().take_while(u8::is_ascii_alphabetic).count();
            MONGO_OPERATORS.contains(&&op[..len]) && (len == op.len() || op[len..].starts_with(']'))
        })
    };
    let quoted = |s: &str| {
        s.strip_prefix('$').is_some_and(|op| {
            let len = op.bytes().take_while(u8::is_ascii_alphabetic).count();
            MONGO_OPERATORS.contains(&&op[..len]) && op[len..].starts_with('"')
        })
    };
    op_at(&lower)
        || lower
            .match_indices("[$")
            .any(|(i, _)| op_at(&lower[i + 1..]))
        || lower
            .match_indices("{\"$")
            .any(|(i, _)| quoted(&lower[i + 2..]))
}
