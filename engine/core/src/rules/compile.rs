//! Compiling and validating a whole rule set into one immutable snapshot, indexed by tier and app.

use super::lints::{
    always_terminal, edge_writes, unknown_calls, unknown_lists, unknown_properties,
    unreachable_rules,
};
use super::lists::{list_entries, IpList, StringList};
use super::register::{build_engine, next_set_id, Lists};
use super::request::Req;
use super::source::{content_version, meta_error, parse_meta, Rule, RuleError, RuleInfo, Source};
use super::state::RuleState;
use crate::policy::{FailPolicy, Tier};
use rhai::Scope;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Settings of a rule set that come from the engine's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSettings {
    /// What a rule error means, per tier (edge, gateway, business).
    pub on_error: [FailPolicy; 3],
    pub challenge_score: i64,
    pub review_score: i64,
    pub deny_score: i64,
}

impl Default for RuleSettings {
    fn default() -> Self {
        RuleSettings {
            on_error: [FailPolicy::Allow, FailPolicy::Allow, FailPolicy::Allow],
            challenge_score: 40,
            review_score: 70,
            deny_score: 100,
        }
    }
}

pub(super) struct TierIndex {
    pub(super) rules: Vec<Rule>,
    /// Indices (in priority order) of the rules for each app named by some rule's `apps`.
    pub(super) by_app: HashMap<String, Vec<usize>>,
    /// Indices of the rules without an `apps` scope (for every other app).
    pub(super) any_app: Vec<usize>,
}

impl TierIndex {
    pub(super) fn build(mut rules: Vec<Rule>) -> TierIndex {
        rules.sort_by(|a, b| {
            a.meta
                .priority
                .cmp(&b.meta.priority)
                .then_with(|| a.meta.name.cmp(&b.meta.name))
        });
        let any_app: Vec<usize> = (0..rules.len())
            .filter(|i| rules[*i].meta.apps.is_none())
            .collect();
        let mut by_app: HashMap<String, Vec<usize>> = HashMap::new();
        for r in &rules {
            for app in r.meta.apps.iter().flatten() {
                by_app.entry(app.clone()).or_default();
            }
        }
        for (app, idx) in by_app.iter_mut() {
            *idx = (0..rules.len())
                .filter(|i| {
                    rules[*i]
                        .meta
                        .apps
                        .as_ref()
                        .is_none_or(|apps| apps.iter().any(|a| a == app))
                })
                .collect();
        }
        TierIndex {
            rules,
            by_app,
            any_app,
        }
    }

    pub(super) fn for_app(&self, app: &str) -> &[usize] {
        self.by_app.get(app).unwrap_or(&self.any_app)
    }
}

/// A compiled, validated, immutable rule set.
pub struct RuleSet {
    /// Unique per compiled set in this process (keys the per-thread resolution cache).
    pub(super) id: u64,
    pub(super) version: String,
    pub(super) engine: rhai::Engine,
    /// The lists the helpers read (also read by the rules' pre-checks).
    pub(super) lists: Arc<Lists>,
    pub(super) state: Option<RuleState>,
    pub(super) tiers: [TierIndex; 3],
    pub(super) settings: RuleSettings,
    pub(super) counts: SetCounts,
}

/// Adds the evaluations it counted to the set's counter when the tier ends, however it ends.
pub(super) struct Tally<'a>(pub(super) &'a AtomicU64, pub(super) u64);

/// The set's evaluation and error counters, written by every worker, on a cache line of their own:
/// next to the read-mostly fields (the engine, the lists) they would make every rule's reads of
/// those miss on the other cores.
#[derive(Default)]
#[repr(align(128))]
pub(super) struct SetCounts {
    pub(super) evaluations: AtomicU64,
    pub(super) errors: AtomicU64,
    _alive: Alive,
}

