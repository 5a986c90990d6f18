//! The Rhai engine a rule set runs on: bounds, the `req` type, every native helper registered once.

use super::eval::Outcome;
use super::helpers::{
    call_id, count, count_ip, distinct, rate_limit, rate_limit_ip, replayed, reputation,
    reputation_kind, reputation_of_request, Counting,
};
use super::lists::{IpList, StringList};
use super::request::{waf_value, Req};
use super::state::{by_policy, RuleState, CHALLENGE_DIFFICULTY, EVAL_NOW, IN_SHADOW};
use crate::model::{Action, Code};
use rhai::{EvalAltResult, ImmutableString, Position};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(super) fn next_set_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Named lists of a rule set.
#[derive(Debug, Default)]
pub(super) struct Lists {
    pub(super) ips: HashMap<String, IpList>,
    pub(super) strings: HashMap<String, StringList>,
}

impl Lists {
    /// `in_list`: `None` when there is no such string list.
    pub(super) fn in_list(&self, list: &str, value: &str) -> Option<bool> {
        self.strings.get(list).map(|s| s.contains(value))
    }

    /// `contains_any`: `None` when there is no such string list.
    pub(super) fn contains_any(&self, list: &str, value: &str) -> Option<bool> {
        self.strings.get(list).map(|s| s.contains_any(value))
    }

    /// `ip_in`: `None` when there is no such IP list.
    pub(super) fn ip_in(&self, list: &str, ip: &str) -> Option<bool> {
        self.ips.get(list).map(|s| s.contains_str(ip))
    }
}

pub(super) type RhaiResult<T> = Result<T, Box<EvalAltResult>>;

pub(super) fn rt_err(msg: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(msg.into(), Position::NONE))
}

pub(super) fn code_from_str(s: &str) -> Option<Code> {
    Code::ALL.into_iter().find(|c| c.as_str() == s)
}

