//! The request being judged and the verdict: contract v1's data model.

use std::collections::HashMap;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

/// Body of `POST /v1/decide`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DecideRequest {
    pub app: String,
    #[serde(default)]
    pub request: JudgedRequest,
    #[serde(default)]
    pub client: ClientInfo,
    /// A string, or a number (taken as its decimal spelling).
    #[serde(default, deserialize_with = "string_or_number")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub user_id: Option<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub params: Option<Value>,
}

/// A judged request's headers: a hash map keyed with foldhash, not std's SipHash. Every decision
/// builds one from the body (ten or so names) and the rules and the WAF look names up in it;
/// SipHash was 13% of parsing a `/v1/decide` body. foldhash is seeded per process, so header
/// names an attacker chooses cannot be aimed at one bucket across processes, and a collision costs
/// time, never an answer: keys are compared whole.
pub type Headers = HashMap<String, String, foldhash::fast::RandomState>;

/// The end-user request a caller asks about.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JudgedRequest {
    #[serde(default = "default_method")]
    pub method: String,
    #[serde(default = "default_path")]
    pub path: String,
    /// Raw query string without the leading `?`.
    #[serde(default)]
    pub query: String,
    /// Header names in lower case (looked up case-insensitively all the same).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = HashMap<String, String>))]
    pub headers: Headers,
    #[serde(default)]
    pub body: Option<String>,
    /// Lower-case hex SHA-256 of the body, for callers that do not forward the body.
    #[serde(default)]
    pub body_sha256: Option<String>,
    /// The path as the client sent it, when the engine normalised `path` ([`crate::path`]): the
    /// signature covers this one. Set by the engine, never read from the caller.
    #[serde(skip)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub raw_path: Option<String>,
}

fn default_method() -> String {
    "GET".to_string()
}
fn default_path() -> String {
    "/".to_string()
}

impl Default for JudgedRequest {
    fn default() -> Self {
        JudgedRequest {
            method: default_method(),
            path: default_path(),
            query: String::new(),
            headers: Headers::default(),
            body: None,
            body_sha256: None,
            raw_path: None,
        }
    }
}

/// The headers the anti-replay steps read. A request carrying one of them twice (names differing
/// only in case, or a header repeated through a proxy) is refused: which copy would be read must
/// never depend on a map's order.
pub const ANTI_REPLAY_HEADERS: [&str; 4] =
    ["x-timestamp", "x-nonce", "x-signature", "x-content-sha256"];

impl JudgedRequest {
    /// Checks the method and query and puts the path in its normal form ([`crate::path`]), keeping
    /// the path as sent in `raw_path` for the signature when it changes.
    pub fn normalize(&mut self) -> Result<(), crate::path::PathError> {
        crate::path::check_method(&self.method)?;
        crate::path::check_query(&self.query)?;
        if let std::borrow::Cow::Owned(p) = crate::path::normalize_path(&self.path)? {
            let raw = std::mem::replace(&mut self.path, p);
            self.raw_path.get_or_insert(raw);
        }
        Ok(())
    }

    /// Whether [`JudgedRequest::normalize`] would change nothing (and refuse nothing).
    pub fn is_normalized(&self) -> bool {
        crate::path::check_method(&self.method).is_ok()
            && crate::path::check_query(&self.query).is_ok()
            && matches!(
                crate::path::normalize_path(&self.path),
                Ok(std::borrow::Cow::Borrowed(_))
            )
    }

    /// The path the signature covers: as the client sent it.
    pub fn signed_path(&self) -> &str {
        self.raw_path.as_deref().unwrap_or(&self.path)
    }

    /// The first anti-replay header ([`ANTI_REPLAY_HEADERS`]) present under more than one name.
    pub fn duplicate_anti_replay_header(&self) -> Option<&'static str> {
        let mut seen = [false; ANTI_REPLAY_HEADERS.len()];
        for k in self.headers.keys() {
            // Only names of the right lengths can match: most headers cost one comparison.
            if !matches!(k.len(), 7 | 11 | 16) {
                continue;
            }
            for (i, name) in ANTI_REPLAY_HEADERS.iter().enumerate() {
                if k.eq_ignore_ascii_case(name) {
                    if seen[i] {
                        return Some(name);
                    }
                    seen[i] = true;
                }
            }
        }
        None
    }

    /// Case-insensitive header lookup.
    pub fn header(&self, name: &str) -> Option<&str> {
        if let Some(v) = self.headers.get(name) {
            return Some(v.as_str());
        }
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// [`JudgedRequest::header`] of each of `names` (given in lower case), in one pass over the
    /// headers instead of a hash per name (and a scan per name that is absent): an exact match
    /// wins, else the first case-insensitive one.
    pub fn headers_of<const N: usize>(&self, names: [&str; N]) -> [Option<&str>; N] {
        let mut exact = [None; N];
        let mut folded = [None; N];
        for (k, v) in &self.headers {
            for (i, name) in names.iter().enumerate() {
                if k.len() != name.len() {
                    continue;
                }
                if k == name {
                    exact[i] = Some(v.as_str());
                } else if folded[i].is_none() && k.eq_ignore_ascii_case(name) {
                    folded[i] = Some(v.as_str());
                }
            }
        }
        std::array::from_fn(|i| exact[i].or(folded[i]))
    }
}

