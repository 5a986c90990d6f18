//! One transaction: the request's collections, the TX collection, and the walk over the rules of
//! phases 1 and 2 with chains, `skipAfter`, `ctl` exclusions, captures and `setvar`.
//!
//! Every member of every collection gets a slot number when the transaction starts; transformed
//! values and prefilter results are cached per slot, so rules sharing a transformation chain (most
//! of the CRS) transform each value once and test each prefilter group once.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::Range;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::body::{self, Pair, Pairs};
use crate::compile::{Ctl, Disruptive, Item, Rule, SetVar};
use crate::ops::{self, NumOp, Op, Param, Part};
use crate::transform::Transform;
use crate::vars::{Selector, Target, Var};
use crate::{Matched, Outcome, Request, Ruleset};

/// Where a value lives: a member of a keyed collection (its value, or its key for the `_NAMES`
/// variables), a single variable, or a copy (TX and MATCHED_VARS change while rules run).
enum Ref {
    Member { i: u32, name: bool, var: Var },
    Single(Var),
    Copy(Vec<u8>, Vec<u8>),
}

const N_VARS: usize = Var::Unsupported as usize + 1;

/// The keyed collections, as ranges of `Tx::members`.
#[derive(Clone, Copy)]
enum Col {
    ArgsGet,
    ArgsPost,
    Headers,
    Cookies,
    Files,
    PartHeaders,
    Xml,
    XmlAttrs,
}
const N_COLS: usize = 8;

/// FxHash: the cache keys are slot and group numbers the engine makes, not attacker input.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, b: &[u8]) {
        for &x in b {
            self.write_u64(x as u64);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// What a rule set has learnt about one value, whatever request it came in: its byte classes
/// and raw-value literal bits (what `slot_info` computes), and which rules (by `Rule::verdict`)
/// are known not to match it, by their prefilter or their operator.
pub(crate) struct Facts {
    info: (u16, Box<[u64]>),
    /// Set bits only ever get set; a thread that reads a bit another is setting at most
    /// evaluates the rule again, with the same answer. Empty for a value the memo does not keep:
    /// nothing is recorded for it.
    miss: Box<[AtomicU64]>,
}

impl Facts {
    fn missed(&self, verdict: u32) -> bool {
        self.miss
            .get(verdict as usize / 64)
            .is_some_and(|w| w.load(Relaxed) & (1 << (verdict % 64)) != 0)
    }

    fn set_missed(&self, verdict: u32) {
        if let Some(w) = self.miss.get(verdict as usize / 64) {
            w.fetch_or(1 << (verdict % 64), Relaxed);
        }
    }
}

/// Values at most this long are remembered across transactions.
const MEMO_MAX_LEN: usize = 512;
/// Shards of a set's memo (each behind its own lock).
const MEMO_SHARDS: usize = 16;
/// Values a generation of a shard holds; two generations are kept, so a set remembers at most
/// 2 × 16 × 256 = 8,192 values (a few MB with their facts), however many threads judge.
const MEMO_ENTRIES: usize = 256;
/// Hashes of values seen once, per shard (direct-mapped: a newer value takes an older's place).
const MEMO_DOOR: usize = 1024;

type Generation = hashbrown::HashTable<(Box<[u8]>, Arc<Facts>)>;

struct Shard {
    new: Generation,
    old: Generation,
    /// The doorkeeper: a value enters the memo the second time it is seen, so values that never
    /// recur (nonces, signatures, session ids) neither cost an entry nor push out those that do.
    seen: Box<[u64]>,
}

impl Default for Shard {
    fn default() -> Shard {
        Shard {
            new: Default::default(),
            old: Default::default(),
            seen: vec![0; MEMO_DOOR].into_boxed_slice(),
        }
    }
}

/// A rule set's memo of value facts, shared by the threads that judge with it. Most values of
/// real traffic recur (header values, argument names, search terms): their facts are computed
/// once, and a later request that carries them pays a hash, a lookup and one bit test per rule
/// instead of the literal scan, the transformations and the operator. Keys are whole values,
/// compared exactly, so a hash collision can never change a verdict; the hash is foldhash's
/// (quality variant) under a per-process random seed, a third of SipHash's instructions on these
/// short values. A client that found colliding values anyway could only evict entries or lengthen
/// probes in a table of at most 512 values: the memo's gain lost, never an answer or a bound.
/// When a shard's newer generation is full it becomes the older and the oldest is dropped: memory
/// stays bounded and values that keep recurring stay in.
pub(crate) struct ValueMemo {
    hasher: foldhash::quality::RandomState,
    shards: Box<[Mutex<Shard>]>,
}

impl Default for ValueMemo {
    fn default() -> ValueMemo {
        ValueMemo {
            hasher: Default::default(),
            shards: (0..MEMO_SHARDS).map(|_| Mutex::default()).collect(),
        }
    }
}

impl std::fmt::Debug for ValueMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ValueMemo")
    }
}

impl ValueMemo {
    /// The facts of `v`, computed by `make` if the memo does not hold them (`make(false)`: for a
    /// value seen for the first time, which the memo will not keep).
    fn get(&self, v: &[u8], make: impl FnOnce(bool) -> Facts) -> Arc<Facts> {
        use std::hash::BuildHasher;
        let h = self.hasher.hash_one(v);
        // Bits the tables use least (they take the low bits for the bucket, the top 7 as a tag).
        let shard = &self.shards[(h >> 40) as usize % MEMO_SHARDS];
        let eq = |e: &(Box<[u8]>, Arc<Facts>)| *e.0 == *v;
        {
            let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = s.new.find(h, eq) {
                return e.1.clone();
            }
            if let Ok(e) = s.old.find_entry(h, eq) {
                let (e, _) = e.remove();
                let f = e.1.clone();
                s.put(h, e, &self.hasher);
                return f;
            }
            let door = &mut s.seen[h as usize % MEMO_DOOR];
            if *door != h {
                *door = h;
                drop(s);
                return Arc::new(make(false));
            }
        }
        // Computed outside the lock: the literal scan is the expensive part.
        let f = Arc::new(make(true));
        let mut s = shard.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = s.new.find(h, eq) {
            return e.1.clone();
        }
        s.put(h, (v.into(), f.clone()), &self.hasher);
        f
    }