/// Compiled rule sets in this process (the live one, rollout arms, caches, decisions in flight).
static ALIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts its [`RuleSet`] in [`ALIVE`] from compilation to drop.
struct Alive;

impl Default for Alive {
    fn default() -> Self {
        ALIVE.fetch_add(1, Ordering::Relaxed);
        Alive
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        ALIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// How many compiled rule sets this process holds now (the `rampart_rulesets_alive` gauge): a
/// set is about a MiB, so anything that keeps sets must bound how many.
pub fn rule_sets_alive() -> usize {
    ALIVE.load(Ordering::Relaxed)
}

impl std::fmt::Debug for RuleSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleSet")
            .field("version", &self.version)
            .field("rules", &self.rule_count())
            .finish()
    }
}

impl RuleSet {
    /// The empty rule set: every tier passes.
    pub fn empty(settings: RuleSettings) -> RuleSet {
        let lists = Arc::new(Lists::default());
        RuleSet {
            id: next_set_id(),
            version: "none".into(),
            engine: build_engine(lists.clone(), None),
            lists,
            state: None,
            tiers: [
                TierIndex::build(Vec::new()),
                TierIndex::build(Vec::new()),
                TierIndex::build(Vec::new()),
            ],
            settings,
            counts: SetCounts::default(),
        }
    }

