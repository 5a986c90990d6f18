//! Staged rollout of a candidate rule set, and the block/allow lists operators edit at run time.
//!
//! A candidate runs beside the stable set in one of two stages:
//!
//! - **shadow**: every request is judged by the stable set; the candidate is evaluated after it,
//!   in simulation (claims only peek, reputation is not fed, its counters live under their own key
//!   prefix so they never spend the stable set's budget), and what it would have done is recorded
//!   as a shadow hit carrying the candidate's version.
//! - **canary(p%)**: a stable hash of the user id (else the device id, else the client IP) puts
//!   each requester in one of 10,000 buckets; requesters in the first `p × 100` buckets that pass
//!   the optional filters (app, device type, country) are judged by the candidate — the same ones
//!   every time and on every instance, so nobody flips between rule sets. Their decisions carry
//!   the arm `canary`.
//!
//! [`ArmStats`] counts, per arm, the decisions that reached the rule tiers, the refusals among
//! them and the decisions where a rule failed; [`RollbackPolicy::check`] compares canary against
//! stable and says when the canary must be rolled back.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::model::{Arm, DecideRequest};
use crate::rules::lists::{IpList, StringList};
use crate::rules::RuleSet;

/// Optional restrictions of a canary: empty lists match everything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct CanaryFilter {
    pub apps: Vec<String>,
    pub device_types: Vec<String>,
    pub countries: Vec<String>,
}

impl CanaryFilter {
    pub fn matches(&self, req: &DecideRequest) -> bool {
        fn one_of(list: &[String], v: Option<&str>) -> bool {
            list.is_empty() || v.is_some_and(|v| list.iter().any(|x| x.eq_ignore_ascii_case(v)))
        }
        one_of(&self.apps, Some(&req.app))
            && one_of(&self.device_types, req.client.device_type.as_deref())
            && one_of(&self.countries, req.client.country.as_deref())
    }

    pub fn is_empty(&self) -> bool {
        self.apps.is_empty() && self.device_types.is_empty() && self.countries.is_empty()
    }
}

/// The stage a candidate runs in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "lowercase")]
pub enum Stage {
    Shadow,
    Canary {
        /// Share of requesters (0 < percent ≤ 100), in hundredths of a percent of precision.
        percent: f64,
        #[serde(default, skip_serializing_if = "CanaryFilter::is_empty")]
        filter: CanaryFilter,
    },
}

/// Number of hash buckets requesters are spread over.
pub const BUCKETS: u64 = 10_000;

/// The requester's bucket (0..10,000): by user id, else device id, else client IP. `None` when the
/// request names none of them (it then stays on the stable set).
pub fn bucket(req: &DecideRequest) -> Option<u64> {
    fn nonempty(s: &Option<String>) -> Option<&str> {
        s.as_deref().filter(|s| !s.is_empty())
    }
    let (kind, id) = if let Some(u) = nonempty(&req.user_id) {
        (b'u', u)
    } else if let Some(d) = nonempty(&req.client.device_id) {
        (b'd', d)
    } else if let Some(ip) = nonempty(&req.client.ip) {
        (b'i', ip)
    } else {
        return None;
    };
    // Namespaced: user "x" and device "x" are different requesters. The app is not part of the
    // key, so a user is in the same arm for every app the canary covers.
    let h = xxhash_rust::xxh3::xxh3_64_with_seed(id.as_bytes(), kind as u64);
    Some(h % BUCKETS)
}

/// Decisions counted for one arm.
#[derive(Debug, Default)]
pub struct ArmCounts {
    /// Decisions that reached the rule tiers (anti-replay rejections are not the rules' doing).
    pub decisions: AtomicU64,
    /// Of those, the ones a rule tier refused (deny, challenge or review).
    pub refusals: AtomicU64,
    /// Of those, the ones where at least one rule failed.
    pub errors: AtomicU64,
}

/// A snapshot of [`ArmCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub decisions: u64,
    pub refusals: u64,
    pub errors: u64,
}

impl Counts {
    pub fn refusal_rate(&self) -> f64 {
        ratio(self.refusals, self.decisions)
    }

