//! Everything a running engine holds: the decision path with its stores, metrics, the decision log,
//! and the maintenance thread that rotates the nonce filter and watches its load.

pub(crate) mod logging;
pub(crate) mod peers;
pub(crate) mod persist;
pub(crate) mod samples;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use rampart_core::replay::fingerprint::{FingerprintStore, PerAppFingerprints};
use rampart_core::replay::nonce::{NonceStore, PerAppNonces};
use rampart_core::rules::{LiveRules, RuleError, RuleSet, RuleState, Source};
use rampart_core::{Engine, Fallback};

use crate::clock::now_ms;
use crate::config::{Backend, NonceMode, Validated};
use crate::declog::DecisionLog;
use crate::metrics::Metrics;
use crate::redis_state::{
    BloomLayout, Redis, RedisDistinct, RedisFingerprints, RedisLimiter, RedisNonces, RedisQuotas,
};

/// Limits applied by the HTTP layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub max_body_bytes: usize,
    pub max_batch_body_bytes: usize,
    pub max_batch_items: usize,
    pub max_header_bytes: usize,
    /// Time a client has to send a whole request body, once its head has arrived.
    pub body_timeout: Duration,
}

/// Decision ids: UUIDv7 (48-bit Unix ms of the decision's own clock, then random bits from a
/// per-process seed mixed with a counter), so ids sort by time and never repeat within a process.
/// The `uuid` crate lays the bits out and writes the text; the random bits stay ours, as `uuid`'s
/// own v7 generator reads the system clock and asks the OS for randomness on every id.
pub(crate) struct IdGen {
    seed: u64,
    counter: AtomicU64,
}

impl IdGen {
    pub fn new() -> Self {
        let mut b = [0u8; 8];
        let _ = getrandom::getrandom(&mut b);
        IdGen {
            seed: u64::from_le_bytes(b),
            counter: AtomicU64::new(0),
        }
    }

    pub fn next(&self, now_ms: i64) -> String {
        let c = self.counter.fetch_add(1, Ordering::Relaxed);
        let r = splitmix(self.seed ^ c);
        // 12 bits of the seed (`rand_a`), then the counter's mix (`rand_b`, its top 62 bits):
        // the builder sets the version and variant bits over them.
        let mut random = [0u8; 10];
        random[..2].copy_from_slice(&(((self.seed >> 52) & 0x0fff) as u16).to_be_bytes());
        random[2..].copy_from_slice(&(r >> 2).to_be_bytes());
        let id = uuid::Builder::from_unix_timestamp_millis(now_ms as u64, &random).into_uuid();
        let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        id.hyphenated().encode_lower(&mut text).to_string()
    }
}

