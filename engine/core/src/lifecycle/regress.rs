//! The regression runner: replays recorded samples through a rule set on the whole decision path
//! and reports what each sample got, per-rule hits, the detection rate on attacks, the
//! false-positive rate on benign traffic, and which samples change decision between two sets.
//!
//! The server (sandbox regression), the rule pipeline and the tests all use this one runner, so a
//! rule set that passes in CI behaves the same when uploaded.
//!
//! Each sample runs in a fresh, deterministic world: new stores (rate limits, counters, claims and
//! nonces start empty), a virtual clock that starts at [`CLOCK_START_MS`] and advances
//! `interval_ms` per request, and requests signed by the runner with [`SAMPLE_SECRET`] (unless
//! the sample asks for an unsigned, stale or tampered one). Samples therefore never depend on each
//! other or on wall time, and a run is reproducible bit for bit.
//!
//! The sample format is documented in `rules/samples/README.md`; [`Sample::from_crs`] also reads
//! the OWASP CRS regression corpus (one JSON request per line).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::EngineSettings;
use crate::model::{Action, DecideRequest, JudgedRequest, Verdict};
use crate::policy::{AppPolicy, DedupPolicy, FailPolicy};
use crate::replay::fingerprint::LocalFingerprintStore;
use crate::replay::nonce::ExactNonceStore;
use crate::replay::sign::{sign, ToSign};
use crate::rules::{LiveRules, RuleError, RuleSet, RuleSettings, RuleState, Source};
use crate::store::breaker::LocalBreakers;
use crate::store::hll::LocalDistinct;
use crate::store::limits::LocalLimiter;
use crate::store::quota::LocalQuotas;
use crate::Engine;

/// The secret of every app in a regression run (samples are signed with it).
pub const SAMPLE_SECRET: &[u8] = b"rampart-samples";
/// Virtual time of a sample's first request.
pub const CLOCK_START_MS: i64 = 1_767_225_600_000;
/// The apps' acceptance window in a regression run.
pub const WINDOW_MS: i64 = 5_000;

/// Attack or benign: which rate a sample counts towards.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Attack,
    Benign,
    /// CRS "negative" tests: not attacks for the rule under test, but not all benign either.
    Negative,
}

/// How the runner signs a sample's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Signing {
    /// A fresh timestamp and nonce per request (a real client).
    #[default]
    Fresh,
    /// No anti-replay headers at all.
    None,
    /// Signed, with a timestamp ten minutes old.
    Stale,
    /// Signed, then the body changed in transit.
    Tampered,
}

/// What a sample expects of its last request's decision. Absent fields are not checked.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Expect {
    pub action: Action,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// One recorded request (or short sequence) and the decision it should get.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Sample {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub kind: Kind,
    #[serde(default)]
    pub category: String,
    /// Where the sample comes from (e.g. a CRS test id).
    #[serde(default)]
    pub source: Option<String>,
    /// CRS paranoia level, for corpus samples.
    #[serde(default)]
    pub paranoia: Option<u8>,
    /// Requests sent first (their decisions are not checked): the history that sets up state.
    #[serde(default)]
    pub before: Vec<DecideRequest>,
    pub request: DecideRequest,
    /// The request is sent this many times; the last decision is checked.
    #[serde(default = "one")]
    pub repeat: u32,
    /// When repeating, send the very same signed request (same nonce): a replay.
    #[serde(default)]
    pub replay: bool,
    #[serde(default)]
    pub sign: Signing,
    /// Virtual time between requests.
    #[serde(default = "ten")]
    pub interval_ms: i64,
    pub expect: Expect,
}

fn one() -> u32 {
    1
}
fn ten() -> i64 {
    10
}

/// A sample file that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct SampleError {
    pub file: String,
    pub message: String,
}

