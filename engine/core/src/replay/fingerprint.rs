//! Duplicate-submission fingerprints: user + route + digest of the canonical JSON params.
//!
//! The same user submitting the same order twice within a route's window (a double click, a client
//! retry that minted a new nonce, a script) gets `DUPLICATE_SUBMISSION`. Two requests are "the same"
//! when app, user, method, path, canonical query and canonical params match, where the canonical
//! params are the JSON with object keys sorted recursively (byte order) and the configured volatile
//! fields (e.g. `requestTime`, `nonce`) removed at every depth. Numbers keep the spelling the parser
//! gives them (`1` and `1.0` differ), strings are compared after JSON unescaping.

use std::fmt::Write as _;

use serde_json::Value;
use xxhash_rust::xxh3::Xxh3;

use crate::store::ttl::TtlSet;
use crate::store::StoreError;

/// Writes `value` as canonical JSON into `out`, skipping object keys listed in `volatile`.
pub fn write_canonical_json(value: &Value, volatile: &[String], out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_json_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical_json(v, volatile, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map
                .keys()
                .filter(|k| !volatile.iter().any(|v| v == *k))
                .collect();
            keys.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json_string(k, out);
                out.push(':');
                write_canonical_json(&map[k.as_str()], volatile, out);
            }
            out.push('}');
        }
    }
}

/// `s` as a JSON string, escaped exactly as `serde_json` escapes it (the reference, checked by a
/// test over every ASCII character), without a string of its own per call.
fn write_json_string(s: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..=0x1f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        start = i + 1;
        if short.is_empty() {
            out.push_str("\\u00");
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        } else {
            out.push_str(short);
        }
    }
    out.push_str(&s[start..]);
    out.push('"');
}

/// Canonical JSON of `value` as a string.
pub fn canonical_json(value: &Value, volatile: &[String]) -> String {
    let mut s = String::new();
    write_canonical_json(value, volatile, &mut s);
    s
}

/// The parts of a request that identify a submission.
#[derive(Debug, Clone, Copy)]
pub struct Submission<'a> {
    pub app: &'a str,
    pub user: &'a str,
    pub method: &'a str,
    pub path: &'a str,
    /// Already canonical (see [`crate::replay::canonical::canonical_query`]).
    pub canonical_query: &'a str,
    /// Canonical JSON of the params.
    pub canonical_params: &'a str,
}

/// The 128-bit fingerprint of a submission.
pub fn fingerprint(s: &Submission<'_>) -> u128 {
    let mut h = Xxh3::new();
    for part in [
        s.app,
        s.user,
        s.method,
        s.path,
        s.canonical_query,
        s.canonical_params,
    ] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.digest128()
}

