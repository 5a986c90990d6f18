//! Variables (`ARGS`, `REQUEST_HEADERS:User-Agent`, `!ARGS:/^utm_/`, `&TX:score`) and the
//! collections a transaction offers them from.

use regex::bytes::{Regex, RegexBuilder};

macro_rules! vars {
    ($($v:ident = $name:literal,)*) => {
        /// A collection or single value a rule can read.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Var {
            $($v,)*
            /// Collections this engine does not keep (persistent `IP`, `GEO`, `DURATION`, `ENV`,
            /// …): they read as empty.
            Unsupported,
        }

        impl Var {
            /// Every variable, in discriminant order.
            pub const ALL: &'static [Var] = &[$(Var::$v,)* Var::Unsupported];

            /// Its SecLang name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Var::$v => $name,)*
                    Var::Unsupported => "UNSUPPORTED",
                }
            }

            pub fn by_name(name: &str) -> Option<Var> {
                let up = name.to_ascii_uppercase();
                $(if up == $name { return Some(Var::$v); })*
                if UNSUPPORTED.contains(&up.as_str()) {
                    return Some(Var::Unsupported);
                }
                None
            }
        }
    };
}

vars! {
    Args = "ARGS",
    ArgsNames = "ARGS_NAMES",
    ArgsGet = "ARGS_GET",
    ArgsGetNames = "ARGS_GET_NAMES",
    ArgsPost = "ARGS_POST",
    ArgsPostNames = "ARGS_POST_NAMES",
    ArgsCombinedSize = "ARGS_COMBINED_SIZE",
    RequestHeaders = "REQUEST_HEADERS",
    RequestHeadersNames = "REQUEST_HEADERS_NAMES",
    RequestCookies = "REQUEST_COOKIES",
    RequestCookiesNames = "REQUEST_COOKIES_NAMES",
    RequestFilename = "REQUEST_FILENAME",
    RequestBasename = "REQUEST_BASENAME",
    RequestUri = "REQUEST_URI",
    RequestUriRaw = "REQUEST_URI_RAW",
    RequestLine = "REQUEST_LINE",
    RequestMethod = "REQUEST_METHOD",
    RequestProtocol = "REQUEST_PROTOCOL",
    QueryString = "QUERY_STRING",
    RequestBody = "REQUEST_BODY",
    RequestBodyLength = "REQUEST_BODY_LENGTH",
    Files = "FILES",
    FilesNames = "FILES_NAMES",
    FilesCombinedSize = "FILES_COMBINED_SIZE",
    MultipartPartHeaders = "MULTIPART_PART_HEADERS",
    MultipartFilename = "MULTIPART_FILENAME",
    MultipartName = "MULTIPART_NAME",
    MultipartStrictError = "MULTIPART_STRICT_ERROR",
    MultipartUnmatchedBoundary = "MULTIPART_UNMATCHED_BOUNDARY",
    Xml = "XML",
    RemoteAddr = "REMOTE_ADDR",
    Tx = "TX",
    MatchedVar = "MATCHED_VAR",
    MatchedVars = "MATCHED_VARS",
    MatchedVarName = "MATCHED_VAR_NAME",
    MatchedVarsNames = "MATCHED_VARS_NAMES",
    ReqbodyProcessor = "REQBODY_PROCESSOR",
    ReqbodyError = "REQBODY_ERROR",
    ReqbodyErrorMsg = "REQBODY_ERROR_MSG",
    UniqueId = "UNIQUE_ID",
}

/// Variables of ModSecurity this engine knows and does not keep.
const UNSUPPORTED: &[&str] = &[
    "IP",
    "GEO",
    "DURATION",
    "ENV",
    "GLOBAL",
    "SESSION",
    "USER",
    "RESOURCE",
    "REMOTE_HOST",
    "REMOTE_PORT",
    "SERVER_NAME",
    "SERVER_ADDR",
    "SERVER_PORT",
    "TIME",
    "TIME_EPOCH",
    "WEBSERVER_ERROR_LOG",
    "RULE",
    "AUTH_TYPE",
    "INBOUND_DATA_ERROR",
    "URLENCODED_ERROR",
    "REQBODY_PROCESSOR_ERROR",
    "MULTIPART_BOUNDARY_QUOTED",
    "MULTIPART_BOUNDARY_WHITESPACE",
    "MULTIPART_DATA_BEFORE",
    "MULTIPART_DATA_AFTER",
    "MULTIPART_HEADER_FOLDING",
    "MULTIPART_LF_LINE",
    "MULTIPART_MISSING_SEMICOLON",
    "MULTIPART_INVALID_QUOTING",
    "MULTIPART_INVALID_PART",
    "MULTIPART_INVALID_HEADER_FOLDING",
    "MULTIPART_FILE_LIMIT_EXCEEDED",
    "MULTIPART_CRLF_LF_LINES",
    "FULL_REQUEST",
    "FULL_REQUEST_LENGTH",
    "REQUEST_BODY_PROCESSOR",
    "STATUS_LINE",
    "RESPONSE_BODY",
    "RESPONSE_HEADERS",
    "RESPONSE_STATUS",
];