impl Sample {
    /// Parses one sample file.
    pub fn parse(file: &str, text: &str) -> Result<Sample, SampleError> {
        let s: Sample = serde_json::from_str(text).map_err(|e| SampleError {
            file: file.into(),
            message: e.to_string(),
        })?;
        if s.repeat == 0 || s.repeat > 10_000 || s.before.len() > 10_000 {
            return Err(SampleError {
                file: file.into(),
                message: "repeat must be 1..=10000 and before at most 10000 requests".into(),
            });
        }
        Ok(s)
    }

    /// A sample from one line of the OWASP CRS regression corpus (`crs-requests.jsonl`):
    /// `label: attack` must not be allowed, `negative` should be.
    pub fn from_crs(line: &str) -> Result<Sample, SampleError> {
        let err = |m: String| SampleError {
            file: "crs".into(),
            message: m,
        };
        let v: Value = serde_json::from_str(line).map_err(|e| err(e.to_string()))?;
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let uri = s("uri");
        let (path, query) = match uri.split_once('?') {
            Some((p, q)) => (p.to_string(), q.to_string()),
            None => (uri.clone(), String::new()),
        };
        let headers: crate::model::Headers = v
            .get("headers")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.to_ascii_lowercase(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let ua = headers.get("user-agent").cloned();
        let body = s("body");
        // `benign`: traffic of the kind the engine protects (bench/waf/shop-traffic.jsonl), counted
        // as false positives when refused.
        let kind = match s("label").as_str() {
            "attack" => Kind::Attack,
            "benign" => Kind::Benign,
            _ => Kind::Negative,
        };
        let mut request = DecideRequest {
            app: "shop".into(),
            request: JudgedRequest {
                method: if s("method").is_empty() {
                    "GET".into()
                } else {
                    s("method")
                },
                path: if path.is_empty() { "/".into() } else { path },
                query,
                headers,
                body: Some(body),
                body_sha256: None,
                raw_path: None,
            },
            ..Default::default()
        };
        request.client.ip = Some("203.0.113.10".into());
        request.client.user_agent = ua;
        Ok(Sample {
            name: s("id"),
            description: s("desc"),
            kind,
            category: s("family"),
            source: Some(format!("crs-{}", s("crs_rule"))),
            paranoia: v.get("paranoia").and_then(Value::as_u64).map(|p| p as u8),
            before: Vec::new(),
            request,
            repeat: 1,
            replay: false,
            sign: Signing::Fresh,
            interval_ms: 10,
            expect: Expect {
                action: if kind == Kind::Attack {
                    Action::Deny
                } else {
                    Action::Allow
                },
                ..Default::default()
            },
        })
    }
}

/// What one sample got.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub action: Action,
    pub code: String,
    pub tier: Option<String>,
    pub rule: Option<String>,
    pub reason: Option<String>,
    /// Shadow rules that would have acted: `tier/rule:action`.
    pub shadow: Vec<String>,
}

impl Outcome {
    fn of(v: &Verdict) -> Outcome {
        Outcome {
            action: v.action,
            code: v.code.as_str().to_string(),
            tier: v.tier.map(str::to_string),
            rule: v.rule.clone(),
            reason: v.reasons.first().map(|r| r.message.clone()),
            shadow: v
                .shadow
                .iter()
                .map(|s| format!("{}/{}:{}", s.tier, s.rule, s.action.as_str()))
                .collect(),
        }
    }

    /// `action code tier/rule`, for listings.
    pub fn summary(&self) -> String {
        format!(
            "{} {}{}",
            self.action.as_str(),
            self.code,
            match (&self.tier, &self.rule) {
                (Some(t), Some(r)) => format!(" {t}/{r}"),
                _ => String::new(),
            }
        )
    }
}

/// One sample's result.
#[derive(Debug, Clone, Serialize)]
pub struct SampleResult {
    pub name: String,
    pub kind: Kind,
    pub category: String,
    pub paranoia: Option<u8>,
    pub expect: Expect,
    pub got: Outcome,
    /// The decision matches every field the sample specifies.
    pub passed: bool,
    /// Attack: refused (not allowed); benign: allowed.
    pub correct: bool,
}

