//! `[state]`: where the anti-replay and rule state lives (in process or Redis), the nonce
//! filter's sizing and each store's failure policy.

use rampart_core::policy::{FailPolicy, StorePolicies};
use rampart_core::replay::bloom::SlicedBloomConfig;
use serde::Deserialize;

use super::apps::AppConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Local,
    Redis,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NonceMode {
    Bloom,
    Exact,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnStoreError {
    Deny,
    Allow,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    pub backend: Backend,
    pub redis_url: String,
    pub nonce_mode: NonceMode,
    pub on_store_error: OnStoreError,
    /// Peak accepted requests per second the nonce filter is sized for.
    pub expected_rps: u64,
    /// Target false-positive rate of the Bloom filter at `expected_rps`.
    pub target_fp: f64,
    /// How long a nonce record is kept, from the earliest moment its request could be accepted
    /// (`ts − window`). Default: 2 × the largest app window. Must be ≥ 2 × every app's window.
    pub nonce_retention_ms: Option<i64>,
    /// Width of a Bloom slice. Default: retention / 48.
    pub nonce_slice_ms: Option<i64>,
    /// Cap on live entries in exact nonce mode.
    pub exact_max_entries: usize,
    /// Cap on live duplicate-submission fingerprints.
    pub fingerprint_max_entries: usize,
    /// Seed nodes of a Redis Cluster (`redis://host:port`); non-empty = cluster mode.
    pub redis_cluster_nodes: Vec<String>,
    /// Prefix of every Redis key.
    pub redis_prefix: String,
    /// Bound on each Redis call.
    pub redis_timeout_ms: u64,
    /// Bound on connecting (and on waiting for the first connection at start).
    pub redis_connect_timeout_ms: u64,
    /// Multiplexed connections (per node) of the detached writes; the decision path uses one
    /// blocking connection per thread that decides.
    pub redis_connections: usize,
    /// With Redis state: at most this many decisions wait on Redis at once, each on a thread of
    /// a pool apart from the HTTP workers, so a slow Redis parks decisions, never the workers
    /// (`/healthz`, `/metrics` and the admin API keep answering). 0 = decide on the HTTP worker.
    pub decision_threads: usize,
    /// With Redis state on one node: keep every client's reputation in each instance, kept current
    /// by Redis pub/sub, so the edge tier's reputation reads cost no round trip. `false` = read
    /// Redis on every decision.
    pub reputation_copy: bool,
    /// With Redis state on one node (and `replica_acks = 0`): concurrent decisions' anti-replay
    /// scripts share writes to Redis, so Redis reads and answers them in batches. Off by default:
    /// measured here it saved Redis no CPU and lengthened p99 (README, performance).
    pub redis_coalesce: bool,
    /// Replicas that must acknowledge each anti-replay write (nonce, submission fingerprint,
    /// spent challenge solution) before it counts (`WAIT`); 0 = Redis's asynchronous replication,
    /// where a failover can forget the nonces accepted just before it.
    pub replica_acks: u32,
    /// How long an anti-replay write waits for `replica_acks` acknowledgements before the step's
    /// `*_on_error` policy answers. Below `redis_timeout_ms`.
    pub replica_ack_timeout_ms: u64,
    /// Bitmaps per Bloom time slice in Redis (spreads a slice over cluster nodes).
    pub bloom_shards: u32,
    /// Stock segments per quota pool; 0 = 1 on a single node, 8 on a cluster.
    pub quota_segments: u32,
    /// Added to every Redis expiry of the anti-replay state: the most the engine instances'
    /// clocks may differ.
    pub clock_margin_ms: i64,
    /// Keep in-process nonce and fingerprint stores up to date, and use them while Redis fails
    /// (where the store's policy is `allow`).
    pub local_fallback: bool,
    /// With `backend = "local"` and a ClickHouse decision log: how often to look in the log for
    /// other instances serving the same apps (per-instance state by mistake). 0 = never.
    pub peer_check_ms: u64,
    pub nonce_on_error: Option<OnStoreError>,
    pub fingerprint_on_error: Option<OnStoreError>,
    pub limits_on_error: Option<OnStoreError>,
    pub counters_on_error: Option<OnStoreError>,
    pub distinct_on_error: Option<OnStoreError>,
    pub quotas_on_error: Option<OnStoreError>,
    pub reputation_on_error: Option<OnStoreError>,
    /// Where the local stores are saved on a graceful stop and read back at start
    /// (`backend = "local"`). Default: `replay/` in `[admin] state_dir`.
    pub snapshot_dir: Option<std::path::PathBuf>,
    /// After an unclean stop (nothing saved), refuse the timestamps the engine can no longer
    /// judge until they fail the window check (`STORE_UNAVAILABLE`); `false` accepts them.
    pub restart_quarantine: bool,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            backend: Backend::Local,
            redis_url: String::new(),
            nonce_mode: NonceMode::Bloom,
            on_store_error: OnStoreError::Deny,
            expected_rps: 100_000,
            target_fp: 1e-6,
            nonce_retention_ms: None,
            nonce_slice_ms: None,
            exact_max_entries: 10_000_000,
            fingerprint_max_entries: 10_000_000,
            redis_cluster_nodes: Vec::new(),
            redis_prefix: "rampart".into(),
            redis_timeout_ms: 200,
            redis_connect_timeout_ms: 2_000,
            redis_connections: 1,
            decision_threads: 64,
            reputation_copy: true,
            redis_coalesce: false,
            replica_acks: 0,
            replica_ack_timeout_ms: 50,
            bloom_shards: 16,
            quota_segments: 0,
            clock_margin_ms: 1_000,
            local_fallback: false,
            peer_check_ms: 30_000,
            nonce_on_error: None,
            fingerprint_on_error: None,
            limits_on_error: None,
            counters_on_error: None,
            distinct_on_error: None,
            quotas_on_error: None,
            reputation_on_error: None,
            snapshot_dir: None,
            restart_quarantine: true,
        }
    }
}

