//! Specialising a compiled set to its configuration, once at load.
//!
//! A CRS request runs ~190 rules, most of which read nothing of the request: the initialisation
//! rules that set TX defaults (`&TX:paranoia_level "@eq 0"` → `setvar`), and the paranoia-level
//! gates (`TX:EXECUTING_PARANOIA_LEVEL "@lt 2"` → `skipAfter`). Their outcome is the same for
//! every request, so they are evaluated here, in order, against the TX state of the rules before
//! them: the values they set become the transaction's initial TX, the rules a gate always skips
//! are removed, and the gates themselves go. Macros of runtime rules that name such a constant
//! (`%{tx.critical_anomaly_score}`) are replaced by its value.
//!
//! A rule is folded only where the result cannot differ from running it:
//! - it reads only TX keys (by name, or their count) and writes only TX, with no `ctl` and no
//!   disruptive action;
//! - no rule left to run time before it (in evaluation order) writes a key it reads or writes,
//!   can skip over it (`skipAfter`/`skip`), or remove it (`ctl:ruleRemoveById`/`ByTag`).
//!
//! A runtime rule that stops the transaction (`deny`, `allow`, `ctl:ruleEngine=Off`) does not
//! keep later rules from folding: a stopped transaction runs nothing after the stop, and what it
//! reports (the rules that matched, the stop) does not depend on TX values set after it.
//!
//! A key counts as written by a `setvar` whose name has macros if it could be that name
//! (`tx.rfi_parameter_%{MATCHED_VAR_NAME}` writes any key starting `rfi_parameter_`;
//! `tx.%{rule.id}-…` any key starting with a digit).

use std::collections::{HashMap, HashSet};

use crate::compile::{Ctl, Disruptive, Item, Rule, SetVar};
use crate::ops::{Op, Param, Part};
use crate::vars::{Selector, Var};
use crate::Ruleset;

/// TX keys a set of rules may write.
#[derive(Default)]
struct Written {
    keys: HashSet<Vec<u8>>,
    /// (literal prefix, next char is a digit)
    prefixes: Vec<(Vec<u8>, bool)>,
    any: bool,
}

impl Written {
    fn add(&mut self, name: &Param) {
        match name.literal() {
            Some(l) => {
                self.keys.insert(strip_tx(&l));
            }
            None => {
                let mut prefix = Vec::new();
                let mut digit = false;
                for p in &name.parts {
                    match p {
                        Part::Lit(l) => prefix.extend_from_slice(l),
                        Part::Macro(c, k) => {
                            digit = c == "rule" && k.as_deref() == Some("id");
                            break;
                        }
                    }
                }
                let prefix = strip_tx(&prefix);
                if prefix.is_empty() && !digit {
                    self.any = true;
                } else {
                    self.prefixes.push((prefix, digit));
                }
            }
        }
    }

    fn rule(&mut self, r: &Rule) {
        let mut m = Some(r);
        while let Some(x) = m {
            for s in &x.setvars {
                match s {
                    SetVar::Set(n, _) | SetVar::Add(n, _) | SetVar::Sub(n, _) | SetVar::Del(n) => {
                        self.add(n)
                    }
                }
            }
            if x.capture {
                for d in 0..10u8 {
                    self.keys.insert(vec![b'0' + d]);
                }
            }
            m = x.chain.as_deref();
        }
    }

    fn has(&self, k: &[u8]) -> bool {
        self.any
            || self.keys.contains(k)
            || self.prefixes.iter().any(|(p, digit)| {
                k.starts_with(p) && (!digit || k.get(p.len()).is_some_and(u8::is_ascii_digit))
            })
    }
}

fn strip_tx(n: &[u8]) -> Vec<u8> {
    let n = n.to_ascii_lowercase();
    match n.strip_prefix(b"tx.") {
        Some(k) => k.to_vec(),
        None => n,
    }
}

/// The TX keys a rule (with its chain) reads, or None if it reads anything but TX by name.
fn reads(r: &Rule) -> Option<Vec<Vec<u8>>> {
    reads_members(r, true)
}