    /// Compiles and validates a whole rule set. Returns every failure, located, or the set.
    pub fn compile(
        sources: &[Source],
        settings: RuleSettings,
        state: &RuleState,
    ) -> Result<RuleSet, Vec<RuleError>> {
        let mut errs = Vec::new();
        let mut sorted: Vec<&Source> = sources.iter().collect();
        sorted.sort_by(|a, b| a.path.cmp(&b.path));

        let version = content_version(sources);

        // Lists first: rules refer to them.
        let mut lists = Lists::default();
        for s in sorted.iter().filter(|s| s.path.starts_with("lists/")) {
            let file = s.path.trim_start_matches("lists/");
            let Some((name, kind)) = file.rsplit_once('.') else {
                errs.push(meta_error(
                    &s.path,
                    1,
                    "list files are lists/<name>.txt or lists/<name>.ips",
                ));
                continue;
            };
            match kind {
                "txt" => {
                    lists.strings.insert(
                        name.to_string(),
                        StringList::from_entries(list_entries(&s.text)),
                    );
                }
                "ips" => match IpList::from_entries(list_entries(&s.text)) {
                    Ok(l) => {
                        lists.ips.insert(name.to_string(), l);
                    }
                    Err(e) => {
                        let line = s
                            .text
                            .lines()
                            .position(|l| l.contains(e.split('"').nth(1).unwrap_or("\u{0}")))
                            .map(|p| p + 1)
                            .unwrap_or(1);
                        errs.push(meta_error(&s.path, line, e));
                    }
                },
                _ => errs.push(meta_error(
                    &s.path,
                    1,
                    "list files end in .txt (strings) or .ips (IP/CIDR)",
                )),
            }
        }
        let lists = Arc::new(lists);
        let engine = build_engine(lists.clone(), Some(state.clone()));

        let mut per_tier: [Vec<Rule>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        let mut names: HashMap<String, String> = HashMap::new();
        for s in sorted.iter().filter(|s| s.path.ends_with(".rhai")) {
            let tier = s.path.split('/').next().and_then(Tier::from_dir);
            let Some(tier) = tier.filter(|_| s.path.matches('/').count() >= 1) else {
                errs.push(meta_error(
                    &s.path,
                    1,
                    "rules live in edge/, gateway/ or business/",
                ));
                continue;
            };
            let meta = parse_meta(s, tier, &mut errs);
            let mut compile_scope = Scope::new();
            // A variable, not a constant: the optimiser folds constants into the AST, and would
            // evaluate helpers such as `waf(req)` once, at compile time, on an empty request.
            // (At run time `req` is a constant, so a rule cannot reassign it.)
            compile_scope.push("req", Req::default());
            let ast = match engine.compile_with_scope(&compile_scope, &s.text) {
                Ok(ast) => Some(ast),
                Err(e) => {
                    let p = e.position();
                    errs.push(RuleError {
                        file: s.path.clone(),
                        line: p.line().unwrap_or(1),
                        column: p.position().unwrap_or(1),
                        message: e.err_type().to_string(),
                    });
                    None
                }
            };
            errs.extend(unknown_calls(s, &engine));
            errs.extend(unknown_properties(s, &super::precheck::FIELD_NAMES));
            errs.extend(unknown_lists(s, &|name| {
                lists.strings.contains_key(name) || lists.ips.contains_key(name)
            }));
            if tier == Tier::Edge {
                errs.extend(edge_writes(s));
            }
            if let (Some(meta), Some(ast)) = (meta, ast) {
                if let Some(first) = names.insert(meta.name.clone(), s.path.clone()) {
                    errs.push(meta_error(
                        &s.path,
                        1,
                        format!("duplicate rule name {:?} (also in {first})", meta.name),
                    ));
                    continue;
                }
                per_tier[tier.index()].push(Rule {
                    id: xxhash_rust::xxh3::xxh3_64(meta.name.as_bytes()),
                    meta,
                    always_terminal: always_terminal(&s.text),
                    precheck: super::precheck::Precheck::compile(&ast),
                    ast,
                    errors: AtomicU64::new(0),
                    hits: AtomicU64::new(0),
                });
            }
        }
        for s in sorted.iter() {
            if !s.path.ends_with(".rhai")
                && !s.path.starts_with("lists/")
                && !s.path.ends_with(".md")
            {
                errs.push(meta_error(&s.path, 1, "unexpected file in the rule set"));
            }
        }
        for rules in per_tier.iter_mut() {
            errs.extend(unreachable_rules(rules));
        }
        if !errs.is_empty() {
            errs.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
            errs.dedup();
            return Err(errs);
        }
        let [e, g, b] = per_tier;
        Ok(RuleSet {
            id: next_set_id(),
            version,
            engine,
            lists,
            state: Some(state.clone()),
            tiers: [
                TierIndex::build(e),
                TierIndex::build(g),
                TierIndex::build(b),
            ],
            settings,
            counts: SetCounts::default(),
        })
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    /// The engine-wide state the set's helpers use (none for the empty set).
    pub fn state(&self) -> Option<&RuleState> {
        self.state.as_ref()
    }

    pub fn rule_count(&self) -> usize {
        self.tiers.iter().map(|t| t.rules.len()).sum()
    }

    pub fn settings(&self) -> &RuleSettings {
        &self.settings
    }

    /// Rule metadata and counters, in tier and priority order.
    pub fn rules(&self) -> Vec<RuleInfo> {
        self.tiers
            .iter()
            .flat_map(|t| t.rules.iter())
            .map(|r| RuleInfo {
                meta: r.meta.clone(),
                hits: r.hits.load(Ordering::Relaxed),
                errors: r.errors.load(Ordering::Relaxed),
            })
            .collect()
    }

    /// The rate limits, counters and distinct sets this set keys by a request field
    /// (`rate_limit("ip:" + req.ip, 20, 40)`), in tier and priority order.
    pub fn subject_keys(&self) -> Vec<super::SubjectKey> {
        let mut out = Vec::new();
        for r in self.tiers.iter().flat_map(|t| t.rules.iter()) {
            super::subject_keys::find(&r.meta.name, &r.ast, &mut out);
        }
        out
    }

    /// Total rule evaluations and errors (errors include bound violations).
    pub fn counters(&self) -> (u64, u64) {
        (
            self.counts.evaluations.load(Ordering::Relaxed),
            self.counts.errors.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        if self.1 > 0 {
            self.0.fetch_add(self.1, Ordering::Relaxed);
        }
    }
}