impl OnStoreError {
    pub fn policy(self) -> FailPolicy {
        match self {
            OnStoreError::Deny => FailPolicy::Deny,
            OnStoreError::Allow => FailPolicy::Allow,
        }
    }
}

impl StateConfig {
    /// Each store's failure policy: its own `*_on_error` key, else `on_store_error`. Quotas
    /// default to `deny` whatever `on_store_error` says (a claim is never granted blind).
    pub fn policies(&self) -> StorePolicies {
        let d = self.on_store_error;
        let p = |o: Option<OnStoreError>| o.unwrap_or(d).policy();
        StorePolicies {
            nonce: p(self.nonce_on_error),
            fingerprint: p(self.fingerprint_on_error),
            limits: p(self.limits_on_error),
            counters: p(self.counters_on_error),
            distinct: p(self.distinct_on_error),
            quotas: self.quotas_on_error.unwrap_or(OnStoreError::Deny).policy(),
            reputation: p(self.reputation_on_error),
        }
    }

    pub fn redis_settings(&self) -> crate::redis_state::RedisSettings {
        crate::redis_state::RedisSettings {
            url: self.redis_url.clone(),
            cluster_nodes: self.redis_cluster_nodes.clone(),
            prefix: self.redis_prefix.clone(),
            timeout: std::time::Duration::from_millis(self.redis_timeout_ms),
            connect_timeout: std::time::Duration::from_millis(self.redis_connect_timeout_ms),
            connections: self.redis_connections,
            replica_acks: self.replica_acks,
            replica_ack_timeout: std::time::Duration::from_millis(self.replica_ack_timeout_ms),
            coalesce: self.redis_coalesce,
        }
    }

    /// Stock segments per quota pool (the `0` = automatic default resolved).
    pub fn quota_segments(&self) -> u32 {
        match self.quota_segments {
            0 if self.redis_cluster_nodes.is_empty() => 1,
            0 => 8,
            n => n,
        }
    }
}

/// What `[state]` derives from the apps' windows: the nonce filter's shape and the retention.
pub(super) struct Derived {
    pub filter: SlicedBloomConfig,
    pub retention_ms: i64,
}