/// What the caller knows about the client.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClientInfo {
    #[serde(default)]
    pub ip: Option<String>,
    #[serde(default)]
    pub device_id: Option<String>,
    #[serde(default)]
    pub ja3: Option<String>,
    #[serde(default)]
    pub country: Option<String>,
    #[serde(default)]
    pub isp: Option<String>,
    #[serde(default)]
    pub device_type: Option<String>,
    #[serde(default)]
    pub user_agent: Option<String>,
}

/// `user_id`: a string, or a number taken as its decimal spelling (as `serde_json::Number` writes
/// it: `42`, `-7`, `1.5`), or null. Read with a visitor: an untagged enum would first copy the
/// value into serde's buffer.
fn string_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct Id;
    impl<'de> serde::de::Visitor<'de> for Id {
        type Value = Option<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or a number")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_owned()))
        }
        fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v.to_string()))
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
            serde_json::Number::from_f64(v)
                .map(|n| Some(n.to_string()))
                .ok_or_else(|| E::custom("user_id: not a finite number"))
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Id)
        }
    }
    d.deserialize_option(Id)
}

/// The four answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Action {
    #[default]
    Allow,
    Challenge,
    Review,
    Deny,
}

impl Action {
    pub const ALL: [Action; 4] = [
        Action::Allow,
        Action::Challenge,
        Action::Review,
        Action::Deny,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Allow => "allow",
            Action::Challenge => "challenge",
            Action::Review => "review",
            Action::Deny => "deny",
        }
    }
}

/// Decision codes of contract v1: stable strings, each with one suggested status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    Ok,
    SignatureMissing,
    SignatureInvalid,
    TimestampSkew,
    NonceInvalid,
    ReplayDuplicate,
    DuplicateSubmission,
    RateLimited,
    CircuitOpen,
    RuleDeny,
    RuleChallenge,
    /// Let through, flagged for manual review (an extension of contract v1).
    RuleReview,
    StoreUnavailable,
    QuotaExhausted,
    /// A proof-of-work solution or clearance that is wrong, expired, foreign or reused (v1.1).
    ChallengeFailed,
}

impl Code {
    pub const ALL: [Code; 15] = [
        Code::Ok,
        Code::SignatureMissing,
        Code::SignatureInvalid,
        Code::TimestampSkew,
        Code::NonceInvalid,
        Code::ReplayDuplicate,
        Code::DuplicateSubmission,
        Code::RateLimited,
        Code::CircuitOpen,
        Code::RuleDeny,
        Code::RuleChallenge,
        Code::RuleReview,
        Code::StoreUnavailable,
        Code::QuotaExhausted,
        Code::ChallengeFailed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::SignatureMissing => "SIGNATURE_MISSING",
            Code::SignatureInvalid => "SIGNATURE_INVALID",
            Code::TimestampSkew => "TIMESTAMP_SKEW",
            Code::NonceInvalid => "NONCE_INVALID",
            Code::ReplayDuplicate => "REPLAY_DUPLICATE",
            Code::DuplicateSubmission => "DUPLICATE_SUBMISSION",
            Code::RateLimited => "RATE_LIMITED",
            Code::CircuitOpen => "CIRCUIT_OPEN",
            Code::RuleDeny => "RULE_DENY",
            Code::RuleChallenge => "RULE_CHALLENGE",
            Code::RuleReview => "RULE_REVIEW",
            Code::StoreUnavailable => "STORE_UNAVAILABLE",
            Code::QuotaExhausted => "QUOTA_EXHAUSTED",
            Code::ChallengeFailed => "CHALLENGE_FAILED",
        }
    }

    /// The HTTP status the caller should return to its user. `RULE_CHALLENGE` is 401 by default
    /// and configurable (`[server] challenge_status`).
    pub fn status(self) -> u16 {
        match self {
            Code::Ok | Code::RuleReview => 200,
            Code::SignatureMissing | Code::SignatureInvalid | Code::TimestampSkew => 401,
            Code::NonceInvalid => 400,
            Code::ReplayDuplicate | Code::DuplicateSubmission | Code::QuotaExhausted => 409,
            Code::RateLimited => 429,
            Code::CircuitOpen | Code::StoreUnavailable => 503,
            Code::RuleDeny | Code::ChallengeFailed => 403,
            Code::RuleChallenge => 401,
        }
    }
}

