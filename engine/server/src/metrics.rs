//! Prometheus metrics (text exposition at `GET /metrics`). Names and labels are documented in
//! `docs/operations.md`. Hot-path counters are resolved once at start-up into arrays indexed by
//! enum, so recording a decision is a few relaxed atomic adds, no label lookup.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use rampart_core::replay::keys::{KeyUse, Keyring};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use rampart_core::model::{Action, Code, Step};
use rampart_core::replay::nonce::NonceStats;
use rampart_core::Verdict;

type Labels = Vec<(&'static str, &'static str)>;

pub struct Metrics {
    registry: Registry,
    decisions_family: Family<Labels, Counter>,
    /// [step][action][code]; `None` for combinations resolved on first use (rule tiers).
    decisions: Vec<Option<Counter>>,
    step_rejections: Vec<Counter>,
    tier_evaluations: Vec<Counter>,
    latency: Histogram,
    degraded: Counter,
    api_errors: Family<Labels, Counter>,
    /// `TIMESTAMP_SKEW` by app and direction: mass rejections from client clocks show which app.
    timestamp_skew: Family<Vec<(&'static str, String)>, Counter>,
    challenges_issued: Counter,
    challenges_solved: Counter,
    challenge_solve: Histogram,
    challenges_failed: Family<Vec<(&'static str, &'static str)>, Counter>,
    pub log_written: Counter,
    pub log_dropped: Counter,
    pub log_queue_depth: Gauge,
    pub log_write_errors: Counter,
    /// ClickHouse sink: rows put into / replayed from the spool, rows the full spool dropped,
    /// failed inserts, what the spool holds.
    pub log_spooled: Counter,
    pub log_unspooled: Counter,
    pub log_spool_dropped: Counter,
    pub log_retries: Counter,
    pub log_spool_bytes: Gauge,
    pub log_spool_rows: Gauge,
    filter_fill: Gauge<f64, AtomicU64>,
    filter_fp: Gauge<f64, AtomicU64>,
    filter_entries: Gauge<f64, AtomicU64>,
    filter_memory: Gauge,
    filter_overloaded: Gauge,
    filter_overload_events: Counter,
    pub ruleset_swaps: Counter,
    pub ruleset_rejected: Counter,
    /// Canaries rolled back automatically.
    pub rollbacks: Counter,
    /// Admin calls refused for missing or wrong credentials (including throttled logins).
    pub auth_failures: Counter,
    pub outcome_refused: Counter,
    ruleset_rules: Gauge,
    /// Versions the control plane keeps compiled (bounded).
    pub ruleset_compiled_versions: Gauge,
    pub rulesets_alive: Gauge,
    pub breakers: Gauge,
    rule_evaluations: Gauge,
    rule_errors: Gauge,
    ruleset_info: Family<Vec<(&'static str, String)>, Gauge>,
    /// The Redis client's counters (unused with local state).
    pub redis: crate::redis_state::RedisCounters,
    /// 1 while the Redis client answers (connected, not cooling down after failures).
    pub redis_up: Gauge,
    /// Other instances seen serving this instance's apps while it keeps its state locally.
    pub local_state_peers: Gauge,
    /// Every signing key seen in a keyring, with its use counter (read at each scrape).
    key_uses: Arc<KeyUses>,
}

/// `rampart_signature_key_uses_total{app,key}`: read from the keys' own counters at each scrape,
/// so a decision pays one relaxed atomic add and no label lookup. A key stays listed after it is
/// retired (its counter stops), so the series never goes backwards.
#[derive(Debug, Default)]
struct KeyUses(Mutex<Vec<KeyUseSeries>>);

/// One series of [`KeyUses`]: the app, the key id and the key's use counter.
type KeyUseSeries = (String, Arc<str>, Arc<KeyUse>);

impl Collector for KeyUsesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let keys = self.0 .0.lock().unwrap_or_else(|e| e.into_inner());
        let mut family = encoder.encode_descriptor(
            "signature_key_uses",
            "Requests whose signature matched each signing key, by app and key id (watch an old \
             key's use fall to zero before retiring it)",
            None,
            MetricType::Counter,
        )?;
        for (app, key, usage) in keys.iter() {
            let labels = [("app", app.as_str()), ("key", &**key)];
            ConstCounter::new(usage.uses()).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

#[derive(Debug)]
struct KeyUsesCollector(Arc<KeyUses>);

/// The per-thread caches' sizes (`rampart_core::memo`), read at scrape time.
#[derive(Debug)]
struct CachesCollector;

impl Collector for CachesCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        type Read = fn(&rampart_core::memo::Sizes) -> i64;
        let gauges: [(&str, &str, Read); 3] = [
            (
                "cache_entries",
                "Entries held by a per-thread cache, every thread together",
                |c| c.entries(),
            ),
            (
                "cache_bytes",
                "Estimated bytes held by a per-thread cache, every thread together",
                |c| c.bytes(),
            ),
            (
                "cache_bound",
                "Entries a per-thread cache holds per thread before it starts over",
                |c| c.bound() as i64,
            ),
        ];
        for (name, help, read) in gauges {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for c in rampart_core::memo::all() {
                ConstGauge::new(read(c)).encode(family.encode_family(&[("cache", c.name)])?)?;
            }
        }
        Ok(())
    }
}

fn idx(step: Step, action: Action, code: Code) -> usize {
    let s = Step::ALL.iter().position(|x| *x == step).unwrap_or(0);
    let a = Action::ALL.iter().position(|x| *x == action).unwrap_or(0);
    let c = Code::ALL.iter().position(|x| *x == code).unwrap_or(0);
    (s * Action::ALL.len() + a) * Code::ALL.len() + c
}

impl Metrics {
    pub fn new(nonce_mode: &'static str) -> Self {
        let mut registry = Registry::with_prefix("rampart");

        let decisions_family = Family::<Labels, Counter>::default();
        registry.register(
            "decisions",
            "Decisions by action, code and the step (tier) that decided",
            decisions_family.clone(),
        );
        let mut decisions = Vec::new();
        for step in Step::ALL {
            for action in Action::ALL {
                for code in Code::ALL {
                    // Materialise only the combinations that can occur, so /metrics stays small,
                    // but keep a handle for every index.
                    let labels = vec![
                        ("action", action.as_str()),
                        ("code", code.as_str()),
                        ("step", step.as_str()),
                    ];
                    decisions.push(
                        plausible(step, action, code)
                            .then(|| decisions_family.get_or_create(&labels).clone()),
                    );
                }
            }
        }

        let timestamp_skew = Family::<Vec<(&'static str, String)>, Counter>::default();
        registry.register(
            "timestamp_skew",
            "Requests refused with TIMESTAMP_SKEW, by app and by whether the client's clock was \
             ahead of or behind the server's (or the timestamp was unreadable)",
            timestamp_skew.clone(),
        );

        let challenges_issued = Counter::default();
        let challenges_solved = Counter::default();
        let challenges_failed = Family::<Vec<(&'static str, &'static str)>, Counter>::default();
        registry.register(
            "challenges_issued",
            "Proof-of-work challenges sent with challenge answers",
            challenges_issued.clone(),
        );
        registry.register(
            "challenges_solved",
            "Solutions verified and used (each earned a clearance)",
            challenges_solved.clone(),
        );
        registry.register(
            "challenges_failed",
            "Solutions and clearances refused with CHALLENGE_FAILED, by reason",
            challenges_failed.clone(),
        );
        let challenge_solve =
            Histogram::new([0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]);
        registry.register(
            "challenge_solve_seconds",
            "Time from a challenge's issue to its solution's use (client solve time plus the round trips)",
            challenge_solve.clone(),
        );
        for f in rampart_core::challenge::Failure::ALL {
            let _ = challenges_failed.get_or_create(&vec![("reason", f.as_str())]);
        }

        let rejections_family = Family::<Labels, Counter>::default();
        registry.register(
            "step_rejections",
            "Requests stopped at each step of the decision path (DESIGN §1 order)",
            rejections_family.clone(),
        );
        let step_rejections = Step::ALL
            .iter()
            .map(|s| {
                rejections_family
                    .get_or_create(&vec![("step", s.as_str())])
                    .clone()
            })
            .collect();

        let tiers_family = Family::<Labels, Counter>::default();
        registry.register(
            "tier_evaluations",
            "Rule tier evaluations",
            tiers_family.clone(),
        );
        let tier_evaluations = ["edge", "gateway", "business"]
            .iter()
            .map(|t| tiers_family.get_or_create(&vec![("tier", *t)]).clone())
            .collect();

        let latency = Histogram::new([
            5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 50e-3,
        ]);
        registry.register(
            "decision_latency_seconds",
            "Time to decide, from request body received to answer built",
            latency.clone(),
        );
        let degraded = Counter::default();
        registry.register(
            "degraded_decisions",
            "Decisions let through by on_store_error = allow while a store failed",
            degraded.clone(),
        );
        let api_errors = Family::<Labels, Counter>::default();
        registry.register(
            "api_errors",
            "API calls refused with a 4xx error envelope, by code",
            api_errors.clone(),
        );

        let redis = crate::redis_state::RedisCounters::default();
        registry.register(
            "redis_calls",
            "Calls made to Redis (shared state)",
            redis.calls.clone(),
        );
        registry.register(
            "redis_errors",
            "Redis calls that failed (connection or command errors)",
            redis.errors.clone(),
        );
        registry.register(
            "redis_timeouts",
            "Redis calls without an answer within state.redis_timeout_ms",
            redis.timeouts.clone(),
        );
        registry.register(
            "redis_fast_failures",
            "Redis calls refused without trying, during the cool-down after failures",
            redis.fast_failures.clone(),
        );
        registry.register(
            "redis_resent",
            "Nonce and fingerprint writes sent again after no answer (they recognise their own first run)",
            redis.resent.clone(),
        );
        registry.register(
            "redis_refusals_cached",
            "Rate-limit checks refused from a remembered refusal, without a Redis call (a key over \
             its limit until its retry-after ends)",
            redis.refusals_cached.clone(),
        );
        registry.register(
            "redis_reputation_reads_copied",
            "Reputation reads answered from this instance's copy of every client's reputation \
             (kept current by Redis pub/sub), without a Redis call",
            redis.reputation_reads_copied.clone(),
        );
        registry.register(
            "redis_coalesced_writes",
            "Writes to Redis carrying the anti-replay scripts of concurrent decisions together \
             (state.redis_coalesce)",
            redis.coalesced_writes.clone(),
        );
        registry.register(
            "redis_coalesced_commands",
            "Scripts sent in those writes (divided by the writes: scripts per write)",
            redis.coalesced_commands.clone(),
        );
        registry.register(
            "redis_replica_ack_shortfalls",
            "Anti-replay writes that fewer than state.replica_acks replicas acknowledged within \
             state.replica_ack_timeout_ms (the step's on_error policy answered)",
            redis.ack_shortfalls.clone(),
        );
        let redis_up = Gauge::default();
        registry.register(
            "redis_up",
            "1 while Redis answers (connected and not cooling down), else 0; absent meaning with local state",
            redis_up.clone(),
        );

        let local_state_peers = Gauge::default();
        registry.register(
            "local_state_peers",
            "Other instances that logged decisions for this instance's apps in the last 2 minutes \
             while this one keeps anti-replay state in process ([state] backend = local): replays \
             across them pass. 0 = none seen or not checked",
            local_state_peers.clone(),
        );

        let log_written = Counter::default();
        let log_dropped = Counter::default();
        let log_queue_depth = Gauge::default();
        let log_write_errors = Counter::default();
        registry.register(
            "decision_log_rows_written",
            "Decision log rows written (to the local files, or inserted into ClickHouse)",
            log_written.clone(),
        );
        registry.register(
            "decision_log_rows_dropped",
            "Decision log rows dropped because the queue was full",
            log_dropped.clone(),
        );
        registry.register(
            "decision_log_queue_depth",
            "Rows waiting to be written",
            log_queue_depth.clone(),
        );
        registry.register(
            "decision_log_write_errors",
            "Failed writes to the local decision log",
            log_write_errors.clone(),
        );

        let log_spooled = Counter::default();
        let log_unspooled = Counter::default();
        let log_spool_dropped = Counter::default();
        let log_retries = Counter::default();
        let log_spool_bytes = Gauge::default();
        let log_spool_rows = Gauge::default();
        registry.register(
            "decision_log_spooled_rows",
            "Rows written to the on-disk spool while ClickHouse was slow or down",
            log_spooled.clone(),
        );
        registry.register(
            "decision_log_unspooled_rows",
            "Spooled rows replayed into ClickHouse",
            log_unspooled.clone(),
        );
        registry.register(
            "decision_log_spool_dropped_rows",
            "Rows lost because the spool was full (on_spool_full) or a segment was damaged",
            log_spool_dropped.clone(),
        );
        registry.register(
            "decision_log_insert_retries",
            "Failed ClickHouse inserts (each one delays the next try by retry_ms)",
            log_retries.clone(),
        );
        registry.register(
            "decision_log_spool_bytes",
            "Bytes held in the decision log spool",
            log_spool_bytes.clone(),
        );
        registry.register(
            "decision_log_spool_rows",
            "Rows held in the decision log spool",
            log_spool_rows.clone(),
        );

        let nonce = registry.sub_registry_with_label(("mode".into(), nonce_mode.into()));
        let filter_fill = Gauge::<f64, AtomicU64>::default();
        let filter_fp = Gauge::<f64, AtomicU64>::default();
        let filter_entries = Gauge::<f64, AtomicU64>::default();
        let filter_memory = Gauge::default();
        let filter_overloaded = Gauge::default();
        let filter_overload_events = Counter::default();
        nonce.register(
            "nonce_filter_fill_ratio",
            "Fraction of bits set in the fullest live slice",
            filter_fill.clone(),
        );
        nonce.register(
            "nonce_filter_estimated_fp",
            "Estimated false-positive rate of a nonce check right now",
            filter_fp.clone(),
        );
        nonce.register(
            "nonce_filter_entries",
            "Estimated entries in the fullest live slice",
            filter_entries.clone(),
        );
        nonce.register(
            "nonce_filter_memory_bytes",
            "Memory of the nonce store",
            filter_memory.clone(),
        );
        nonce.register(
            "nonce_filter_overloaded",
            "1 while the load exceeds what the filter was sized for",
            filter_overloaded.clone(),
        );
        nonce.register(
            "nonce_filter_overload_events",
            "Times the filter was seen over its design load",
            filter_overload_events.clone(),
        );

        let ruleset_swaps = Counter::default();
        let ruleset_rejected = Counter::default();
        let ruleset_rules = Gauge::default();
        let ruleset_compiled_versions = Gauge::default();
        let rulesets_alive = Gauge::default();
        let breakers = Gauge::default();
        let rule_evaluations = Gauge::default();
        let rule_errors = Gauge::default();
        let ruleset_info = Family::<Vec<(&'static str, String)>, Gauge>::default();
        registry.register(
            "ruleset_swaps",
            "Rule sets published (directory reloads and uploads)",
            ruleset_swaps.clone(),
        );
        registry.register(
            "ruleset_rejected",
            "Rule sets refused by validation (the live set stayed)",
            ruleset_rejected.clone(),
        );
        let rollbacks = Counter::default();
        registry.register(
            "rollout_auto_rollbacks",
            "Canaries rolled back automatically because they departed from stable",
            rollbacks.clone(),
        );
        let auth_failures = Counter::default();
        registry.register(
            "admin_auth_failures",
            "Admin calls refused for missing or wrong credentials, and throttled logins",
            auth_failures.clone(),
        );
        let outcome_refused = Counter::default();
        registry.register(
            "outcome_refused",
            "Outcome reports refused: unsigned, wrongly signed, outside the window or sent twice",
            outcome_refused.clone(),
        );
        registry.register(
            "ruleset_rules",
            "Rules in the live set",
            ruleset_rules.clone(),
        );
        registry.register(
            "ruleset_compiled_versions",
            "Rule-set versions kept compiled for rollouts, regressions and rollbacks (at most [admin] compiled_versions)",
            ruleset_compiled_versions.clone(),
        );
        registry.register(
            "rulesets_alive",
            "Compiled rule sets held by the process: the live set, rollout arms, the compiled cache, decisions in flight",
            rulesets_alive.clone(),
        );
        registry.register(
            "circuit_breakers",
            "Circuit breakers held in process (at most [rules] max_breakers)",
            breakers.clone(),
        );
        registry.register(
            "rule_evaluations",
            "Rule evaluations by the live set since it was published",
            rule_evaluations.clone(),
        );
        registry.register(
            "rule_errors",
            "Rule evaluations of the live set that failed or hit a bound (answered by the tier default)",
            rule_errors.clone(),
        );
        registry.register(
            "ruleset_info",
            "The live rule set's version (value 1)",
            ruleset_info.clone(),
        );

        let key_uses = Arc::new(KeyUses::default());
        registry.register_collector(Box::new(KeyUsesCollector(key_uses.clone())));
        registry.register_collector(Box::new(CachesCollector));

        let info = Family::<Labels, Gauge>::default();
        registry.register("build_info", "Build information", info.clone());
        info.get_or_create(&vec![("version", env!("CARGO_PKG_VERSION"))])
            .set(1);

        Metrics {
            registry,
            decisions_family,
            decisions,
            step_rejections,
            tier_evaluations,
            latency,
            degraded,
            api_errors,
            timestamp_skew,
            challenges_issued,
            challenges_solved,
            challenge_solve,
            challenges_failed,
            log_written,
            log_dropped,
            log_queue_depth,
            log_write_errors,
            log_spooled,
            log_unspooled,
            log_spool_dropped,
            log_retries,
            log_spool_bytes,
            log_spool_rows,
            filter_fill,
            filter_fp,
            filter_entries,
            filter_memory,
            filter_overloaded,
            filter_overload_events,
            ruleset_swaps,
            ruleset_rejected,
            rollbacks,
            auth_failures,
            outcome_refused,
            ruleset_rules,
            rule_evaluations,
            rule_errors,
            ruleset_info,
            redis,
            redis_up,
            local_state_peers,
            ruleset_compiled_versions,
            rulesets_alive,
            breakers,
            key_uses,
        }
    }

    /// Lists the keys of `app`'s keyring in `rampart_signature_key_uses_total` (keys already
    /// listed keep their series).
    pub fn track_keys(&self, app: &str, ring: &Keyring) {
        let mut keys = self.key_uses.0.lock().unwrap_or_else(|e| e.into_inner());
        for k in ring.keys() {
            let known = keys
                .iter_mut()
                .find(|(a, id, _)| a == app && **id == *k.id());
            match known {
                // A keyring rebuilt after a change shares the counter; re-point it all the same.
                Some(entry) => entry.2 = k.usage().clone(),
                None => keys.push((app.to_string(), k.id_arc().clone(), k.usage().clone())),
            }
        }
    }

    pub fn update_rules(&self, set: &rampart_core::rules::RuleSet) {
        let (evals, errors) = set.counters();
        self.ruleset_rules.set(set.rule_count() as i64);
        self.rule_evaluations.set(evals as i64);
        self.rule_errors.set(errors as i64);
        self.ruleset_info.clear();
        self.ruleset_info
            .get_or_create(&vec![("version", set.version().to_string())])
            .set(1);
    }

    /// Counts one decision for `app` (an app the engine knows whenever the code is
    /// `TIMESTAMP_SKEW`: the window step comes after the signature).
    pub fn record(&self, app: &str, v: &Verdict, latency_s: f64) {
        if v.challenge.is_some() {
            self.challenges_issued.inc();
        }
        if v.clearance.is_some() {
            self.challenges_solved.inc();
        }
        if let Some(ms) = v.solve_ms {
            self.challenge_solve.observe(ms.max(0) as f64 / 1000.0);
        }
        if v.code == Code::ChallengeFailed && v.rule.as_deref() == Some("challenge") {
            let said = v.reasons.first().map(|r| r.message.as_str()).unwrap_or("");
            if let Some(f) = rampart_core::challenge::Failure::ALL
                .into_iter()
                .find(|f| said.starts_with(f.as_str()))
            {
                self.challenges_failed
                    .get_or_create(&vec![("reason", f.as_str())])
                    .inc();
            }
        }
        // The window step's own refusals (a rule may answer the same code; it is not counted).
        if v.code == Code::TimestampSkew && v.step == Step::Window {
            let direction = match v.reasons.first().and_then(|r| r.skew_ms) {
                Some(s) if s > 0 => "ahead",
                Some(_) => "behind",
                None => "unreadable",
            };
            self.timestamp_skew
                .get_or_create(&vec![
                    ("app", app.to_string()),
                    ("direction", direction.into()),
                ])
                .inc();
        }
        match &self.decisions[idx(v.step, v.action, v.code)] {
            Some(c) => {
                c.inc();
            }
            None => {
                self.decisions_family
                    .get_or_create(&vec![
                        ("action", v.action.as_str()),
                        ("code", v.code.as_str()),
                        ("step", v.step.as_str()),
                    ])
                    .inc();
            }
        }
        if v.step != Step::Final {
            let s = Step::ALL.iter().position(|x| *x == v.step).unwrap_or(0);
            self.step_rejections[s].inc();
        }
        // Which tiers ran: edge always; gateway and business once the anti-replay steps passed.
        self.tier_evaluations[0].inc();
        if matches!(v.step, Step::Gateway | Step::Business | Step::Final) {
            self.tier_evaluations[1].inc();
        }
        if matches!(v.step, Step::Business | Step::Final) {
            self.tier_evaluations[2].inc();
        }
        if v.degraded {
            self.degraded.inc();
        }
        self.latency.observe(latency_s);
    }

    pub fn api_error(&self, code: &'static str) {
        self.api_errors.get_or_create(&vec![("code", code)]).inc();
    }

    /// Updates the nonce-filter gauges; returns true when the filter just became overloaded.
    pub fn update_nonce(&self, s: &NonceStats) -> bool {
        self.filter_fill.set(s.fill_ratio);
        self.filter_fp.set(s.estimated_fp);
        self.filter_entries.set(s.entries);
        self.filter_memory.set(s.memory_bytes as i64);
        let was = self.filter_overloaded.set(s.overloaded as i64) == 1;
        if s.overloaded && !was {
            self.filter_overload_events.inc();
            return true;
        }
        false
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}

/// Which (step, action, code) combinations the decision path can produce today.
fn plausible(step: Step, action: Action, code: Code) -> bool {
    match step {
        Step::Signature => {
            action == Action::Deny
                && matches!(code, Code::SignatureMissing | Code::SignatureInvalid)
        }
        Step::Window => action == Action::Deny && code == Code::TimestampSkew,
        Step::Nonce => {
            action == Action::Deny
                && matches!(
                    code,
                    Code::NonceInvalid
                        | Code::ReplayDuplicate
                        | Code::StoreUnavailable
                        | Code::TimestampSkew
                        | Code::ChallengeFailed
                )
        }
        Step::Fingerprint => {
            action == Action::Deny
                && matches!(code, Code::DuplicateSubmission | Code::StoreUnavailable)
        }
        Step::Final => action == Action::Allow && code == Code::Ok,
        Step::Edge | Step::Gateway | Step::Business => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_uses_are_read_from_the_keys_at_each_scrape() {
        let m = Metrics::new("bloom");
        let ring = Keyring::single(b"s");
        m.track_keys("shop", &ring);
        ring.keys()[0].record_use(5);
        ring.keys()[0].record_use(6);
        let text = m.encode();
        assert!(
            text.contains("rampart_signature_key_uses_total{app=\"shop\",key=\"default\"} 2"),
            "{text}"
        );
    }
}
