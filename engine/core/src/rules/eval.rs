//! Evaluating a tier: the rules that apply in priority order, first terminal action wins, scores
//! summed, shadow hits recorded, errors and bounds answered by the tier's default.

use super::compile::{RuleSet, Tally};
use super::helpers::with_replay;
use super::request::Req;
use super::source::{Mode, Rule};
use super::state::{
    CHALLENGE_DIFFICULTY, DEGRADED, EVAL_NOW, IN_EDGE, IN_SHADOW, KEY_NS, LAST_RETRY, RESOLUTION,
    RULE_ID, SIMULATING, STORE_DOWN,
};
use crate::model::{Action, Code, Reason, ShadowHit, Step, Verdict};
use crate::policy::{FailPolicy, Tier};
use rhai::{Dynamic, EvalAltResult, Scope};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// What a rule returned.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Allow,
    Terminal {
        action: Action,
        code: Code,
        reason: String,
    },
    Score {
        points: i64,
        reason: String,
    },
}

impl RuleSet {
    pub(super) fn eval(
        &self,
        rule: &Rule,
        req: &Req,
        scope: &mut Scope<'static>,
    ) -> Result<Option<Outcome>, String> {
        let mut calls = Vec::new();
        if let Some(p) = &rule.precheck {
            let max_string = self.engine.max_string_size();
            match p.check(req, &self.lists, max_string, self.state.as_ref()) {
                super::precheck::Checked::RuledOut => return Ok(None),
                super::precheck::Checked::Run(made) => calls = made,
            }
        }
        // The scope (`req`) is made for the first rule of the tier that runs in the interpreter.
        if scope.is_empty() {
            scope.push_constant("req", req.clone());
        }
        let base = scope.len();
        let result = with_replay(calls, || self.run(rule, scope));
        scope.rewind(base);
        match result {
            Ok(v) if v.is_unit() => Ok(None),
            Ok(v) => match v.try_cast::<Outcome>() {
                Some(o) => Ok(Some(o)),
                None => Err("the rule must end with allow(), deny(…), challenge(…), review(…), score(…) or nothing".into()),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    /// Runs one rule's statements. Rhai resolves each call (getter, helper, `len`…) through the
    /// engine's modules and caches the answer only from its second use in one cache; a fresh cache
    /// per evaluation (what `eval_ast_with_scope` does) therefore resolves every call every time.
    /// Rules without functions of their own resolve the same names to the same native functions
    /// of this set's engine, so they share one cache per thread and per set, kept across
    /// decisions. A rule that defines functions gets a fresh cache (its names may shadow others).
    pub(super) fn run(
        &self,
        rule: &Rule,
        scope: &mut Scope<'_>,
    ) -> Result<Dynamic, Box<EvalAltResult>> {
        if rule.ast.has_functions() {
            return self.engine.eval_ast_with_scope::<Dynamic>(scope, &rule.ast);
        }
        RESOLUTION.with(|cell| {
            let Ok(mut slot) = cell.try_borrow_mut() else {
                // Re-entered (a helper judged with another set): no sharing.
                return self.engine.eval_ast_with_scope::<Dynamic>(scope, &rule.ast);
            };
            // Two slots: a canary and its stable set alternate on one thread.
            if slot[0].as_ref().is_none_or(|(id, _)| *id != self.id) {
                slot.swap(0, 1);
                if slot[0].as_ref().is_none_or(|(id, _)| *id != self.id) {
                    slot[0] = Some((self.id, rhai::Caches::new()));
                }
            }
            let (_, caches) = slot[0].as_mut().expect("just set");
            let mut global = self.engine.new_global_runtime_state();
            #[allow(deprecated)] // the supported spelling of "evaluate these statements" in 1.x
            self.engine
                .eval_statements_raw(&mut global, caches, scope, rule.ast.statements())
        })
    }

    /// Evaluates one tier for `req`.
    pub fn evaluate_tier(
        &self,
        tier: Tier,
        req: &Req,
        session: &mut RuleSession,
    ) -> Option<Verdict> {
        let index = &self.tiers[tier.index()];
        let ids = index.for_app(req.app());
        if ids.is_empty() {
            return None;
        }
        // One write of the shared counter per tier, not one per rule (see `SetCounts`).
        let mut tally = Tally(&self.counts.evaluations, 0);
        let mut scope = Scope::new();
        EVAL_NOW.with(|n| n.set(req.now_ms));
        /// Clears the edge flag however the tier ends.
        struct EdgeDone;
        impl Drop for EdgeDone {
            fn drop(&mut self) {
                IN_EDGE.with(|f| f.set(false));
            }
        }
        IN_EDGE.with(|f| f.set(tier == Tier::Edge));
        let _edge = EdgeDone;
        for &i in ids {
            let rule = &index.rules[i];
            if !rule.applies_to_route(req.path()) {
                if let Some(t) = session.trace.as_deref_mut() {
                    let shadow = rule.meta.mode == Mode::Shadow;
                    t.rule(
                        &rule.meta.name,
                        shadow,
                        "not for this route".into(),
                        Instant::now(),
                    );
                }
                continue;
            }
            let started = session.trace.is_some().then(Instant::now);
            LAST_RETRY.with(|r| r.set(0));
            STORE_DOWN.with(|d| d.set(None));
            DEGRADED.with(|d| d.set(false));
            IN_SHADOW
                .with(|f| f.set(rule.meta.mode == Mode::Shadow || SIMULATING.with(|s| s.get())));
            RULE_ID.with(|r| r.set(rule.id));
            tally.1 += 1;
            let outcome = self.eval(rule, req, &mut scope);
            IN_SHADOW.with(|f| f.set(false));
            if let (Some(t), Some(started)) = (session.trace.as_deref_mut(), started) {
                t.rule(
                    &rule.meta.name,
                    rule.meta.mode == Mode::Shadow,
                    trace_outcome(&outcome),
                    started,
                );
            }
            if DEGRADED.with(|d| d.get()) && rule.meta.mode == Mode::Enforce {
                session.degraded = true;
            }
            let outcome = match outcome {
                Ok(o) => o,
                Err(msg) => {
                    rule.errors.fetch_add(1, Ordering::Relaxed);
                    self.counts.errors.fetch_add(1, Ordering::Relaxed);
                    session.errors += 1;
                    if let Some(store) = STORE_DOWN.with(|d| d.take()) {
                        if rule.meta.mode == Mode::Enforce {
                            return Some(Verdict::reject(
                                tier.step(),
                                Action::Deny,
                                Code::StoreUnavailable,
                                &rule.meta.name,
                                Reason::new(format!(
                                    "{msg}; the {store} store fails closed (on_store_error = deny)"
                                )),
                            ));
                        }
                        continue;
                    }
                    if rule.meta.mode == Mode::Enforce
                        && self.settings.on_error[tier.index()] == FailPolicy::Deny
                    {
                        return Some(Verdict::reject(
                            tier.step(),
                            Action::Deny,
                            Code::RuleDeny,
                            &rule.meta.name,
                            Reason::new(format!(
                                "rule failed and the {} tier fails closed: {msg}",
                                tier.as_str()
                            )),
                        ));
                    }
                    continue;
                }
            };
            let Some(outcome) = outcome else { continue };
            rule.hits.fetch_add(1, Ordering::Relaxed);
            if rule.meta.mode == Mode::Shadow {
                if let Outcome::Terminal {
                    action,
                    code,
                    reason,
                } = &outcome
                {
                    session.shadow.push(ShadowHit {
                        tier: tier.as_str().into(),
                        rule: rule.meta.name.clone(),
                        action: *action,
                        code: *code,
                        reason: reason.clone(),
                        version: None,
                    });
                }
                continue;
            }
            match outcome {
                Outcome::Allow => return None,
                Outcome::Score { points, reason } => {
                    session.score += points;
                    session.reasons.push(Reason::new(format!(
                        "{} ({points:+}): {reason}",
                        rule.meta.name
                    )));
                }
                Outcome::Terminal {
                    action,
                    code,
                    reason,
                } => {
                    let mut v = Verdict::reject(
                        tier.step(),
                        action,
                        code,
                        &rule.meta.name,
                        Reason::new(reason),
                    );
                    let retry = LAST_RETRY.with(|r| r.get());
                    if code == Code::RateLimited && retry > 0 {
                        v.retry_after_ms = Some(retry);
                    }
                    if code == Code::RuleChallenge {
                        v.challenge_difficulty =
                            Some(CHALLENGE_DIFFICULTY.with(|d| d.replace(0))).filter(|d| *d > 0);
                    }
                    return Some(v);
                }
            }
        }
        None
    }

    /// The counting calls the gateway and business tiers' rules will make for `req`, in order,
    /// for as long as each rate limit allows: the rules that apply are planned in priority order
    /// ([`super::precheck::Precheck::plan`]), gateway then business, until the first that is not
    /// ruled out under that assumption (or has no pre-check), or the first distinct count (whose
    /// answer the rules need before going on). A store can then make them in the anti-replay
    /// step's round trip, stopping at the first refusal, and hand the answers to the rules
    /// ([`super::prefetched`]): the same calls, in the same order, with the same answers, as the
    /// tiers make on their own. Empty without counting state.
    pub fn plan_calls(&self, req: &Req) -> Vec<crate::store::limits::Planned> {
        let mut out = Vec::new();
        if self.plan_tier(Tier::Gateway, req, &mut out) {
            self.plan_tier(Tier::Business, req, &mut out);
        }
        out
    }

    /// Plans `tier` into `out`; true when every rule that applies was planned through (the
    /// next tier can be planned after it).
    fn plan_tier(
        &self,
        tier: Tier,
        req: &Req,
        out: &mut Vec<crate::store::limits::Planned>,
    ) -> bool {
        let Some(state) = self.state.as_ref() else {
            return false;
        };
        let index = &self.tiers[tier.index()];
        let max_string = self.engine.max_string_size();
        EVAL_NOW.with(|n| n.set(req.now_ms));
        for &i in index.for_app(req.app()) {
            let rule = &index.rules[i];
            if !rule.applies_to_route(req.path()) {
                continue;
            }
            let planned = rule
                .precheck
                .as_ref()
                .and_then(|p| p.plan(req, &self.lists, max_string, state));
            match planned {
                Some((calls, ends)) => {
                    out.extend(calls);
                    if ends {
                        return false;
                    }
                }
                None => return false,
            }
        }
        true
    }

    /// What this set would decide for `req` if it were enforced, without lasting effects: claims
    /// only peek, reputation is not fed, and rate limits, counters and distinct counts use keys
    /// under a prefix of their own (`sim:<version>:`). Returns the refusal (as a shadow hit
    /// carrying this set's version; `None` = it would allow) and the number of rule failures.
    pub fn simulate(&self, req: &Req) -> (Option<ShadowHit>, u64) {
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                SIMULATING.with(|s| s.set(false));
                KEY_NS.with(|ns| ns.borrow_mut().clear());
            }
        }
        SIMULATING.with(|s| s.set(true));
        KEY_NS.with(|ns| {
            let mut ns = ns.borrow_mut();
            ns.clear();
            ns.push_str("sim:");
            ns.push_str(&self.version[..self.version.len().min(12)]);
            ns.push(':');
        });
        let _reset = Reset;
        let (verdict, errors) = self.judge(req);
        let hit = verdict.map(|v| ShadowHit {
            tier: v.tier.unwrap_or("business").to_string(),
            rule: v.rule.unwrap_or_default(),
            action: v.action,
            code: v.code,
            reason: v
                .reasons
                .first()
                .map(|r| r.message.clone())
                .unwrap_or_default(),
            version: Some(self.version.clone()),
        });
        (hit, errors)
    }

    /// The three tiers and the score thresholds, as on the decision path (without the anti-replay
    /// steps between them): the refusal, if any, and the number of rule failures.
    pub fn judge(&self, req: &Req) -> (Option<Verdict>, u64) {
        let mut session = RuleSession::default();
        let verdict = [Tier::Edge, Tier::Gateway, Tier::Business]
            .into_iter()
            .find_map(|t| self.evaluate_tier(t, req, &mut session))
            .or_else(|| self.finish(&mut session));
        (verdict, session.errors)
    }

    /// [`RuleSet::judge`] with a trace of every tier and rule.
    pub fn judge_traced(&self, req: &Req) -> (Option<Verdict>, crate::trace::Trace) {
        let mut session = RuleSession::traced();
        let mut verdict = None;
        for t in [Tier::Edge, Tier::Gateway, Tier::Business] {
            session.step(t.as_str());
            verdict = self.evaluate_tier(t, req, &mut session);
            if verdict.is_some() {
                break;
            }
        }
        if verdict.is_none() {
            session.step("score");
            verdict = self.finish(&mut session);
        }
        let tracer = session.trace.take().expect("a traced session");
        let trace = tracer.finish(verdict.as_ref().unwrap_or(&Verdict::allow()));
        (verdict, trace)
    }

    /// After the business tier: the accumulated score against the thresholds.
    pub fn finish(&self, session: &mut RuleSession) -> Option<Verdict> {
        let s = &self.settings;
        let (action, code) = if session.score >= s.deny_score {
            (Action::Deny, Code::RuleDeny)
        } else if session.score >= s.review_score {
            (Action::Review, Code::RuleReview)
        } else if session.score >= s.challenge_score {
            (Action::Challenge, Code::RuleChallenge)
        } else {
            return None;
        };
        let mut v = Verdict::reject(
            Step::Business,
            action,
            code,
            "score",
            Reason::new(format!("risk score {}", session.score)),
        );
        v.reasons.append(&mut session.reasons);
        Some(v)
    }
}

/// Per-decision state while the tiers run.
#[derive(Debug, Default)]
pub struct RuleSession {
    pub score: i64,
    pub reasons: Vec<Reason>,
    pub shadow: Vec<ShadowHit>,
    pub errors: u64,
    /// An enforced rule's store failed and its policy let the decision go on.
    pub degraded: bool,
    /// Set only for a traced decision ([`crate::trace`]).
    pub trace: Option<Box<crate::trace::Tracer>>,
}

impl RuleSession {
    /// A session that records a trace.
    pub fn traced() -> RuleSession {
        RuleSession {
            trace: Some(Box::default()),
            ..RuleSession::default()
        }
    }

    /// Marks the start of a step in the trace (nothing when not tracing).
    #[inline]
    pub fn step(&mut self, step: &'static str) {
        if let Some(t) = self.trace.as_deref_mut() {
            t.step(step);
        }
    }
}

/// A rule's result as a trace line.
pub(super) fn trace_outcome(o: &Result<Option<Outcome>, String>) -> String {
    match o {
        Ok(None) => "no match".into(),
        Ok(Some(Outcome::Allow)) => "allow".into(),
        Ok(Some(Outcome::Score { points, reason })) => format!("score {points:+}: {reason}"),
        Ok(Some(Outcome::Terminal {
            action,
            code,
            reason,
        })) => format!("{} {}: {reason}", action.as_str(), code.as_str()),
        Err(e) => format!("error: {e}"),
    }
}
