//! The anti-replay steps of the decision path, in order: signature, time window, nonce
//! de-duplication, duplicate-submission fingerprint. Each either goes on (`Continue`) with what
//! the next step needs, or ends the decision (`Break`) with its verdict.

use std::ops::ControlFlow::{self, Break, Continue};
use std::sync::Arc;

use crate::model::{Action, Code, DecideRequest, Reason, Step, Verdict};
use crate::policy::{AppPolicy, FailPolicy};
use crate::replay::canonical::{canonical_query, SignedFields};
use crate::replay::fingerprint::{canonical_json, fingerprint, Submission};
use crate::replay::nonce::{validate_nonce, NonceVerdict, Then};
use crate::rules::DecisionContext;
use crate::store::StoreError;

use super::Engine;

/// What the nonce step found besides freshness: whether the decision is degraded, the
/// fingerprint's answer when the store took it in the same step, and the answers of the rate
/// limits it spent with it (see `NonceStore::check_and_insert_limits`).
pub(super) type NonceAnswer = (
    bool,
    Option<Result<bool, StoreError>>,
    Vec<crate::store::limits::PlannedAnswer>,
);

impl Engine {
    /// Step 2, signature: the three anti-replay headers are there and some `x-signature` entry
    /// matches a key of the app that is active now (only the key `x-key-id` names, when it names
    /// one). Goes on with the raw `x-timestamp`, the nonce and the id of the key that matched.
    #[inline]
    pub(super) fn check_signature<'r>(
        &self,
        ctx: &DecisionContext<'r>,
        body_hash: &str,
    ) -> ControlFlow<Verdict, (&'r str, &'r str, Arc<str>)> {
        let app = ctx.app;
        let r = &ctx.request.request;
        let [ts, n, s, key_id] =
            r.headers_of(["x-timestamp", "x-nonce", "x-signature", "x-key-id"]);
        let (ts_raw, nonce, sig) = match (ts, n, s) {
            (Some(t), Some(n), Some(s)) => (t, n, s),
            (t, n, s) => {
                let missing: Vec<&str> = [("x-timestamp", t), ("x-nonce", n), ("x-signature", s)]
                    .into_iter()
                    .filter(|(_, v)| v.is_none())
                    .map(|(k, _)| k)
                    .collect();
                return Break(Verdict::reject(
                    Step::Signature,
                    Action::Deny,
                    Code::SignatureMissing,
                    "signature",
                    Reason::new(format!(
                        "missing anti-replay header(s): {}",
                        missing.join(", ")
                    )),
                ));
            }
        };
        // Warm the nonce filter's cache line now: the HMAC below takes long enough to hide the miss.
        self.prefetch_nonce(app, ts_raw, nonce);
        let fields = SignedFields {
            app: &app.id,
            method: &r.method,
            // The path as the client sent (and signed) it; every other step reads the normal form.
            path: r.signed_path(),
            query: &r.query,
            timestamp: ts_raw,
            nonce,
            body_sha256: body_hash,
        };
        // An empty `x-key-id` names no key (a proxy may pass the header through empty).
        let key_id = key_id
            .map(|k| k.trim_matches(' '))
            .filter(|k| !k.is_empty());
        let keys = app.keys.load();
        match keys.verify(&fields, sig, key_id, ctx.now_ms) {
            Ok(key) => {
                key.record_use(ctx.now_ms);
                Continue((ts_raw, nonce, key.id_arc().clone()))
            }
            Err(e) => Break(Verdict::reject(
                Step::Signature,
                Action::Deny,
                Code::SignatureInvalid,
                "signature",
                Reason::new(e.to_string()),
            )),
        }
    }

    /// Best-effort cache warm-up for the nonce step (no state is read or written).
    fn prefetch_nonce(&self, app: &AppPolicy, ts_raw: &str, nonce: &str) {
        if let Some(ts) = crate::replay::canonical::parse_timestamp(ts_raw) {
            self.nonces.prefetch(&app.id, nonce, ts);
        }
    }

    /// Step 3, time window: the timestamp is within the app's window, narrowed by every matching
    /// route. Goes on with the timestamp and its skew from server time.
    #[inline]
    pub(super) fn check_window(
        &self,
        ctx: &DecisionContext<'_>,
        ts_raw: &str,
    ) -> ControlFlow<Verdict, (i64, i64)> {
        let (app, now_ms) = (ctx.app, ctx.now_ms);
        let r = &ctx.request.request;
        let ts = match crate::replay::canonical::parse_timestamp(ts_raw) {
            Some(ts) => ts,
            None => {
                return Break(window_verdict(
                    now_ms,
                    "x-timestamp is not a Unix time in milliseconds".into(),
                    None,
                ))
            }
        };
        // Routes (the path is signed, so an attacker cannot pick one) may narrow the app's window.
        // Every matching route counts, not only the first: a broad entry listed before a
        // sensitive one (for its dedup settings) must not hide the sensitive route's window.
        let window_ms = self
            .routes
            .iter()
            .filter(|rt| rt.window_ms.is_some() && rt.matches(&app.id, &r.path))
            .filter_map(|rt| rt.window_ms)
            .fold(app.window_ms, i64::min);
        let skew = ts.saturating_sub(now_ms);
        if skew.unsigned_abs() > window_ms.unsigned_abs() {
            return Break(skew_verdict(now_ms, skew, window_ms));
        }
        Continue((ts, skew))
    }

    /// Step 4, nonce: the nonce is new for the app (the first write to shared state), with the
    /// fallback store consulted as configured. Goes on with whether the answer is degraded (a
    /// failed store was let through by its policy, or the fallback answered).
    #[inline]
    pub(super) fn check_nonce(
        &self,
        ctx: &DecisionContext<'_>,
        nonce: &str,
        ts: i64,
        skew: i64,
        then: Option<Then>,
        limits: &[crate::store::limits::Planned],
    ) -> ControlFlow<Verdict, NonceAnswer> {
        let (app, now_ms) = (ctx.app, ctx.now_ms);
        if let Err(msg) = validate_nonce(nonce) {
            return Break(Verdict::reject(
                Step::Nonce,
                Action::Deny,
                Code::NonceInvalid,
                "nonce",
                Reason::new(msg),
            ));
        }
        // The restart quarantine: a timestamp that could have been accepted before the nonce
        // store lost its records cannot be judged new.
        let from = self
            .judge_from_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if ts.saturating_sub(app.window_ms) < from {
            let mut v = Verdict::reject(
                Step::Nonce,
                Action::Deny,
                Code::StoreUnavailable,
                "nonce",
                Reason::new(format!(
                    "restart quarantine: this instance lost its nonce records at about {from} \
                     (Unix ms, an unclean stop); a request whose x-timestamp is before {} could \
                     have been accepted before it and cannot be judged; send it again with a \
                     fresh timestamp and nonce",
                    from.saturating_add(app.window_ms)
                )),
            );
            v.retry_after_ms = Some(
                from.saturating_add(app.window_ms)
                    .saturating_sub(now_ms)
                    .max(1) as u64,
            );
            return Break(v);
        }
        let mut degraded = false;
        // With a fingerprint to record, one step where the store can (one round trip); the
        // fingerprint's answer is then handed to the fingerprint step.
        let mut spent = Vec::new();
        let batched = match limits {
            [] => None,
            _ if self.fallback.is_some() => None,
            _ => self.nonces.check_and_insert_limits(
                &app.id,
                nonce,
                ts,
                app.window_ms,
                now_ms,
                then,
                limits,
            ),
        };
        let combined = match (batched, then) {
            (Some((c, answers)), _) => {
                spent = answers;
                Some(c)
            }
            (None, Some(t)) if self.fallback.is_none() => {
                self.nonces
                    .check_and_insert_then(&app.id, nonce, ts, app.window_ms, now_ms, t)
            }
            _ => None,
        };
        let (mut seen, fingerprint) = match combined {
            Some((seen, fp)) => (seen, fp),
            None => (
                self.nonces
                    .check_and_insert(&app.id, nonce, ts, app.window_ms, now_ms),
                None,
            ),
        };
        if let Some(fb) = &self.fallback {
            match &seen {
                // Write-through, so the local filter knows this instance's nonces when it is
                // needed. And it is asked: a nonce this instance accepted while the shared store
                // was away (or before the shared store restarted empty) is still a replay.
                Ok(NonceVerdict::Fresh) => {
                    if let Ok(NonceVerdict::Replay) =
                        fb.nonces
                            .check_and_insert(&app.id, nonce, ts, app.window_ms, now_ms)
                    {
                        seen = Ok(NonceVerdict::Replay);
                    }
                }
                Err(e)
                    if e.is_store_failure() && self.on_store_error.nonce == FailPolicy::Allow =>
                {
                    degraded = true;
                    seen = fb
                        .nonces
                        .check_and_insert(&app.id, nonce, ts, app.window_ms, now_ms);
                }
                _ => {}
            }
        }
        match seen {
            Ok(NonceVerdict::Fresh) => {}
            Ok(NonceVerdict::Replay) => {
                let mut v = Verdict::reject(
                    Step::Nonce,
                    Action::Deny,
                    Code::ReplayDuplicate,
                    "nonce",
                    Reason::new("this (app, x-nonce) was already used: replayed request"),
                );
                v.degraded = degraded;
                return Break(v);
            }
            Ok(NonceVerdict::OutOfRange) => {
                return Break(skew_verdict(now_ms, skew, app.window_ms));
            }
            Err(e) => match self.store_failure(self.on_store_error.nonce, Step::Nonce, "nonce", &e)
            {
                Some(v) => return Break(v),
                None => degraded = true,
            },
        }
        Continue((degraded, fingerprint, spent))
    }

    /// The duplicate-submission fingerprint the request records, if its route and method call for
    /// one and it names a user or a device: computed before the nonce step so that a store can
    /// take both in one step. Pure.
    pub(super) fn fingerprint_of(
        &self,
        ctx: &DecisionContext<'_>,
        body_hash: &str,
    ) -> Option<Then> {
        let (req, app) = (ctx.request, ctx.app);
        let r = &req.request;
        let route = self.route(&app.id, &r.path);
        let dedup = route.map(|r| &r.dedup).unwrap_or(&self.default_dedup);
        // Users and devices live in separate namespaces: user "x" is not device "x".
        let user = match (req.user_id.as_deref(), req.client.device_id.as_deref()) {
            (Some(u), _) if !u.is_empty() => format!("u:{u}"),
            (_, Some(d)) if !d.is_empty() => format!("d:{d}"),
            _ => return None,
        };
        let method = r.method.to_ascii_uppercase();
        if dedup.window_ms <= 0 || !dedup.methods.contains(&method) {
            return None;
        }
        let params = submission_params(req, body_hash, &dedup.volatile_fields);
        let query = canonical_query(&r.query);
        let fp = fingerprint(&Submission {
            app: &app.id,
            user: &user,
            method: &method,
            path: &r.path,
            canonical_query: &query,
            canonical_params: &params,
        });
        Some(Then {
            fingerprint: fp,
            window_ms: dedup.window_ms,
        })
    }

    /// Step 5, fingerprint: the same user (or device) has not sent the same submission to the
    /// route within its dedup window. `degraded` comes from the nonce step; goes on with it,
    /// updated.
    #[inline]
    pub(super) fn check_fingerprint(
        &self,
        ctx: &DecisionContext<'_>,
        then: Option<Then>,
        answered: Option<Result<bool, StoreError>>,
        mut degraded: bool,
    ) -> ControlFlow<Verdict, bool> {
        let (app, now_ms) = (ctx.app, ctx.now_ms);
        let Some(Then {
            fingerprint: fp,
            window_ms,
        }) = then
        else {
            return Continue(degraded);
        };
        let mut first = match answered {
            Some(a) => a,
            None => self
                .fingerprints
                .insert_if_absent(&app.id, fp, window_ms, now_ms),
        };
        if let Some(fb) = &self.fallback {
            match &first {
                Ok(true) => {
                    if let Ok(false) = fb
                        .fingerprints
                        .insert_if_absent(&app.id, fp, window_ms, now_ms)
                    {
                        first = Ok(false);
                    }
                }
                Err(e)
                    if e.is_store_failure()
                        && self.on_store_error.fingerprint == FailPolicy::Allow =>
                {
                    degraded = true;
                    first = fb
                        .fingerprints
                        .insert_if_absent(&app.id, fp, window_ms, now_ms);
                }
                _ => {}
            }
        }
        match first {
            Ok(true) => {}
            Ok(false) => {
                let mut v = Verdict::reject(
                    Step::Fingerprint,
                    Action::Deny,
                    Code::DuplicateSubmission,
                    "fingerprint",
                    Reason::new(format!("same user, route and params within {window_ms} ms")),
                );
                v.degraded = degraded;
                return Break(v);
            }
            Err(e) => match self.store_failure(
                self.on_store_error.fingerprint,
                Step::Fingerprint,
                "fingerprint",
                &e,
            ) {
                Some(v) => return Break(v),
                None => degraded = true,
            },
        }
        Continue(degraded)
    }
}