pub(super) fn build_engine(lists: Arc<Lists>, state: Option<RuleState>) -> rhai::Engine {
    let full_state = state.clone();
    let mut e = rhai::Engine::new();
    e.set_max_operations(20_000)
        .set_max_call_levels(8)
        .set_max_expr_depths(32, 16)
        .set_max_string_size(1 << 20)
        .set_max_array_size(1024)
        .set_max_map_size(1024)
        .set_strict_variables(true)
        // Rhai's string interner is one lock for the whole engine, and with `sync` a thread that
        // finds it taken sleeps 10 ms before trying again: two workers judging at once stalled
        // each other, one decision in a hundred taking 10 ms. Interning saves a few allocations.
        .set_max_strings_interned(0);
    e.on_print(|_| {}).on_debug(|_, _, _| {});

    e.register_type_with_name::<Req>("Request");
    // One table of getters for Rhai and the pre-check.
    for (name, get) in super::precheck::FIELDS {
        e.register_get(name, move |r: &mut Req| -> ImmutableString {
            get(r).into()
        });
    }
    e.register_get("cleared", |r: &mut Req| r.cleared());
    e.register_fn("header", |r: &mut Req, name: &str| -> ImmutableString {
        r.header(name).into()
    })
    .register_fn("param", |r: &mut Req, name: &str| r.param(name));

    e.register_type_with_name::<Outcome>("Outcome");
    e.register_fn("allow", || Outcome::Allow);
    e.register_fn("deny", |reason: &str| Outcome::Terminal {
        action: Action::Deny,
        code: Code::RuleDeny,
        reason: reason.to_string(),
    });
    e.register_fn("deny", |code: &str, reason: &str| -> RhaiResult<Outcome> {
        let code = code_from_str(code)
            .filter(|c| !matches!(c, Code::Ok | Code::RuleChallenge | Code::RuleReview))
            .ok_or_else(|| rt_err(format!("deny: {code:?} is not a deny code")))?;
        Ok(Outcome::Terminal {
            action: Action::Deny,
            code,
            reason: reason.to_string(),
        })
    });
    e.register_fn("challenge", |reason: &str| {
        CHALLENGE_DIFFICULTY.with(|d| d.set(0));
        Outcome::Terminal {
            action: Action::Challenge,
            code: Code::RuleChallenge,
            reason: reason.to_string(),
        }
    });
    e.register_fn(
        "challenge",
        |reason: &str, opts: rhai::Map| -> RhaiResult<Outcome> {
            let mut difficulty = 0;
            for (k, v) in opts {
                match (k.as_str(), v.as_int()) {
                    ("difficulty", Ok(n))
                        if (1..=crate::challenge::MAX_DIFFICULTY as i64).contains(&n) =>
                    {
                        difficulty = n as u8
                    }
                    ("difficulty", _) => {
                        return Err(rt_err(format!(
                            "challenge: difficulty must be an integer from 1 to {}",
                            crate::challenge::MAX_DIFFICULTY
                        )))
                    }
                    (k, _) => return Err(rt_err(format!("challenge: unknown setting {k:?}"))),
                }
            }
            CHALLENGE_DIFFICULTY.with(|d| d.set(difficulty));
            Ok(Outcome::Terminal {
                action: Action::Challenge,
                code: Code::RuleChallenge,
                reason: reason.to_string(),
            })
        },
    );
    e.register_fn("review", |reason: &str| Outcome::Terminal {
        action: Action::Review,
        code: Code::RuleReview,
        reason: reason.to_string(),
    });
    e.register_fn("score", |points: i64, reason: &str| Outcome::Score {
        points,
        reason: reason.to_string(),
    });

    let l = lists.clone();
    e.register_fn(
        "in_list",
        move |list: &str, value: &str| -> RhaiResult<bool> {
            l.in_list(list, value)
                .ok_or_else(|| rt_err(format!("in_list: no string list {list:?}")))
        },
    );
    let l = lists.clone();
    e.register_fn(
        "contains_any",
        move |list: &str, value: &str| -> RhaiResult<bool> {
            l.contains_any(list, value)
                .ok_or_else(|| rt_err(format!("contains_any: no string list {list:?}")))
        },
    );
    let l = lists;
    e.register_fn("ip_in", move |list: &str, ip: &str| -> RhaiResult<bool> {
        l.ip_in(list, ip)
            .ok_or_else(|| rt_err(format!("ip_in: no IP list {list:?}")))
    });

    e.register_fn("waf", |r: &mut Req| -> ImmutableString {
        r.waf_name().into()
    });
    let crs = full_state.as_ref().and_then(|s| s.crs.clone());
    let c = crs.clone();
    e.register_fn("crs", move |r: &mut Req| -> ImmutableString {
        r.crs_name(c.as_deref()).into()
    });
    let c = crs.clone();
    e.register_fn("crs_rules", move |r: &mut Req| -> ImmutableString {
        r.crs(c.as_deref()).rule_list().into()
    });
    let c = crs;
    e.register_fn("crs_score", move |r: &mut Req| -> i64 {
        r.crs(c.as_deref()).score
    });
    e.register_fn("waf_part", |r: &mut Req| -> ImmutableString {
        r.waf_part().into()
    });
    e.register_fn("waf_value", |v: &str| -> ImmutableString {
        waf_value(v).into()
    });

    let breakers = state.as_ref().map(|s| s.breakers.clone());
    e.register_fn(
        "circuit_open",
        move |r: &mut Req, cfg: rhai::Map| -> RhaiResult<bool> {
            let b = breakers
                .as_ref()
                .ok_or_else(|| rt_err("circuit_open: no breaker state".into()))?;
            let d = crate::store::breaker::BreakerConfig::default();
            let num = |k: &str, dflt: f64| -> RhaiResult<f64> {
                match cfg.get(k) {
                    None => Ok(dflt),
                    Some(v) => v
                        .as_float()
                        .or_else(|_| v.as_int().map(|i| i as f64))
                        .map_err(|_| rt_err(format!("circuit_open: {k} must be a number"))),
                }
            };
            for k in cfg.keys() {
                if ![
                    "window_ms",
                    "min_requests",
                    "error_ratio",
                    "slow_ms",
                    "slow_ratio",
                    "open_ms",
                ]
                .contains(&k.as_str())
                {
                    return Err(rt_err(format!("circuit_open: unknown setting {k:?}")));
                }
            }
            let c = crate::store::breaker::BreakerConfig {
                window_ms: num("window_ms", d.window_ms as f64)?.max(1.0) as i64,
                min_requests: num("min_requests", d.min_requests as f64)?.max(1.0) as u64,
                error_ratio: num("error_ratio", d.error_ratio)?,
                slow_ms: num("slow_ms", d.slow_ms as f64)?.max(0.0) as u64,
                slow_ratio: num("slow_ratio", d.slow_ratio)?,
                open_ms: num("open_ms", d.open_ms as f64)?.max(1.0) as i64,
            };
            let key = crate::store::breaker::breaker_key(r.app(), r.path());
            Ok(!b.allow(&key, EVAL_NOW.with(|n| n.get()), c))
        },
    );

    // The counting helpers: one definition each (below), which the pre-check calls too; what it
    // already asked is answered from its record (`replayed`), never asked twice.
    let st = state.clone();
    e.register_fn("rate_limit", move |key: &str, rate: i64, burst: i64| {
        let rate = rate as f64;
        replayed(
            Counting::RateLimit,
            || call_id(key, "", [rate, burst as f64]),
            || rate_limit(st.as_ref(), key, rate, burst).map(i64::from),
        )
        .map(|allowed| allowed != 0)
    });
    let st = state.clone();
    e.register_fn("rate_limit", move |key: &str, rate: f64, burst: i64| {
        replayed(
            Counting::RateLimit,
            || call_id(key, "", [rate, burst as f64]),
            || rate_limit(st.as_ref(), key, rate, burst).map(i64::from),
        )
        .map(|allowed| allowed != 0)
    });
    let st = state.clone();
    e.register_fn(
        "rate_limit_ip",
        move |r: &mut Req, rate: i64, burst: i64| -> RhaiResult<bool> {
            rate_limit_ip(st.as_ref(), r, rate as f64, burst)
        },
    );
    let st = state.clone();
    e.register_fn(
        "rate_limit_ip",
        move |r: &mut Req, rate: f64, burst: i64| -> RhaiResult<bool> {
            rate_limit_ip(st.as_ref(), r, rate, burst)
        },
    );
    let st = state.clone();
    e.register_fn(
        "count_ip",
        move |r: &mut Req, window_ms: i64| -> RhaiResult<i64> {
            count_ip(st.as_ref(), r, window_ms)
        },
    );
    let st = state;
    e.register_fn("count", move |key: &str, window_ms: i64| {
        replayed(
            Counting::Count,
            || call_id(key, "", [window_ms as f64, 0.0]),
            || count(st.as_ref(), key, window_ms),
        )
    });
    if let Some(st) = full_state {
        register_state_helpers(&mut e, st);
    }
    e
}