    pub fn error_rate(&self) -> f64 {
        ratio(self.errors, self.decisions)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl ArmCounts {
    pub fn record(&self, refused: bool, failed: bool) {
        self.decisions.fetch_add(1, Ordering::Relaxed);
        if refused {
            self.refusals.fetch_add(1, Ordering::Relaxed);
        }
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn get(&self) -> Counts {
        Counts {
            decisions: self.decisions.load(Ordering::Relaxed),
            refusals: self.refusals.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
        }
    }
}

/// Per-arm counts of one candidate's run (a new candidate starts from zero).
#[derive(Debug, Default)]
pub struct ArmStats {
    pub stable: ArmCounts,
    pub canary: ArmCounts,
    /// In the shadow stage: what the candidate would have done with the same requests.
    pub shadow: ArmCounts,
}

/// A snapshot of [`ArmStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    pub stable: Counts,
    pub canary: Counts,
    pub shadow: Counts,
}

impl ArmStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            stable: self.stable.get(),
            canary: self.canary.get(),
            shadow: self.shadow.get(),
        }
    }
}

/// A candidate rule set and its stage.
pub struct Candidate {
    pub set: Arc<RuleSet>,
    pub stage: Stage,
    pub stats: ArmStats,
    /// The canary's bucket bound: buckets below it go to the candidate.
    threshold: u64,
}

impl std::fmt::Debug for Candidate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Candidate")
            .field("version", &self.set.version())
            .field("stage", &self.stage)
            .finish()
    }
}

impl Candidate {
    pub fn new(set: Arc<RuleSet>, stage: Stage) -> Self {
        let threshold = match &stage {
            Stage::Shadow => 0,
            Stage::Canary { percent, .. } => {
                ((percent.clamp(0.0, 100.0) / 100.0) * BUCKETS as f64).round() as u64
            }
        };
        Candidate {
            set,
            stage,
            stats: ArmStats::default(),
            threshold,
        }
    }

    /// The arm `req` belongs to.
    pub fn arm(&self, req: &DecideRequest) -> Arm {
        match &self.stage {
            Stage::Shadow => Arm::Stable,
            Stage::Canary { filter, .. } => match bucket(req) {
                Some(b) if b < self.threshold && filter.matches(req) => Arm::Canary,
                _ => Arm::Stable,
            },
        }
    }

    pub fn is_shadow(&self) -> bool {
        matches!(self.stage, Stage::Shadow)
    }
}

/// When a canary is rolled back automatically.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RollbackPolicy {
    /// Neither arm is judged before it has this many rule-judged decisions.
    pub min_samples: u64,
    /// Roll back when canary refusal rate − stable refusal rate exceeds this (absolute, 0–1).
    pub max_refusal_increase: f64,
    /// Roll back when canary rule-error rate − stable rule-error rate exceeds this (absolute, 0–1).
    pub max_error_increase: f64,
}

impl Default for RollbackPolicy {
    fn default() -> Self {
        RollbackPolicy {
            min_samples: 200,
            max_refusal_increase: 0.05,
            max_error_increase: 0.01,
        }
    }
}

impl RollbackPolicy {
    /// `Some(reason)` when the canary departs from stable beyond the thresholds.
    pub fn check(&self, s: &StatsSnapshot) -> Option<String> {
        if s.canary.decisions < self.min_samples || s.stable.decisions < self.min_samples {
            return None;
        }
        let (c, st) = (&s.canary, &s.stable);
        let dr = c.refusal_rate() - st.refusal_rate();
        if dr > self.max_refusal_increase {
            return Some(format!(
                "canary refusal rate {:.2}% vs stable {:.2}% over {} / {} decisions \
                 (allowed increase {:.2} points)",
                100.0 * c.refusal_rate(),
                100.0 * st.refusal_rate(),
                c.decisions,
                st.decisions,
                100.0 * self.max_refusal_increase
            ));
        }
        let de = c.error_rate() - st.error_rate();
        if de > self.max_error_increase {
            return Some(format!(
                "canary rule-error rate {:.2}% vs stable {:.2}% over {} / {} decisions \
                 (allowed increase {:.2} points)",
                100.0 * c.error_rate(),
                100.0 * st.error_rate(),
                c.decisions,
                st.decisions,
                100.0 * self.max_error_increase
            ));
        }
        None
    }
}

/// What a list entry says about a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ListAction {
    /// Refused at the edge step with `RULE_DENY`.
    Block,
    /// Skips the rule tiers (never the anti-replay core).
    Allow,
}

/// What a list entry matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ListKind {
    /// `client.ip`, against addresses and CIDR blocks.
    Ip,
    /// `user_id`, exactly.
    User,
    /// `client.device_id`, exactly.
    Device,
    /// `client.ja3`, exactly (case-insensitive hex).
    Ja3,
    /// The user agent (`client.user_agent`, else the `user-agent` header), by case-insensitive
    /// substring.
    Ua,
}

