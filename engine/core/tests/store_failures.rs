//! Declared store failure policies (DESIGN §2): what callers see when a store cannot answer, per
//! store, for the anti-replay steps and for the rule helpers — and the local fallback that keeps
//! catching an instance's own replays while the shared store is away.
//!
//! The failing store here is a switchable wrapper around the real in-process stores; the Redis
//! stores are exercised against real Redis servers in the server crate's tests.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rampart_core::engine::EngineSettings;
use rampart_core::model::{Action, Code, DecideRequest, JudgedRequest};
use rampart_core::policy::{AppPolicy, DedupPolicy};
use rampart_core::replay::bloom::SlicedBloomConfig;
use rampart_core::replay::fingerprint::{FingerprintStore, LocalFingerprintStore};
use rampart_core::replay::nonce::{BloomNonceStore, NonceStats, NonceStore, NonceVerdict};
use rampart_core::replay::sign::{sign, ToSign};
use rampart_core::rules::{LiveRules, RuleSet, RuleSettings, RuleState, Source};
use rampart_core::store::limits::{Gcra, LimiterStore, LocalLimiter};
use rampart_core::store::StoreError;
use rampart_core::{Engine, FailPolicy, Fallback, Step, StorePolicies};

const SECRET: &[u8] = b"failure-secret";
const NOW: i64 = 1_000_000;

/// A store that fails with `Unavailable` while `down` is set, else delegates to a real local one.
struct Switch<T> {
    inner: T,
    down: Arc<AtomicBool>,
}

impl<T> Switch<T> {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::Relaxed) {
            Err(StoreError::Unavailable("connection refused".into()))
        } else {
            Ok(())
        }
    }
}