impl Default for IdGen {
    fn default() -> Self {
        Self::new()
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A running engine. Its `engine`, `log` and `config` are part of the crate's public surface (the
/// tests and benches read them); the rest is the server's own.
pub struct Runtime {
    pub engine: Engine,
    pub(crate) metrics: Arc<Metrics>,
    pub log: DecisionLog,
    pub(crate) limits: Limits,
    pub(crate) instance: Arc<str>,
    pub(crate) ids: IdGen,
    pub(crate) ready: AtomicBool,
    pub config: Validated,
    /// What `/v1/authz` believes of the proxy headers (`[server] proxy_headers`,
    /// `trusted_proxies`).
    pub(crate) proxy_trust: rampart_core::forward::ProxyTrust,
    /// The bearer token `/metrics` requires (`[server] metrics_token`).
    pub(crate) metrics_token: Option<String>,
    /// State of the counting rule helpers (rate limits, counters); survives rule set swaps.
    pub(crate) rule_state: RuleState,
    stop: AtomicBool,
    maintenance: Mutex<Option<JoinHandle<()>>>,
    /// The Redis client and nonce store, with `[state] backend = "redis"`.
    pub(crate) redis: Option<Arc<Redis>>,
    redis_nonces: Option<Arc<RedisNonces>>,
    /// Versions, rollout, lists, audit and admin identities.
    pub(crate) control: crate::control::Control,
    /// The in-process anti-replay stores and where they are saved across restarts
    /// (`backend = "local"`).
    persist: Option<(persist::Persist, persist::LocalStores)>,
    heartbeat: Mutex<Option<JoinHandle<()>>>,
    /// With Redis state and `[state] decision_threads` > 0: the permits of the decisions that
    /// may wait on Redis at once, each on a pool thread apart from the HTTP workers.
    pub(crate) offload: Option<Arc<tokio::sync::Semaphore>>,
}

/// Why the engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("decision log directory {dir}: {err}")]
    DecisionLog { dir: String, err: std::io::Error },
    #[error("cannot read rules from {dir}: {err}")]
    RulesDir { dir: String, err: std::io::Error },
    #[error("redis: {0}")]
    Redis(String),
    #[error("the rule set in {dir} is invalid:\n  {}", .errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n  "))]
    Rules { dir: String, errors: Vec<RuleError> },
    #[error("admin: {0}")]
    Control(String),
    #[error("state snapshot: {0}")]
    State(String),
    #[error("{0}")]
    Config(String),
}

/// Compiles the rule set configured in `[rules] dir` (the empty set when there is none).
mod embedded {
    include!(concat!(env!("OUT_DIR"), "/default_rules.rs"));
}

/// The default rule set built into the binary.
pub(crate) fn default_rules() -> Vec<Source> {
    embedded::DEFAULT_RULES
        .iter()
        .map(|(path, text)| Source {
            path: (*path).into(),
            text: (*text).into(),
        })
        .collect()
}

/// The sample set built into the binary (`rules/samples/`).
pub(crate) fn default_samples() -> &'static [(&'static str, &'static str)] {
    embedded::DEFAULT_SAMPLES
}

pub(crate) fn load_rules(cfg: &Validated, state: &RuleState) -> Result<RuleSet, StartError> {
    let settings = cfg.raw.rules.settings();
    let Some(dir) = &cfg.raw.rules.dir else {
        if !cfg.raw.rules.defaults {
            return Ok(RuleSet::empty(settings));
        }
        return RuleSet::compile(&default_rules(), settings, state).map_err(|errors| {
            StartError::Rules {
                dir: "<built-in default rules>".into(),
                errors,
            }
        });
    };
    let shown = dir.display().to_string();
    let sources = rampart_files::read_sources(dir).map_err(|err| StartError::RulesDir {
        dir: shown.clone(),
        err,
    })?;
    RuleSet::compile(&sources, settings, state)
        .map_err(|errors| StartError::Rules { dir: shown, errors })
}

impl Runtime {
    /// The parts of the runtime the control plane acts on.
    pub(crate) fn host(&self) -> crate::control::Host<'_> {
        crate::control::Host {
            engine: &self.engine,
            metrics: &self.metrics,
            rule_state: &self.rule_state,
            config: &self.config,
        }
    }
}