/// The duplicate-submission step's state.
pub trait FingerprintStore: Send + Sync {
    /// Records `fp` (a submission of `app`) for `window_ms` unless it is already live.
    /// `Ok(true)` = first submission.
    fn insert_if_absent(
        &self,
        app: &str,
        fp: u128,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    fn maintain(&self, now_ms: i64);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One fingerprint store per app (see [`crate::replay::nonce::PerApp`]): a flood of one app's
/// submissions fills its own store only.
pub type PerAppFingerprints = crate::replay::nonce::PerApp<dyn FingerprintStore>;

impl FingerprintStore for PerAppFingerprints {
    fn insert_if_absent(
        &self,
        app: &str,
        fp: u128,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.part(app)?.insert_if_absent(app, fp, window_ms, now_ms)
    }

    fn maintain(&self, now_ms: i64) {
        for (_, s) in self.parts() {
            s.maintain(now_ms);
        }
    }

    fn len(&self) -> usize {
        self.parts().iter().map(|(_, s)| s.len()).sum()
    }
}

/// In-process fingerprint store.
pub struct LocalFingerprintStore {
    set: TtlSet<u128>,
}

impl LocalFingerprintStore {
    pub fn new(max_entries: usize) -> Self {
        LocalFingerprintStore {
            set: TtlSet::new(max_entries),
        }
    }
}

impl LocalFingerprintStore {
    /// The live fingerprints and their expiries (for a snapshot across a restart).
    pub fn live_entries(&self, now_ms: i64) -> Vec<(u128, i64)> {
        self.set.live_entries(now_ms)
    }

    /// Puts back a snapshot's fingerprints; how many were still live.
    pub fn restore(&self, entries: Vec<(u128, i64)>, now_ms: i64) -> usize {
        self.set.restore(entries, now_ms)
    }
}

impl FingerprintStore for LocalFingerprintStore {
    fn insert_if_absent(
        &self,
        _app: &str,
        fp: u128,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.set
            .insert_if_absent(fp, now_ms, now_ms.saturating_add(window_ms))
            .map_err(|e| StoreError::Full(e.to_string()))
    }

    fn maintain(&self, now_ms: i64) {
        self.set.purge(now_ms);
    }

    fn len(&self) -> usize {
        self.set.len()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut cases: Vec<String> = (0u8..=0x7f).map(|b| (b as char).to_string()).collect();
        cases.extend(
            [
                "",
                "plain",
                "a\"b\\c\u{1}\u{1f}\u{7f}",
                "é漢字🙂\n\t\r\u{8}\u{c}",
                "\"\"\\\\",
                "x\u{0}y",
            ]
            .map(str::to_string),
        );
        cases.push((0u8..=0x7f).map(|b| b as char).collect::<String>() + "ß");
        for c in cases {
            let mut out = String::from("prefix");
            write_json_string(&c, &mut out);
            assert_eq!(
                out,
                format!("prefix{}", serde_json::to_string(&c).unwrap()),
                "{c:?}"
            );
        }
    }
    use super::*;
    use serde_json::json;

    fn vol() -> Vec<String> {
        vec!["requestTime".into(), "nonce".into()]
    }

    #[test]
    fn key_order_and_volatile_fields_do_not_matter() {
        let a =
            json!({"order": "A1", "amount": 100, "requestTime": 1, "items": [{"b": 1, "a": 2}]});
        let b =
            json!({"items": [{"a": 2, "b": 1}], "requestTime": 999, "amount": 100, "order": "A1"});
        assert_eq!(canonical_json(&a, &vol()), canonical_json(&b, &vol()));
        assert_eq!(
            canonical_json(&a, &vol()),
            r#"{"amount":100,"items":[{"a":2,"b":1}],"order":"A1"}"#
        );
        let nested = json!({"x": {"nonce": "abc", "y": 1}});
        assert_eq!(canonical_json(&nested, &vol()), r#"{"x":{"y":1}}"#);
    }

    #[test]
    fn meaningful_changes_do_matter() {
        let a = json!({"order": "A1", "amount": 100});
        for b in [
            json!({"order": "A1", "amount": 101}),
            json!({"order": "A2", "amount": 100}),
            json!({"order": "A1"}),
            json!({"order": "A1", "amount": "100"}),
            json!([{"order": "A1", "amount": 100}]),
        ] {
            assert_ne!(canonical_json(&a, &vol()), canonical_json(&b, &vol()));
        }
        // Arrays keep their order.
        assert_ne!(
            canonical_json(&json!([1, 2]), &vol()),
            canonical_json(&json!([2, 1]), &vol())
        );
    }

    #[test]
    fn fingerprint_separates_fields() {
        let base = Submission {
            app: "demo",
            user: "u1",
            method: "POST",
            path: "/a",
            canonical_query: "",
            canonical_params: "{}",
        };
        let f = fingerprint(&base);
        assert_eq!(f, fingerprint(&base));
        // Moving bytes from one field to the next must change the fingerprint (length-prefixed).
        assert_ne!(
            f,
            fingerprint(&Submission {
                user: "u",
                method: "1POST",
                ..base
            })
        );
        assert_ne!(f, fingerprint(&Submission { user: "u2", ..base }));
    }

    #[test]
    fn store_window() {
        let s = LocalFingerprintStore::new(10);
        assert_eq!(s.insert_if_absent("a", 5, 1000, 0), Ok(true));
        assert_eq!(s.insert_if_absent("a", 5, 1000, 999), Ok(false));
        assert_eq!(s.insert_if_absent("a", 5, 1000, 1000), Ok(true));
    }
}