/// The same for the chain's starter alone (its condition, not its actions).
fn reads_starter(r: &Rule) -> Option<Vec<Vec<u8>>> {
    reads_members(r, false)
}

fn reads_members(r: &Rule, whole: bool) -> Option<Vec<Vec<u8>>> {
    let mut keys = Vec::new();
    let param = |p: &Param, keys: &mut Vec<Vec<u8>>| -> bool {
        for part in &p.parts {
            if let Part::Macro(c, k) = part {
                match (c.as_str(), k) {
                    ("tx", Some(k)) => keys.push(k.as_bytes().to_vec()),
                    _ => return false,
                }
            }
        }
        true
    };
    let mut m = Some(r);
    while let Some(x) = m {
        for t in &x.targets {
            match (&t.var, &t.selector) {
                (Var::Tx, Selector::Key(k)) => keys.push(k.clone()),
                _ => return None,
            }
        }
        let ok = match &x.op {
            Op::Str(_, p) | Op::Num(_, p) => param(p, &mut keys),
            Op::RxMacro(..) => false,
            _ => true,
        };
        if !ok {
            return None;
        }
        if !whole {
            return Some(keys);
        }
        for s in &x.setvars {
            let ok = match s {
                SetVar::Set(n, v) | SetVar::Add(n, v) | SetVar::Sub(n, v) => {
                    n.literal().is_some() && param(v, &mut keys)
                }
                SetVar::Del(n) => n.literal().is_some(),
            };
            if !ok {
                return None;
            }
        }
        if x.ctls.iter().any(|c| !matches!(c, Ctl::Ignored)) {
            return None;
        }
        m = x.chain.as_deref();
    }
    Some(keys)
}

/// What runtime rules seen so far could do to the rules after them.
#[derive(Default)]
struct Before {
    written: Written,
    /// Jumps of runtime rules not yet landed in this phase: `skipAfter` targets, and the rules
    /// left to skip of the longest `skip`.
    targets: Vec<String>,
    skip: u32,
    removed_ids: Vec<(u32, u32)>,
    removed_tags: Vec<String>,
}

impl Before {
    /// Passing item `it` of the phase: jumps that land there are closed.
    fn pass(&mut self, it: &Item) {
        match it {
            Item::Marker(m) => self.targets.retain(|t| t != m),
            Item::Rule(r) => {
                let id = r.id.to_string();
                self.targets.retain(|t| *t != id);
                self.skip = self.skip.saturating_sub(1);
            }
        }
    }

    fn new_phase(&mut self) {
        self.targets.clear();
        self.skip = 0;
    }

    fn runtime(&mut self, r: &Rule) {
        self.written.rule(r);
        let mut m = Some(r);
        while let Some(x) = m {
            if let Some(t) = &x.skip_after {
                self.targets.push(t.clone());
            }
            self.skip = self.skip.max(x.skip);

            for c in &x.ctls {
                match c {
                    Ctl::RemoveById(ids) => self.removed_ids.extend(ids.iter().copied()),
                    Ctl::RemoveByTag(t) => self.removed_tags.push(t.clone()),
                    _ => {}
                }
            }
            m = x.chain.as_deref();
        }
    }

    fn starter_foldable(&self, r: &Rule) -> bool {
        if !self.targets.is_empty() || self.skip > 0 {
            return false;
        }
        reads_starter(r).is_some_and(|keys| keys.iter().all(|k| !self.written.has(k)))
    }

    fn foldable(&self, r: &Rule) -> bool {
        if !self.targets.is_empty()
            || self.skip > 0
            || self
                .removed_ids
                .iter()
                .any(|&(a, b)| r.id >= a && r.id <= b)
            || self.removed_tags.iter().any(|t| r.tags.contains(t))
        {
            return false;
        }
        let Some(keys) = reads(r) else { return false };
        let mut w = Written::default();
        w.rule(r);
        keys.iter()
            .chain(w.keys.iter())
            .all(|k| !self.written.has(k))
            && w.prefixes.is_empty()
            && !w.any
    }
}

