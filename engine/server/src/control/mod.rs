//! The control plane: rule set versions ([`versions`]), staged rollout with approval and automatic
//! rollback ([`rollout`]), block/allow lists ([`lists`]), signing keys added and retired at run
//! time ([`keys`]), the audit log ([`audit`]), kept in files or Redis ([`store`]); who may do what is [`crate::auth`]. This file holds the state document and
//! the mechanism every change goes through.
//!
//! Every change goes through [`Control::mutate`]: read the rollout state, derive the next one,
//! save it with compare-and-set, append an audit entry, apply it to this instance. Other instances
//! notice the new generation within `[admin] poll_ms` and apply it too ([`Control::poll`]).

pub(crate) mod audit;
mod keys;
mod lists;
mod repairs;
mod rollout;
pub mod store;
mod versions;

use std::sync::{Arc, Mutex};

use rampart_core::rollout::{Candidate, DynamicLists, RollbackPolicy};
use serde::{Deserialize, Serialize};

use crate::auth::{Identities, Principal, Sessions, Throttle};
use crate::clock::now_ms;
use crate::error::ApiError;
use store::ControlStore;

pub use audit::{Audit, AuditEntry};
pub use keys::{CreatedKey, KeyEntry, NewKey, RetiredKey};
pub use lists::{ListEntry, NewListEntry};
pub use repairs::{BreakerRepair, LimitReset, PoolRefill, Repair, RepairEntry};
pub use rollout::{CandidateState, RolloutEvent, StageRequest};
pub use versions::{Provenance, VersionDoc, VersionMeta};

/// What the control plane acts on: the live engine, the rule helpers' state, the metrics and the
/// configuration. The runtime lends it ([`crate::runtime::Runtime::host`]), so the control plane
/// never names the runtime that owns it.
#[derive(Clone, Copy)]
pub struct Host<'a> {
    pub engine: &'a rampart_core::Engine,
    pub metrics: &'a crate::metrics::Metrics,
    pub rule_state: &'a rampart_core::rules::RuleState,
    pub config: &'a crate::config::Validated,
}

/// How many rollout events the state keeps (the audit log keeps everything).
const HISTORY_CAP: usize = 500;

/// The rollout state: one document, one generation per change.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ControlState {
    pub generation: u64,
    pub stable: Option<String>,
    pub candidate: Option<CandidateState>,
    /// Content hash of the rule directory (or built-in set) last imported.
    pub imported: Option<String>,
    /// Versions that have been stable: they can be re-activated without a new approval.
    pub approved: Vec<String>,
    pub lists: Vec<ListEntry>,
    pub next_list_id: u64,
    pub lists_version: u64,
    /// Signing keys added and retired through the admin API (secrets of live keys included).
    pub keys: Vec<KeyEntry>,
    pub keys_version: u64,
    pub history: Vec<RolloutEvent>,
    /// Operators' repairs of live state, the last ones ([`repairs`]).
    pub repairs: Vec<RepairEntry>,
    pub next_repair_id: u64,
}

impl ControlState {
    fn event(&mut self, e: RolloutEvent) {
        self.history.push(e);
        if self.history.len() > HISTORY_CAP {
            let cut = self.history.len() - HISTORY_CAP;
            self.history.drain(..cut);
        }
    }
}

/// What this instance last applied.
#[derive(Default)]
struct Applied {
    generation: u64,
    lists_version: u64,
    /// The earliest expiry among the applied list entries.
    next_expiry_ms: Option<i64>,
    /// The keys version applied, once any was.
    keys_version: Option<u64>,
    /// The last repair applied (None until the first state was read: the repairs recorded
    /// before this instance started are taken as done).
    repair_id: Option<u64>,
}

/// The control plane of one instance.
pub struct Control {
    pub store: Arc<dyn ControlStore>,
    pub sessions: Sessions,
    pub identities: Identities,
    pub throttle: Throttle,
    pub policy: RollbackPolicy,
    pub cookie_secure: bool,
    /// Rule sets compiled from stored versions (`[admin] compiled_versions` of them).
    compiled: Mutex<versions::Compiled>,
    applied: Mutex<Applied>,
    /// Serialises this instance's changes (the store's compare-and-set covers other instances).
    write: Mutex<()>,
    /// This process, in the repairs it records (instances may share a name).
    process: String,
}

fn conflict(code: &'static str, msg: impl Into<String>) -> ApiError {
    ApiError::new(409, code, msg)
}

fn store_err(e: store::StoreError) -> ApiError {
    ApiError::new(503, "CONTROL_UNAVAILABLE", e.to_string())
}

impl Control {
    pub fn new(
        store: Arc<dyn ControlStore>,
        identities: Identities,
        cfg: &crate::config::AdminConfig,
    ) -> Result<Control, String> {
        let key = store.session_key().map_err(|e| e.to_string())?;
        Self::with_key(store, identities, cfg, key)
    }