impl ListKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ListKind::Ip => "ip",
            ListKind::User => "user",
            ListKind::Device => "device",
            ListKind::Ja3 => "ja3",
            ListKind::Ua => "ua",
        }
    }

    /// Checks an entry's value for this kind.
    pub fn validate(self, value: &str) -> Result<(), String> {
        if value.is_empty() || value.len() > 512 {
            return Err("value must be 1–512 bytes".into());
        }
        if value.chars().any(char::is_control) {
            return Err("value must not contain control characters".into());
        }
        match self {
            ListKind::Ip => crate::rules::lists::parse_cidr(value).map(|_| ()),
            ListKind::Ja3 if !value.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Err("a JA3 hash is hex".into())
            }
            _ => Ok(()),
        }
    }
}

/// The compiled block and allow lists (entries that have expired are left out by the caller).
#[derive(Debug, Default)]
pub struct DynamicLists {
    version: u64,
    by: HashMap<ListAction, Matchers>,
}

#[derive(Debug, Default)]
struct Matchers {
    ip: IpList,
    user: StringList,
    device: StringList,
    ja3: StringList,
    ua: StringList,
}

/// One match: which list, which kind, and the request's value that matched.
#[derive(Debug, Clone, PartialEq)]
pub struct ListHit {
    pub action: ListAction,
    pub kind: ListKind,
    pub value: String,
}

