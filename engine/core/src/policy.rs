//! The declared policies every layer shares: an app's keys and window, duplicate-submission and
//! route settings, what each store does when it fails, and the three rule tiers. Plain data with
//! no behaviour beyond naming itself, so the stores, the rules and the engine can all name it
//! without depending on one another.

use std::sync::Arc;

use crate::model::Step;
use crate::replay::keys::Keyring;

/// An app: who may ask, with which keys, within which window.
#[derive(Debug, Clone)]
pub struct AppPolicy {
    pub id: String,
    /// The app's signing keys. Swapped whole when keys are added or retired at run time (a
    /// decision reads one keyring from start to end); clones of the policy share it.
    pub keys: Arc<arc_swap::ArcSwap<Keyring>>,
    /// Accepted clock difference, both ways: |server_now − x-timestamp| ≤ window_ms.
    pub window_ms: i64,
    /// Browser traffic behind forward-auth (`[[apps]] accept_unsigned`): a request that carries
    /// none of the anti-replay headers is judged without the anti-replay steps (it has no nonce
    /// to protect) instead of being refused `SIGNATURE_MISSING`. A request that carries any of
    /// them is checked in full.
    pub accept_unsigned: bool,
}

impl AppPolicy {
    /// An app with one key, `default`.
    pub fn new(id: impl Into<String>, secret: &[u8], window_ms: i64) -> Self {
        Self::with_keys(id, Keyring::single(secret), window_ms)
    }

    pub fn with_keys(id: impl Into<String>, keys: Keyring, window_ms: i64) -> Self {
        AppPolicy {
            id: id.into(),
            keys: Arc::new(arc_swap::ArcSwap::from_pointee(keys)),
            window_ms,
            accept_unsigned: false,
        }
    }

    /// The same app, accepting unsigned requests (or not).
    pub fn accepting_unsigned(mut self, accept: bool) -> Self {
        self.accept_unsigned = accept;
        self
    }
}

/// Duplicate-submission settings of a route (or the defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct DedupPolicy {
    /// 0 disables the fingerprint step.
    pub window_ms: i64,
    /// Upper-case methods the step applies to.
    pub methods: Vec<String>,
    /// Object keys removed (at every depth) before the params are fingerprinted.
    pub volatile_fields: Vec<String>,
}

impl Default for DedupPolicy {
    fn default() -> Self {
        DedupPolicy {
            window_ms: 1000,
            methods: ["POST", "PUT", "PATCH", "DELETE"]
                .map(String::from)
                .to_vec(),
            volatile_fields: [
                "requestTime",
                "timestamp",
                "ts",
                "nonce",
                "sign",
                "signature",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

/// A route with its own dedup policy and, optionally, a narrower time window. `path` matches
/// exactly, or as a prefix when it ends in `*`.
#[derive(Debug, Clone, PartialEq)]
pub struct RoutePolicy {
    /// `None` = every app.
    pub app: Option<String>,
    pub path: String,
    pub dedup: DedupPolicy,
    /// The time window on this route: `|now − ts| ≤ min(window_ms, the app's window_ms)`. It can
    /// only narrow the app's window, so the nonce retention sized for the app still covers it.
    /// `None` = the app's window.
    pub window_ms: Option<i64>,
}

impl RoutePolicy {
    pub(crate) fn matches(&self, app: &str, path: &str) -> bool {
        if self.app.as_deref().is_some_and(|a| a != app) {
            return false;
        }
        match self.path.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == self.path,
        }
    }
}

/// What to do when a store fails (DESIGN §2: declared, not improvised).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPolicy {
    /// Fail closed: deny with `STORE_UNAVAILABLE`.
    Deny,
    /// Fail open: go on, and mark the decision `degraded`.
    Allow,
}

/// The declared failure policy of each store (DESIGN §2): what a decision does when the store it
/// needs cannot answer (unreachable, timed out, full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorePolicies {
    /// The nonce step.
    pub nonce: FailPolicy,
    /// The duplicate-submission step.
    pub fingerprint: FailPolicy,
    /// `rate_limit`.
    pub limits: FailPolicy,
    /// `count`.
    pub counters: FailPolicy,
    /// `distinct`.
    pub distinct: FailPolicy,
    /// `claim`, `claimed`. Only `Deny` is meaningful: a claim that cannot be recorded is never
    /// granted (the configuration refuses `allow`).
    pub quotas: FailPolicy,
    /// `reputation`, `report`.
    pub reputation: FailPolicy,
}

impl StorePolicies {
    /// The same policy for every store.
    pub fn all(p: FailPolicy) -> Self {
        StorePolicies {
            nonce: p,
            fingerprint: p,
            limits: p,
            counters: p,
            distinct: p,
            quotas: p,
            reputation: p,
        }
    }
}

impl Default for StorePolicies {
    fn default() -> Self {
        Self::all(FailPolicy::Deny)
    }
}

/// The three rule tiers, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Tier {
    Edge,
    Gateway,
    Business,
}

impl Tier {
    pub fn step(self) -> Step {
        match self {
            Tier::Edge => Step::Edge,
            Tier::Gateway => Step::Gateway,
            Tier::Business => Step::Business,
        }
    }
}

pub const TIERS: [Tier; 3] = [Tier::Edge, Tier::Gateway, Tier::Business];

impl Tier {
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Edge => "edge",
            Tier::Gateway => "gateway",
            Tier::Business => "business",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Tier::Edge => 0,
            Tier::Gateway => 1,
            Tier::Business => 2,
        }
    }

    pub(crate) fn from_dir(s: &str) -> Option<Tier> {
        TIERS.into_iter().find(|t| t.as_str() == s)
    }
}