/// Folds what can be folded (see the module docs). Returns the number of rules removed.
pub(crate) fn specialize(rs: &mut Ruleset) -> usize {
    let mut before = Before::default();
    let mut dead: [Vec<bool>; 2] = [Vec::new(), Vec::new()];
    let mut tx = crate::eval::StaticTx::default();
    for (items, dead) in rs.compiled.phases.iter().zip(dead.iter_mut()) {
        before.new_phase();
        *dead = vec![false; items.len()];
        let mut i = 0;
        while i < items.len() {
            let Item::Rule(r) = &items[i] else {
                before.pass(&items[i]);
                i += 1;
                continue;
            };
            if !before.foldable(r) {
                // A rule whose starter reads only constants and never matches is dead.
                if before.starter_foldable(r) && !tx.starter_matches(rs, r) {
                    dead[i] = true;
                } else {
                    before.runtime(r);
                }
                before.pass(&items[i]);
                i += 1;
                continue;
            }
            let saved = (r.disruptive != Disruptive::Pass).then(|| tx.vars.clone());
            let matched = tx.run(rs, r);
            if let (true, Some(saved)) = (matched, saved) {
                // A deny or allow that always fires (a misconfiguration) stays a runtime rule.
                tx.vars = saved;
                before.pass(&items[i]);
                before.runtime(r);
                i += 1;
                continue;
            }
            dead[i] = true;
            i += 1;
            if !matched {
                continue;
            }
            let to = if let Some(target) = &r.skip_after {
                crate::eval::skip_after(items, i, target)
            } else {
                let mut n = r.skip;
                let mut j = i;
                while n > 0 && j < items.len() {
                    if matches!(items[j], Item::Rule(_)) {
                        n -= 1;
                    }
                    j += 1;
                }
                j
            };
            // Markers in the skipped stretch stay (other rules may jump to them); rules go.
            for (d, it) in dead[i..to].iter_mut().zip(&items[i..to]) {
                *d = true;
                before.pass(it);
            }
            i = to;
        }
    }
    let mut removed = 0;
    for (phase, d) in dead.iter().enumerate() {
        let items = std::mem::take(&mut rs.compiled.phases[phase]);
        for (k, it) in items.into_iter().enumerate() {
            match it {
                Item::Rule(_) if d[k] => removed += 1,
                it => rs.compiled.phases[phase].push(it),
            }
        }
    }
    // Constants for the macros of the rules left.
    let mut written = Written::default();
    for p in &rs.compiled.phases {
        for it in p {
            if let Item::Rule(r) = it {
                written.rule(r);
            }
        }
    }
    let consts: HashMap<Vec<u8>, Vec<u8>> = tx
        .vars
        .iter()
        .filter(|(k, _)| !written.has(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for p in &mut rs.compiled.phases {
        for it in p.iter_mut() {
            if let Item::Rule(r) = it {
                fold_params(r, &consts);
            }
        }
    }
    rs.initial_tx = tx.vars;
    removed
}

fn fold(p: &mut Param, consts: &HashMap<Vec<u8>, Vec<u8>>) {
    let mut changed = false;
    for part in &mut p.parts {
        if let Part::Macro(c, Some(k)) = part {
            if c == "tx" {
                if let Some(v) = consts.get(k.as_bytes()) {
                    *part = Part::Lit(v.clone());
                    changed = true;
                }
            }
        }
    }
    if changed {
        // Merge adjacent literals so a fully constant parameter is one literal.
        let mut out: Vec<Part> = Vec::new();
        for part in p.parts.drain(..) {
            match (out.last_mut(), part) {
                (Some(Part::Lit(a)), Part::Lit(b)) => a.extend_from_slice(&b),
                (_, part) => out.push(part),
            }
        }
        p.parts = out;
    }
}

fn fold_params(r: &mut Rule, consts: &HashMap<Vec<u8>, Vec<u8>>) {
    if let Op::Str(_, p) | Op::Num(_, p) = &mut r.op {
        fold(p, consts);
    }
    for s in &mut r.setvars {
        match s {
            SetVar::Set(_, v) | SetVar::Add(_, v) | SetVar::Sub(_, v) => fold(v, consts),
            SetVar::Del(_) => {}
        }
    }
    if let Some(c) = r.chain.as_deref_mut() {
        fold_params(c, consts);
    }
}
