//! What a validated configuration says about itself: the warnings `rampart check` and `rampart
//! serve` print, the nonce store's sizing `rampart check` prints, and the settings view of the
//! console (no secret in any of them).

use rampart_core::policy::FailPolicy;
use rampart_core::replay::keys::Validity;

use super::state::{Backend, NonceMode};
use super::Validated;

/// Redis memory of one exact nonce key, and of one compact-mode token key, as measured by
/// `BENCH_ONLY=memory cargo bench -p rampart --bench redis_state` (Redis 7.0: 181 B per key at
/// 200,000 exact keys; 261 B per token key at about 125,000).
const EXACT_KEY_BYTES: f64 = 180.0;
const TOKEN_KEY_BYTES: f64 = 260.0;

/// A window wider than this draws a warning from `rampart check` and `rampart serve`.
pub const WIDE_WINDOW_MS: i64 = 60_000;

/// A configured key that expires within this (a week) draws a warning.
pub const KEY_EXPIRY_WARNING_MS: i64 = 7 * 86_400_000;

impl Validated {
    /// What is allowed but probably a mistake: apps whose time window is wider than
    /// [`WIDE_WINDOW_MS`] (a captured request can be replayed that long wherever dedup is weak, and
    /// nonce retention grows with it), with the fix; configured keys that expired or expire within
    /// [`KEY_EXPIRY_WARNING_MS`], and apps with no key valid now (every request refused).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings_at(crate::clock::now_ms())
    }

    /// [`Validated::warnings`] at server time `now`.
    pub fn warnings_at(&self, now: i64) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.apps {
            let (id, w) = (&a.id, a.window_ms);
            if a.accept_unsigned {
                out.push(format!(
                    "app {id:?}: accept_unsigned is on; a request without anti-replay headers is \
                     judged by the rules alone (no replay protection). Meant for browser pages \
                     behind forward-auth; give signed API clients an app of their own"
                ));
            }
            if w > WIDE_WINDOW_MS {
                out.push(format!(
                    "app {id:?}: window_ms = {w} is wider than {} s; a captured request stays \
                     valid that long. Narrow the app's window, or give its sensitive routes a \
                     narrower one with [[routes]] window_ms",
                    WIDE_WINDOW_MS / 1000
                ));
            }
            for k in &a.keys {
                match k.not_after_ms {
                    Some(t) if t < now => out.push(format!(
                        "app {id:?}: key {:?} expired at {}; requests signed with it are refused. \
                         Remove it from the configuration",
                        k.id,
                        crate::clock::utc(t)
                    )),
                    Some(t) if t - now <= KEY_EXPIRY_WARNING_MS => out.push(format!(
                        "app {id:?}: key {:?} expires at {} (in {} h); make sure clients sign \
                         with another key by then",
                        k.id,
                        crate::clock::utc(t),
                        (t - now) / 3_600_000
                    )),
                    _ => {}
                }
            }
            let ring = a.keyring();
            if !ring
                .keys()
                .iter()
                .any(|k| k.validity(now) == Validity::Active)
            {
                out.push(format!(
                    "app {id:?}: no configured key is valid now; every request of this app is \
                     refused until one is (or one is added through the admin API)"
                ));
            }
        }
        out
    }

    /// Each app's configured keys as `rampart check` prints them: ids and validity, never
    /// secrets.
    pub fn keys_report(&self, now: i64) -> Vec<String> {
        let when = |t: Option<i64>| t.map(crate::clock::utc);
        self.apps
            .iter()
            .map(|a| {
                let keys: Vec<String> = a
                    .keys
                    .iter()
                    .map(|k| {
                        let span = match (when(k.not_before_ms), when(k.not_after_ms)) {
                            (None, None) => "always valid".to_string(),
                            (Some(b), None) => format!("valid from {b}"),
                            (None, Some(e)) => format!("valid until {e}"),
                            (Some(b), Some(e)) => format!("valid from {b} until {e}"),
                        };
                        let state = match k.signing_key().validity(now) {
                            Validity::Active => "active",
                            Validity::NotYet(_) => "not yet valid",
                            Validity::Expired(_) => "expired",
                        };
                        format!("{} ({span}; {state})", k.id)
                    })
                    .collect();
                format!("app {} keys: {}", a.id, keys.join(", "))
            })
            .collect()
    }

    /// The running configuration as the console's settings page shows it: every value that shapes
    /// decisions, and no secret (app secrets, password hashes, token hashes, ClickHouse password
    /// and credentials inside URLs are left out or cut).
    pub fn settings_view(&self) -> serde_json::Value {
        use rampart_core::redact::strip_credentials;
        use serde_json::json;
        let c = &self.raw;
        let fp = |p: FailPolicy| match p {
            FailPolicy::Deny => "deny",
            FailPolicy::Allow => "allow",
        };
        let pol = c.state.policies();
        let (backend, mode) = (
            match c.state.backend {
                Backend::Local => "local",
                Backend::Redis => "redis",
            },
            match c.state.nonce_mode {
                NonceMode::Bloom => "bloom",
                NonceMode::Exact => "exact",
            },
        );
        let rs = c.rules.settings();
        json!({
            // Keys are listed to admins only (`GET /admin/v1/apps/{app}/keys`).
            "apps": self.apps.iter().map(|a| json!({"id": a.id, "window_ms": a.window_ms, "accept_unsigned": a.accept_unsigned})).collect::<Vec<_>>(),
            "fingerprint": {"window_ms": c.fingerprint.window_ms, "methods": c.fingerprint.methods,
                            "volatile_fields": c.fingerprint.volatile_fields},
            "routes": c.routes.iter().map(|r| json!({
                "app": r.app, "path": r.path, "window_ms": r.window_ms, "dedup_window_ms": r.dedup_window_ms,
                "methods": r.methods, "volatile_fields": r.volatile_fields,
            })).collect::<Vec<_>>(),
            "state": {
                "backend": backend, "nonce_mode": mode,
                "redis": (c.state.backend == Backend::Redis).then(|| json!({
                    "url": strip_credentials(&c.state.redis_url),
                    "cluster_nodes": c.state.redis_cluster_nodes.iter().map(|n| strip_credentials(n)).collect::<Vec<_>>(),
                    "prefix": c.state.redis_prefix,
                    "timeout_ms": c.state.redis_timeout_ms,
                    "local_fallback": c.state.local_fallback,
                    "peer_check_ms": c.state.peer_check_ms,
                })),
                "nonce_retention_ms": self.retention_ms,
                "expected_rps": c.state.expected_rps,
                "target_fp": c.state.target_fp,
                "on_store_error": {
                    "nonce": fp(pol.nonce), "fingerprint": fp(pol.fingerprint),
                    "limits": fp(pol.limits), "counters": fp(pol.counters),
                    "distinct": fp(pol.distinct), "quotas": fp(pol.quotas),
                    "reputation": fp(pol.reputation),
                },
            },
            "rules": {
                "dir": c.rules.dir, "defaults": c.rules.defaults, "reload": c.rules.reload,
                "on_error": {"edge": fp(rs.on_error[0]), "gateway": fp(rs.on_error[1]),
                             "business": fp(rs.on_error[2])},
                "challenge_score": rs.challenge_score, "review_score": rs.review_score,
                "deny_score": rs.deny_score,
            },
            "decision_log": {
                "clickhouse_url": c.decision_log.clickhouse_url.as_deref().map(strip_credentials),
                "clickhouse_database": c.decision_log.clickhouse_database,
                "dir": c.decision_log.dir, "record_request": c.decision_log.record_request,
            },
            "server": {
                "max_body_bytes": c.server.max_body_bytes,
                "max_batch_items": c.server.max_batch_items,
                "max_header_bytes": c.server.max_header_bytes,
                "max_connections": c.server.max_connections,
                "client_request_timeout_ms": c.server.client_request_timeout_ms,
                "challenge_status": c.server.challenge_status,
                "instance": c.server.instance,
                "tls": self.tls.is_some(),
                "tls_cert_file": c.server.tls_cert_file,
            },
            "admin": {
                "users": c.admin.users.iter().map(|u| json!({"name": u.name, "role": u.role})).collect::<Vec<_>>(),
                "tokens": c.admin.tokens.iter().map(|t| json!({"name": t.name, "role": t.role})).collect::<Vec<_>>(),
                "bundle_keys": c.admin.bundle_keys.iter().map(|k| json!({"name": k.name, "public_key": k.public_key})).collect::<Vec<_>>(),
                "allow_unsigned_uploads": c.admin.allow_unsigned_uploads,
                "key_approval": c.admin.key_approval,
                "session_ttl_ms": c.admin.session_ttl_ms,
                "canary_min_samples": c.admin.canary_min_samples,
                "canary_max_refusal_increase": c.admin.canary_max_refusal_increase,
                "canary_max_error_increase": c.admin.canary_max_error_increase,
            },
        })
    }

    /// What the nonce store will cost, for `rampart check`: one store per app, each sized for the
    /// app's own `expected_rps`, and their total.
    pub fn sizing_report(&self) -> String {
        let v = self;
        let st = &v.raw.state;
        let rps = |id: &str| v.filter_for(id).expected_rps;
        let total_rps: u64 = v.apps.iter().map(|a| rps(&a.id)).sum();
        let live = total_rps as f64 * v.retention_ms as f64 / 1000.0;
        // A Redis key per nonce (SET NX PX): key, value, expiry and dict overhead, ~180 B each
        // (`BENCH_ONLY=memory cargo bench -p rampart --bench redis_state`: 181 B at 200,000 keys).
        let redis_bytes = live * EXACT_KEY_BYTES;
        let mib = |b: f64| b / (1024.0 * 1024.0);
        let n = v.apps.len();
        let mut report = match st.nonce_mode {
            NonceMode::Bloom => {
                let f = &v.filter;
                let d = f.design();
                let total: u64 = v
                    .apps
                    .iter()
                    .map(|a| v.filter_for(&a.id).memory_bytes())
                    .sum();
                let mut s = format!(
                    "nonce store: bloom, one filter per app ({n}), sized for {total_rps} requests/s in all, retention {} ms, slices of {} ms ({} slices)\n  \
                     memory: {:.1} MiB\n  \
                     bits per entry: {:.2} at design load (k = {}), {:.2} per live nonce including slice overhead\n  \
                     expected false-positive rate: {:.2e} (target {:.0e})\n  \
                     for comparison, one Redis key per nonce (SET NX PX, ~180 B): {:.0} keys ≈ {:.0} MiB",
                    v.retention_ms,
                    f.slice_ms,
                    f.slots(),
                    mib(total as f64),
                    d.bits_per_entry,
                    d.k,
                    f.effective_bits_per_entry(),
                    d.expected_fp,
                    st.target_fp,
                    live,
                    mib(redis_bytes),
                );
                if n > 1 {
                    for id in v.apps.iter().map(|a| &a.id) {
                        let af = v.filter_for(id);
                        s.push_str(&format!(
                            "\n  app {id}: {} requests/s, {:.1} MiB",
                            af.expected_rps,
                            mib(af.memory_bytes() as f64)
                        ));
                    }
                }
                s
            }
            NonceMode::Exact => {
                let cap: usize = v.apps.iter().map(|a| v.exact_max_entries_for(&a.id)).sum();
                format!(
                    "nonce store: exact (no false positives), one store per app ({n}), retention {} ms, at most {cap} entries in all\n  \
                     memory at {total_rps} requests/s: ~{:.0} MiB (grows with live nonces; at most ~{:.0} MiB)",
                    v.retention_ms,
                    mib(live * 96.0),
                    mib(cap as f64 * 96.0)
                )
            }
        };
        if st.backend == super::state::Backend::Redis {
            report.push_str(&v.redis_sizing(total_rps));
        }
        report
    }

    /// The Redis side of the nonce store (`backend = "redis"`): in compact mode one set of
    /// bitmaps per app, each sized for the app's rate, plus the short-lived token keys that make
    /// a second send of a call recognise itself; in exact mode one key per live nonce.
    fn redis_sizing(&self, total_rps: u64) -> String {
        let st = &self.raw.state;
        let mib = |b: f64| b / (1024.0 * 1024.0);
        // A token key: ~60 B of name, its value and expiry, and Redis's per-key overhead.
        let token_keys = total_rps as f64 * (2.0 * st.redis_timeout_ms as f64 + 100.0) / 1000.0;
        match st.nonce_mode {
            NonceMode::Bloom => {
                let layouts: Vec<(&str, crate::redis_state::BloomLayout)> = self
                    .apps
                    .iter()
                    .map(|a| {
                        let l = crate::redis_state::BloomLayout::new(
                            &self.filter_for(&a.id),
                            st.bloom_shards,
                        );
                        (a.id.as_str(), l)
                    })
                    .collect();
                let total: u64 = layouts.iter().map(|(_, l)| l.memory_bytes()).sum();
                let mut s = format!(
                    "\n  in Redis (compact mode): {:.1} MiB of bitmaps for {} app(s) ({} shards per slice), \
                     plus ~{:.1} MiB of token keys (one per new nonce for 2 × redis_timeout_ms + 100 ms) \
                     at {total_rps} requests/s",
                    mib(total as f64),
                    layouts.len(),
                    st.bloom_shards,
                    mib(token_keys * TOKEN_KEY_BYTES),
                );
                for (id, l) in &layouts {
                    s.push_str(&format!(
                        "\n  in Redis, app {id}: {:.1} MiB ({} slices × {} shards × {} B, k = {})",
                        mib(l.memory_bytes() as f64),
                        l.live_slices(),
                        l.shards,
                        l.bytes_per_shard(),
                        l.k
                    ));
                }
                s
            }
            NonceMode::Exact => {
                let live = total_rps as f64 * self.retention_ms as f64 / 1000.0;
                format!(
                    "\n  in Redis (exact mode): ~{:.0} MiB at {total_rps} requests/s (~180 B per live nonce)",
                    mib(live * EXACT_KEY_BYTES)
                )
            }
        }
    }
}
