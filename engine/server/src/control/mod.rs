//! The control plane: rule set versions, staged rollout with approval and automatic rollback,
//! block/allow lists, the audit log, and who may do what ([`auth`]).
//!
//! Every change goes through [`Control::mutate`]: read the rollout state, derive the next one,
//! save it with compare-and-set, append an audit entry, apply it to this instance. Other instances
//! notice the new generation within `[admin] poll_ms` and apply it too ([`Control::poll`]).

pub mod store;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use rampart_core::rollout::{
    CanaryFilter, Candidate, DynamicLists, ListAction, ListKind, RollbackPolicy, Stage,
};
use rampart_core::rules::{RuleSet, Source};
use serde::{Deserialize, Serialize};

use crate::auth::{Identities, Principal, Role, Sessions, Throttle};
use crate::clock::now_ms;
use crate::error::ApiError;
use store::ControlStore;

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

/// A rule set version's metadata.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VersionMeta {
    /// The content hash of the set (the rule set's `version`).
    pub version: String,
    pub author: String,
    pub message: String,
    pub parent: Option<String>,
    pub created_ms: i64,
    /// `upload`, `rules-dir` or `built-in`.
    pub source: String,
    pub files: usize,
    pub rules: usize,
    /// The trusted key that signed the uploaded bundle (its `[[admin.bundle_keys]]` name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// The bundle's git origin (repository, ref, commit), as signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<rampart_core::lifecycle::bundle::Origin>,
}

/// Where an upload came from: a verified bundle's signer and origin, or nothing.
#[derive(Debug, Clone, Default)]
pub struct Provenance {
    /// Key name and id.
    pub signed_by: Option<(String, String)>,
    pub origin: Option<rampart_core::lifecycle::bundle::Origin>,
}

/// A stored version: metadata and every file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionDoc {
    #[serde(flatten)]
    pub meta: VersionMeta,
    pub sources: BTreeMap<String, String>,
}

impl VersionDoc {
    pub fn sources(&self) -> Vec<Source> {
        self.sources
            .iter()
            .map(|(p, t)| Source {
                path: p.clone(),
                text: t.clone(),
            })
            .collect()
    }
}

/// The candidate in the rollout state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CandidateState {
    pub version: String,
    /// `shadow` or `canary`.
    pub stage: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    #[serde(default, skip_serializing_if = "CanaryFilter::is_empty")]
    pub filter: CanaryFilter,
    pub by: String,
    pub since_ms: i64,
}

impl CandidateState {
    pub fn to_stage(&self) -> Stage {
        match self.stage.as_str() {
            "canary" => Stage::Canary {
                percent: self.percent.unwrap_or(0.0),
                filter: self.filter.clone(),
            },
            _ => Stage::Shadow,
        }
    }
}

/// A block or allow list entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ListEntry {
    pub id: u64,
    pub list: ListAction,
    pub kind: ListKind,
    pub value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<i64>,
    #[serde(default)]
    pub note: String,
    pub by: String,
    pub created_ms: i64,
}

/// One step of the rollout history.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RolloutEvent {
    pub time_ms: i64,
    pub actor: String,
    /// `import`, `stage`, `approve`, `rollback`, `auto-rollback`, `activate`.
    pub action: String,
    pub version: Option<String>,
    /// The stable version before the event.
    pub stable_before: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
    pub history: Vec<RolloutEvent>,
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

/// One audit log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    pub seq: u64,
    pub time_ms: i64,
    pub actor: String,
    pub role: Role,
    pub via: String,
    /// e.g. `ruleset.upload`, `rollout.stage`, `rollout.approve`, `rollout.rollback`,
    /// `rollout.auto-rollback`, `ruleset.activate`, `list.add`, `list.remove`, `login`,
    /// `logout`, `settings.log-level`.
    pub action: String,
    pub target: String,
    /// Hash of what the action replaced (e.g. the stable version before), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Hash of what the action put in place, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

/// What this instance last applied.
#[derive(Default)]
struct Applied {
    generation: u64,
    lists_version: u64,
    /// The earliest expiry among the applied list entries.
    next_expiry_ms: Option<i64>,
}