/// Strict Unix-ms parse: ASCII digits only (no sign, no spaces), at most 16 digits.
impl Engine {
    /// Records the single use of a verified solution in the fingerprint store (shared across
    /// instances in Redis mode) until the challenge expires: a second use is `CHALLENGE_FAILED`
    /// (`reused`). A failing store follows the fingerprint step's policy.
    pub(super) fn consume_solution(
        &self,
        ctx: &DecisionContext<'_>,
        s: &crate::challenge::Solved,
    ) -> ControlFlow<Verdict, ()> {
        let fp = {
            use sha2::Digest;
            let d = sha2::Sha256::new()
                .chain_update(b"rampart-pow-used\0")
                .chain_update(s.id.as_bytes())
                .finalize();
            u128::from_be_bytes(d[..16].try_into().expect("16 bytes"))
        };
        let ttl = (s.expires_ms - ctx.now_ms).max(1);
        match self
            .fingerprints
            .insert_if_absent(&ctx.request.app, fp, ttl, ctx.now_ms)
        {
            Ok(true) => Continue(()),
            Ok(false) => Break(super::challenge_failed(
                Step::Nonce,
                crate::challenge::Failure::Reused,
                true,
            )),
            Err(e) => match self.store_failure(
                self.on_store_error.fingerprint,
                Step::Fingerprint,
                "fingerprint",
                &e,
            ) {
                Some(v) => Break(v),
                None => Continue(()),
            },
        }
    }
}