impl NonceStore for Switch<BloomNonceStore> {
    fn check_and_insert(
        &self,
        app: &str,
        nonce: &str,
        ts_ms: i64,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<NonceVerdict, StoreError> {
        self.check()?;
        self.inner
            .check_and_insert(app, nonce, ts_ms, window_ms, now_ms)
    }
    fn maintain(&self, now_ms: i64) {
        self.inner.maintain(now_ms)
    }
    fn stats(&self, now_ms: i64) -> NonceStats {
        self.inner.stats(now_ms)
    }
}

impl FingerprintStore for Switch<LocalFingerprintStore> {
    fn insert_if_absent(
        &self,
        app: &str,
        fp: u128,
        window_ms: i64,
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.insert_if_absent(app, fp, window_ms, now_ms)
    }
    fn maintain(&self, now_ms: i64) {
        self.inner.maintain(now_ms)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
}

impl LimiterStore for Switch<LocalLimiter> {
    fn gcra(&self, key: &str, now_ms: i64, rate: f64, burst: u32) -> Result<Gcra, StoreError> {
        self.check()?;
        self.inner.gcra(key, now_ms, rate, burst)
    }
    fn incr(&self, key: &str, now_ms: i64, window_ms: i64, n: i64) -> Result<i64, StoreError> {
        self.check()?;
        self.inner.incr(key, now_ms, window_ms, n)
    }
    fn get(&self, key: &str, now_ms: i64, window_ms: i64) -> Result<i64, StoreError> {
        self.check()?;
        self.inner.get(key, now_ms, window_ms)
    }
    fn gcra_tat(&self, key: &str, now_ms: i64) -> Result<Option<f64>, StoreError> {
        self.check()?;
        self.inner.gcra_tat(key, now_ms)
    }
    fn reset(&self, key: &str) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.reset(key)
    }
    fn maintain(&self, now_ms: i64) {
        self.inner.maintain(now_ms)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
}

fn bloom() -> BloomNonceStore {
    BloomNonceStore::new(
        SlicedBloomConfig {
            expected_rps: 10_000,
            slice_ms: 100,
            retention_ms: 10_000,
            max_window_ms: 5_000,
            target_fp: 1e-6,
        },
        9,
    )
}

struct World {
    engine: Engine,
    down: Arc<AtomicBool>,
}

fn world(policies: StorePolicies, fallback: bool, rules: &[(&str, &str)]) -> World {
    let down = Arc::new(AtomicBool::new(false));
    let mut state = RuleState::local(1000);
    state.limiter = Arc::new(Switch {
        inner: LocalLimiter::new(1000),
        down: down.clone(),
    });
    state.policies = policies;
    let sources: Vec<Source> = rules
        .iter()
        .map(|(path, body)| Source {
            path: (*path).into(),
            text: format!(
                "//! name: {}\n//! priority: 10\n//! owner: test\n//! description: test\n{body}\n",
                path.rsplit('/').next().unwrap().trim_end_matches(".rhai")
            ),
        })
        .collect();
    let set = RuleSet::compile(&sources, RuleSettings::default(), &state)
        .unwrap_or_else(|e| panic!("{e:#?}"));
    let mut engine = Engine::new(
        EngineSettings {
            apps: vec![AppPolicy::new("shop", SECRET, 5_000)],
            routes: vec![],
            default_dedup: DedupPolicy::default(),
            on_store_error: policies,
            challenge_status: 403,
        },
        Arc::new(Switch {
            inner: bloom(),
            down: down.clone(),
        }),
        Arc::new(Switch {
            inner: LocalFingerprintStore::new(1000),
            down: down.clone(),
        }),
        Arc::new(LiveRules::new(set)),
    );
    if fallback {
        engine = engine.with_fallback(Fallback {
            nonces: Arc::new(bloom()),
            fingerprints: Arc::new(LocalFingerprintStore::new(1000)),
        });
    }
    World { engine, down }
}

fn request(nonce: &str, body: &str) -> DecideRequest {
    let h = sign(
        SECRET,
        &ToSign {
            app: "shop",
            method: "POST",
            path: "/api/order",
            query: "",
            body: body.as_bytes(),
            timestamp_ms: NOW,
            nonce,
        },
    );
    let mut r = JudgedRequest {
        method: "POST".into(),
        path: "/api/order".into(),
        body: Some(body.into()),
        ..Default::default()
    };
    r.headers.insert("x-timestamp".into(), h.timestamp);
    r.headers.insert("x-nonce".into(), h.nonce);
    r.headers.insert("x-signature".into(), h.signature);
    let mut d = DecideRequest {
        app: "shop".into(),
        request: r,
        user_id: Some("u1".into()),
        ..Default::default()
    };
    d.client.ip = Some("198.51.100.7".into());
    d
}

fn decide(w: &World, nonce: &str, body: &str) -> rampart_core::Verdict {
    w.engine.decide(&request(nonce, body), NOW).unwrap()
}

#[test]
fn nonce_store_down_under_deny_is_store_unavailable_and_never_a_pass() {
    let w = world(StorePolicies::all(FailPolicy::Deny), false, &[]);
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "nonce-deny-000000001", "{}");
    assert_eq!(v.code, Code::StoreUnavailable);
    assert_eq!(v.action, Action::Deny);
    assert_eq!(v.status, 503);
    assert_eq!(v.step, Step::Nonce);
    // Recovery needs no restart: the store is back, the same request is judged normally.
    w.down.store(false, Ordering::Relaxed);
    assert_eq!(decide(&w, "nonce-deny-000000001", "{}").code, Code::Ok);
    assert_eq!(
        decide(&w, "nonce-deny-000000001", "{}").code,
        Code::ReplayDuplicate
    );
}

#[test]
fn nonce_store_down_under_allow_passes_marked_degraded() {
    let w = world(StorePolicies::all(FailPolicy::Allow), false, &[]);
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "nonce-allow-00000001", "{}");
    assert_eq!(v.code, Code::Ok);
    assert!(v.degraded);
    w.down.store(false, Ordering::Relaxed);
    let v = decide(&w, "nonce-allow-00000002", "{\"x\":1}");
    assert_eq!(v.code, Code::Ok);
    assert!(!v.degraded);
}

#[test]
fn local_fallback_catches_this_instances_replays_while_the_shared_store_is_away() {
    let w = world(StorePolicies::all(FailPolicy::Allow), true, &[]);
    // Accepted while the shared store works: written through to the local filter.
    assert_eq!(decide(&w, "fallback-nonce-00001", "{}").code, Code::Ok);
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "fallback-nonce-00001", "{}");
    assert_eq!(v.code, Code::ReplayDuplicate, "{v:?}");
    assert!(v.degraded);
    // A new nonce passes (degraded), and its replay during the outage is caught as well.
    let v = decide(&w, "fallback-nonce-00002", "{\"a\":1}");
    assert_eq!((v.code, v.degraded), (Code::Ok, true));
    let v = decide(&w, "fallback-nonce-00002", "{\"a\":1}");
    assert_eq!(v.code, Code::ReplayDuplicate);
    // Same user, route and params under a fresh nonce: the local fingerprint catches it too.
    let v = decide(&w, "fallback-nonce-00003", "{\"a\":1}");
    assert_eq!(v.code, Code::DuplicateSubmission);
    assert!(v.degraded);
}

