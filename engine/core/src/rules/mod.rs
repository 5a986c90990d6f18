//! The three-tier Rhai rule runtime (DESIGN §4).
//!
//! A rule is a Rhai script with a metadata header of `//! key: value` lines:
//!
//! ```text
//! //! name: scanner-user-agents
//! //! priority: 10
//! //! mode: enforce            (or shadow)
//! //! owner: secops
//! //! description: Known security scanners announce themselves in the user agent.
//! //! apps: shop, pay          (optional; default every app)
//! //! routes: /api/order/*     (optional; exact paths, or prefixes ending in *)
//! if contains_any("scanner_ua", req.user_agent) { deny("scanner user agent") }
//! ```
//!
//! The tier comes from the directory (`edge/`, `gateway/`, `business/`); lists come from
//! `lists/<name>.txt`. A [`RuleSet`] is compiled and validated as a whole — every script compiled
//! once, every failure reported with file, line and column — and published as one immutable
//! snapshot in [`LiveRules`] (`arc-swap`): a failed compile never replaces the live set.
//!
//! **Evaluation.** Per tier, the rules that apply to the request's app (indexed at compile time)
//! and route run in priority order against a typed request object `req` (getters over
//! `ImmutableString`s, not a map rebuilt per request). The first terminal action (`deny`,
//! `challenge`, `review`) wins; `allow()` ends the tier; `score(points, reason)` adds points that are
//! compared with the thresholds after the business tier. A rule in `shadow` mode runs but only
//! reports what it would have done. A rule that errors or hits a bound is counted and answered by
//! its tier's declared default (`Allow` = go on, `Deny` = deny with `RULE_DENY`).
//!
//! **Store failures** inside a helper (Redis unreachable, a local store full) are not rule errors:
//! they are answered by that store's declared policy ([`StorePolicies`]). `Deny` stops the decision
//! with `STORE_UNAVAILABLE` (from an enforced rule); `Allow` makes the helper answer its neutral
//! value (`rate_limit` → allowed, `count`/`distinct`/`reputation`/`claimed` → 0, `report` → nothing)
//! and marks the decision `degraded`. A bad argument from the rule itself stays a rule error.
//!
//! **Bounds** (each one stops a class of runaway script; none is reached by a sane rule):
//! - operations ≤ 20,000 — an infinite loop is cut off after ~100 µs instead of stalling a worker;
//! - call depth ≤ 8 and expression depth ≤ 32 (16 in functions) — no runaway recursion;
//! - strings ≤ 1 MiB, arrays and maps ≤ 1,024 entries — no unbounded growth (`s += s`);
//! - strict variables — a typo in a variable name is a compile error, not a runtime surprise.

pub mod lists;
mod precheck;

mod compile;
mod eval;
mod helpers;
mod lints;
mod live;
mod register;
mod request;
mod source;
mod state;
mod subject_keys;

pub use compile::{rule_sets_alive, RuleSet, RuleSettings};
pub use eval::{Outcome, RuleSession};
pub use helpers::{prefetched, PrefetchedGuard, HELPERS};
pub use live::LiveRules;
pub use request::{DecisionContext, Req, ReqData};
pub use source::{content_version, Mode, RuleError, RuleInfo, RuleMeta, Source};
pub use state::{
    ReputationPolicy, RuleState, QUOTA_POOL_TTL_MS, REPUTATION_KEY_PREFIX, REPUTATION_KINDS,
};
pub use subject_keys::{Keeps, SubjectKey};

#[cfg(test)]
mod tests {
    /// The interner's lock sleeps 10 ms when contended (see `build_engine`): it stays off.
    #[test]
    fn the_rule_engine_interns_no_strings() {
        let e = super::register::build_engine(Default::default(), None);
        assert_eq!(e.max_strings_interned(), 0);
    }

    /// The keys kept per thread between reads never carry one read's keys into the next.
    #[test]
    fn worst_reputation_reads_only_its_own_pairs() {
        let st = super::RuleState::local(1000);
        st.report("ip", "198.51.100.9", 40, 1_000).unwrap();
        st.report("user", "u1", 5, 1_000).unwrap();
        let read = |pairs: &[(&str, &str)]| st.worst_reputation(pairs, 2_000).unwrap();
        assert_eq!(read(&[("ip", "198.51.100.9"), ("user", "u1")]), 40);
        assert_eq!(read(&[("user", "u1")]), 5);
        assert_eq!(read(&[("ip", ""), ("user", "u2")]), 0);
        assert_eq!(read(&[]), 0);
        // Same text, other kind: another key.
        assert_eq!(read(&[("device", "198.51.100.9")]), 0);
        assert_eq!(st.reputation("ip", "198.51.100.9", 2_000).unwrap(), 40);
    }
}