impl Runtime {
    /// Builds the stores and the decision path from a validated configuration.
    pub fn build(cfg: Validated) -> Result<Arc<Runtime>, StartError> {
        rampart_core::waf::warm_up();
        let st = &cfg.raw.state;
        // One store per app, each sized for its app: one app's flood spends its own capacity.
        let per_app =
            |l: &persist::LocalStores| -> (Arc<dyn NonceStore>, Arc<dyn FingerprintStore>) {
                let nonces = l
                    .nonces
                    .iter()
                    .map(|(id, n)| -> (String, Arc<dyn NonceStore>) {
                        let s: Arc<dyn NonceStore> = match n {
                            persist::LocalNonces::Bloom(b) => b.clone(),
                            persist::LocalNonces::Exact(e) => e.clone(),
                        };
                        (id.clone(), s)
                    })
                    .collect();
                let fps = l
                    .fingerprints
                    .iter()
                    .map(|(id, f)| -> (String, Arc<dyn FingerprintStore>) {
                        (id.clone(), f.clone())
                    })
                    .collect();
                (
                    Arc::new(PerAppNonces::new(nonces)),
                    Arc::new(PerAppFingerprints::new(fps)),
                )
            };
        let redis_mode = st.backend == Backend::Redis;
        let mode = match (redis_mode, st.nonce_mode) {
            (false, NonceMode::Bloom) => "bloom",
            (false, NonceMode::Exact) => "exact",
            (true, NonceMode::Bloom) => "redis-bloom",
            (true, NonceMode::Exact) => "redis-exact",
        };
        let metrics = Arc::new(Metrics::new(mode));
        rampart_core::memo::WAF_VALUES.set_bound(cfg.raw.waf.cache_entries);
        rampart_core::memo::WAF_PATHS.set_bound(cfg.raw.waf.cache_entries);
        rampart_core::memo::LIST_ANSWERS.set_bound(cfg.raw.rules.list_cache_entries);
        let mut rule_state = RuleState::local(cfg.raw.rules.max_limiter_keys);
        rule_state.reputation.window_ms = cfg.raw.rules.reputation_window_ms;
        rule_state.policies = st.policies();
        rule_state.crs = cfg.crs.clone();
        rule_state.breakers = Arc::new(rampart_core::store::breaker::LocalBreakers::with_max(
            cfg.raw.rules.max_breakers,
        ));
        let mut local = None;
        let (nonces, fingerprints, redis, redis_nonces): (
            Arc<dyn NonceStore>,
            Arc<dyn FingerprintStore>,
            _,
            _,
        ) = if redis_mode {
            let redis = Redis::start(&st.redis_settings(), metrics.redis.clone())
                .map_err(StartError::Redis)?;
            let nonce_mode = match st.nonce_mode {
                NonceMode::Exact => crate::redis_state::NonceMode::Exact,
                // One filter per app, sized for the app's own rate; the probe seed is drawn at
                // random by the first instance and kept with the recorded layout.
                NonceMode::Bloom => crate::redis_state::NonceMode::Bloom(
                    cfg.apps
                        .iter()
                        .map(|a| {
                            let layout = BloomLayout::new(&cfg.filter_for(&a.id), st.bloom_shards);
                            (a.id.clone(), layout)
                        })
                        .collect(),
                ),
            };
            let rn = Arc::new(RedisNonces::new(
                redis.clone(),
                nonce_mode,
                cfg.retention_ms,
                st.clock_margin_ms,
            ));
            rule_state.limiter = Arc::new(RedisLimiter::new(redis.clone(), st.reputation_copy));
            rule_state.distinct = Arc::new(RedisDistinct::new(redis.clone()));
            let quotas = Arc::new(RedisQuotas::new(
                redis.clone(),
                st.quota_segments(),
                rampart_core::rules::QUOTA_POOL_TTL_MS,
            ));
            // Instances that disagree on these would miss each other's nonces or oversell.
            for check in [rn.check_layout_at_start(), quotas.check_layout_at_start()] {
                match check {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(
                        "redis unreachable at start: the shared layouts are checked on first use"
                    ),
                    Err(e) => return Err(StartError::Redis(e)),
                }
            }
            rule_state.quotas = quotas;
            (
                rn.clone() as Arc<dyn NonceStore>,
                Arc::new(RedisFingerprints::new(redis.clone())) as Arc<dyn FingerprintStore>,
                Some(redis),
                Some(rn),
            )
        } else {
            let (p, prior) = persist::Persist::open(&cfg.raw.snapshot_dir(), now_ms())
                .map_err(StartError::State)?;
            let (stores, found) = persist::build(&cfg, prior, now_ms());
            let (n, f) = per_app(&stores);
            local = Some((p, stores, found));
            (n, f, None, None)
        };
        let rules = Arc::new(LiveRules::new(load_rules(&cfg, &rule_state)?));
        let mut engine = Engine::new(cfg.engine_settings(), nonces, fingerprints, rules);
        for app in engine.apps() {
            metrics.track_keys(&app.id, &app.keys.load());
        }
        if redis_mode && st.local_fallback {
            let (nonces, fingerprints) = per_app(&persist::fresh_stores(&cfg));
            engine = engine.with_fallback(Fallback {
                nonces,
                fingerprints,
            });
        }
        let persist = match local {
            Some((p, stores, found)) => {
                match found {
                    persist::Found::Fresh => {}
                    persist::Found::Restored {
                        saved_at_ms,
                        records,
                    } => tracing::info!(
                        saved_at_ms,
                        records,
                        "read back the nonce and fingerprint stores saved at the last graceful stop"
                    ),
                    persist::Found::Unknown { since_ms, why } if st.restart_quarantine => {
                        let max_window = cfg.apps.iter().map(|a| a.window_ms).max().unwrap_or(0);
                        tracing::warn!(
                            since_ms,
                            until_ms = since_ms.saturating_add(2 * max_window),
                            reason = %why,
                            "restart quarantine: the nonce store cannot know what was accepted \
                             before since_ms; requests whose timestamps could have been accepted \
                             then are refused with STORE_UNAVAILABLE until until_ms"
                        );
                        engine.set_restart_quarantine(since_ms);
                    }
                    persist::Found::Unknown { since_ms, why } => tracing::warn!(
                        since_ms,
                        reason = %why,
                        "the nonce store cannot know what was accepted before since_ms, and \
                         [state] restart_quarantine = false: replays of those requests pass \
                         until their timestamps leave the window"
                    ),
                }
                Some((p, stores))
            }
            None => None,
        };
        let log = DecisionLog::start(&cfg.raw.decision_log, metrics.clone()).map_err(|err| {
            StartError::DecisionLog {
                dir: cfg.raw.decision_log.dir.display().to_string(),
                err,
            }
        })?;
        let instance: Arc<str> = if cfg.raw.server.instance.is_empty() {
            host_name().into()
        } else {
            cfg.raw.server.instance.as_str().into()
        };
        let control = build_control(&cfg, redis.as_ref())?;
        // Challenges are MACed with a key every instance sharing the control store shares.
        let engine = engine.with_challenge(cfg.raw.challenge.engine_config(control.sessions.key()));
        let s = &cfg.raw.server;
        let limits = Limits {
            max_body_bytes: s.max_body_bytes,
            max_batch_body_bytes: s.max_batch_body_bytes,
            max_batch_items: s.max_batch_items,
            max_header_bytes: s.max_header_bytes,
            body_timeout: Duration::from_millis(s.client_body_timeout_ms),
        };
        let metrics_token = cfg.raw.server.metrics_token().map_err(StartError::Config)?;
        let offload_permits = (redis.is_some() && cfg.raw.state.decision_threads > 0)
            .then(|| Arc::new(tokio::sync::Semaphore::new(cfg.raw.state.decision_threads)));
        let rt = Arc::new(Runtime {
            proxy_trust: cfg.raw.server.proxy_trust(),
            metrics_token,
            engine,
            metrics,
            log,
            limits,
            instance,
            ids: IdGen::new(),
            ready: AtomicBool::new(false),
            config: cfg,
            rule_state,
            stop: AtomicBool::new(false),
            maintenance: Mutex::new(None),
            redis,
            redis_nonces,
            control,
            persist,
            heartbeat: Mutex::new(None),
            offload: offload_permits,
        });
        rt.engine.maintain(now_ms());
        rt.import_rules();
        rt.refresh_gauges();
        Ok(rt)
    }