impl SampleResult {
    /// Refused by the edge tier.
    pub fn refused_at_edge(&self) -> bool {
        self.got.action != Action::Allow && self.got.tier.as_deref() == Some("edge")
    }
}

/// Counts for a group of samples.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rate {
    pub hits: u64,
    pub total: u64,
}

impl Rate {
    pub fn ratio(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.hits as f64 / self.total as f64
        }
    }
}

/// The result of replaying samples through one rule set.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub ruleset_version: String,
    pub results: Vec<SampleResult>,
    /// Decisions made by each rule (`tier/rule`), and shadow hits (`shadow:tier/rule`).
    pub rule_hits: BTreeMap<String, u64>,
}

impl Report {
    /// Attacks not allowed.
    pub fn detection(&self) -> Rate {
        self.rate(Kind::Attack, |r| r.got.action != Action::Allow)
    }

    /// Benign samples not allowed.
    pub fn false_positives(&self) -> Rate {
        self.rate(Kind::Benign, |r| r.got.action != Action::Allow)
    }

    fn rate(&self, kind: Kind, hit: impl Fn(&SampleResult) -> bool) -> Rate {
        let mut r = Rate::default();
        for s in self.results.iter().filter(|s| s.kind == kind) {
            r.total += 1;
            r.hits += hit(s) as u64;
        }
        r
    }

    /// Refusal rate by (kind, paranoia level), for corpus runs.
    pub fn by_paranoia(&self) -> BTreeMap<(Kind, u8), Rate> {
        let mut m: BTreeMap<(Kind, u8), Rate> = BTreeMap::new();
        for s in &self.results {
            let r = m.entry((s.kind, s.paranoia.unwrap_or(0))).or_default();
            r.total += 1;
            r.hits += (s.got.action != Action::Allow) as u64;
        }
        m
    }

    /// Rate of refusals by the edge tier (the WAF's own figure: refusals by later tiers, such
    /// as a business rule on a recorded request, do not count) by (kind, paranoia level).
    pub fn edge_by_paranoia(&self) -> BTreeMap<(Kind, u8), Rate> {
        let mut m: BTreeMap<(Kind, u8), Rate> = BTreeMap::new();
        for s in &self.results {
            let r = m.entry((s.kind, s.paranoia.unwrap_or(0))).or_default();
            r.total += 1;
            r.hits += s.refused_at_edge() as u64;
        }
        m
    }

    /// [`Report::edge_by_paranoia`] by (kind, category).
    pub fn edge_by_category(&self) -> BTreeMap<(Kind, String), Rate> {
        let mut m: BTreeMap<(Kind, String), Rate> = BTreeMap::new();
        for s in &self.results {
            let r = m.entry((s.kind, s.category.clone())).or_default();
            r.total += 1;
            r.hits += s.refused_at_edge() as u64;
        }
        m
    }

    /// Refusal rate by (kind, category).
    pub fn by_category(&self) -> BTreeMap<(Kind, String), Rate> {
        let mut m: BTreeMap<(Kind, String), Rate> = BTreeMap::new();
        for s in &self.results {
            let r = m.entry((s.kind, s.category.clone())).or_default();
            r.total += 1;
            r.hits += (s.got.action != Action::Allow) as u64;
        }
        m
    }

    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed).count()
    }

    pub fn failures(&self) -> impl Iterator<Item = &SampleResult> {
        self.results.iter().filter(|r| !r.passed)
    }

    /// Samples whose decision differs in `other` (matched by name): `(name, here, there)`.
    pub fn changes<'a>(&'a self, other: &'a Report) -> Vec<Change<'a>> {
        let theirs: BTreeMap<&str, &SampleResult> =
            other.results.iter().map(|r| (r.name.as_str(), r)).collect();
        self.results
            .iter()
            .filter_map(|mine| {
                let t = theirs.get(mine.name.as_str())?;
                let differ = (mine.got.action, &mine.got.code, &mine.got.rule)
                    != (t.got.action, &t.got.code, &t.got.rule);
                differ.then_some(Change {
                    name: &mine.name,
                    kind: mine.kind,
                    before: &mine.got,
                    after: &t.got,
                })
            })
            .collect()
    }
}

