//! Staged rollout: the candidate in the rollout state and its history, staging in shadow or
//! canary, four-eyes approval, manual and automatic rollback, re-activating an earlier stable
//! version.

use rampart_core::rollout::{CanaryFilter, Stage};
use serde::{Deserialize, Serialize};

use super::audit::Audit;
use super::{conflict, Control, ControlState, Host};
use crate::auth::Principal;
use crate::clock::now_ms;
use crate::error::ApiError;

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

impl RolloutEvent {
    /// `who` did `action` to `version` now, with the stable version before it; no stage, percent
    /// or reason.
    pub(super) fn new(
        who: &Principal,
        action: &str,
        version: &str,
        stable_before: Option<String>,
    ) -> RolloutEvent {
        RolloutEvent {
            time_ms: now_ms(),
            actor: who.name.clone(),
            action: action.into(),
            version: Some(version.into()),
            stable_before,
            stage: None,
            percent: None,
            reason: None,
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

impl Control {
    /// Rolls back a canary whose refusal or error rate broke the rollback policy (by the
    /// `auto-rollback` system actor).
    pub(super) fn roll_back_failing_canary(&self, rt: &Host<'_>) {
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
                        stage: Some("canary".into()),
                        reason: Some(reason.clone()),
                        ..RolloutEvent::new(&who, "auto-rollback", &version, s.stable.clone())
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
                stage: Some(stage_name.into()),
                percent,
                ..RolloutEvent::new(who, "stage", &version, s.stable.clone())
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
                stage: Some("stable".into()),
                ..RolloutEvent::new(who, "approve", version, before.clone())
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
                stage: Some(c.stage.clone()),
                percent: c.percent,
                reason: Some(reason.to_string()),
                ..RolloutEvent::new(who, "rollback", &c.version, s.stable.clone())
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
                stage: Some("stable".into()),
                ..RolloutEvent::new(who, "activate", version, before.clone())
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
}