    /// Values remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let s = s.lock().unwrap_or_else(|e| e.into_inner());
                s.new.len() + s.old.len()
            })
            .sum()
    }

    /// Forgets every value (benchmarks measure the cold cost with the memo empty).
    pub(crate) fn clear(&self) {
        for s in self.shards.iter() {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.new.clear();
            s.old.clear();
            s.seen.fill(0);
        }
    }
}

impl Shard {
    fn put(&mut self, h: u64, e: (Box<[u8]>, Arc<Facts>), hasher: &foldhash::quality::RandomState) {
        use std::hash::BuildHasher;
        if self.new.len() >= MEMO_ENTRIES {
            self.old = std::mem::take(&mut self.new);
            self.new.reserve(MEMO_ENTRIES, |e| hasher.hash_one(&*e.0));
        }
        self.new.insert_unique(h, e, |e| hasher.hash_one(&*e.0));
    }
}

/// Whether transactions use the value memo (`SECLANG_NO_MEMO=1` turns it off, for comparisons).
fn memo_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("SECLANG_NO_MEMO").is_none())
}

/// A `ctl:ruleRemoveTarget…` in force: (rule ids, or tag), the variable and key it removes.
type RemovedTarget = (Option<Vec<(u32, u32)>>, Option<String>, Var, Selector);

pub(crate) struct Tx<'r> {
    rs: &'r Ruleset,
    members: Pairs<'r>,
    cols: [Range<u32>; N_COLS],
    /// Single variables, borrowed from the request where they are as sent.
    singles: Vec<Cow<'r, [u8]>>,
    tx: TxVars<'r>,
    matched_var: Vec<u8>,
    matched_var_name: Vec<u8>,
    matched_vars: Vec<(Vec<u8>, Vec<u8>)>,
    removed_ids: Vec<(u32, u32)>,
    removed_tags: Vec<String>,
    removed_targets: Vec<RemovedTarget>,
    /// (slot << 32 | transformation prefix id) → the value after that prefix.
    tcache: FxMap<u64, Rc<[u8]>>,
    /// (slot << 32 | prefilter group) → which of the group's rules may match.
    pcache: FxMap<u64, u128>,
    /// (regex selector, member) → whether the selector takes the member's key.
    excl: std::cell::RefCell<FxMap<u64, bool>>,
    /// Per part (see `compile::part_of`): byte classes and prefilter bits of all its values.
    parts: Vec<Option<(u16, Box<[u64]>)>>,
    /// Per slot: the value's facts (from the set's memo when it was seen before).
    slots: Vec<Option<Arc<Facts>>>,
    refs: Vec<Ref>,
    /// Per target group (`Rule::target_group`): the values its list collected, while no `ctl`
    /// has removed a target.
    groups: Vec<Option<Rc<[Ref]>>>,
    rule_id: u32,
    rule_msg: Vec<u8>,
    out: Outcome,
    stop: bool,
}

fn lower(s: &[u8]) -> Vec<u8> {
    s.to_ascii_lowercase()
}

fn push_range<'r>(members: &mut Pairs<'r>, items: Pairs<'r>) -> Range<u32> {
    let a = members.len() as u32;
    members.extend(items);
    a..members.len() as u32
}