impl Var {
    /// Variables whose value is one item without a key.
    pub fn is_single(self) -> bool {
        use Var::*;
        matches!(
            self,
            ArgsCombinedSize
                | RequestFilename
                | RequestBasename
                | RequestUri
                | RequestUriRaw
                | RequestLine
                | RequestMethod
                | RequestProtocol
                | QueryString
                | RequestBody
                | RequestBodyLength
                | FilesCombinedSize
                | MultipartStrictError
                | MultipartUnmatchedBoundary
                | RemoteAddr
                | MatchedVar
                | MatchedVarName
                | ReqbodyProcessor
                | ReqbodyError
                | ReqbodyErrorMsg
                | UniqueId
        )
    }
}

/// Which members of a collection a target reads.
#[derive(Debug, Clone)]
pub enum Selector {
    All,
    /// A key, lower-cased (keys compare without case).
    Key(Vec<u8>),
    /// `/regex/` on the key (case-insensitive).
    Regex(Regex),
}

impl Selector {
    pub fn parse(s: &str) -> Result<Selector, String> {
        if s.is_empty() {
            return Ok(Selector::All);
        }
        if s.len() >= 2 && s.starts_with('/') && s.ends_with('/') {
            let re = RegexBuilder::new(&s[1..s.len() - 1])
                .case_insensitive(true)
                .unicode(false)
                .build()
                .map_err(|e| format!("bad key regex {s}: {e}"))?;
            return Ok(Selector::Regex(re));
        }
        let s = s.trim_matches('\'');
        Ok(Selector::Key(s.to_ascii_lowercase().into_bytes()))
    }

    /// Does this selector take the key `k`?
    pub fn takes(&self, k: &[u8]) -> bool {
        match self {
            Selector::All => true,
            Selector::Key(key) => key.eq_ignore_ascii_case(k),
            Selector::Regex(re) => re.is_match(k),
        }
    }

    pub fn same_as(&self, other: &Selector) -> bool {
        match (self, other) {
            (Selector::All, Selector::All) => true,
            (Selector::Key(a), Selector::Key(b)) => a == b,
            (Selector::Regex(a), Selector::Regex(b)) => a.as_str() == b.as_str(),
            _ => false,
        }
    }
}

/// One target of a rule: `VAR[:selector]`, possibly counted (`&`), with the exclusions (`!VAR:key`)
/// that name the same variable.
#[derive(Debug, Clone)]
pub struct Target {
    pub var: Var,
    pub selector: Selector,
    pub count: bool,
    pub exclusions: Vec<Selector>,
}

/// Parses a target list `ARGS|!ARGS:x|&TX:y`. Exclusions attach to every positive target of
/// the same variable.
pub fn parse_targets(text: &str) -> Result<Vec<Target>, String> {
    let mut pos = Vec::new();
    let mut neg: Vec<(Var, Selector)> = Vec::new();
    for part in split_targets(text) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (negated, count, rest) = if let Some(r) = part.strip_prefix('!') {
            (true, false, r)
        } else if let Some(r) = part.strip_prefix('&') {
            (false, true, r)
        } else {
            (false, false, part)
        };
        let (name, sel) = match rest.split_once(':') {
            Some((n, s)) => (n, s),
            None => (rest, ""),
        };
        let var = Var::by_name(name).ok_or_else(|| format!("unknown variable {name}"))?;
        let selector = if var == Var::Xml {
            Selector::Key(sel.as_bytes().to_vec())
        } else {
            Selector::parse(sel)?
        };
        if negated {
            neg.push((var, selector));
        } else {
            pos.push(Target {
                var,
                selector,
                count,
                exclusions: Vec::new(),
            });
        }
    }
    for t in &mut pos {
        for (v, s) in &neg {
            if *v == t.var {
                t.exclusions.push(s.clone());
            }
        }
    }
    Ok(pos)
}

/// Splits on `|` outside `/regex/` selectors.
fn split_targets(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut start = 0;
    let mut in_re = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            // `VAR:/regex/`, except XML's XPath selectors (`XML:/*`, `XML://@*`).
            b'/' if !in_re
                && i > 0
                && b[i - 1] == b':'
                && !text[start..i]
                    .trim_start_matches(['!', '&'])
                    .eq_ignore_ascii_case("XML:") =>
            {
                in_re = true
            }
            b'\\' if in_re => i += 1,
            b'/' if in_re => in_re = false,
            b'|' if !in_re => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_with_exclusions_counts_and_regex_keys() {
        let t = parse_targets(
            "REQUEST_COOKIES|!REQUEST_COOKIES:/__utm/|ARGS_NAMES|ARGS|!ARGS:pwd|&TX:x|XML:/*",
        )
        .unwrap();
        assert_eq!(t.len(), 5);
        assert_eq!(t[0].var, Var::RequestCookies);
        assert_eq!(t[0].exclusions.len(), 1);
        assert!(t[0].exclusions[0].takes(b"__utmz"));
        assert_eq!(t[2].var, Var::Args);
        assert!(t[2].exclusions[0].takes(b"PWD"));
        assert!(t[3].count);
        assert!(matches!(t[4].var, Var::Xml));
        let t = parse_targets("ARGS|XML:/*|XML://@*|REQUEST_BODY").unwrap();
        assert_eq!(t.len(), 4);
    }

    #[test]
    fn regex_selectors_may_hold_pipes() {
        let t = parse_targets("ARGS:/^(a|b)$/|ARGS_NAMES").unwrap();
        assert_eq!(t.len(), 2);
        assert!(t[0].selector.takes(b"A"));
        assert!(!t[0].selector.takes(b"c"));
    }

    #[test]
    fn unknown_variables_are_errors() {
        assert!(parse_targets("ARGZ").is_err());
    }
}