    /// Records the configured rule set (directory or built-in) as a version and applies the
    /// stored rollout state: the stable version kept in the control store wins over the built-in
    /// set; a rule directory whose content changed since its last import becomes stable.
    fn import_rules(&self) {
        let r = &self.config.raw.rules;
        let imported = match (&r.dir, r.defaults) {
            (Some(dir), _) => match rampart_files::read_sources(dir) {
                Ok(sources) => self
                    .control
                    .import(&self.host(), &sources, "rules-dir", true),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the rule directory");
                    Ok(())
                }
            },
            (None, true) => self
                .control
                .import(&self.host(), &default_rules(), "built-in", false),
            (None, false) => match self.control.store.load() {
                Ok(s) => self.control.apply(&self.host(), &s),
                Err(e) => Err(crate::error::ApiError::new(
                    503,
                    "CONTROL_UNAVAILABLE",
                    e.to_string(),
                )),
            },
        };
        if let Err(e) = imported {
            tracing::warn!(error = %e.message, code = e.code, "cannot record the rule set in the control store yet; running the configured set and signing keys");
        }
    }

    /// Re-reads `[rules] dir` if its files changed since `last`; returns the new signature.
    fn reload_if_changed(&self, last: u64) -> u64 {
        let Some(dir) = &self.config.raw.rules.dir else {
            return last;
        };
        let sig = rampart_files::signature(dir);
        if sig != last {
            match rampart_files::read_sources(dir) {
                Ok(sources) => {
                    if let Err(e) = self
                        .control
                        .import(&self.host(), &sources, "rules-dir", true)
                    {
                        tracing::warn!(error = %e.message, code = e.code, "rule directory change not applied; the live set is unchanged");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot read the rule directory"),
            }
        }
        sig
    }

    /// True once the engine is shutting down.
    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Starts the maintenance thread (and the peer check, where it applies) and marks the engine
    /// ready.
    pub fn start_background(self: &Arc<Self>) {
        crate::runtime::peers::spawn(self);
        if self.persist.is_some() {
            // A thread of its own: the heartbeat bounds what an unclean stop can have accepted,
            // so nothing else may delay it.
            let rt = self.clone();
            let h = std::thread::Builder::new()
                .name("heartbeat".into())
                .spawn(move || {
                    while !rt.stop.load(Ordering::Acquire) {
                        if let Some((p, _)) = &rt.persist {
                            if let Err(e) = p.heartbeat(now_ms()) {
                                tracing::error!(error = %e, "cannot write the heartbeat");
                            }
                        }
                        std::thread::sleep(Duration::from_millis(persist::HEARTBEAT_MS));
                    }
                })
                .expect("spawn heartbeat thread");
            *self.heartbeat.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
        }
        let rt = self.clone();
        let tick = Duration::from_millis((self.config.filter.slice_ms / 4).clamp(5, 50) as u64);
        let rules = &self.config.raw.rules;
        let reload_every = Duration::from_millis(rules.reload_interval_ms);
        let watch = rules.reload && rules.dir.is_some();
        let handle = std::thread::Builder::new()
            .name("maintenance".into())
            .spawn(move || {
                let mut last_stats = std::time::Instant::now();
                let mut last_poll = std::time::Instant::now();
                let poll_every = Duration::from_millis(rt.config.raw.admin.poll_ms);
                let mut last_reload = std::time::Instant::now();
                let mut sig = rt
                    .config
                    .raw
                    .rules
                    .dir
                    .as_deref()
                    .map(rampart_files::signature)
                    .unwrap_or(0);
                while !rt.stop.load(Ordering::Acquire) {
                    let now = now_ms();
                    rt.engine.maintain(now);
                    rt.rule_state.maintain(now);
                    if last_stats.elapsed() >= Duration::from_secs(1) {
                        rt.sample_shared_filter(now);
                        rt.refresh_gauges();
                        last_stats = std::time::Instant::now();
                    }
                    if last_poll.elapsed() >= poll_every {
                        rt.control.poll(&rt.host());
                        last_poll = std::time::Instant::now();
                    }
                    if watch && last_reload.elapsed() >= reload_every {
                        sig = rt.reload_if_changed(sig);
                        last_reload = std::time::Instant::now();
                    }
                    std::thread::sleep(tick);
                }
            })
            .expect("spawn maintenance thread");
        *self.maintenance.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        self.ready.store(true, Ordering::Release);
    }

    /// Recomputes the gauges and says loudly when the nonce filter is over its design load.
    pub(crate) fn refresh_gauges(&self) {
        if let Some(r) = &self.redis {
            self.metrics
                .redis_up
                .set((r.connected() && !r.cooling_down()) as i64);
        }
        let stats = self.engine.nonce_store().stats(now_ms());
        if self.metrics.update_nonce(&stats) {
            tracing::warn!(
                entries = stats.entries,
                fill_ratio = stats.fill_ratio,
                estimated_fp = stats.estimated_fp,
                expected_rps = self.config.raw.state.expected_rps,
                "nonce filter load exceeds its design: false positives (false kills) will rise above \
                 state.target_fp; raise state.expected_rps"
            );
        }
        self.metrics
            .log_queue_depth
            .set(self.log.queue_depth() as i64);
        self.metrics.update_rules(&self.engine.rules().snapshot());
        self.metrics
            .ruleset_compiled_versions
            .set(self.control.compiled_versions() as i64);
        self.metrics
            .rulesets_alive
            .set(rampart_core::rules::rule_sets_alive() as i64);
        self.metrics
            .breakers
            .set(self.rule_state.breakers.len() as i64);
    }

    /// Samples the fill of the shared Bloom filter (one app per call, in turn).
    fn sample_shared_filter(&self, now: i64) {
        let Some(rn) = &self.redis_nonces else { return };
        let apps = &self.config.apps;
        if apps.is_empty() {
            return;
        }
        let i = (now / 1000) as usize % apps.len();
        rn.sample(&apps[i].id, now);
    }

    /// Whether the engine can serve decisions: started, and connected to Redis when it uses it.
    pub(crate) fn is_ready(&self) -> Result<(), &'static str> {
        if !self.ready.load(Ordering::Acquire) {
            return Err("starting");
        }
        if self.redis.as_ref().is_some_and(|r| !r.connected()) {
            return Err("waiting for redis");
        }
        Ok(())
    }

    /// Stops the background work and drains the decision log.
    pub fn shutdown(&self) {
        self.ready.store(false, Ordering::Release);
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self
            .maintenance
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = h.join();
        }
        if let Some(h) = self
            .heartbeat
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = h.join();
        }
        // The server has stopped taking requests: save the local stores for the next start.
        if let Some((p, stores)) = &self.persist {
            match p.save(stores, now_ms()) {
                Ok(records) => tracing::info!(records, "saved the nonce and fingerprint stores"),
                Err(e) => tracing::error!(
                    error = %e,
                    "cannot save the nonce and fingerprint stores: the next start quarantines"
                ),
            }
        }
        self.log.shutdown();
    }
}