/// The step of the decision path that produced the verdict (a metric label; DESIGN §1 order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    Edge,
    Signature,
    Window,
    Nonce,
    Fingerprint,
    Gateway,
    Business,
    /// Passed every step.
    Final,
}

impl Step {
    /// True when the decision got past the anti-replay steps to the rules (or was made by the
    /// edge tier, which runs first).
    pub fn reached_rules(self) -> bool {
        matches!(
            self,
            Step::Edge | Step::Gateway | Step::Business | Step::Final
        )
    }

    /// True for the steps where rules decide.
    pub fn is_rule_tier(self) -> bool {
        matches!(self, Step::Edge | Step::Gateway | Step::Business)
    }

    pub const ALL: [Step; 8] = [
        Step::Edge,
        Step::Signature,
        Step::Window,
        Step::Nonce,
        Step::Fingerprint,
        Step::Gateway,
        Step::Business,
        Step::Final,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Edge => "edge",
            Step::Signature => "signature",
            Step::Window => "window",
            Step::Nonce => "nonce",
            Step::Fingerprint => "fingerprint",
            Step::Gateway => "gateway",
            Step::Business => "business",
            Step::Final => "final",
        }
    }

    /// The `tier` reported in a decision: rule tiers by name, anti-replay steps as `replay`.
    pub fn tier(self) -> Option<&'static str> {
        match self {
            Step::Edge => Some("edge"),
            Step::Signature | Step::Window | Step::Nonce | Step::Fingerprint => Some("replay"),
            Step::Gateway => Some("gateway"),
            Step::Business => Some("business"),
            Step::Final => None,
        }
    }
}

/// One reason behind a verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Reason {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_time_ms: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skew_ms: Option<i64>,
}

impl Reason {
    pub fn new(message: impl Into<String>) -> Self {
        Reason {
            message: message.into(),
            server_time_ms: None,
            skew_ms: None,
        }
    }
}

/// What a shadow rule would have done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ShadowHit {
    pub tier: String,
    pub rule: String,
    pub action: Action,
    pub code: Code,
    pub reason: String,
    /// The candidate rule set's version when the hit comes from a candidate in the shadow stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// The core's answer; the server adds the decision id, latency and rule set.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Verdict {
    pub action: Action,
    pub code: Code,
    pub status: u16,
    pub tier: Option<&'static str>,
    pub rule: Option<String>,
    pub reasons: Vec<Reason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    pub shadow: Vec<ShadowHit>,
    /// True when a store failed and the `allow` failure policy let the request through.
    pub degraded: bool,
    #[serde(skip)]
    pub step: Step,
    /// The risk score the rules added up (recorded in the decision log).
    #[serde(skip)]
    pub score: i64,
    /// Version of the rule set the decision was made with.
    #[serde(skip)]
    pub ruleset_version: String,
    /// Which arm of a rollout made the decision.
    #[serde(skip)]
    pub arm: Arm,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server_time_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skew_ms: Option<i64>,
    /// The signing key the request's signature matched (set once the signature step passed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<std::sync::Arc<str>>,
    /// With a `challenge` answer: the proof of work that passes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<crate::challenge::Challenge>,
    /// After a verified solution: the clearance later requests carry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clearance: Option<crate::challenge::Clearance>,
    /// The difficulty a rule asked for (`challenge(reason, #{difficulty: N})`).
    #[serde(skip)]
    pub challenge_difficulty: Option<u8>,
    /// The request carried a valid solution or clearance (`req.cleared`).
    #[serde(skip)]
    pub cleared: bool,
    /// With a solution used by this request: how long after its challenge was issued it came
    /// back solved (ms), for the solve-time metric.
    #[serde(skip)]
    pub solve_ms: Option<i64>,
}

impl Verdict {
    /// Where the request stands with challenges, for the decision log: `issued` (this answer
    /// carries a challenge), `solved` (a solution was used and a clearance issued), `cleared`
    /// (a valid clearance or solution made `req.cleared` true), or `""`.
    pub fn challenge_state(&self) -> &'static str {
        if self.challenge.is_some() {
            "issued"
        } else if self.clearance.is_some() {
            "solved"
        } else if self.cleared {
            "cleared"
        } else {
            ""
        }
    }
}