impl<'r> Tx<'r> {
    pub(crate) fn new(rs: &'r Ruleset, req: &Request<'r>) -> Tx<'r> {
        let mut singles: Vec<Cow<'r, [u8]>> = vec![Cow::Borrowed(&b""[..]); N_VARS];
        let uri = req.uri.as_bytes();
        let (path, query) = match uri.iter().position(|&c| c == b'?') {
            Some(p) => (&uri[..p], &uri[p + 1..]),
            None => (uri, &b""[..]),
        };
        let path = match path.iter().position(|&c| c == b'#') {
            Some(p) => &path[..p],
            None => path,
        };
        let mut members = Pairs::new();
        let mut get = Pairs::new();
        body::urlencoded(query, &mut get);
        let mut headers = Pairs::new();
        let mut cookies = Pairs::new();
        let mut ctype = String::new();
        let mut ctype_raw = "";
        for (k, v) in &req.headers {
            headers.push((Cow::Borrowed(k.as_bytes()), Cow::Borrowed(v.as_bytes())));
            if k.eq_ignore_ascii_case("cookie") {
                body::cookies(v.as_bytes(), &mut cookies);
            } else if k.eq_ignore_ascii_case("content-type") {
                ctype = v.to_ascii_lowercase();
                ctype_raw = v;
            }
        }
        let mut post = Pairs::new();
        let mut files = Pairs::new();
        let mut part_headers = Pairs::new();
        let mut xml = Pairs::new();
        let mut xml_attrs = Pairs::new();
        let b = req.body;
        let mut processor: &[u8] = b"";
        if !b.is_empty() {
            let looks_json = matches!(
                b.iter().find(|c| !c.is_ascii_whitespace()),
                Some(b'{') | Some(b'[')
            );
            if ctype.starts_with("multipart/") {
                processor = b"MULTIPART";
                let m = body::multipart(ctype_raw, b);
                post = m.args;
                files = m.files;
                part_headers = m
                    .part_headers
                    .into_iter()
                    .map(|h| {
                        let n = h.iter().position(|&c| c == b':').unwrap_or(h.len());
                        (Cow::Owned(h[..n].to_vec()), Cow::Owned(h))
                    })
                    .collect();
                if m.strict_error {
                    singles[Var::MultipartStrictError as usize] = Cow::Borrowed(b"1");
                }
            } else if ctype.contains("json") || (ctype.is_empty() && looks_json) {
                processor = b"JSON";
                if !body::json(b, &mut post) {
                    singles[Var::ReqbodyError as usize] = Cow::Borrowed(b"1");
                    singles[Var::ReqbodyErrorMsg as usize] = Cow::Borrowed(b"JSON parsing error");
                }
            } else if ctype.contains("xml") {
                processor = b"XML";
                match body::xml(b) {
                    Some((t, a)) => {
                        xml = t
                            .into_iter()
                            .map(|v| (Cow::Borrowed(&b""[..]), Cow::Owned(v)))
                            .collect();
                        xml_attrs = a
                            .into_iter()
                            .map(|v| (Cow::Borrowed(&b""[..]), Cow::Owned(v)))
                            .collect();
                    }
                    None => {
                        singles[Var::ReqbodyError as usize] = Cow::Borrowed(b"1");
                        singles[Var::ReqbodyErrorMsg as usize] =
                            Cow::Borrowed(b"XML parsing error");
                    }
                }
            } else if ctype.starts_with("application/x-www-form-urlencoded") || ctype.is_empty() {
                processor = b"URLENCODED";
                body::urlencoded(b, &mut post);
            }
        }
        let combined: usize = get
            .iter()
            .chain(post.iter())
            .map(|(k, v)| k.len() + v.len())
            .sum();
        let cols = [
            push_range(&mut members, get),
            push_range(&mut members, post),
            push_range(&mut members, headers),
            push_range(&mut members, cookies),
            push_range(&mut members, files),
            push_range(&mut members, part_headers),
            push_range(&mut members, xml),
            push_range(&mut members, xml_attrs),
        ];
        for v in [
            Var::MultipartStrictError,
            Var::MultipartUnmatchedBoundary,
            Var::ReqbodyError,
        ] {
            if singles[v as usize].is_empty() {
                singles[v as usize] = Cow::Borrowed(b"0");
            }
        }
        singles[Var::ReqbodyProcessor as usize] = Cow::Borrowed(processor);
        let basename = match path.iter().rposition(|&c| c == b'/' || c == b'\\') {
            Some(p) if p + 1 < path.len() => &path[p + 1..],
            _ => path,
        };
        // The path as the application sees it: percent-decoded (a `+` stays a `+`).
        singles[Var::RequestFilename as usize] = percent_decode(path);
        singles[Var::RequestBasename as usize] = percent_decode(basename);
        singles[Var::RequestUri as usize] = Cow::Borrowed(uri);
        singles[Var::RequestUriRaw as usize] = Cow::Borrowed(uri);
        singles[Var::QueryString as usize] = Cow::Borrowed(query);
        singles[Var::RequestMethod as usize] = Cow::Borrowed(req.method.as_bytes());
        singles[Var::RequestProtocol as usize] = Cow::Borrowed(req.protocol.as_bytes());
        singles[Var::RequestLine as usize] =
            Cow::Owned(format!("{} {} {}", req.method, req.uri, req.protocol).into_bytes());
        // As in ModSecurity, the raw body is a variable only where no structured processor read
        // it (URL-encoded forms, unknown types); JSON, XML and multipart bodies are read as ARGS,
        // XML and FILES.
        if processor == b"URLENCODED" || processor.is_empty() {
            singles[Var::RequestBody as usize] = Cow::Borrowed(b);
        }
        singles[Var::RequestBodyLength as usize] = Cow::Owned(b.len().to_string().into_bytes());
        singles[Var::RemoteAddr as usize] = Cow::Borrowed(req.remote_addr.as_bytes());
        singles[Var::UniqueId as usize] = Cow::Borrowed(b"0");
        singles[Var::ArgsCombinedSize as usize] = Cow::Owned(combined.to_string().into_bytes());
        singles[Var::FilesCombinedSize as usize] = Cow::Borrowed(b"0");
        Tx {
            rs,
            members,
            cols,
            singles,
            tx: TxVars {
                base: &rs.initial_tx,
                over: HashMap::new(),
            },
            matched_var: Vec::new(),
            matched_var_name: Vec::new(),
            matched_vars: Vec::new(),
            removed_ids: Vec::new(),
            removed_tags: Vec::new(),
            removed_targets: Vec::new(),
            tcache: FxMap::with_capacity_and_hasher(256, Default::default()),
            pcache: FxMap::with_capacity_and_hasher(64, Default::default()),
            slots: Vec::new(),
            parts: vec![None; 64],
            excl: std::cell::RefCell::new(FxMap::with_capacity_and_hasher(64, Default::default())),
            refs: Vec::new(),
            groups: vec![None; rs.compiled.target_groups as usize],
            rule_id: 0,
            rule_msg: Vec::new(),
            out: Outcome::default(),
            stop: false,
        }
    }

    fn col(&self, c: Col) -> Range<usize> {
        let r = &self.cols[c as usize];
        r.start as usize..r.end as usize
    }

    pub(crate) fn run(mut self) -> Outcome {
        for phase in 0..2 {
            let items = &self.rs.compiled.phases[phase];
            let mut i = 0;
            while i < items.len() && !self.stop {
                let Item::Rule(r) = &items[i] else {
                    i += 1;
                    continue;
                };
                i += 1;
                if !self.rule(r) {
                    continue;
                }
                if let Some(target) = &r.skip_after {
                    i = skip_after(items, i, target);
                } else if r.skip > 0 {
                    let mut n = r.skip;
                    while n > 0 && i < items.len() {
                        if matches!(items[i], Item::Rule(_)) {
                            n -= 1;
                        }
                        i += 1;
                    }
                }
            }
            if self.stop {
                break;
            }
        }
        let score = [
            "blocking_inbound_anomaly_score",
            "anomaly_score",
            "inbound_anomaly_score",
        ]
        .iter()
        .map(|k| self.tx.get(k.as_bytes()).map(ops::num).unwrap_or(0))
        .max()
        .unwrap_or(0);
        self.out.score = score;
        self.out
    }

    /// The facts of the value in `slot` (computed, or found in the memo, the first time).
    fn facts(&mut self, slot: u32) -> &Arc<Facts> {
        if self.slots.len() <= slot as usize {
            self.slots.resize_with(slot as usize + 1, || None);
        }
        if self.slots[slot as usize].is_none() {
            let v = self.value_of_slot(slot);
            let f = if v.len() <= MEMO_MAX_LEN && memo_on() {
                self.rs.memo.get(v, |keep| self.new_facts(v, keep))
            } else {
                Arc::new(self.new_facts(v, false))
            };
            self.slots[slot as usize] = Some(f);
        }
        self.slots[slot as usize].as_ref().unwrap()
    }

    /// Records in the facts of the value in `slot` that `r` does not match it.
    fn missed(&self, slot: Option<u32>, r: &Rule) {
        if let Some(Some(f)) = slot.map(|s| &self.slots[s as usize]) {
            f.set_missed(r.verdict);
        }
    }

    fn removed(&self, r: &Rule) -> bool {
        self.removed_ids
            .iter()
            .any(|&(a, b)| r.id >= a && r.id <= b)
            || self.removed_tags.iter().any(|t| r.tags.contains(t))
    }

    /// Evaluates a rule and its chain; on a full match runs its actions. True if it matched.
    fn rule(&mut self, r: &Rule) -> bool {
        if r.id != 0 && self.removed(r) {
            return false;
        }
        if let (Some(pf), true) = (r.prefilter, r.parts != 0) {
            if self.no_candidate(r.parts, pf) {
                return false;
            }
        }
        self.rule_id = r.id;
        self.matched_vars.clear();
        if !self.one(r, r) {
            return false;
        }
        let mut m = r.chain.as_deref();
        while let Some(c) = m {
            if !self.one(c, r) {
                return false;
            }
            m = c.chain.as_deref();
        }
        if r.severity.is_some() {
            let msg = r
                .msg
                .as_ref()
                .map(|p| String::from_utf8_lossy(&self.expand(p)).into_owned())
                .unwrap_or_default();
            let data = r.logdata.as_ref().map(|p| {
                let d = self.expand(p);
                String::from_utf8_lossy(&d[..d.len().min(200)]).into_owned()
            });
            self.out.matched.push(Matched {
                id: r.id,
                severity: r.severity,
                paranoia: r.paranoia,
                msg,
                var: String::from_utf8_lossy(&self.matched_var_name).into_owned(),
                data: data.unwrap_or_default(),
            });
        }
        match r.disruptive {
            Disruptive::Deny => {
                self.out.interrupted = Some(r.id);
                self.stop = true;
            }
            Disruptive::Allow => {
                self.out.allowed = Some(r.id);
                self.stop = true;
            }
            Disruptive::Pass => {}
        }
        true
    }

    fn actions(&mut self, r: &Rule) {
        if let Some(p) = &r.msg {
            self.rule_msg = self.expand(p).into_owned();
        }
        for s in &r.setvars {
            match s {
                SetVar::Set(n, v) => {
                    let (n, v) = (tx_key(&self.expand(n)), self.expand(v).into_owned());
                    self.tx.set(n, v);
                }
                SetVar::Add(n, v) | SetVar::Sub(n, v) => {
                    let n = tx_key(&self.expand(n));
                    let d = ops::num(&self.expand(v));
                    let cur = self.tx.get(&n).map(ops::num).unwrap_or(0);
                    let nv = if matches!(s, SetVar::Add(..)) {
                        cur + d
                    } else {
                        cur - d
                    };
                    self.tx.set(n, nv.to_string().into_bytes());
                }
                SetVar::Del(n) => {
                    let n = tx_key(&self.expand(n));
                    self.tx.del(n);
                }
            }
        }
        for c in &r.ctls {
            match c {
                Ctl::EngineOff => self.stop = true,
                Ctl::RemoveById(r) => self.removed_ids.extend(r.iter().copied()),
                Ctl::RemoveByTag(t) => self.removed_tags.push(t.clone()),
                Ctl::RemoveTargetById(ids, v, s) => {
                    self.removed_targets
                        .push((Some(ids.clone()), None, *v, s.clone()))
                }
                Ctl::RemoveTargetByTag(t, v, s) => {
                    self.removed_targets
                        .push((None, Some(t.clone()), *v, s.clone()))
                }
                Ctl::Ignored => {}
            }
        }
    }

    /// Evaluates one member of a chain (`top` is the chain's starter, whose id and tags the
    /// exclusions name). True if some value matched.
    fn one(&mut self, r: &Rule, top: &Rule) -> bool {
        if r.targets.is_empty() {
            let hit = !matches!(r.op, Op::NoMatch) ^ r.negated;
            if hit {
                self.actions(r);
            }
            return hit;
        }
        // A list's values do not depend on the rule (`top` only matters to targets a `ctl` removed).
        let group = (r.target_group != u32::MAX && self.removed_targets.is_empty())
            .then_some(r.target_group as usize);
        let shared: Option<Rc<[Ref]>> = match group {
            Some(g) => Some(match &self.groups[g] {
                Some(list) => list.clone(),
                None => {
                    // Collected in the reused buffer, then copied once at its final size.
                    let mut v = std::mem::take(&mut self.refs);
                    v.clear();
                    for t in &r.targets {
                        self.collect(t, top, &mut v);
                    }
                    let list: Rc<[Ref]> = v.drain(..).collect();
                    self.refs = v;
                    self.groups[g] = Some(list.clone());
                    list
                }
            }),
            None => None,
        };
        let mut refs = std::mem::take(&mut self.refs);
        refs.clear();
        if shared.is_none() {
            for t in &r.targets {
                self.collect(t, top, &mut refs);
            }
        }
        let list: &[Ref] = shared.as_deref().unwrap_or(&refs);
        let mut any = false;
        for rf in list {
            let slot = self.slot(rf);
            // The slot whose facts can hold the rule's verdict, unless they already hold a miss.
            let memo = match slot {
                Some(s) if r.verdict != u32::MAX => {
                    if self.facts(s).missed(r.verdict) {
                        continue;
                    }
                    Some(s)
                }
                _ => None,
            };
            if let (Some(pf), Some(slot)) = (r.prefilter, slot) {
                if !self.may_match(slot, pf, r) {
                    self.missed(memo, r);
                    continue;
                }
            }
            let cached = if r.transforms.is_empty() {
                None
            } else {
                self.transformed(rf, slot, r)
            };
            let hit = {
                let raw = self.value(rf);
                let v: &[u8] = cached.as_deref().unwrap_or(raw);
                self.matches(r, v)
            };
            let Some(caps) = hit else {
                self.missed(memo, r);
                continue;
            };
            any = true;
            let v = cached
                .as_deref()
                .map(<[u8]>::to_vec)
                .unwrap_or_else(|| self.value(rf).to_vec());
            let name = self.name(rf);
            if let Some(caps) = caps {
                for (k, c) in caps.into_iter().enumerate() {
                    self.tx.set(k.to_string().into_bytes(), c);
                }
            }
            self.matched_var = v.clone();
            self.matched_var_name = name.clone();
            self.matched_vars.push((name, v));
            // As in ModSecurity, `setvar` and `ctl` run for every matched value, before the
            // chain's next member is evaluated (members may read what the starter set).
            self.actions(r);
        }
        self.refs = refs;
        any
    }

    /// The slot number of a value that does not change during the transaction.
    fn slot(&self, rf: &Ref) -> Option<u32> {
        match rf {
            Ref::Member { i, name, .. } => Some(i * 2 + *name as u32),
            Ref::Single(v) => Some(self.members.len() as u32 * 2 + *v as u32),
            Ref::Copy(..) => None,
        }
    }

    /// Whether the prefilter lets the rule run on the value in `slot`: by the raw value's
    /// literals when the rule's chain cannot change that value (but for case), else by its
    /// chain group's literals in the transformed value.
    fn may_match(&mut self, slot: u32, pf: crate::compile::Prefilter, r: &Rule) -> bool {
        let info = self.slot_info(slot);
        if info.0 & pf.sensitive == 0 {
            let w = pf.global as usize / 64;
            return info
                .1
                .get(w)
                .is_some_and(|x| x & (1u64 << (pf.global % 64)) != 0);
        }
        let key = (slot as u64) << 32 | pf.group as u64;
        let bits = match self.pcache.get(&key) {
            Some(b) => *b,
            None => {
                let rf = self.ref_of_slot(slot);
                let v: Rc<[u8]> = match self.transformed(&rf, Some(slot), r) {
                    Some(v) => v,
                    None => Rc::from(self.value(&rf)),
                };
                let g = &self.rs.compiled.groups[pf.group as usize];
                let mut b = 0u128;
                if let Some(ac) = &g.ac {
                    for m in ac.find_overlapping_iter(aho_corasick::Input::new(&v[..])) {
                        b |= g.pattern_bits[m.pattern().as_usize()];
                    }
                }
                if !g.bytes.is_empty() {
                    let set = crate::compile::byte_set(&v);
                    for &(c, bits) in &g.bytes {
                        if crate::compile::has_byte(&set, c) {
                            b |= bits;
                        }
                    }
                }
                self.pcache.insert(key, b);
                b
            }
        };
        bits & (1u128 << pf.bit) != 0
    }

    /// True if no value of the collections in `parts` can pass the rule's prefilter: none holds
    /// one of its literals, and none has a byte its transformations could act on.
    fn no_candidate(&mut self, parts: u64, pf: crate::compile::Prefilter) -> bool {
        let (w, b) = (pf.global as usize / 64, 1u64 << (pf.global % 64));
        let mut rest = parts;
        while rest != 0 {
            let part = rest.trailing_zeros();
            rest &= rest - 1;
            let (flags, bits) = self.part_info(part);
            if flags & pf.sensitive != 0 || bits.get(w).is_some_and(|x| x & b != 0) {
                return false;
            }
        }
        true
    }

    /// The byte classes and raw-value prefilter bits of every value of a part (see
    /// `compile::part_of`), ORed together; cached.
    fn part_info(&mut self, part: u32) -> (u16, &[u64]) {
        if self.parts[part as usize].is_none() {
            let mut flags = 0u16;
            let mut bits = vec![0u64; self.rs.compiled.global_words];
            for slot in self.part_slots(part) {
                let (f, b) = self.slot_info(slot);
                flags |= *f;
                for (x, y) in bits.iter_mut().zip(b.iter()) {
                    *x |= y;
                }
            }
            self.parts[part as usize] = Some((flags, bits.into_boxed_slice()));
        }
        let (f, b) = self.parts[part as usize].as_ref().unwrap();
        (*f, b)
    }

    fn part_slots(&self, part: u32) -> Vec<u32> {
        let n = self.members.len() as u32 * 2;
        if part < crate::compile::KEYED_PARTS {
            let (col, name) = (part / 2, part % 2);
            let r = &self.cols[col as usize];
            (r.start..r.end).map(|i| i * 2 + name).collect()
        } else {
            vec![n + (part - crate::compile::KEYED_PARTS)]
        }
    }

    /// A value's byte classes and the rules whose literals its raw bytes hold (cached per slot).
    fn slot_info(&mut self, slot: u32) -> &(u16, Box<[u64]>) {
        &self.facts(slot).info
    }

    /// A value's facts; with room for misses if the memo keeps them (`keep`).
    fn new_facts(&self, v: &[u8], keep: bool) -> Facts {
        let words = if keep {
            (self.rs.compiled.verdicts as usize).div_ceil(64)
        } else {
            0
        };
        Facts {
            info: self.info_of(v),
            miss: (0..words).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A raw value's byte classes and the rules whose literals it holds.
    fn info_of(&self, v: &[u8]) -> (u16, Box<[u64]>) {
        let f = crate::transform::flags::of(v);
        let mut bits = vec![0u64; self.rs.compiled.global_words].into_boxed_slice();
        if let Some((ac, lit_bits)) = &self.rs.compiled.global {
            for m in ac.find_overlapping_iter(aho_corasick::Input::new(v)) {
                for &(w, b) in &lit_bits[m.pattern().as_usize()] {
                    bits[w as usize] |= b;
                }
            }
        }
        let singles = &self.rs.compiled.global_bytes;
        if !singles.is_empty() {
            let set = crate::compile::byte_set(v);
            for (c, lit_bits) in singles {
                if crate::compile::has_byte(&set, *c) {
                    for &(w, b) in lit_bits {
                        bits[w as usize] |= b;
                    }
                }
            }
        }
        (f, bits)
    }

    fn ref_of_slot(&self, slot: u32) -> Ref {
        let n = self.members.len() as u32 * 2;
        if slot < n {
            Ref::Member {
                i: slot / 2,
                name: slot % 2 == 1,
                var: Var::Args,
            }
        } else {
            Ref::Single(var_at(slot - n))
        }
    }

    fn value_of_slot(&self, slot: u32) -> &[u8] {
        let n = self.members.len() as u32 * 2;
        if slot < n {
            let m = &self.members[(slot / 2) as usize];
            if slot % 2 == 1 {
                &m.0
            } else {
                &m.1
            }
        } else {
            &self.singles[(slot - n) as usize]
        }
    }

    /// The operator's verdict on a value (negation applied); `Some(captures)` on a match.
    #[allow(clippy::option_option)]
    fn matches(&self, r: &Rule, v: &[u8]) -> Option<Option<Vec<Vec<u8>>>> {
        let (hit, caps) = match &r.op {
            Op::Rx(re) => rx(re, r, v),
            Op::RxMacro(p, cache) => {
                let pat = self.expand(p);
                let found = cache
                    .lock()
                    .ok()
                    .and_then(|c| c.iter().find(|(k, _)| *k == *pat).map(|(_, r)| r.clone()));
                let re = match found {
                    Some(re) => re,
                    None => match ops::regex(&String::from_utf8_lossy(&pat)) {
                        Ok(re) => {
                            let re = std::sync::Arc::new(re);
                            if let Ok(mut c) = cache.lock() {
                                if c.len() >= 16 {
                                    c.remove(0);
                                }
                                c.push((pat.to_vec(), re.clone()));
                            }
                            re
                        }
                        Err(_) => return None,
                    },
                };
                rx(&re, r, v)
            }
            Op::Pm(ac, _) => match ac.find(v) {
                Some(m) if r.capture => (true, Some(vec![v[m.start()..m.end()].to_vec()])),
                Some(_) => (true, None),
                None => (false, None),
            },
            Op::Str(op, p) => (ops::str_op(*op, v, &self.expand(p)), None),
            Op::Num(op, p) => {
                let a = ops::num(v);
                let b = ops::num(&self.expand(p));
                (
                    match op {
                        NumOp::Eq => a == b,
                        NumOp::Ge => a >= b,
                        NumOp::Gt => a > b,
                        NumOp::Le => a <= b,
                        NumOp::Lt => a < b,
                    },
                    None,
                )
            }
            Op::DetectSqli => {
                let (hit, fp) = ops::sqli(v);
                (
                    hit,
                    if r.capture {
                        Some(vec![fp.unwrap_or_default()])
                    } else {
                        None
                    },
                )
            }
            Op::DetectXss => (ops::xss(v), None),
            Op::ValidateUrlEncoding => (ops::bad_url_encoding(v), None),
            Op::ValidateUtf8 => (std::str::from_utf8(v).is_err(), None),
            Op::ValidateByteRange(ok) => (v.iter().any(|&c| !ok[c as usize]), None),
            Op::IpMatch(l) => (ops::ip_in(l, v), None),
            Op::Unconditional => (true, None),
            Op::NoMatch => (false, None),
        };
        if hit != r.negated {
            Some(if r.negated { None } else { caps })
        } else {
            None
        }
    }

    /// The value after the rule's transformations (None: the raw value, unchanged), from the
    /// per-slot cache where an earlier rule ran the same chain or a prefix of it. A value with no
    /// byte the chain acts on is the raw value, or its lower- or upper-case copy.
    fn transformed(&mut self, rf: &Ref, slot: Option<u32>, r: &Rule) -> Option<Rc<[u8]>> {
        if let Some(slot) = slot {
            if self.slot_info(slot).0 & r.sensitive == 0 {
                let case = r
                    .transforms
                    .iter()
                    .rev()
                    .find(|t| matches!(t, Transform::Lowercase | Transform::Uppercase));
                let t = case?;
                let key = (slot as u64) << 32 | r.prefix_ids[r.prefix_ids.len() - 1] as u64;
                if let Some(c) = self.tcache.get(&key) {
                    return Some(c.clone());
                }
                let v: Rc<[u8]> = Rc::from(&*t.apply(self.value(rf)));
                self.tcache.insert(key, v.clone());
                return Some(v);
            }
        }
        let mut start = 0;
        let mut cur: Option<Rc<[u8]>> = None;
        if let Some(slot) = slot {
            for i in (0..r.prefix_ids.len()).rev() {
                if let Some(c) = self
                    .tcache
                    .get(&((slot as u64) << 32 | r.prefix_ids[i] as u64))
                {
                    if i + 1 == r.prefix_ids.len() {
                        return Some(c.clone());
                    }
                    cur = Some(c.clone());
                    start = i + 1;
                    break;
                }
            }
        }
        let mut cur: Rc<[u8]> = match cur {
            Some(c) => c,
            None => Rc::from(self.value(rf)),
        };
        for i in start..r.transforms.len() {
            if let Cow::Owned(o) = r.transforms[i].apply(&cur) {
                cur = Rc::from(o);
            }
            if let Some(slot) = slot {
                self.tcache
                    .insert((slot as u64) << 32 | r.prefix_ids[i] as u64, cur.clone());
            }
        }
        Some(cur)
    }

    fn value<'a>(&'a self, rf: &'a Ref) -> &'a [u8] {
        match rf {
            Ref::Copy(_, v) => v,
            Ref::Member { i, name, .. } => {
                let m = &self.members[*i as usize];
                if *name {
                    &m.0
                } else {
                    &m.1
                }
            }
            Ref::Single(v) => &self.singles[*v as usize],
        }
    }

    fn name(&self, rf: &Ref) -> Vec<u8> {
        match rf {
            Ref::Copy(k, _) => k.clone(),
            Ref::Single(v) => var_name(*v).as_bytes().to_vec(),
            Ref::Member { i, var, .. } => {
                let mut n = var_name(*var).as_bytes().to_vec();
                let key = &self.members[*i as usize].0;
                if !key.is_empty() {
                    n.push(b':');
                    n.extend_from_slice(key);
                }
                n
            }
        }
    }

    fn excluded(&self, t: &Target, top: &Rule, key: &[u8], member: Option<usize>) -> bool {
        t.exclusions.iter().any(|s| self.takes(s, key, member))
            || self.removed_targets.iter().any(|(ids, tag, v, s)| {
                *v == t.var
                    && (ids
                        .as_ref()
                        .is_some_and(|ids| ids.iter().any(|&(a, b)| top.id >= a && top.id <= b))
                        || tag.as_ref().is_some_and(|tag| top.tags.contains(tag)))
                    && self.takes(s, key, member)
            })
    }

    /// `Selector::takes`, with regex answers for collection members cached: the CRS repeats the
    /// same exclusion (`!REQUEST_COOKIES:/__utm/`) on dozens of rules.
    fn takes(&self, s: &Selector, key: &[u8], member: Option<usize>) -> bool {
        match (s, member) {
            (Selector::Regex(re), Some(i)) => {
                let k = (re as *const _ as usize as u64) << 20 ^ i as u64;
                if let Some(&b) = self.excl.borrow().get(&k) {
                    return b;
                }
                let b = re.is_match(key);
                self.excl.borrow_mut().insert(k, b);
                b
            }
            _ => s.takes(key),
        }
    }

    fn collect(&self, t: &Target, top: &Rule, out: &mut Vec<Ref>) {
        let start = out.len();
        let check = !t.exclusions.is_empty() || !self.removed_targets.is_empty();
        let keyed = |cols: &[Col], name: bool, out: &mut Vec<Ref>| {
            for &c in cols {
                for i in self.col(c) {
                    let k = &self.members[i].0;
                    if self.takes(&t.selector, k, Some(i))
                        && !(check && self.excluded(t, top, k, Some(i)))
                    {
                        out.push(Ref::Member {
                            i: i as u32,
                            name,
                            var: t.var,
                        });
                    }
                }
            }
        };
        use Col::*;
        match t.var {
            Var::Args => keyed(&[ArgsGet, ArgsPost], false, out),
            Var::ArgsNames => keyed(&[ArgsGet, ArgsPost], true, out),
            Var::ArgsGet => keyed(&[ArgsGet], false, out),
            Var::ArgsGetNames => keyed(&[ArgsGet], true, out),
            Var::ArgsPost => keyed(&[ArgsPost], false, out),
            Var::ArgsPostNames => keyed(&[ArgsPost], true, out),
            Var::RequestHeaders => keyed(&[Headers], false, out),
            Var::RequestHeadersNames => keyed(&[Headers], true, out),
            Var::RequestCookies => keyed(&[Cookies], false, out),
            Var::RequestCookiesNames => keyed(&[Cookies], true, out),
            Var::Files | Var::MultipartFilename => keyed(&[Files], false, out),
            Var::FilesNames | Var::MultipartName => keyed(&[Files], true, out),
            Var::MultipartPartHeaders => keyed(&[PartHeaders], false, out),
            Var::Xml => {
                let attrs = matches!(&t.selector, Selector::Key(k) if k.contains(&b'@'));
                for i in self.col(if attrs { XmlAttrs } else { Xml }) {
                    out.push(Ref::Member {
                        i: i as u32,
                        name: false,
                        var: Var::Xml,
                    });
                }
            }
            Var::Tx => match &t.selector {
                Selector::Key(k) => {
                    if let Some(v) = self.tx.get(&k[..]) {
                        let mut n = b"TX:".to_vec();
                        n.extend_from_slice(k);
                        out.push(Ref::Copy(n, v.to_vec()));
                    }
                }
                _ => {
                    let take = |k: &[u8]| t.selector.takes(k);
                    let mut kv: Vec<(&[u8], &[u8])> = self
                        .tx
                        .iter_taken(&take)
                        .filter(|(k, _)| !(check && self.excluded(t, top, k, None)))
                        .collect();
                    kv.sort();
                    for (k, v) in kv {
                        let mut n = b"TX:".to_vec();
                        n.extend_from_slice(k);
                        out.push(Ref::Copy(n, v.to_vec()));
                    }
                }
            },
            Var::MatchedVars | Var::MatchedVarsNames => {
                for (k, v) in &self.matched_vars {
                    let v = if t.var == Var::MatchedVars {
                        v.clone()
                    } else {
                        k.clone()
                    };
                    out.push(Ref::Copy(k.clone(), v));
                }
            }
            Var::MatchedVar => out.push(Ref::Copy(
                self.matched_var_name.clone(),
                self.matched_var.clone(),
            )),
            Var::MatchedVarName => out.push(Ref::Copy(
                self.matched_var_name.clone(),
                self.matched_var_name.clone(),
            )),
            Var::Unsupported => {}
            v => out.push(Ref::Single(v)),
        }
        if t.count {
            let n = out.len() - start;
            out.truncate(start);
            let mut name = var_name(t.var).as_bytes().to_vec();
            if let Selector::Key(k) = &t.selector {
                name.push(b':');
                name.extend_from_slice(k);
            }
            out.push(Ref::Copy(name, n.to_string().into_bytes()));
        }
    }

    /// Expands `%{…}` macros. A parameter that is one literal or one macro is borrowed, not
    /// copied (`@within %{tx.restricted_headers}` is expanded for every value it is tested on).
    fn expand<'a>(&'a self, p: &'a Param) -> Cow<'a, [u8]> {
        match p.parts.as_slice() {
            [Part::Lit(l)] => return Cow::Borrowed(l),
            [Part::Macro(c, k)] => return self.macro_value(c, k.as_deref()).unwrap_or_default(),
            _ => {}
        }
        let mut o = Vec::new();
        for part in &p.parts {
            match part {
                Part::Lit(l) => o.extend_from_slice(l),
                Part::Macro(c, k) => {
                    if let Some(v) = self.macro_value(c, k.as_deref()) {
                        o.extend_from_slice(&v);
                    }
                }
            }
        }
        Cow::Owned(o)
    }

    /// A macro's value (`None`: it names nothing, and expands to nothing).
    fn macro_value(&self, c: &str, k: Option<&str>) -> Option<Cow<'_, [u8]>> {
        fn find<'a>(pairs: &'a [Pair<'_>], k: &str) -> Option<&'a [u8]> {
            pairs
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k.as_bytes()))
                .map(|(_, v)| &**v)
        }
        let v: &[u8] = match (c, k) {
            ("tx", Some(k)) => self.tx.get(k.as_bytes())?,
            ("matched_var", None) => &self.matched_var,
            ("matched_var_name", None) => &self.matched_var_name,
            ("rule", Some("id")) => return Some(Cow::Owned(self.rule_id.to_string().into_bytes())),
            ("rule", Some("msg")) => &self.rule_msg,
            ("request_headers", Some(k)) => find(&self.members[self.col(Col::Headers)], k)?,
            ("args", Some(k)) => find(
                &self.members[self.col(Col::ArgsGet).start..self.col(Col::ArgsPost).end],
                k,
            )?,
            ("request_cookies", Some(k)) => find(&self.members[self.col(Col::Cookies)], k)?,
            (name, None) => Var::by_name(name)
                .filter(|v| v.is_single())
                .map(|v| &*self.singles[v as usize])?,
            _ => return None,
        };
        Some(Cow::Borrowed(v))
    }
}