/// The control store: Redis in Redis mode (entries moved out of its audit log go to
/// `<control dir>/audit/`), else files in the control directory.
pub(crate) fn control_store(
    cfg: &Validated,
    redis: Option<&Arc<Redis>>,
) -> Result<Arc<dyn crate::control::store::ControlStore>, String> {
    use crate::control::store::{FileStore, RedisStore};
    let dir = cfg.raw.control_dir();
    let max = cfg.raw.admin.audit_max_entries;
    Ok(match redis {
        Some(r) => Arc::new(RedisStore::new(r.clone()).with_audit(max, dir.join("audit"))),
        None => Arc::new(
            FileStore::open(&dir)
                .map_err(|e| e.to_string())?
                .with_audit_max(max),
        ),
    })
}

/// The control plane: the store (Redis in Redis mode, else files), the identities (a bootstrap
/// `admin` when none are configured), the session key.
fn build_control(
    cfg: &Validated,
    redis: Option<&Arc<Redis>>,
) -> Result<crate::control::Control, StartError> {
    let a = &cfg.raw.admin;
    let dir = cfg.raw.control_dir();
    let store = control_store(cfg, redis).map_err(StartError::Control)?;
    let mut ids = a.identities();
    if ids.users.is_empty() && ids.tokens.is_empty() {
        let (user, file) = bootstrap_admin(&dir).map_err(StartError::Control)?;
        tracing::warn!(
            file = %file.display(),
            "no [admin] users configured: user \"admin\" (role admin) can log in with the password in this file; configure [[admin.users]] for real use"
        );
        ids.users.insert(user.name.clone(), user);
    }
    match crate::control::Control::new(store.clone(), ids, a) {
        Ok(c) => Ok(c),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the shared session key yet; sessions from this instance are valid here only until it restarts");
            let mut ids = a.identities();
            if ids.users.is_empty() && ids.tokens.is_empty() {
                let (user, _) = bootstrap_admin(&dir).map_err(StartError::Control)?;
                ids.users.insert(user.name.clone(), user);
            }
            crate::control::Control::with_key(store, ids, a, random_key())
                .map_err(StartError::Control)
        }
    }
}