/// A sample whose decision differs between two rule sets.
#[derive(Debug, Clone, Serialize)]
pub struct Change<'a> {
    pub name: &'a str,
    pub kind: Kind,
    pub before: &'a Outcome,
    pub after: &'a Outcome,
}

/// Replays samples through rule sets.
pub struct Runner {
    sources: Vec<Source>,
    settings: RuleSettings,
    version: String,
    /// Worker threads (samples are independent).
    pub threads: usize,
    /// The CRS `crs(req)` judges with, as in the engine.
    pub crs: Option<crate::waf::crs::SharedCrs>,
}

impl Runner {
    /// Validates the rule set once; every sample then runs on a fresh copy of it.
    pub fn new(sources: Vec<Source>, settings: RuleSettings) -> Result<Runner, Vec<RuleError>> {
        let set = RuleSet::compile(&sources, settings.clone(), &RuleState::local(16))?;
        Ok(Runner {
            version: set.version().to_string(),
            sources,
            settings,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            crs: None,
        })
    }

    /// This runner judging `crs(req)` with `crs`.
    pub fn with_crs(mut self, crs: Option<crate::waf::crs::SharedCrs>) -> Runner {
        self.crs = crs;
        self
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// Runs every sample; results come back in the samples' order.
    pub fn run(&self, samples: &[Sample]) -> Report {
        self.run_with_progress(samples, &|| {})
    }

    /// [`Runner::run`], calling `tick` after each sample (for progress bars).
    pub fn run_with_progress(&self, samples: &[Sample], tick: &(dyn Fn() + Sync)) -> Report {
        let threads = self.threads.clamp(1, 64).min(samples.len().max(1));
        let chunk = samples.len().div_ceil(threads).max(1);
        let results: Vec<SampleResult> = std::thread::scope(|s| {
            let handles: Vec<_> = samples
                .chunks(chunk)
                .map(|part| {
                    s.spawn(move || {
                        let world = World::new(self);
                        part.iter()
                            .map(|x| {
                                let r = world.run(x);
                                tick();
                                r
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("a regression worker panicked"))
                .collect()
        });
        let mut rule_hits = BTreeMap::new();
        for r in &results {
            if let (Some(t), Some(rule)) = (&r.got.tier, &r.got.rule) {
                *rule_hits.entry(format!("{t}/{rule}")).or_insert(0) += 1;
            }
            for sh in &r.got.shadow {
                let name = sh.rsplit_once(':').map_or(sh.as_str(), |(n, _)| n);
                *rule_hits.entry(format!("shadow:{name}")).or_insert(0) += 1;
            }
        }
        Report {
            ruleset_version: self.version.clone(),
            results,
            rule_hits,
        }
    }

    /// One sample in a fresh world.
    pub fn run_one(&self, sample: &Sample) -> SampleResult {
        World::new(self).run(sample)
    }

    /// One sample in a fresh world, with the trace of its last request (the one judged): every
    /// step and rule of the decision path and its time. `None` when the request was refused
    /// before the decision path (an unknown app, a malformed field).
    pub fn trace_one(&self, sample: &Sample) -> (SampleResult, Option<crate::trace::Trace>) {
        World::new(self).run_traced(sample, true)
    }
}

/// A compiled copy of the rule set with stores of its own, emptied before each sample (compiling
/// once per worker instead of once per sample).
struct World {
    limiter: Arc<LocalLimiter>,
    distinct: Arc<LocalDistinct>,
    quotas: Arc<LocalQuotas>,
    breakers: Arc<LocalBreakers>,
    set: Arc<RuleSet>,
}

impl World {
    fn new(runner: &Runner) -> World {
        let limiter = Arc::new(LocalLimiter::new(1 << 20));
        let distinct = Arc::new(LocalDistinct::new(1 << 20));
        let quotas = Arc::new(LocalQuotas::new(1 << 20, crate::rules::QUOTA_POOL_TTL_MS));
        let breakers = Arc::new(LocalBreakers::new());
        let state = RuleState {
            limiter: limiter.clone(),
            breakers: breakers.clone(),
            distinct: distinct.clone(),
            quotas: quotas.clone(),
            reputation: Default::default(),
            policies: Default::default(),
            crs: runner.crs.clone(),
            hot: Default::default(),
        };
        let set = RuleSet::compile(&runner.sources, runner.settings.clone(), &state)
            .expect("validated in Runner::new");
        World {
            limiter,
            distinct,
            quotas,
            breakers,
            set: Arc::new(set),
        }
    }

    fn run(&self, sample: &Sample) -> SampleResult {
        self.run_traced(sample, false).0
    }

    fn run_traced(
        &self,
        sample: &Sample,
        traced: bool,
    ) -> (SampleResult, Option<crate::trace::Trace>) {
        self.limiter.clear();
        self.distinct.clear();
        self.quotas.clear();
        self.breakers.clear();
        let mut apps: Vec<&str> = sample
            .before
            .iter()
            .chain(std::iter::once(&sample.request))
            .map(|r| r.app.as_str())
            .filter(|a| !a.is_empty())
            .collect();
        apps.sort_unstable();
        apps.dedup();
        let engine = Engine::new(
            EngineSettings {
                apps: apps
                    .iter()
                    .map(|a| AppPolicy::new(*a, SAMPLE_SECRET, WINDOW_MS))
                    .collect(),
                routes: Vec::new(),
                default_dedup: DedupPolicy::default(),
                on_store_error: crate::policy::StorePolicies::all(FailPolicy::Deny),
                challenge_status: 403,
            },
            Arc::new(ExactNonceStore::new(2 * WINDOW_MS, 1 << 20)),
            Arc::new(LocalFingerprintStore::new(1 << 20)),
            Arc::new(LiveRules::from_arc(self.set.clone())),
        )
        .with_challenge(crate::challenge::ChallengeConfig {
            keys: vec![SAMPLE_CHALLENGE_KEY],
            ..Default::default()
        });
        let mut now = CLOCK_START_MS;
        let mut seq = 0u64;
        let mut trace = None;
        // What the client holds: the last challenge it was given, the last clearance it earned.
        let mut held = Held::default();
        let mut decide =
            |r: &DecideRequest, now: i64, signed: Option<&DecideRequest>, traced: bool| {
                let prepared = match signed {
                    Some(p) => p.clone(),
                    None => {
                        seq += 1;
                        let mut p = prepare(r, sample.sign, now, seq);
                        held.fill(&mut p);
                        p
                    }
                };
                let v = if traced {
                    engine.decide_traced(&prepared, now).map(|(v, t)| {
                        trace = Some(t);
                        v
                    })
                } else {
                    engine.decide(&prepared, now)
                };
                if let Ok(v) = &v {
                    held.learn(v);
                }
                (prepared, v)
            };
        for r in &sample.before {
            let _ = decide(r, now, None, false);
            now += sample.interval_ms;
        }
        let mut last = None;
        let mut first_signed: Option<DecideRequest> = None;
        for i in 0..sample.repeat {
            let reuse = if sample.replay && i > 0 {
                first_signed.as_ref()
            } else {
                None
            };
            let is_last = i + 1 == sample.repeat;
            let (prepared, v) = decide(&sample.request, now, reuse, traced && is_last);
            if first_signed.is_none() {
                first_signed = Some(prepared);
            }
            last = Some(v);
            now += sample.interval_ms;
        }
        let got = match last.expect("repeat ≥ 1") {
            Ok(v) => Outcome::of(&v),
            Err(e) => Outcome {
                action: Action::Deny,
                code: e.code().to_string(),
                tier: None,
                rule: None,
                reason: Some(e.to_string()),
                shadow: Vec::new(),
            },
        };
        let e = &sample.expect;
        let passed = got.action == e.action
            && e.code.as_ref().is_none_or(|c| *c == got.code)
            && e.tier.as_ref().is_none_or(|t| Some(t) == got.tier.as_ref())
            && e.rule.as_ref().is_none_or(|r| Some(r) == got.rule.as_ref());
        let correct = match sample.kind {
            Kind::Attack => got.action != Action::Allow,
            Kind::Benign | Kind::Negative => got.action == Action::Allow,
        };
        let result = SampleResult {
            name: sample.name.clone(),
            kind: sample.kind,
            category: sample.category.clone(),
            paranoia: sample.paranoia,
            expect: sample.expect.clone(),
            got,
            passed,
            correct,
        };
        (result, trace)
    }
}

/// The proof-of-work key of the runner's engine (samples are judged by one engine each).
const SAMPLE_CHALLENGE_KEY: [u8; 32] = *b"rampart-samples-challenge-key-01";

/// Header value that stands for the solution of the last challenge the sample's client was given.
pub const SOLUTION_PLACEHOLDER: &str = "{solution}";
/// Header value that stands for the last clearance the sample's client earned.
pub const CLEARANCE_PLACEHOLDER: &str = "{clearance}";

/// A sample's client between its requests: what it was given to pass challenges.
#[derive(Default)]
struct Held {
    /// The solution of the last challenge (solved as a client would: the smallest counter).
    solution: Option<String>,
    clearance: Option<String>,
}

impl Held {
    fn learn(&mut self, v: &Verdict) {
        if let Some(c) = &v.challenge {
            let counter = crate::challenge::solve(&c.token, c.difficulty);
            self.solution = Some(format!("{}:{counter}", c.token));
        }
        if let Some(c) = &v.clearance {
            self.clearance = Some(c.token.clone());
        }
    }

    /// Replaces the placeholders in header values (a placeholder with nothing held yet stays as
    /// it is, and is refused as malformed like any other bad token).
    fn fill(&self, r: &mut DecideRequest) {
        for v in r.request.headers.values_mut() {
            let held = match v.as_str() {
                SOLUTION_PLACEHOLDER => &self.solution,
                CLEARANCE_PLACEHOLDER => &self.clearance,
                _ => continue,
            };
            if let Some(h) = held {
                v.clone_from(h);
            }
        }
    }
}

/// The request as the client would send it: signed (or not, or badly) at virtual time `now`.
fn prepare(r: &DecideRequest, signing: Signing, now: i64, seq: u64) -> DecideRequest {
    let mut r = r.clone();
    if signing == Signing::None {
        return r;
    }
    let ts = if signing == Signing::Stale {
        now - 600_000
    } else {
        now
    };
    let nonce = format!("sample-{seq:012}-{:08x}", now as u32);
    let body = r.request.body.clone().unwrap_or_default();
    let h = sign(
        SAMPLE_SECRET,
        &ToSign {
            app: &r.app,
            method: &r.request.method.to_ascii_uppercase(),
            path: &r.request.path,
            query: &r.request.query,
            body: body.as_bytes(),
            timestamp_ms: ts,
            nonce: &nonce,
        },
    );
    let headers = &mut r.request.headers;
    headers.insert("x-timestamp".into(), h.timestamp);
    headers.insert("x-nonce".into(), h.nonce);
    headers.insert("x-signature".into(), h.signature);
    if signing == Signing::Tampered {
        r.request.body = Some(format!("{body} "));
    }
    r
}
