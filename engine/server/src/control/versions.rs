//! Rule set versions: stored documents with their metadata and provenance, the cache of compiled
//! versions, uploads and imports (the rule directory or the built-in set becoming stable).

use std::collections::BTreeMap;
use std::sync::Arc;

use rampart_core::rules::{RuleSet, Source};
use serde::{Deserialize, Serialize};

use super::audit::Audit;
use super::{store_err, Control, Host, RolloutEvent};
use crate::auth::Principal;
use crate::clock::now_ms;
use crate::error::ApiError;

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

/// Rule sets compiled from stored versions, least recently used first, at most `max` (a set is
/// about a MiB: the rule engine, its lists' automata, the scripts). Uploads and directory reloads
/// come here too, so a set that is neither live nor in a rollout arm is dropped once `max` newer
/// ones were used: a rule directory rewritten every few seconds keeps memory flat.
pub(crate) struct Compiled {
    max: usize,
    sets: Vec<(String, Arc<RuleSet>)>,
}

impl Compiled {
    pub(crate) fn new(max: usize) -> Compiled {
        Compiled {
            max: max.max(1),
            sets: Vec::new(),
        }
    }

    fn get(&mut self, version: &str) -> Option<Arc<RuleSet>> {
        let i = self.sets.iter().position(|(v, _)| v == version)?;
        let e = self.sets.remove(i);
        let set = e.1.clone();
        self.sets.push(e);
        Some(set)
    }

    fn put(&mut self, version: &str, set: Arc<RuleSet>) {
        self.sets.retain(|(v, _)| v != version);
        if self.sets.len() >= self.max {
            self.sets.remove(0);
        }
        self.sets.push((version.to_string(), set));
    }

    fn len(&self) -> usize {
        self.sets.len()
    }
}

impl Control {
    /// The rule set of a stored version, compiled against the engine's state (cached).
    pub fn compiled(&self, rt: &Host<'_>, version: &str) -> Result<Arc<RuleSet>, ApiError> {
        if let Some(s) = self.lock_compiled().get(version) {
            return Ok(s);
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
        self.lock_compiled().put(version, set.clone());
        Ok(set)
    }

    /// How many versions are kept compiled (the `rampart_ruleset_compiled_versions` gauge).
    pub fn compiled_versions(&self) -> usize {
        self.lock_compiled().len()
    }

    fn lock_compiled(&self) -> std::sync::MutexGuard<'_, Compiled> {
        self.compiled.lock().unwrap_or_else(|e| e.into_inner())
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
        self.lock_compiled().put(&version, Arc::new(set));
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
            s.event(RolloutEvent::new(&who, "import", &v, before.clone()));
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

    /// Without dev mode, an uploaded version goes live only if a trusted key signed it (versions
    /// uploaded while `allow_unsigned_uploads` was on stay unstageable after it is turned off).
    pub(super) fn require_signed(&self, rt: &Host<'_>, doc: &VersionDoc) -> Result<(), ApiError> {
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
}
