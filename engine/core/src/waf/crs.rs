//! The OWASP Core Rule Set, run natively by `rampart-seclang`, for the edge tier's `crs(req)`.
//!
//! The caller (the server) reads the rule files; this module decides which of them make the set,
//! writes the setup the CRS expects (paranoia level, anomaly threshold, allowed methods) in
//! front, adds Rampart's own exclusions after them, and judges requests with the compiled set.
//!
//! Which files: the request-phase attack files (`REQUEST-9xx-*.conf`) except those that judge
//! what a request judge does not see or keeps elsewhere — 910 (IP reputation, persistent
//! collections), 911 (allowed methods: a route's business), 912 (DoS, persistent collections)
//! and 920 (HTTP protocol conformance: gateways forward a subset of the headers, so "no Accept
//! header" says nothing about the client). `skip` in the options names them; an operator may
//! change it.

use std::sync::Arc;

use rampart_seclang::{Request, Ruleset};

use crate::model::DecideRequest;

/// Files of a CRS rules directory left out by default (see the module docs).
pub const DEFAULT_SKIP: &[&str] = &[
    "REQUEST-910-",
    "REQUEST-911-",
    "REQUEST-912-",
    "REQUEST-920-",
];

/// Rules removed after the CRS files by default, with why (in the file): each fired on 0.3% or
/// more of benign shop traffic at paranoia level 2, and together they refused 24% of it. What
/// they still add on attacks is measured in docs/waf.md.
pub const DEFAULT_EXCLUSIONS: &str = include_str!("crs-exclusions.conf");

/// How the set is built.
#[derive(Debug, Clone)]
pub struct CrsOptions {
    /// Paranoia level the rules run at (1–4).
    pub paranoia: u8,
    /// Inbound anomaly score at which a request is refused (CRS's own default is 5).
    pub threshold: i64,
    /// File name prefixes left out.
    pub skip: Vec<String>,
    /// Apply [`DEFAULT_EXCLUSIONS`].
    pub default_exclusions: bool,
}

impl Default for CrsOptions {
    fn default() -> Self {
        CrsOptions {
            paranoia: 2,
            threshold: 5,
            skip: DEFAULT_SKIP.iter().map(|s| s.to_string()).collect(),
            default_exclusions: true,
        }
    }
}

/// A compiled CRS and what it was built from.
#[derive(Debug)]
pub struct Crs {
    rules: Ruleset,
    pub options: CrsOptions,
    /// `SecComponentSignature` of the set (e.g. `OWASP_CRS/3.3.4`), if it has one.
    pub version: String,
    /// Files compiled, in order.
    pub files: Vec<String>,
}

/// What the CRS made of one request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CrsVerdict {
    /// The anomaly score reached the threshold (or a rule denied outright).
    pub blocked: bool,
    pub score: i64,
    /// Ids of the attack rules that matched, in order.
    pub rules: Vec<u32>,
}

impl CrsVerdict {
    /// The attack family of the first matched attack rule (`sqli`, `xss`, `rce`, …), or "".
    pub fn attack(&self) -> &'static str {
        self.rules.first().map(|&id| family(id)).unwrap_or("")
    }

    /// The matched rule ids, comma-separated.
    pub fn rule_list(&self) -> String {
        self.rules
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// The attack family a CRS rule id belongs to (by its file's number).
pub fn family(id: u32) -> &'static str {
    match id / 1000 {
        913 => "scanner",
        920 => "protocol",
        921 => "protocol",
        922 => "multipart",
        930 => "lfi",
        931 => "rfi",
        932 => "rce",
        933 => "php",
        934 => "generic",
        941 => "xss",
        942 => "sqli",
        943 => "session_fixation",
        944 => "java",
        _ => "other",
    }
}

impl Crs {
    /// Compiles the set from a directory's files (name, text) — only `REQUEST-*.conf` files are
    /// taken, minus `options.skip` — then `after` (an operator's exclusion files, name and
    /// text). `data` reads the data files the rules name.
    pub fn build(
        dir_files: &[(String, String)],
        after: &[(String, String)],
        data: &dyn Fn(&str) -> Result<String, String>,
        options: CrsOptions,
    ) -> Result<Crs, Vec<rampart_seclang::Error>> {
        let p = options.paranoia.clamp(1, 4);
        let setup = format!(
            "SecAction \"id:900000,phase:1,pass,nolog,\
             setvar:tx.crs_setup_version=400,\
             setvar:tx.paranoia_level={p},setvar:tx.executing_paranoia_level={p},\
             setvar:tx.blocking_paranoia_level={p},setvar:tx.detection_paranoia_level={p},\
             setvar:tx.inbound_anomaly_score_threshold={t},\
             setvar:'tx.allowed_methods=GET HEAD POST OPTIONS PUT PATCH DELETE'\"\n",
            t = options.threshold
        );
        let mut files = vec![("rampart-setup.conf".to_string(), setup)];
        let mut names: Vec<&(String, String)> = dir_files
            .iter()
            .filter(|(n, _)| n.starts_with("REQUEST-") && n.ends_with(".conf"))
            .filter(|(n, _)| !options.skip.iter().any(|s| n.starts_with(s.as_str())))
            .collect();
        names.sort_by(|a, b| a.0.cmp(&b.0));
        files.extend(names.into_iter().cloned());
        if options.default_exclusions {
            files.push((
                "rampart-exclusions.conf".to_string(),
                DEFAULT_EXCLUSIONS.to_string(),
            ));
        }
        files.extend(after.iter().cloned());
        let version = dir_files
            .iter()
            .find_map(|(_, t)| {
                t.lines()
                    .find_map(|l| l.trim().strip_prefix("SecComponentSignature"))
                    .map(|v| v.trim().trim_matches('"').to_string())
            })
            .unwrap_or_default();
        let rules = Ruleset::build(&files, data)?;
        Ok(Crs {
            rules,
            options,
            version,
            files: files.into_iter().map(|(n, _)| n).collect(),
        })
    }

