//! Decision traces: each step of the decision path and each rule it evaluated, with its outcome and
//! its time. Built only when asked for ([`crate::engine::Engine::decide_traced`],
//! [`crate::rules::RuleSet::judge_traced`]); the ordinary decision path carries an empty
//! `Option` and reads no clock for it.

use std::time::Instant;

use serde::Serialize;

use crate::model::Verdict;

/// A traced decision: the steps in the order they ran.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Trace {
    pub steps: Vec<StepTrace>,
    /// From the first step to the verdict, in microseconds.
    pub total_us: f64,
}

/// One step: `lists`, `edge`, `signature`, `window`, `nonce`, `fingerprint`, `gateway`,
/// `business` or `score`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StepTrace {
    pub step: &'static str,
    /// `pass` for a step the request got through; for the deciding step the verdict
    /// (`deny REPLAY_DUPLICATE: …`); `allow` for the last step of an allowed request.
    pub outcome: String,
    pub elapsed_us: f64,
    /// The rules a tier evaluated, in evaluation order (empty for the other steps).
    pub rules: Vec<RuleTrace>,
}

/// One rule of a tier.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RuleTrace {
    pub rule: String,
    /// `enforce` or `shadow`.
    pub mode: &'static str,
    /// `no match`, `allow`, `score +N: reason`, `deny RULE_DENY: reason`, `error: …`, or
    /// `not for this route`.
    pub outcome: String,
    pub elapsed_us: f64,
}

/// Collects a trace while a decision runs.
#[derive(Debug)]
pub struct Tracer {
    started: Instant,
    step_started: Instant,
    steps: Vec<StepTrace>,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer::new()
    }
}

fn us(since: Instant) -> f64 {
    since.elapsed().as_nanos() as f64 / 1000.0
}

impl Tracer {
    pub fn new() -> Tracer {
        let now = Instant::now();
        Tracer {
            started: now,
            step_started: now,
            steps: Vec::new(),
        }
    }

    /// Closes the running step (it passed) and opens `step`.
    pub fn step(&mut self, step: &'static str) {
        self.close("pass".into());
        self.step_started = Instant::now();
        self.steps.push(StepTrace {
            step,
            outcome: String::new(),
            elapsed_us: 0.0,
            rules: Vec::new(),
        });
    }

    fn close(&mut self, outcome: String) {
        if let Some(last) = self.steps.last_mut() {
            if last.outcome.is_empty() {
                last.outcome = outcome;
                last.elapsed_us = us(self.step_started);
            }
        }
    }

    /// Records one rule's evaluation in the running step.
    pub fn rule(&mut self, rule: &str, shadow: bool, outcome: String, started: Instant) {
        let elapsed_us = us(started);
        if let Some(last) = self.steps.last_mut() {
            last.rules.push(RuleTrace {
                rule: rule.to_string(),
                mode: if shadow { "shadow" } else { "enforce" },
                outcome,
                elapsed_us,
            });
        }
    }

    /// Ends the trace with the verdict: the running step is the one that decided.
    pub fn finish(mut self, v: &Verdict) -> Trace {
        self.close(verdict_summary(v));
        Trace {
            total_us: us(self.started),
            steps: self.steps,
        }
    }
}

/// `allow`, or `deny RULE_DENY: reason`.
pub fn verdict_summary(v: &Verdict) -> String {
    let mut s = v.action.as_str().to_string();
    if v.code != crate::model::Code::Ok {
        s.push(' ');
        s.push_str(v.code.as_str());
    }
    if let Some(r) = v.reasons.first() {
        s.push_str(": ");
        s.push_str(&r.message);
    }
    s
}