/// The variable with discriminant `n`.
fn var_at(n: u32) -> Var {
    Var::ALL
        .get(n as usize)
        .copied()
        .unwrap_or(Var::Unsupported)
}

/// The name a variable has in SecLang (`ARGS`, `REQUEST_HEADERS`), for MATCHED_VAR_NAME.
fn var_name(v: Var) -> &'static str {
    v.name()
}

fn percent_decode(v: &[u8]) -> Cow<'_, [u8]> {
    if !v.contains(&b'%') {
        return Cow::Borrowed(v);
    }
    let mut o = Vec::with_capacity(v.len());
    let mut i = 0;
    while i < v.len() {
        if v[i] == b'%' {
            if let (Some(a), Some(b)) = (
                v.get(i + 1).and_then(|&c| crate::transform::hex(c)),
                v.get(i + 2).and_then(|&c| crate::transform::hex(c)),
            ) {
                o.push(a << 4 | b);
                i += 3;
                continue;
            }
        }
        o.push(v[i]);
        i += 1;
    }
    Cow::Owned(o)
}

/// `@rx`: a cheap yes/no first; the groups only for a match of a rule that captures.
fn rx(re: &ops::Rx, r: &Rule, v: &[u8]) -> (bool, Option<Vec<Vec<u8>>>) {
    if !re.is_match(v) {
        return (false, None);
    }
    if r.capture && !r.negated {
        return (true, re.captures(v));
    }
    (true, None)
}