#[test]
fn a_nonce_accepted_during_the_outage_stays_a_replay_after_the_shared_store_returns() {
    let w = world(StorePolicies::all(FailPolicy::Allow), true, &[]);
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "outage-nonce-0000001", "{\"o\":1}");
    assert_eq!((v.code, v.degraded), (Code::Ok, true));
    // The shared store is back (and never saw that nonce): the local record still answers.
    w.down.store(false, Ordering::Relaxed);
    let v = decide(&w, "outage-nonce-0000001", "{\"o\":1}");
    assert_eq!(v.code, Code::ReplayDuplicate, "{v:?}");
    assert!(!v.degraded);
    // The same submission under a fresh nonce: the local fingerprint remembers it too.
    let v = decide(&w, "outage-nonce-0000002", "{\"o\":1}");
    assert_eq!(v.code, Code::DuplicateSubmission, "{v:?}");
}

#[test]
fn fingerprint_policy_is_separate_from_the_nonce_policy() {
    let mut p = StorePolicies::all(FailPolicy::Allow);
    p.fingerprint = FailPolicy::Deny;
    let w = world(p, false, &[]);
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "fp-policy-0000000001", "{}");
    assert_eq!(v.code, Code::StoreUnavailable);
    assert_eq!(v.step, Step::Fingerprint);
}

const RATE_RULE: (&str, &str) = (
    "gateway/ip-rate.rhai",
    "if !rate_limit(\"ip:\" + req.ip, 1000, 1000) { deny(\"RATE_LIMITED\", \"too fast\") }",
);

#[test]
fn a_helper_whose_store_fails_closed_answers_store_unavailable_from_its_rule() {
    let mut p = StorePolicies::all(FailPolicy::Allow);
    p.limits = FailPolicy::Deny;
    p.nonce = FailPolicy::Allow;
    p.fingerprint = FailPolicy::Allow;
    let w = world(p, false, &[RATE_RULE]);
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "helper-deny-00000001", "{}");
    assert_eq!(v.code, Code::StoreUnavailable, "{v:?}");
    assert_eq!(v.step, Step::Gateway);
    assert_eq!(v.rule.as_deref(), Some("ip-rate"));
    assert_eq!(v.status, 503);
}

#[test]
fn a_helper_whose_store_fails_open_answers_its_neutral_value_marked_degraded() {
    let w = world(
        StorePolicies::all(FailPolicy::Allow),
        false,
        &[
            RATE_RULE,
            (
                "business/velocity.rhai",
                "if count(\"u:\" + req.user, 60000) > 0 { deny(\"busy\") }",
            ),
            (
                "edge/reputation.rhai",
                "if reputation(req) > 0 { deny(\"bad reputation\") }",
            ),
        ],
    );
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "helper-allow-0000001", "{}");
    assert_eq!(v.code, Code::Ok, "{v:?}");
    assert!(v.degraded);
}

#[test]
fn shadow_rules_with_a_failed_store_change_nothing() {
    let mut p = StorePolicies::all(FailPolicy::Deny);
    p.nonce = FailPolicy::Allow;
    p.fingerprint = FailPolicy::Allow;
    let w = world(
        p,
        false,
        &[(
            "gateway/shadow-rate.rhai",
            "//! mode: shadow\nif !rate_limit(\"ip:\" + req.ip, 1, 1) { deny(\"RATE_LIMITED\", \"x\") }",
        )],
    );
    w.down.store(true, Ordering::Relaxed);
    let v = decide(&w, "shadow-store-0000001", "{}");
    // The limiter fails closed, but a shadow rule can never deny: the decision stands (degraded
    // only by the anti-replay stores, which fail open here).
    assert_eq!(v.code, Code::Ok, "{v:?}");
    assert!(v.shadow.is_empty());
}
