//! Operators' repairs of live state: reset a subject's reputation, clear one rate-limit or
//! counter key, close or force open a route's circuit breaker, refill a claim pool.
//!
//! A repair goes through the control state like every change ([`Control::mutate`]: audited,
//! compare-and-set), as an entry of `repairs`; every instance applies each entry once, the one
//! the operator asked at once and the others when they notice the new generation (within
//! `[admin] poll_ms`). What applying means depends on where the state lives:
//! - shared state (Redis) is repaired once, by the instance that was asked; the others only
//!   forget what they remember of it (a cached refusal);
//! - local state and circuit breakers (always per instance, fed by each instance's
//!   `POST /v1/outcome`) are repaired by every instance on its own.
//!
//! An instance that starts takes the repairs already recorded as done: it has nothing to repair
//! (its local state starts empty or from a snapshot taken after them).

use serde::{Deserialize, Serialize};

use super::audit::Audit;
use super::{Control, Host};
use crate::auth::Principal;
use crate::clock::now_ms;
use crate::error::ApiError;

/// How many repairs the control state keeps (the audit log keeps everything).
pub(super) const REPAIRS_CAP: usize = 256;

// The admin API's request bodies (here, like the other resources' bodies, so that the OpenAPI
// document need not import the admin module).

/// `POST /admin/v1/limits/reset`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitReset {
    /// The key as the rule gave it to `rate_limit`, `count` or `rate_limit_ip`'s own key
    /// (e.g. `user:alice`).
    pub key: String,
}

/// `POST /admin/v1/breakers/close` and `…/open`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerRepair {
    pub app: String,
    /// The route the rule watches (the request path `breaker(req, …)` was called with).
    pub route: String,
    /// `open` only: how long it stays open (then probes as after a trip); absent = until
    /// closed.
    #[serde(default)]
    pub for_ms: Option<i64>,
}

/// `POST /admin/v1/pools/{pool}/refill`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PoolRefill {
    /// How many more claims the pool may grant (1–10,000,000), on top of the rule's stock and
    /// earlier refills.
    pub add: u64,
}

/// What to repair.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Repair {
    /// Forget a subject's reputation (`subject`: ip, user, device, ja3).
    Reputation { subject: String, value: String },
    /// Clear a rate limit and sliding window, by the key the rule gave (`user:alice`).
    Limit { key: String },
    /// Close a route's breaker (counts start afresh), or open it until `open_until_ms`.
    Breaker {
        app: String,
        route: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        open_until_ms: Option<i64>,
    },
    /// Let a claim pool grant `add` more claims (nobody twice).
    Pool { pool: String, add: u64 },
}

/// A recorded repair.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RepairEntry {
    pub id: u64,
    #[serde(flatten)]
    pub repair: Repair,
    pub by: String,
    pub at_ms: i64,
    /// The process that was asked (it repaired shared state itself).
    pub origin: String,
}

impl Repair {
    fn audit(&self) -> (&'static str, String) {
        match self {
            Repair::Reputation { subject, value } => {
                ("subject.reputation.reset", format!("{subject}:{value}"))
            }
            Repair::Limit { key } => ("limit.reset", key.clone()),
            Repair::Breaker {
                app,
                route,
                open_until_ms: None,
            } => ("breaker.close", format!("{app}:{route}")),
            Repair::Breaker { app, route, .. } => ("breaker.open", format!("{app}:{route}")),
            Repair::Pool { pool, .. } => ("pool.refill", pool.clone()),
        }
    }
}

impl Control {
    /// Records `repair` (audited) and applies it here; the other instances apply it within
    /// `poll_ms`. `before` goes to the audit entry (e.g. the reputation it replaced).
    pub fn repair(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        repair: Repair,
        before: Option<String>,
    ) -> Result<RepairEntry, ApiError> {
        let now = now_ms();
        let (action, target) = repair.audit();
        // Here first, so that a store that cannot do it answers the operator (and nothing is
        // recorded for the others).
        act(rt, &repair, true)?;
        self.mutate(rt, who, |s| {
            s.next_repair_id += 1;
            let entry = RepairEntry {
                id: s.next_repair_id,
                repair: repair.clone(),
                by: who.name.clone(),
                at_ms: now,
                origin: self.process.clone(),
            };
            s.repairs.push(entry.clone());
            if s.repairs.len() > REPAIRS_CAP {
                let cut = s.repairs.len() - REPAIRS_CAP;
                s.repairs.drain(..cut);
            }
            Ok((
                Audit {
                    action: action.into(),
                    target: target.clone(),
                    before: before.clone(),
                    after: None,
                    detail: serde_json::to_value(&entry).unwrap_or_default(),
                },
                entry,
            ))
        })
    }

    /// Applies one recorded repair on this instance, unless it is the one that was asked (which
    /// did it before recording it).
    pub(super) fn apply_repair(&self, rt: &Host<'_>, e: &RepairEntry) {
        if e.origin == self.process {
            return;
        }
        match act(rt, &e.repair, false) {
            Ok(()) => tracing::info!(repair = e.id, by = %e.by, kind = ?e.repair, "repair applied"),
            Err(err) => {
                tracing::error!(repair = e.id, error = %err, "cannot apply a repair")
            }
        }
    }
}

/// Does `repair` on this instance (`here`: the instance the operator asked).
fn act(rt: &Host<'_>, repair: &Repair, here: bool) -> Result<(), rampart_core::store::StoreError> {
    match repair {
        Repair::Reputation { subject, value } => rt
            .rule_state
            .repair_reputation(subject, value, here)
            .map(|_| ()),
        Repair::Limit { key } => rt.rule_state.repair_limit(key, here).map(|_| ()),
        Repair::Breaker {
            app,
            route,
            open_until_ms,
        } => {
            let key = rampart_core::store::breaker::breaker_key(app, route);
            rt.rule_state.breakers.force(&key, now_ms(), *open_until_ms);
            Ok(())
        }
        Repair::Pool { pool, add } => {
            let quotas = &rt.rule_state.quotas;
            // Shared pools are refilled once, by the instance asked; local ones by each.
            if here || !quotas.shared() {
                quotas.refill(pool, *add, now_ms())?;
            }
            Ok(())
        }
    }
}