fn tx_key(n: &[u8]) -> Vec<u8> {
    let n = lower(n);
    match n.strip_prefix(b"tx.") {
        Some(k) => k.to_vec(),
        None => n,
    }
}

/// The TX collection: the set's initial values (from the rules folded at load) under this
/// transaction's own writes and deletions.
pub(crate) struct TxVars<'r> {
    base: &'r HashMap<Vec<u8>, Vec<u8>>,
    over: HashMap<Vec<u8>, Option<Vec<u8>>>,
}

impl TxVars<'_> {
    fn get(&self, k: &[u8]) -> Option<&[u8]> {
        match self.over.get(k) {
            Some(v) => v.as_deref(),
            None => self.base.get(k).map(Vec::as_slice),
        }
    }

    fn set(&mut self, k: Vec<u8>, v: Vec<u8>) {
        self.over.insert(k, Some(v));
    }

    fn del(&mut self, k: Vec<u8>) {
        self.over.insert(k, None);
    }

    /// The variables whose names `take` accepts: the name is tested before a base variable is
    /// looked up among the overrides (a `TX:/^header_name_/` walk rejects most names, and each
    /// lookup hashes the name).
    fn iter_taken<'s, F: Fn(&[u8]) -> bool>(
        &'s self,
        take: &'s F,
    ) -> impl Iterator<Item = (&'s [u8], &'s [u8])> + 's {
        let over = self
            .over
            .iter()
            .filter(|(k, _)| take(k))
            .filter_map(|(k, v)| v.as_deref().map(|v| (k.as_slice(), v)));
        let base = self
            .base
            .iter()
            .filter(|(k, _)| take(k) && !self.over.contains_key(*k))
            .map(|(k, v)| (k.as_slice(), v.as_slice()));
        over.chain(base)
    }
}