    /// Rules left after specialising to the options, and how many were folded at load.
    pub fn rule_counts(&self) -> (usize, usize) {
        (self.rules.rule_count(), self.rules.folded())
    }

    pub fn warnings(&self) -> &[String] {
        self.rules.warnings()
    }

    /// Forgets what the rule set has learnt about values it judged, and libinjection's memo in
    /// this thread (benchmarks measure the cold cost so).
    pub fn clear_memo(&self) {
        self.rules.clear_memo();
        rampart_seclang::ops::clear_memo();
    }

    /// Judges a request as its HTTP form: method, path and query, headers (the caller's
    /// `client.user_agent` as `User-Agent` when the headers have none), body, client address.
    pub fn judge(&self, r: &DecideRequest) -> CrsVerdict {
        let q = &r.request;
        let uri;
        let uri_ref = if q.query.is_empty() {
            q.path.as_str()
        } else {
            uri = format!("{}?{}", q.path, q.query);
            uri.as_str()
        };
        // A proof-of-work solution or clearance reaching the rules was verified by its MAC: it
        // is Rampart's own token, not the client's text (see `UNSCANNED_HEADERS`). Nor are
        // well-formed anti-replay headers handed over (`anti_replay_token`).
        let mut headers: Vec<(&str, &str)> = q
            .headers
            .iter()
            .filter(|(k, v)| {
                ![
                    crate::challenge::SOLUTION_HEADER,
                    crate::challenge::CLEARANCE_HEADER,
                ]
                .iter()
                .any(|h| h.eq_ignore_ascii_case(k))
                    && !anti_replay_token(k, v)
            })
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if let Some(ua) = r.client.user_agent.as_deref() {
            if !q
                .headers
                .keys()
                .any(|k| k.eq_ignore_ascii_case("user-agent"))
            {
                headers.push(("user-agent", ua));
            }
        }
        let req = Request {
            method: &q.method,
            uri: uri_ref,
            protocol: "HTTP/1.1",
            headers,
            body: q.body.as_deref().unwrap_or("").as_bytes(),
            remote_addr: r.client.ip.as_deref().unwrap_or(""),
        };
        let o = self.rules.evaluate(&req);
        let rules: Vec<u32> = o
            .matched
            .iter()
            .filter(|m| m.id < 949_000 && m.severity.is_some_and(|s| s <= 5))
            .map(|m| m.id)
            .collect();
        CrsVerdict {
            blocked: o.interrupted.is_some() || o.score >= self.options.threshold,
            score: o.score,
            rules,
        }
    }
}

/// Whether the header `name: value` is one of the anti-replay headers in exactly the form its
/// step reads, each checked by that step's own function: a timestamp of 1–16 digits, a nonce of
/// contract v1 (16–64 of `[A-Za-z0-9_-]`), `v1=<64 hex>` signature entries, a 64-hex body hash,
/// a key id (`[A-Za-z0-9._-]`). Such a value holds nothing a rule of the Core Rule Set looks for;
/// it is fresh on every request, so each one scanned cost the CRS a cold pass of every header
/// rule (6% of its instructions on the load test's traffic). Any other value of these headers,
/// and any value a step would refuse, is scanned as before: the edge runs before the
/// anti-replay steps, and what they would refuse is still the attacker's text when the edge
/// reads it.
pub fn anti_replay_token(name: &str, value: &str) -> bool {
    match name.len() {
        11 if name.eq_ignore_ascii_case("x-timestamp") => {
            crate::replay::canonical::parse_timestamp(value).is_some()
        }
        7 if name.eq_ignore_ascii_case("x-nonce") => {
            crate::replay::nonce::validate_nonce(value).is_ok()
        }
        11 if name.eq_ignore_ascii_case("x-signature") => {
            crate::replay::keys::well_formed_signature(value)
        }
        16 if name.eq_ignore_ascii_case("x-content-sha256") => {
            crate::replay::canonical::is_sha256_hex(value)
        }
        8 if name.eq_ignore_ascii_case("x-key-id") => crate::replay::keys::valid_key_id(value),
        _ => false,
    }
}

/// A shared, compiled set (what the rule runtime holds).
pub type SharedCrs = Arc<Crs>;