pub(super) fn register_state_helpers(e: &mut rhai::Engine, st: RuleState) {
    let now = || EVAL_NOW.with(|n| n.get());
    let s = st.clone();
    e.register_fn("distinct", move |key: &str, item: &str, window_ms: i64| {
        replayed(
            Counting::Distinct,
            || call_id(key, item, [window_ms as f64, 0.0]),
            || distinct(&s, key, item, window_ms),
        )
    });
    let s = st.clone();
    e.register_fn(
        "claim",
        move |pool: &str, user: &str, stock: i64| -> RhaiResult<ImmutableString> {
            super::helpers::refuse_at_edge("claim")?;
            let stock =
                u64::try_from(stock).map_err(|_| rt_err("claim: stock must be ≥ 0".into()))?;
            let c = if IN_SHADOW.with(|f| f.get()) {
                s.quotas.peek(pool, user, stock)
            } else {
                s.quotas.claim(pool, user, stock, now())
            };
            // A claim that cannot be recorded is never granted: `exhausted` is the neutral answer.
            by_policy(
                "claim",
                "quotas",
                s.policies.quotas,
                c,
                crate::store::quota::Claim::Exhausted,
            )
            .map(|c| c.as_str().into())
        },
    );
    let s = st.clone();
    e.register_fn("claimed", move |pool: &str| -> RhaiResult<i64> {
        by_policy(
            "claimed",
            "quotas",
            s.policies.quotas,
            s.quotas.claimed(pool),
            0,
        )
        .map(|n| n as i64)
    });
    let s = st.clone();
    e.register_fn("reputation", move |kind: &str, value: &str| {
        replayed(
            Counting::Reputation,
            || call_id(kind, value, [0.0, 0.0]),
            || reputation(&s, kind, value),
        )
    });
    let s = st.clone();
    e.register_fn("reputation", move |r: &mut Req| {
        replayed(
            Counting::ReputationOfRequest,
            || call_id("", "", [0.0, 0.0]),
            || reputation_of_request(&s, r),
        )
    });
    let s = st;
    e.register_fn(
        "report",
        move |kind: &str, value: &str, points: i64| -> RhaiResult<()> {
            reputation_kind("report", kind)?;
            super::helpers::refuse_at_edge("report")?;
            if IN_SHADOW.with(|f| f.get()) {
                return Ok(());
            }
            by_policy(
                "report",
                "reputation",
                s.policies.reputation,
                s.report(kind, value, points, now()),
                (),
            )
        },
    );
}