/// Runs rules that read only TX, at load, against a TX state kept between them (see
/// `specialize`).
#[derive(Default)]
pub(crate) struct StaticTx {
    pub vars: HashMap<Vec<u8>, Vec<u8>>,
}

impl StaticTx {
    /// Whether the chain's starter matches, its actions undone.
    pub fn starter_matches(&mut self, rs: &Ruleset, r: &Rule) -> bool {
        let saved = self.vars.clone();
        let empty = HashMap::new();
        let req = Request::default();
        let mut tx = Tx::new(rs, &req);
        tx.tx = TxVars {
            base: &empty,
            over: saved
                .iter()
                .map(|(k, v)| (k.clone(), Some(v.clone())))
                .collect(),
        };
        tx.one(r, r)
    }

    /// Evaluates one rule (and its chain) with its actions; true if it matched.
    pub fn run(&mut self, rs: &Ruleset, r: &Rule) -> bool {
        let empty = HashMap::new();
        let req = Request::default();
        let mut tx = Tx::new(rs, &req);
        tx.tx = TxVars {
            base: &empty,
            over: self.vars.drain().map(|(k, v)| (k, Some(v))).collect(),
        };
        let matched = tx.rule(r);
        self.vars = tx
            .tx
            .over
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        matched
    }
}

/// The index after the marker (or rule id) `target` at or after `from`; the end if there is none.
pub(crate) fn skip_after(items: &[Item], from: usize, target: &str) -> usize {
    let id: Option<u32> = target.parse().ok();
    for (j, it) in items.iter().enumerate().skip(from) {
        match it {
            Item::Marker(m) if m == target => return j + 1,
            Item::Rule(r) if id == Some(r.id) => return j + 1,
            _ => {}
        }
    }
    items.len()
}