fn random_key() -> Vec<u8> {
    let mut k = [0u8; 32];
    let _ = getrandom::getrandom(&mut k);
    k.to_vec()
}

/// The bootstrap `admin` user: its password is generated once into
/// `<state_dir>/initial-admin-password` (owner-only) and kept there across restarts.
fn bootstrap_admin(
    dir: &std::path::Path,
) -> Result<(crate::auth::User, std::path::PathBuf), String> {
    let file = dir.join("initial-admin-password");
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let password = match std::fs::read_to_string(&file) {
        Ok(p) if p.trim().len() >= 12 => p.trim().to_string(),
        _ => {
            let mut b = [0u8; 12];
            getrandom::getrandom(&mut b).map_err(|e| e.to_string())?;
            let p = hex::encode(b);
            crate::control::store::write_private(&file, format!("{p}\n").as_bytes())
                .map_err(|e| format!("{}: {e}", file.display()))?;
            p
        }
    };
    let password_hash = crate::auth::hash_password(&password)?;
    Ok((
        crate::auth::User {
            name: "admin".into(),
            role: crate::auth::Role::Admin,
            password_hash,
        },
        file,
    ))
}

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| format!("rampart-{}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout the ids have always had, written out bit by bit.
    fn reference(seed: u64, counter: u64, now_ms: i64) -> String {
        let r = splitmix(seed ^ counter);
        let hi = ((now_ms as u64 & 0xffff_ffff_ffff) << 16) | 0x7000 | ((seed >> 52) & 0x0fff);
        let lo = (0b10u64 << 62) | (r >> 2);
        let h = format!("{:032x}", ((hi as u128) << 64) | lo as u128);
        format!(
            "{}-{}-{}-{}-{}",
            &h[0..8],
            &h[8..12],
            &h[12..16],
            &h[16..20],
            &h[20..]
        )
    }

    #[test]
    fn decision_ids_keep_their_layout() {
        for seed in [0, u64::MAX, 0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210] {
            let ids = IdGen {
                seed,
                counter: AtomicU64::new(0),
            };
            for (c, now) in [0, 1, 1_700_000_000_000, (1 << 48) - 1, 1 << 48, i64::MAX]
                .into_iter()
                .enumerate()
            {
                assert_eq!(
                    ids.next(now),
                    reference(seed, c as u64, now),
                    "{seed} {now}"
                );
            }
        }
    }

    #[test]
    fn decision_ids_are_uuid_v7_text_in_time_order() {
        let ids = IdGen::new();
        let id = uuid::Uuid::try_parse(&ids.next(1_700_000_000_123)).unwrap();
        assert_eq!(id.get_version_num(), 7);
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        // The decision's own clock, not the system's.
        let ts = id.get_timestamp().unwrap().to_unix();
        assert_eq!(ts, (1_700_000_000, 123_000_000), "{id}");
        let (a, b) = (ids.next(1_700_000_000_000), ids.next(1_700_000_000_001));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "7", "version 7: {a}");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"), "variant: {a}");
        assert!(a < b, "{a} < {b}");
        assert_ne!(ids.next(5), ids.next(5));
    }
}