/// The control plane of one instance.
pub struct Control {
    pub store: Arc<dyn ControlStore>,
    pub sessions: Sessions,
    pub identities: Identities,
    pub throttle: Throttle,
    pub policy: RollbackPolicy,
    pub cookie_secure: bool,
    /// Rule sets compiled from stored versions, by version.
    compiled: Mutex<HashMap<String, Arc<RuleSet>>>,
    applied: Mutex<Applied>,
    /// Serialises this instance's changes (the store's compare-and-set covers other instances).
    write: Mutex<()>,
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
            compiled: Mutex::new(HashMap::new()),
            applied: Mutex::new(Applied::default()),
            write: Mutex::new(()),
        })
    }

    /// The rule set of a stored version, compiled against the engine's state (cached).
    pub fn compiled(&self, rt: &Host<'_>, version: &str) -> Result<Arc<RuleSet>, ApiError> {
        if let Some(s) = self.lock_compiled().get(version) {
            return Ok(s.clone());
        }
        let live = rt.engine.rules().snapshot();
        if live.version() == version {
            return Ok(live);
        }
        let doc = self.doc(version)?;
        let set = RuleSet::compile(
            &doc.sources(),
            rt.config.raw.rules.settings(),
            rt.rule_state,
        )
        .map_err(|errs| {
            ApiError::new(
                422,
                "RULESET_INVALID",
                format!(
                    "stored version {version} no longer compiles: {}",
                    errs.first().map(|e| e.to_string()).unwrap_or_default()
                ),
            )
        })?;
        let set = Arc::new(set);
        self.cache_compiled(version, set.clone());
        Ok(set)
    }

    /// Keeps `set` compiled for its version, at most 16 of them (a set is about half a MiB: the
    /// rule engine, its lists' automata, the scripts). Uploads and directory reloads come here too,
    /// or every reload would keep its set for good.
    fn cache_compiled(&self, version: &str, set: Arc<RuleSet>) {
        let mut c = self.lock_compiled();
        if c.len() >= 16 && !c.contains_key(version) {
            c.clear();
        }
        c.insert(version.to_string(), set);
    }

    /// How many versions are kept compiled (the `rampart_ruleset_compiled_versions` gauge).
    pub fn compiled_versions(&self) -> usize {
        self.lock_compiled().len()
    }

    fn lock_compiled(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<RuleSet>>> {
        self.compiled.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an audit entry (a failure to record is logged: the change itself is done).
    pub fn audit(
        &self,
        who: &Principal,
        action: &str,
        target: &str,
        before: Option<String>,
        after: Option<String>,
        detail: serde_json::Value,
    ) {
        let mut e = AuditEntry {
            seq: 0,
            time_ms: now_ms(),
            actor: who.name.clone(),
            role: who.role,
            via: format!("{:?}", who.via).to_ascii_lowercase(),
            action: action.into(),
            target: target.into(),
            before,
            after,
            detail,
        };
        if let Err(err) = self.store.append_audit(&mut e) {
            tracing::error!(%err, action, actor = %who.name, "cannot append to the audit log");
        }
    }

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
                self.audit(
                    who,
                    &audit.action,
                    &audit.target,
                    audit.before,
                    audit.after,
                    audit.detail,
                );
                if let Err(e) = self.apply(rt, &next) {
                    tracing::error!(error = %e, "saved a control state this instance cannot apply");
                }
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
        if let Some(c) = rt.engine.candidate() {
            if c.is_shadow() {
                return;
            }
            if let Some(reason) = self.policy.check(&c.stats.snapshot()) {
                let version = c.set.version().to_string();
                let stats = c.stats.snapshot();
                let who = Principal::system("auto-rollback");
                let r = self.mutate(rt, &who, |s| {
                    match &s.candidate {
                        Some(cand) if cand.version == version => {}
                        // Someone else already acted on it.
                        _ => return Err(conflict("NO_CANDIDATE", "gone")),
                    }
                    s.candidate = None;
                    s.event(RolloutEvent {
                        time_ms: now_ms(),
                        actor: who.name.clone(),
                        action: "auto-rollback".into(),
                        version: Some(version.clone()),
                        stable_before: s.stable.clone(),
                        stage: Some("canary".into()),
                        percent: None,
                        reason: Some(reason.clone()),
                    });
                    Ok((
                        Audit {
                            action: "rollout.auto-rollback".into(),
                            target: version.clone(),
                            before: Some(version.clone()),
                            after: s.stable.clone(),
                            detail: serde_json::json!({ "reason": reason, "stats": stats }),
                        },
                        (),
                    ))
                });
                match r {
                    Ok(()) => {
                        rt.metrics.rollbacks.inc();
                        tracing::warn!(%version, %reason, "canary rolled back automatically");
                    }
                    Err(e) if e.code == "NO_CANDIDATE" => {}
                    Err(e) => tracing::error!(error = %e.message, "automatic rollback failed"),
                }
            }
        }
    }

    /// Stores `sources` as a version (validated first). Returns its metadata and whether it is
    /// new.
    pub fn upload(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        sources: &[Source],
        message: &str,
        source: &str,
        provenance: Provenance,
    ) -> Result<(VersionMeta, bool), ApiError> {
        let set = RuleSet::compile(sources, rt.config.raw.rules.settings(), rt.rule_state)
            .map_err(|errors| {
                rt.metrics.ruleset_rejected.inc();
                ApiError::new(
                    422,
                    "RULESET_INVALID",
                    format!("{} problem(s); nothing was stored", errors.len()),
                )
                .with_details(serde_json::to_value(&errors).unwrap_or_default())
            })?;
        let version = set.version().to_string();
        if let Some(existing) = self.store.get_version(&version).map_err(store_err)? {
            return Ok((existing.meta, false));
        }
        let state = self.store.load().map_err(store_err)?;
        let meta = VersionMeta {
            version: version.clone(),
            author: who.name.clone(),
            message: message.chars().take(1000).collect(),
            parent: state.stable.clone(),
            created_ms: now_ms(),
            source: source.into(),
            files: sources.len(),
            rules: set.rule_count(),
            key_id: provenance.signed_by.as_ref().map(|(_, id)| id.clone()),
            signed_by: provenance.signed_by.map(|(name, _)| name),
            origin: provenance.origin,
        };
        let doc = VersionDoc {
            meta: meta.clone(),
            sources: sources
                .iter()
                .map(|s| (s.path.clone(), s.text.clone()))
                .collect(),
        };
        self.store.put_version(&doc).map_err(store_err)?;
        self.cache_compiled(&version, Arc::new(set));
        self.audit(
            who,
            "ruleset.upload",
            &version,
            meta.parent.clone(),
            Some(version.clone()),
            serde_json::json!({
                "message": meta.message, "files": meta.files, "rules": meta.rules,
                "signed_by": meta.signed_by, "key_id": meta.key_id, "origin": meta.origin,
            }),
        );
        Ok((meta, true))
    }

    /// At start and on directory changes: makes `sources` the stable set when it differs from
    /// the last import (`always_when_changed`), or when nothing is stable yet.
    pub fn import(
        &self,
        rt: &Host<'_>,
        sources: &[Source],
        source: &str,
        always_when_changed: bool,
    ) -> Result<(), ApiError> {
        let who = Principal::system(source);
        let (meta, _) = self.upload(
            rt,
            &who,
            sources,
            &format!("imported from {source}"),
            source,
            Provenance::default(),
        )?;
        let v = meta.version;
        let cur = self.store.load().map_err(store_err)?;
        let changed = cur.imported.as_deref() != Some(&v);
        if cur.stable.is_some() && !changed {
            return self.apply(rt, &cur);
        }
        self.mutate(rt, &who, |s| {
            let changed = s.imported.as_deref() != Some(&v);
            let take = s.stable.is_none() || (always_when_changed && changed);
            if !take {
                if changed {
                    s.imported = Some(v.clone());
                }
                return Ok((Audit::none(), ()));
            }
            let before = s.stable.replace(v.clone());
            s.imported = Some(v.clone());
            if s.candidate.as_ref().is_some_and(|c| c.version == v) {
                s.candidate = None;
            }
            if !s.approved.contains(&v) {
                s.approved.push(v.clone());
            }
            s.event(RolloutEvent {
                time_ms: now_ms(),
                actor: who.name.clone(),
                action: "import".into(),
                version: Some(v.clone()),
                stable_before: before.clone(),
                stage: None,
                percent: None,
                reason: None,
            });
            Ok((
                Audit {
                    action: "ruleset.import".into(),
                    target: v.clone(),
                    before,
                    after: Some(v.clone()),
                    detail: serde_json::json!({ "source": source }),
                },
                (),
            ))
        })
    }

    /// Starts a candidate in shadow or canary.
    pub fn stage(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        req: StageRequest,
    ) -> Result<ControlState, ApiError> {
        let stage_name = req.stage.as_str();
        if !matches!(stage_name, "shadow" | "canary") {
            return Err(ApiError::new(
                400,
                "INVALID_FIELD",
                "stage must be \"shadow\" or \"canary\" (stable needs an approval: POST /admin/v1/rollout/approve)",
            ));
        }
        let percent = match (stage_name, req.percent) {
            ("canary", Some(p)) if p > 0.0 && p <= 100.0 => Some(p),
            ("canary", _) => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "a canary needs percent, 0 < percent ≤ 100",
                ))
            }
            _ => None,
        };
        self.require_signed(rt, &self.doc(&req.version)?)?;
        // Compiles (and caches) before the state says anyone should run it.
        self.compiled(rt, &req.version)?;
        let version = req.version.clone();
        let filter = req.filter.clone().unwrap_or_default();
        self.mutate(rt, who, |s| {
            if s.stable.as_deref() == Some(&version) {
                return Err(conflict(
                    "ALREADY_STABLE",
                    format!("{version} is already the stable version"),
                ));
            }
            if let Some(c) = &s.candidate {
                if c.version != version {
                    return Err(conflict(
                        "CANDIDATE_IN_PROGRESS",
                        format!(
                            "{} is already rolling out; roll it back or approve it first",
                            c.version
                        ),
                    ));
                }
            }
            let before = s.candidate.as_ref().map(|c| c.version.clone());
            s.candidate = Some(CandidateState {
                version: version.clone(),
                stage: stage_name.into(),
                percent,
                filter: filter.clone(),
                by: who.name.clone(),
                since_ms: now_ms(),
            });
            s.event(RolloutEvent {
                time_ms: now_ms(),
                actor: who.name.clone(),
                action: "stage".into(),
                version: Some(version.clone()),
                stable_before: s.stable.clone(),
                stage: Some(stage_name.into()),
                percent,
                reason: None,
            });
            Ok((
                Audit {
                    action: "rollout.stage".into(),
                    target: version.clone(),
                    before,
                    after: Some(version.clone()),
                    detail: serde_json::json!({ "stage": stage_name, "percent": percent, "filter": filter }),
                },
                s.clone(),
            ))
        })
    }

    /// Without dev mode, an uploaded version goes live only if a trusted key signed it (versions
    /// uploaded while `allow_unsigned_uploads` was on stay unstageable after it is turned off).
    fn require_signed(&self, rt: &Host<'_>, doc: &VersionDoc) -> Result<(), ApiError> {
        let m = &doc.meta;
        if !rt.config.raw.admin.allow_unsigned_uploads
            && m.source == "upload"
            && m.signed_by.is_none()
        {
            return Err(ApiError::new(
                403,
                "BUNDLE_UNSIGNED",
                format!(
                    "{} was uploaded unsigned; only signed bundles go live here",
                    m.version
                ),
            ));
        }
        Ok(())
    }

    /// A stored version, or 404 `VERSION_NOT_FOUND`.
    pub fn doc(&self, version: &str) -> Result<VersionDoc, ApiError> {
        self.store
            .get_version(version)
            .map_err(store_err)?
            .ok_or_else(|| ApiError::new(404, "VERSION_NOT_FOUND", format!("no version {version}")))
    }

    /// Promotes the candidate to stable: by an approver who is not the version's author.
    pub fn approve(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        version: &str,
    ) -> Result<ControlState, ApiError> {
        let doc = self.doc(version)?;
        if doc.meta.author == who.name {
            return Err(ApiError::new(
                403,
                "FOUR_EYES",
                format!("{} wrote {version}; someone else must approve it", who.name),
            ));
        }
        self.require_signed(rt, &doc)?;
        self.compiled(rt, version)?;
        self.mutate(rt, who, |s| {
            match &s.candidate {
                Some(c) if c.version == version => {}
                Some(c) => {
                    return Err(conflict(
                        "VERSION_MISMATCH",
                        format!("the candidate is {}, not {version}", c.version),
                    ))
                }
                None => {
                    return Err(conflict(
                        "NO_CANDIDATE",
                        "stage the version in shadow or canary before approving it",
                    ))
                }
            }
            let before = s.stable.replace(version.to_string());
            let staged = s.candidate.take();
            if !s.approved.iter().any(|a| a == version) {
                s.approved.push(version.to_string());
            }
            s.event(RolloutEvent {
                time_ms: now_ms(),
                actor: who.name.clone(),
                action: "approve".into(),
                version: Some(version.to_string()),
                stable_before: before.clone(),
                stage: Some("stable".into()),
                percent: None,
                reason: None,
            });
            Ok((
                Audit {
                    action: "rollout.approve".into(),
                    target: version.to_string(),
                    before,
                    after: Some(version.to_string()),
                    detail: serde_json::json!({
                        "author": doc.meta.author,
                        "staged_by": staged.map(|c| c.by),
                    }),
                },
                s.clone(),
            ))
        })
    }

    /// Ends the candidate's rollout (everyone back on stable).
    pub fn rollback(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        reason: &str,
    ) -> Result<ControlState, ApiError> {
        self.mutate(rt, who, |s| {
            let Some(c) = s.candidate.take() else {
                return Err(conflict(
                    "NO_CANDIDATE",
                    "no candidate is rolling out (to go back to an earlier stable version, activate it)",
                ));
            };
            s.event(RolloutEvent {
                time_ms: now_ms(),
                actor: who.name.clone(),
                action: "rollback".into(),
                version: Some(c.version.clone()),
                stable_before: s.stable.clone(),
                stage: Some(c.stage.clone()),
                percent: c.percent,
                reason: Some(reason.to_string()),
            });
            Ok((
                Audit {
                    action: "rollout.rollback".into(),
                    target: c.version.clone(),
                    before: Some(c.version.clone()),
                    after: s.stable.clone(),
                    detail: serde_json::json!({ "reason": reason, "stage": c.stage }),
                },
                s.clone(),
            ))
        })
    }

    /// Makes a version that was stable before the stable one again, at once.
    pub fn activate(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        version: &str,
    ) -> Result<ControlState, ApiError> {
        self.compiled(rt, version)?;
        self.mutate(rt, who, |s| {
            if !s.approved.iter().any(|a| a == version) {
                return Err(conflict(
                    "NOT_APPROVED",
                    format!("{version} was never stable: stage it and have it approved"),
                ));
            }
            if s.stable.as_deref() == Some(version) {
                return Err(conflict(
                    "ALREADY_STABLE",
                    format!("{version} is already stable"),
                ));
            }
            let before = s.stable.replace(version.to_string());
            if s.candidate.as_ref().is_some_and(|c| c.version == version) {
                s.candidate = None;
            }
            s.event(RolloutEvent {
                time_ms: now_ms(),
                actor: who.name.clone(),
                action: "activate".into(),
                version: Some(version.to_string()),
                stable_before: before.clone(),
                stage: Some("stable".into()),
                percent: None,
                reason: None,
            });
            Ok((
                Audit {
                    action: "ruleset.activate".into(),
                    target: version.to_string(),
                    before,
                    after: Some(version.to_string()),
                    detail: serde_json::Value::Null,
                },
                s.clone(),
            ))
        })
    }

    /// Adds a block or allow list entry.
    pub fn add_list_entry(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        e: NewListEntry,
    ) -> Result<ListEntry, ApiError> {
        e.kind
            .validate(&e.value)
            .map_err(|m| ApiError::new(400, "INVALID_FIELD", format!("value: {m}")))?;
        let now = now_ms();
        let expires_ms = match (e.expires_ms, e.ttl_ms) {
            (Some(_), Some(_)) => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "give expires_ms or ttl_ms, not both",
                ))
            }
            (Some(t), None) if t <= now => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "expires_ms is in the past",
                ))
            }
            (None, Some(t)) if t <= 0 => {
                return Err(ApiError::new(
                    400,
                    "INVALID_FIELD",
                    "ttl_ms must be positive",
                ))
            }
            (Some(t), None) => Some(t),
            (None, Some(t)) => Some(now.saturating_add(t)),
            (None, None) => None,
        };
        if e.note.len() > 1000 {
            return Err(ApiError::new(
                400,
                "INVALID_FIELD",
                "note is over 1000 bytes",
            ));
        }
        self.mutate(rt, who, |s| {
            if s.lists.len() >= 100_000 {
                return Err(conflict("LIST_FULL", "the lists hold 100,000 entries"));
            }
            s.next_list_id += 1;
            s.lists_version += 1;
            let entry = ListEntry {
                id: s.next_list_id,
                list: e.list,
                kind: e.kind,
                value: e.value.clone(),
                expires_ms,
                note: e.note.clone(),
                by: who.name.clone(),
                created_ms: now,
            };
            s.lists.push(entry.clone());
            let h = list_hash(&s.lists);
            Ok((
                Audit {
                    action: "list.add".into(),
                    target: format!("{}:{}", list_name(e.list), e.kind.as_str()),
                    before: Some(list_hash(&s.lists[..s.lists.len() - 1])),
                    after: Some(h),
                    detail: serde_json::to_value(&entry).unwrap_or_default(),
                },
                entry,
            ))
        })
    }

    pub fn remove_list_entry(
        &self,
        rt: &Host<'_>,
        who: &Principal,
        id: u64,
    ) -> Result<(), ApiError> {
        self.mutate(rt, who, |s| {
            let before = list_hash(&s.lists);
            let Some(i) = s.lists.iter().position(|e| e.id == id) else {
                return Err(ApiError::new(
                    404,
                    "NOT_FOUND",
                    format!("no list entry {id}"),
                ));
            };
            let entry = s.lists.remove(i);
            s.lists_version += 1;
            Ok((
                Audit {
                    action: "list.remove".into(),
                    target: format!("{}:{}", list_name(entry.list), entry.kind.as_str()),
                    before: Some(before),
                    after: Some(list_hash(&s.lists)),
                    detail: serde_json::to_value(&entry).unwrap_or_default(),
                },
                (),
            ))
        })
    }
}