impl StateConfig {
    /// Checks `[state]` against the apps' windows; every problem goes into `errs`.
    pub(super) fn check(&self, apps: &[AppConfig], errs: &mut Vec<String>) -> Derived {
        let st = self;
        let policies = st.policies();
        if st.backend == Backend::Redis {
            let has_url = !st.redis_url.is_empty();
            let has_cluster = !st.redis_cluster_nodes.is_empty();
            if has_url == has_cluster {
                errs.push(
                    "state.backend = \"redis\" needs exactly one of state.redis_url (one node) \
                     and state.redis_cluster_nodes (a cluster)"
                        .into(),
                );
            } else if let Err(e) = crate::redis_state::validate(&st.redis_settings()) {
                errs.push(e);
            }
            if st.redis_prefix.is_empty()
                || st
                    .redis_prefix
                    .chars()
                    .any(|c| c == '{' || c == '}' || c.is_whitespace())
            {
                errs.push("state.redis_prefix must be non-empty, without braces or spaces".into());
            }
            // A call blocks its worker for up to this long.
            if !(1..=5_000).contains(&st.redis_timeout_ms) {
                errs.push("state.redis_timeout_ms must be between 1 and 5000".into());
            }
            if st.decision_threads > 4_096 {
                errs.push("state.decision_threads must be between 0 and 4096".into());
            }
            if !(1..=600_000).contains(&st.redis_connect_timeout_ms) {
                errs.push("state.redis_connect_timeout_ms must be between 1 and 600000".into());
            }
            if !(1..=64).contains(&st.redis_connections) {
                errs.push("state.redis_connections must be between 1 and 64".into());
            }
            if st.replica_acks > 16 {
                errs.push("state.replica_acks must be between 0 and 16".into());
            }
            if st.replica_acks > 0 && !(1..st.redis_timeout_ms).contains(&st.replica_ack_timeout_ms)
            {
                errs.push(
                    "state.replica_ack_timeout_ms must be at least 1 and below state.redis_timeout_ms \
                     (the wait for replicas is part of the call redis_timeout_ms bounds)"
                        .into(),
                );
            }
            if !(1..=1024).contains(&st.bloom_shards) {
                errs.push("state.bloom_shards must be between 1 and 1024".into());
            }
            if st.quota_segments > 1024 {
                errs.push("state.quota_segments must be at most 1024".into());
            }
            if !(0..=60_000).contains(&st.clock_margin_ms) {
                errs.push("state.clock_margin_ms must be between 0 and 60000".into());
            }
        }
        if policies.quotas == FailPolicy::Allow {
            errs.push(
                "state.quotas_on_error = \"allow\" is refused: a claim that cannot be recorded \
                 cannot be granted without risking overselling (set quotas_on_error = \"deny\")"
                    .into(),
            );
        }
        if st.peer_check_ms != 0 && st.peer_check_ms < 100 {
            errs.push("state.peer_check_ms must be 0 (off) or ≥ 100".into());
        }
        if st.replica_acks > 0 && st.backend != Backend::Redis {
            errs.push("state.replica_acks only applies to state.backend = \"redis\"".into());
        }
        if st.local_fallback {
            if st.backend != Backend::Redis {
                errs.push("state.local_fallback only applies to state.backend = \"redis\"".into());
            } else if policies.nonce == FailPolicy::Deny && policies.fingerprint == FailPolicy::Deny
            {
                errs.push(
                    "state.local_fallback needs nonce_on_error or fingerprint_on_error = \"allow\" \
                     (with \"deny\", a Redis failure denies and the fallback is never used)"
                        .into(),
                );
            }
        }
        if !(st.target_fp > 0.0 && st.target_fp <= 0.01) {
            errs.push("state.target_fp must be in (0, 0.01]".into());
        }
        if st.expected_rps == 0 {
            errs.push("state.expected_rps must be at least 1".into());
        }
        let max_window = apps.iter().map(|a| a.window_ms).max().unwrap_or(1).max(1);
        let retention = st.nonce_retention_ms.unwrap_or(2 * max_window);
        for a in apps {
            if retention < 2 * a.window_ms {
                errs.push(format!(
                    "state.nonce_retention_ms = {retention} is shorter than the acceptance span of app {:?} \
                     (2 × window_ms = {}): a request is accepted while |now − x-timestamp| ≤ {} ms, so its \
                     replay can arrive up to {} ms after the first sighting and would pass once the nonce \
                     is forgotten. Set nonce_retention_ms ≥ {} or shrink the window.",
                    a.id,
                    2 * a.window_ms,
                    a.window_ms,
                    2 * a.window_ms,
                    2 * a.window_ms
                ));
            }
        }
        let slice = st.nonce_slice_ms.unwrap_or((retention / 48).max(1));
        if slice < 1 || slice > retention.max(1) {
            errs.push("state.nonce_slice_ms must be between 1 and nonce_retention_ms".into());
        }
        let filter = SlicedBloomConfig {
            expected_rps: st.expected_rps.max(1),
            slice_ms: slice.max(1),
            retention_ms: retention,
            max_window_ms: max_window,
            target_fp: st.target_fp,
        };
        // One filter per app, each sized for the app's own rate.
        let total: u64 = apps
            .iter()
            .map(|a| {
                SlicedBloomConfig {
                    expected_rps: a.expected_rps.unwrap_or(st.expected_rps).max(1),
                    ..filter
                }
                .memory_bytes()
            })
            .sum();
        if st.nonce_mode == NonceMode::Bloom
            && st.target_fp > 0.0
            && total > 16 * 1024 * 1024 * 1024
        {
            errs.push(format!(
                "the nonce filters would need {} MiB (one per app: expected_rps × retention); lower \
                 expected_rps or the windows",
                total / (1024 * 1024)
            ));
        }
        Derived {
            filter,
            retention_ms: retention,
        }
    }
}