impl Verdict {
    pub fn allow() -> Self {
        Verdict {
            action: Action::Allow,
            code: Code::Ok,
            status: 200,
            tier: None,
            rule: None,
            reasons: Vec::new(),
            retry_after_ms: None,
            shadow: Vec::new(),
            degraded: false,
            step: Step::Final,
            score: 0,
            ruleset_version: String::new(),
            arm: Arm::Stable,
            server_time_ms: None,
            skew_ms: None,
            key_id: None,
            challenge: None,
            clearance: None,
            challenge_difficulty: None,
            cleared: false,
            solve_ms: None,
        }
    }

    /// A rejection by an anti-replay or rule step.
    pub fn reject(step: Step, action: Action, code: Code, rule: &str, reason: Reason) -> Self {
        Verdict {
            action,
            code,
            status: code.status(),
            tier: step.tier(),
            rule: Some(rule.to_string()),
            reasons: vec![reason],
            retry_after_ms: None,
            shadow: Vec::new(),
            degraded: false,
            step,
            score: 0,
            ruleset_version: String::new(),
            arm: Arm::Stable,
            server_time_ms: None,
            skew_ms: None,
            key_id: None,
            challenge: None,
            clearance: None,
            challenge_difficulty: None,
            cleared: false,
            solve_ms: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `headers_of` answers what `header` answers for each name: exact names, names in another
    /// case, both spellings of one name (the exact one wins), absent names, no headers.
    #[test]
    fn headers_of_reads_as_header_does() {
        let names = ["x-timestamp", "x-nonce", "x-signature", "x-key-id"];
        let cases: [&[(&str, &str)]; 5] = [
            &[("x-timestamp", "1"), ("x-nonce", "n"), ("x-signature", "s")],
            &[
                ("X-Timestamp", "1"),
                ("x-NONCE", "n"),
                ("X-Key-Id", "k"),
                ("other", "o"),
            ],
            &[
                ("x-key-id", "exact"),
                ("X-KEY-ID", "folded"),
                ("x-nonce", "n"),
            ],
            &[
                ("X-KEY-ID", "a"),
                ("X-Key-Id", "b"),
                ("x-key-i", "c"),
                ("x-key-idd", "d"),
            ],
            &[],
        ];
        for h in cases {
            let r = JudgedRequest {
                headers: h
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Default::default()
            };
            assert_eq!(r.headers_of(names), names.map(|n| r.header(n)), "{h:?}");
        }
        let both = JudgedRequest {
            headers: [("X-KEY-ID", "folded"), ("x-key-id", "exact")]
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .into_iter()
                .collect(),
            ..Default::default()
        };
        assert_eq!(both.headers_of(["x-key-id"]), [Some("exact")]);
    }

    /// `user_id` reads as the untagged enum it replaced did: strings as they are, numbers in
    /// `serde_json::Number`'s spelling, null and absence as none, anything else refused.
    #[test]
    fn user_ids_are_strings_or_numbers() {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Old {
            S(String),
            N(serde_json::Number),
        }
        let ids = [
            r#""u-1""#,
            r#""é\"x""#,
            "42",
            "-7",
            "0",
            "18446744073709551615",
            "-9223372036854775808",
            "1.5",
            "1e3",
            "1E-7",
            "100.0",
            "123456789012345678901234567890",
        ];
        for id in ids {
            let body = format!(r#"{{"app":"a","user_id":{id}}}"#);
            let new: DecideRequest = serde_json::from_str(&body).unwrap();
            let old = match serde_json::from_str::<Old>(id).unwrap() {
                Old::S(s) => s,
                Old::N(n) => n.to_string(),
            };
            assert_eq!(new.user_id.as_deref(), Some(old.as_str()), "{id}");
        }
        for none in [r#"{"app":"a"}"#, r#"{"app":"a","user_id":null}"#] {
            let r: DecideRequest = serde_json::from_str(none).unwrap();
            assert_eq!(r.user_id, None);
        }
        for bad in ["true", "[1]", r#"{"id":1}"#] {
            let body = format!(r#"{{"app":"a","user_id":{bad}}}"#);
            assert!(
                serde_json::from_str::<DecideRequest>(&body).is_err(),
                "{bad}"
            );
        }
    }
}

/// Which rule set judged a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arm {
    #[default]
    Stable,
    Canary,
}

impl Arm {
    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Stable => "stable",
            Arm::Canary => "canary",
        }
    }
}