impl DynamicLists {
    /// Builds the lists from `(action, kind, value)` entries, all already validated.
    pub fn build<'a>(
        version: u64,
        entries: impl IntoIterator<Item = (ListAction, ListKind, &'a str)>,
    ) -> Result<Self, String> {
        let mut raw: HashMap<(ListAction, ListKind), Vec<String>> = HashMap::new();
        for (a, k, v) in entries {
            let v = if k == ListKind::Ja3 {
                v.to_ascii_lowercase()
            } else {
                v.to_string()
            };
            raw.entry((a, k)).or_default().push(v);
        }
        let mut by: HashMap<ListAction, Matchers> = HashMap::new();
        for ((a, k), values) in raw {
            let m = by.entry(a).or_default();
            let strs = values.iter().map(String::as_str);
            match k {
                ListKind::Ip => m.ip = IpList::from_entries(strs)?,
                ListKind::User => m.user = StringList::from_entries(strs),
                ListKind::Device => m.device = StringList::from_entries(strs),
                ListKind::Ja3 => m.ja3 = StringList::from_entries(strs),
                ListKind::Ua => m.ua = StringList::from_entries(strs),
            }
        }
        Ok(DynamicLists { version, by })
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn is_empty(&self) -> bool {
        self.by.is_empty()
    }

    /// The first match: the block list is asked before the allow list.
    pub fn check(&self, req: &DecideRequest) -> Option<ListHit> {
        if self.by.is_empty() {
            return None;
        }
        let c = &req.client;
        let ua = c
            .user_agent
            .as_deref()
            .or_else(|| req.request.header("user-agent"));
        for action in [ListAction::Block, ListAction::Allow] {
            let Some(m) = self.by.get(&action) else {
                continue;
            };
            let hit = |kind: ListKind, value: &str| {
                Some(ListHit {
                    action,
                    kind,
                    value: value.to_string(),
                })
            };
            if let Some(ip) = c.ip.as_deref() {
                if m.ip.ranges() > 0 && m.ip.contains_str(ip) {
                    return hit(ListKind::Ip, ip);
                }
            }
            if let Some(u) = req.user_id.as_deref() {
                if m.user.contains(u) {
                    return hit(ListKind::User, u);
                }
            }
            if let Some(d) = c.device_id.as_deref() {
                if m.device.contains(d) {
                    return hit(ListKind::Device, d);
                }
            }
            if let Some(j) = c.ja3.as_deref() {
                if !m.ja3.is_empty() && m.ja3.contains(&j.to_ascii_lowercase()) {
                    return hit(ListKind::Ja3, j);
                }
            }
            if let Some(ua) = ua {
                if m.ua.contains_any(ua) {
                    return hit(ListKind::Ua, ua);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(user: Option<&str>, device: Option<&str>, ip: Option<&str>) -> DecideRequest {
        let mut r: DecideRequest = serde_json::from_str(r#"{"app":"a"}"#).unwrap();
        r.user_id = user.map(String::from);
        r.client.device_id = device.map(String::from);
        r.client.ip = ip.map(String::from);
        r
    }

    #[test]
    fn canary_share_is_close_to_its_percentage_and_stable_per_user() {
        let c = Candidate::new(
            Arc::new(RuleSet::empty(Default::default())),
            Stage::Canary {
                percent: 10.0,
                filter: CanaryFilter::default(),
            },
        );
        let n = 20_000;
        let canary = (0..n)
            .filter(|i| c.arm(&req(Some(&format!("user-{i}")), None, None)) == Arm::Canary)
            .count();
        let share = canary as f64 / n as f64;
        assert!((0.09..0.11).contains(&share), "share {share}");
        for i in 0..1000 {
            let r = req(Some(&format!("user-{i}")), Some("dev"), Some("10.0.0.1"));
            assert_eq!(c.arm(&r), c.arm(&r));
        }
    }

    #[test]
    fn bucket_falls_back_from_user_to_device_to_ip() {
        assert_eq!(bucket(&req(None, None, None)), None);
        let by_ip = bucket(&req(None, None, Some("10.0.0.1")));
        let by_dev = bucket(&req(None, Some("10.0.0.1"), Some("10.0.0.1")));
        let by_user = bucket(&req(Some("10.0.0.1"), Some("x"), Some("10.0.0.1")));
        assert!(by_ip.is_some() && by_dev.is_some() && by_user.is_some());
        // Same string, different namespaces: not forced into one bucket.
        let same = [by_ip, by_dev, by_user]
            .iter()
            .filter(|b| **b == by_ip)
            .count();
        assert!(same < 3);
        assert_eq!(bucket(&req(Some(""), None, Some("10.0.0.1"))), by_ip);
    }

    #[test]
    fn filters_keep_other_requesters_on_stable() {
        let c = Candidate::new(
            Arc::new(RuleSet::empty(Default::default())),
            Stage::Canary {
                percent: 100.0,
                filter: CanaryFilter {
                    apps: vec![],
                    device_types: vec!["android".into()],
                    countries: vec!["DE".into()],
                },
            },
        );
        let mut r = req(Some("u"), None, None);
        assert_eq!(c.arm(&r), Arm::Stable);
        r.client.device_type = Some("Android".into());
        r.client.country = Some("de".into());
        assert_eq!(c.arm(&r), Arm::Canary);
        r.client.country = Some("FR".into());
        assert_eq!(c.arm(&r), Arm::Stable);
    }

    #[test]
    fn rollback_waits_for_samples_then_compares_rates() {
        let p = RollbackPolicy {
            min_samples: 100,
            max_refusal_increase: 0.05,
            max_error_increase: 0.01,
        };
        let c = |d, r, e| Counts {
            decisions: d,
            refusals: r,
            errors: e,
        };
        let mut s = StatsSnapshot {
            stable: c(1000, 50, 0),
            canary: c(99, 99, 0),
            shadow: Counts::default(),
        };
        assert_eq!(p.check(&s), None, "too few canary samples");
        s.canary = c(100, 10, 0);
        assert_eq!(p.check(&s), None, "10% vs 5%: within 5 points");
        s.canary = c(100, 11, 0);
        assert!(p.check(&s).unwrap().contains("refusal rate"));
        s.canary = c(100, 5, 2);
        assert!(p.check(&s).unwrap().contains("rule-error rate"));
    }

    #[test]
    fn lists_match_by_kind_and_block_wins() {
        let l = DynamicLists::build(
            1,
            [
                (ListAction::Block, ListKind::Ip, "203.0.113.0/24"),
                (ListAction::Allow, ListKind::User, "vip"),
                (ListAction::Block, ListKind::Ua, "sqlmap"),
                (ListAction::Block, ListKind::Ja3, "ABCDEF"),
            ],
        )
        .unwrap();
        let mut r = req(Some("vip"), None, Some("203.0.113.9"));
        assert_eq!(l.check(&r).unwrap().action, ListAction::Block);
        r.client.ip = Some("198.51.100.1".into());
        assert_eq!(l.check(&r).unwrap().action, ListAction::Allow);
        r.user_id = None;
        assert_eq!(l.check(&r), None);
        r.client.user_agent = Some("Mozilla SQLMap/1.0".into());
        assert_eq!(l.check(&r).unwrap().kind, ListKind::Ua);
        r.client.user_agent = None;
        r.client.ja3 = Some("abcdef".into());
        assert_eq!(l.check(&r).unwrap().kind, ListKind::Ja3);
        assert!(ListKind::Ip.validate("10.0.0.0/33").is_err());
        assert!(ListKind::Ja3.validate("xyz").is_err());
        assert!(ListKind::User.validate("a\nb").is_err());
    }
}