    /// As [`Control::new`], with a given session key.
    pub fn with_key(
        store: Arc<dyn ControlStore>,
        identities: Identities,
        cfg: &crate::config::AdminConfig,
        key: Vec<u8>,
    ) -> Result<Control, String> {
        Ok(Control {
            store,
            sessions: Sessions::new(key, cfg.session_ttl_ms),
            identities,
            throttle: Throttle::new(cfg.login_max_failures, cfg.login_lockout_ms),
            policy: RollbackPolicy {
                min_samples: cfg.canary_min_samples,
                max_refusal_increase: cfg.canary_max_refusal_increase,
                max_error_increase: cfg.canary_max_error_increase,
            },
            cookie_secure: cfg.cookie_secure,
            compiled: Mutex::new(versions::Compiled::new(cfg.compiled_versions)),
            applied: Mutex::new(Applied::default()),
            write: Mutex::new(()),
            process: {
                let mut b = [0u8; 8];
                let _ = getrandom::getrandom(&mut b);
                hex::encode(b)
            },
        })
    }
}

impl Control {
    /// Applies `f` to the rollout state and saves it (compare-and-set, retried on conflict),
    /// then applies the result here. `f` returns the audit entry's (action, target, before, after,
    /// detail).
    pub fn mutate<T>(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        f: impl Fn(&mut ControlState) -> Result<(Audit, T), ApiError>,
    ) -> Result<T, ApiError> {
        let _w = self.write.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..8 {
            let cur = self.store.load().map_err(store_err)?;
            let mut next = cur.clone();
            let (audit, out) = f(&mut next)?;
            next.generation = cur.generation + 1;
            if self.store.save(&next).map_err(store_err)? {
                // Applied first, here, in the request's span: the poll for other instances'
                // changes would otherwise find this one while the audit entry is written.
                if let Err(e) = self.apply(rt, &next) {
                    tracing::error!(error = %e, "saved a control state this instance cannot apply");
                }
                self.audit(
                    who,
                    &audit.action,
                    &audit.target,
                    audit.before,
                    audit.after,
                    audit.detail,
                );
                return Ok(out);
            }
        }
        Err(conflict(
            "CONFLICT",
            "the rollout state kept changing under this request; try again",
        ))
    }

    /// Makes this instance run what `state` says.
    pub fn apply(&self, rt: &Host<'_>, state: &ControlState) -> Result<(), ApiError> {
        // Keys first: a retired key must stop passing even if a rule set below cannot be applied.
        {
            let mut a = self.applied.lock().unwrap_or_else(|e| e.into_inner());
            if a.keys_version != Some(state.keys_version) {
                self.apply_keys(rt, state);
                a.keys_version = Some(state.keys_version);
            }
        }
        if let Some(v) = &state.stable {
            if rt.engine.rules().snapshot().version() != v {
                let set = self.compiled(rt, v)?;
                let old = rt.engine.rules().swap_arc(set);
                rt.metrics.ruleset_swaps.inc();
                tracing::info!(from = old.version(), to = %v, "stable rule set changed");
            }
        }
        let want = state.candidate.as_ref();
        let have = rt.engine.candidate();
        let same = match (want, &have) {
            (None, None) => true,
            (Some(w), Some(h)) => h.set.version() == w.version && h.stage == w.to_stage(),
            _ => false,
        };
        if !same {
            match want {
                None => rt.engine.set_candidate(None),
                Some(w) => {
                    let set = self.compiled(rt, &w.version)?;
                    rt.engine
                        .set_candidate(Some(Arc::new(Candidate::new(set, w.to_stage()))));
                }
            }
            tracing::info!(candidate = ?want.map(|c| (&c.version, &c.stage, c.percent)), "candidate changed");
        }
        let mut a = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        let last = state.repairs.last().map_or(0, |r| r.id);
        match a.repair_id {
            None => a.repair_id = Some(state.next_repair_id.max(last)),
            Some(done) => {
                for e in state.repairs.iter().filter(|e| e.id > done) {
                    self.apply_repair(rt, e);
                }
                a.repair_id = Some(done.max(last));
            }
        }
        let now = now_ms();
        if a.lists_version != state.lists_version
            || a.next_expiry_ms.is_some_and(|t| t <= now)
            || rt.engine.lists().version() != state.lists_version
        {
            let live: Vec<&ListEntry> = state
                .lists
                .iter()
                .filter(|e| e.expires_ms.is_none_or(|t| t > now))
                .collect();
            match DynamicLists::build(
                state.lists_version,
                live.iter().map(|e| (e.list, e.kind, e.value.as_str())),
            ) {
                Ok(l) => rt.engine.set_lists(l),
                Err(e) => tracing::error!(error = %e, "cannot build the block/allow lists"),
            }
            a.lists_version = state.lists_version;
            a.next_expiry_ms = live.iter().filter_map(|e| e.expires_ms).min();
        }
        a.generation = state.generation;
        Ok(())
    }

    /// Picks up changes made elsewhere, expires list entries, and rolls back a failing canary.
    pub fn poll(&self, rt: &Host<'_>) {
        let generation = match self.store.generation() {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the control state");
                return;
            }
        };
        let (applied, expiry) = {
            let a = self.applied.lock().unwrap_or_else(|e| e.into_inner());
            (a.generation, a.next_expiry_ms)
        };
        if generation != applied || expiry.is_some_and(|t| t <= now_ms()) {
            match self.store.load() {
                Ok(s) => {
                    if let Err(e) = self.apply(rt, &s) {
                        tracing::error!(error = %e, "cannot apply the control state");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the control state"),
            }
        }
        self.roll_back_failing_canary(rt);
    }
}