fn skew_verdict(now_ms: i64, skew: i64, window_ms: i64) -> Verdict {
    window_verdict(
        now_ms,
        format!(
            "x-timestamp is {} ms {} server time; the window is ±{window_ms} ms",
            skew.unsigned_abs(),
            if skew > 0 { "ahead of" } else { "behind" }
        ),
        Some(skew),
    )
}

/// `TIMESTAMP_SKEW`, with the server time (and the skew, when the timestamp parsed) for the
/// caller to correct its clock.
fn window_verdict(now_ms: i64, message: String, skew: Option<i64>) -> Verdict {
    let mut v = Verdict::reject(
        Step::Window,
        Action::Deny,
        Code::TimestampSkew,
        "window",
        Reason {
            message,
            server_time_ms: Some(now_ms),
            skew_ms: skew,
        },
    );
    v.server_time_ms = Some(now_ms);
    v.skew_ms = skew;
    v
}

/// The params of a submission: `params` when given, else the body when it is JSON, else the body
/// hash.
fn submission_params(req: &DecideRequest, body_hash: &str, volatile: &[String]) -> String {
    if let Some(p) = &req.params {
        return canonical_json(p, volatile);
    }
    if let Some(body) = &req.request.body {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(body) {
            return canonical_json(&v, volatile);
        }
    }
    format!("sha256:{body_hash}")
}