fn list_name(a: ListAction) -> &'static str {
    match a {
        ListAction::Block => "block",
        ListAction::Allow => "allow",
    }
}

/// A short content hash of list entries (for the audit log's before/after).
fn list_hash(entries: &[ListEntry]) -> String {
    let body = serde_json::to_vec(entries).unwrap_or_default();
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(&body))
}

/// The audit entry a change produces.
pub struct Audit {
    pub action: String,
    pub target: String,
    pub before: Option<String>,
    pub after: Option<String>,
    pub detail: serde_json::Value,
}

impl Audit {
    /// An import that is recorded but not made stable (a new built-in set while another
    /// version is stable).
    fn none() -> Audit {
        Audit {
            action: "ruleset.import-skipped".into(),
            target: String::new(),
            before: None,
            after: None,
            detail: serde_json::Value::Null,
        }
    }
}

/// `POST /admin/v1/rollout`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StageRequest {
    pub version: String,
    pub stage: String,
    #[serde(default)]
    pub percent: Option<f64>,
    #[serde(default)]
    pub filter: Option<CanaryFilter>,
}

/// `POST /admin/v1/lists`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewListEntry {
    pub list: ListAction,
    pub kind: ListKind,
    pub value: String,
    #[serde(default)]
    pub expires_ms: Option<i64>,
    #[serde(default)]
    pub ttl_ms: Option<i64>,
    #[serde(default)]
    pub note: String,
}
