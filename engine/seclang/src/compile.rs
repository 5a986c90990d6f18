//! Directives → a compiled rule set: rules of the request phases in order, chains linked,
//! operators and transformation chains built once, removals and target updates applied.

use std::collections::HashMap;

use crate::ops::{Op, Param};
use crate::parse::{self, Directive, RawAction};
use crate::transform::Transform;
use crate::vars::{self, Selector, Target, Var};
use crate::Error;

/// What a rule does to the transaction's flow when it matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disruptive {
    /// `pass`, and `block` under the anomaly-scoring default action.
    Pass,
    /// `deny`, `drop`, or `block` under a denying default action: the transaction is refused.
    Deny,
    /// `allow`: stop evaluating, accept.
    Allow,
}

#[derive(Debug, Clone)]
pub enum SetVar {
    Set(Param, Param),
    Add(Param, Param),
    Sub(Param, Param),
    Del(Param),
}

#[derive(Debug, Clone)]
pub enum Ctl {
    /// `ctl:ruleEngine=Off` stops evaluation; `On`/`DetectionOnly` change nothing here.
    EngineOff,
    RemoveById(Vec<(u32, u32)>),
    RemoveByTag(String),
    RemoveTargetById(Vec<(u32, u32)>, Var, Selector),
    RemoveTargetByTag(String, Var, Selector),
    /// Accepted and without effect in this engine (body processors, audit log settings, …).
    Ignored,
}

/// One compiled rule (a chain's members hang off `chain`).
#[derive(Debug)]
pub struct Rule {
    pub id: u32,
    pub phase: u8,
    pub targets: Vec<Target>,
    pub op: Op,
    pub negated: bool,
    pub transforms: Vec<Transform>,
    /// Id of each prefix of `transforms` in the set's prefix table (for the per-transaction
    /// transformation cache); `transforms.len()` entries.
    pub prefix_ids: Vec<u32>,
    /// Where an `@rx` with required literals sits in the prefilters (see `prefilter`).
    pub prefilter: Option<Prefilter>,
    /// Byte classes (`transform::flags`) its transformations act on.
    pub sensitive: u16,
    /// The parts (see [`part_of`]) the rule reads, so a transaction can skip it when no value
    /// there can pass its prefilter; 0 when it reads something else (TX, counts).
    pub parts: u64,
    /// Its target list's number among the set's distinct lists whose values do not change
    /// during a transaction ([`group_targets`]); `u32::MAX` when they may (TX, matched values,
    /// counts).
    pub target_group: u32,
    /// Its bit in each value's memo of rules known not to match it ([`number_verdicts`]);
    /// `u32::MAX` when its verdict is not a function of the value alone (an operator with
    /// macros, no targets).
    pub verdict: u32,
    pub capture: bool,
    pub multi_match: bool,
    pub setvars: Vec<SetVar>,
    pub ctls: Vec<Ctl>,
    pub disruptive: Disruptive,
    pub skip_after: Option<String>,
    pub skip: u32,
    pub chain: Option<Box<Rule>>,
    pub msg: Option<Param>,
    pub logdata: Option<Param>,
    pub severity: Option<u8>,
    pub tags: Vec<String>,
    pub paranoia: Option<u8>,
    pub file: String,
    pub line: usize,
}

/// A rule or a marker (`SecMarker`), in the order of a phase.
#[derive(Debug)]
pub enum Item {
    Rule(Box<Rule>),
    Marker(String),
}

/// The compiled set: the items of phase 1 (request headers) and 2 (request body).
#[derive(Debug, Default)]
pub struct Compiled {
    pub phases: [Vec<Item>; 2],
    pub warnings: Vec<String>,
    pub prefixes: u32,
    pub groups: Vec<Group>,
    /// The literals of every prefiltered rule, for raw values: literal → rule bits (by
    /// `Prefilter::global`, 64 to a word).
    pub global: Option<(aho_corasick::AhoCorasick, Vec<LiteralBits>)>,
    /// The single-byte literals among them (lower-cased), tested against a value's set of bytes
    /// ([`byte_set`]) instead of in the automaton (see [`Group::bytes`]).
    pub global_bytes: Vec<(u8, LiteralBits)>,
    pub global_words: usize,
    /// Distinct target lists whose values a transaction can collect once and share (see
    /// [`group_targets`]).
    pub target_groups: u32,
    /// Rules (chain members included) whose verdict on a value depends on that value alone
    /// (see [`number_verdicts`]).
    pub verdicts: u32,
}

/// Numbers every rule's target list (chains included) among the set's distinct lists, so that a
/// transaction collects the values of a list once (the CRS repeats a few lists, such as
/// `REQUEST_COOKIES|!REQUEST_COOKIES:/__utm/|REQUEST_COOKIES_NAMES|ARGS_NAMES|ARGS|XML:/*`, on
/// most of its rules). Lists that read what changes while rules run (TX, the matched values) or
/// count are left out. Run last: exclusions added by later directives change the lists.
pub fn group_targets(c: &mut Compiled) {
    use crate::vars::Var;
    let mut ids: std::collections::HashMap<String, u32> = std::collections::HashMap::new();
    let mut visit = |r: &mut Rule| {
        let stable = r.targets.iter().all(|t| {
            !t.count
                && !matches!(
                    t.var,
                    Var::Tx
                        | Var::MatchedVar
                        | Var::MatchedVarName
                        | Var::MatchedVars
                        | Var::MatchedVarsNames
                )
        });
        if stable && !r.targets.is_empty() {
            let n = ids.len() as u32;
            r.target_group = *ids.entry(format!("{:?}", r.targets)).or_insert(n);
        } else {
            r.target_group = u32::MAX;
        }
    };
    for phase in &mut c.phases {
        for item in phase.iter_mut() {
            if let Item::Rule(r) = item {
                let mut m: Option<&mut Rule> = Some(r);
                while let Some(x) = m {
                    visit(x);
                    m = x.chain.as_deref_mut();
                }
            }
        }
    }
    c.target_groups = ids.len() as u32;
}

/// Numbers every rule (chain members included) whose operator's verdict on a value, after the
/// rule's transformations, depends on nothing but that value: no macro in its argument, targets
/// to read. Such a verdict can be remembered across transactions (`eval`'s value memo). Run
/// after folding: it may change operators.
pub fn number_verdicts(c: &mut Compiled) {
    use crate::ops::Part;
    let literal = |p: &crate::ops::Param| p.parts.iter().all(|x| matches!(x, Part::Lit(_)));
    let mut n = 0u32;
    for phase in &mut c.phases {
        for item in phase.iter_mut() {
            if let Item::Rule(r) = item {
                let mut m: Option<&mut Rule> = Some(r);
                while let Some(x) = m {
                    let pure = !x.targets.is_empty()
                        && match &x.op {
                            Op::RxMacro(..) => false,
                            Op::Str(_, p) | Op::Num(_, p) => literal(p),
                            _ => true,
                        };
                    x.verdict = if pure {
                        n += 1;
                        n - 1
                    } else {
                        u32::MAX
                    };
                    m = x.chain.as_deref_mut();
                }
            }
        }
    }
    c.verdicts = n;
}

/// Parts 0..16 are the keyed collections' values (even) and keys (odd), by `eval::Col`; part
/// 16 + n is the single variable with discriminant n.
pub const KEYED_PARTS: u32 = 16;

/// The parts a target reads, or None if it reads what the prefilter does not see.
pub fn part_of(t: &crate::vars::Target) -> Option<u64> {
    use crate::vars::Var::*;
    if t.count {
        return None;
    }
    // eval::Col order: ArgsGet, ArgsPost, Headers, Cookies, Files, PartHeaders, Xml, XmlAttrs.
    let keyed = |cols: &[u32], name: u32| cols.iter().fold(0u64, |m, c| m | 1 << (c * 2 + name));
    Some(match t.var {
        Args => keyed(&[0, 1], 0),
        ArgsNames => keyed(&[0, 1], 1),
        ArgsGet => keyed(&[0], 0),
        ArgsGetNames => keyed(&[0], 1),
        ArgsPost => keyed(&[1], 0),
        ArgsPostNames => keyed(&[1], 1),
        RequestHeaders => keyed(&[2], 0),
        RequestHeadersNames => keyed(&[2], 1),
        RequestCookies => keyed(&[3], 0),
        RequestCookiesNames => keyed(&[3], 1),
        Files | MultipartFilename => keyed(&[4], 0),
        FilesNames | MultipartName => keyed(&[4], 1),
        MultipartPartHeaders => keyed(&[5], 0),
        Xml => keyed(&[6, 7], 0),
        Tx | MatchedVar | MatchedVars | MatchedVarName | MatchedVarsNames => return None,
        Unsupported => 0,
        v => {
            let n = KEYED_PARTS + v as u32;
            if n >= 64 {
                return None;
            }
            1 << n
        }
    })
}

/// The rules (word index, bits) that need one literal.
pub type LiteralBits = Vec<(u32, u64)>;

/// Literals of one rule: (its index in evaluation order, its literals).
type RuleLiterals = (usize, Vec<Vec<u8>>);

/// A rule's place in the prefilters.
#[derive(Debug, Clone, Copy)]
pub struct Prefilter {
    /// Group of its transformation chain, and its bit there.
    pub group: u32,
    pub bit: u32,
    /// Its bit in the set-wide automaton over raw values.
    pub global: u32,
    /// Byte classes (`transform::flags`) its chain is sensitive to: a value with none of them
    /// is judged by the raw-value automaton.
    pub sensitive: u16,
}

/// The required literals of up to 128 `@rx` rules that share a transformation chain, in one
/// automaton: one pass over a transformed value tells which of them can match it.
#[derive(Debug)]
pub struct Group {
    /// The literals of two bytes or more; `None` when the group has no other.
    pub ac: Option<aho_corasick::AhoCorasick>,
    /// For each literal of the automaton, the rules (bits) that need it.
    pub pattern_bits: Vec<u128>,
    /// Single-byte literals (lower-cased) and the rules that need them. Some CRS patterns
    /// require no more than a letter (`e`, `t`, `.`…): in the automaton such a literal matches
    /// at almost every byte of ordinary text, and its overlapping search spent most of its time
    /// reporting them (92% of all matches over the benign shop requests at PL1). Tested
    /// against the value's set of bytes ([`byte_set`]) instead.
    pub bytes: Vec<(u8, u128)>,
}

/// The bytes of a value, ASCII lower-cased (as the literals are), as a 256-bit set.
pub fn byte_set(v: &[u8]) -> [u64; 4] {
    let mut s = [0u64; 4];
    for &c in v {
        let c = c.to_ascii_lowercase();
        s[(c >> 6) as usize] |= 1u64 << (c & 63);
    }
    s
}

/// Whether `c` is in a set made by [`byte_set`].
pub fn has_byte(s: &[u64; 4], c: u8) -> bool {
    s[(c >> 6) as usize] & (1u64 << (c & 63)) != 0
}

/// Splits literals (with what each maps to) into the single-byte ones, lower-cased, tested
/// against a value's [`byte_set`], and the longer ones, which go into an automaton.
#[allow(clippy::type_complexity)]
fn split_single_bytes<B>(lits: Vec<Vec<u8>>, bits: Vec<B>) -> (Vec<(u8, B)>, Vec<Vec<u8>>, Vec<B>) {
    let (mut bytes, mut long, mut long_bits) = (Vec::new(), Vec::new(), Vec::new());
    for (l, b) in lits.into_iter().zip(bits) {
        match l[..] {
            [c] => bytes.push((c.to_ascii_lowercase(), b)),
            _ => {
                long.push(l);
                long_bits.push(b);
            }
        }
    }
    (bytes, long, long_bits)
}

/// Gives every non-negated `@rx` rule (chain members included) with required literals a bit in
/// the group of its transformation chain.
fn prefilters(c: &mut Compiled) {
    fn visit(r: &mut Rule, f: &mut impl FnMut(&mut Rule)) {
        f(r);
        if let Some(next) = r.chain.as_deref_mut() {
            visit(next, f);
        }
    }
    let mut each = |f: &mut dyn FnMut(&mut Rule)| {
        for p in &mut c.phases {
            for it in p.iter_mut() {
                if let Item::Rule(r) = it {
                    visit(r, &mut |x| f(x));
                }
            }
        }
    };
    // (byte classes its chain acts on, its literals, its chain)
    #[allow(clippy::type_complexity)]
    let mut rules: Vec<(u16, Option<Vec<Vec<u8>>>, u32)> = Vec::new();
    each(&mut |r| {
        let literals = match &r.op {
            _ if r.negated => None,
            Op::Rx(crate::ops::Rx::Fast(re)) => crate::prefilter::required(re.as_str()),
            Op::Rx(crate::ops::Rx::Backtracking(re)) => {
                crate::prefilter::required_backtracking(re.as_str())
            }
            // A phrase list is its own literal set.
            Op::Pm(_, words) if !words.is_empty() => Some(words.clone()),
            _ => None,
        };
        let sensitive = r.transforms.iter().fold(0, |m, t| m | t.sensitive());
        rules.push((
            sensitive,
            literals,
            r.prefix_ids.last().copied().unwrap_or(u32::MAX),
        ));
    });
    let mut by_chain: HashMap<u32, Vec<RuleLiterals>> = HashMap::new();
    for (k, (_, lits, chain)) in rules.iter_mut().enumerate() {
        if let Some(lits) = lits.take() {
            by_chain.entry(*chain).or_default().push((k, lits));
        }
    }
    let mut assign: Vec<Option<Prefilter>> = vec![None; rules.len()];
    let mut global_lits: Vec<Vec<u8>> = Vec::new();
    let mut global_bits: Vec<Vec<(u32, u64)>> = Vec::new();
    let mut next_global = 0u32;
    let mut chains: Vec<_> = by_chain.into_iter().collect();
    chains.sort_by_key(|(c, _)| *c);
    for (_, members) in chains {
        for part in members.chunks(128) {
            let mut lits: Vec<Vec<u8>> = Vec::new();
            let mut bits: Vec<u128> = Vec::new();
            for (bit, (_, ls)) in part.iter().enumerate() {
                for l in ls {
                    match lits.iter().position(|x| x == l) {
                        Some(p) => bits[p] |= 1 << bit,
                        None => {
                            lits.push(l.clone());
                            bits.push(1 << bit);
                        }
                    }
                }
            }
            // A DFA: one table lookup per byte in the overlapping search that runs per value and
            // group (measured on the CRS at PL2 over benign shop requests: 0.88× the time of
            // the contiguous NFA the builder picks by itself, for about 18 MB more across the
            // CRS's groups and 0.13 s more to load).
            let (bytes, long, long_bits) = split_single_bytes(lits, bits);
            let ac = if long.is_empty() {
                None
            } else {
                let Ok(ac) = aho_corasick::AhoCorasickBuilder::new()
                    .kind(Some(aho_corasick::AhoCorasickKind::DFA))
                    .ascii_case_insensitive(true)
                    .match_kind(aho_corasick::MatchKind::Standard)
                    .build(&long)
                else {
                    continue;
                };
                Some(ac)
            };
            let group = c.groups.len() as u32;
            c.groups.push(Group {
                ac,
                pattern_bits: long_bits,
                bytes,
            });
            for (bit, (k, ls)) in part.iter().enumerate() {
                let global = next_global;
                next_global += 1;
                for l in ls {
                    let p = match global_lits.iter().position(|x| x == l) {
                        Some(p) => p,
                        None => {
                            global_lits.push(l.clone());
                            global_bits.push(Vec::new());
                            global_lits.len() - 1
                        }
                    };
                    let (w, b) = (global / 64, 1u64 << (global % 64));
                    match global_bits[p].iter_mut().find(|(x, _)| *x == w) {
                        Some(e) => e.1 |= b,
                        None => global_bits[p].push((w, b)),
                    }
                }
                assign[*k] = Some(Prefilter {
                    group,
                    bit: bit as u32,
                    global,
                    sensitive: rules[*k].0,
                });
            }
        }
    }
    let mut k = 0;
    let mut groups = std::mem::take(&mut c.groups);
    let mut each = |f: &mut dyn FnMut(&mut Rule)| {
        for p in &mut c.phases {
            for it in p.iter_mut() {
                if let Item::Rule(r) = it {
                    visit(r, &mut |x| f(x));
                }
            }
        }
    };
    each(&mut |r| {
        r.prefilter = assign[k];
        k += 1;
        r.parts = r
            .targets
            .iter()
            .map(part_of)
            .try_fold(0u64, |m, p| p.map(|p| m | p))
            .unwrap_or(0);
    });
    c.groups.append(&mut groups);
    c.global_words = next_global.div_ceil(64) as usize;
    let (bytes, global_lits, global_bits) = split_single_bytes(global_lits, global_bits);
    c.global_bytes = bytes;
    c.global = aho_corasick::AhoCorasickBuilder::new()
        .kind(Some(aho_corasick::AhoCorasickKind::DFA))
        .ascii_case_insensitive(true)
        .match_kind(aho_corasick::MatchKind::Standard)
        .build(&global_lits)
        .ok()
        .map(|ac| (ac, global_bits));
}

fn severity(s: &str) -> Option<u8> {
    Some(match s.to_ascii_uppercase().as_str() {
        "EMERGENCY" | "0" => 0,
        "ALERT" | "1" => 1,
        "CRITICAL" | "2" => 2,
        "ERROR" | "3" => 3,
        "WARNING" | "4" => 4,
        "NOTICE" | "5" => 5,
        "INFO" | "6" => 6,
        "DEBUG" | "7" => 7,
        _ => return None,
    })
}

/// Parses `942100`, `942100-942199`, `942100 942110` into ranges.
pub fn id_ranges(s: &str) -> Result<Vec<(u32, u32)>, String> {
    let mut v = Vec::new();
    for part in s
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|p| !p.is_empty())
    {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let a: u32 = a
            .trim()
            .parse()
            .map_err(|_| format!("bad rule id {part}"))?;
        let b: u32 = b
            .trim()
            .parse()
            .map_err(|_| format!("bad rule id {part}"))?;
        v.push((a.min(b), a.max(b)));
    }
    Ok(v)
}

fn one_target(s: &str) -> Result<(Var, Selector), String> {
    let s = s.trim().trim_start_matches('!');
    let (name, sel) = s.split_once(':').unwrap_or((s, ""));
    let var = Var::by_name(name).ok_or_else(|| format!("unknown variable {name}"))?;
    Ok((var, Selector::parse(sel)?))
}

fn ctl(v: &str) -> Result<Ctl, String> {
    let (k, val) = v.split_once('=').ok_or_else(|| format!("bad ctl {v}"))?;
    Ok(match k.trim().to_ascii_lowercase().as_str() {
        "ruleengine" => {
            if val.trim().eq_ignore_ascii_case("off") {
                Ctl::EngineOff
            } else {
                Ctl::Ignored
            }
        }
        "ruleremovebyid" => Ctl::RemoveById(id_ranges(val)?),
        "ruleremovebytag" => Ctl::RemoveByTag(val.trim().to_string()),
        "ruleremovetargetbyid" => {
            let (ids, t) = val.split_once(';').ok_or_else(|| format!("bad ctl {v}"))?;
            let (var, sel) = one_target(t)?;
            Ctl::RemoveTargetById(id_ranges(ids)?, var, sel)
        }
        "ruleremovetargetbytag" => {
            let (tag, t) = val.split_once(';').ok_or_else(|| format!("bad ctl {v}"))?;
            let (var, sel) = one_target(t)?;
            Ctl::RemoveTargetByTag(tag.trim().to_string(), var, sel)
        }
        _ => Ctl::Ignored,
    })
}

fn setvar(v: &str) -> Result<SetVar, String> {
    let v = v.trim();
    if let Some(name) = v.strip_prefix('!') {
        return Ok(SetVar::Del(Param::parse(&name.to_ascii_lowercase())));
    }
    let (name, value) = v.split_once('=').unwrap_or((v, "1"));
    if !name.to_ascii_lowercase().starts_with("tx.") {
        // Persistent collections (ip., session., global.) are not kept here.
        return Err(String::new());
    }
    let name = Param::parse(&name.to_ascii_lowercase());
    Ok(if let Some(n) = value.strip_prefix('+') {
        SetVar::Add(name, Param::parse(n))
    } else if let Some(n) = value.strip_prefix('-') {
        SetVar::Sub(name, Param::parse(n))
    } else {
        SetVar::Set(name, Param::parse(value))
    })
}

/// Settings of one rule before its operator is known.
#[derive(Default)]
struct Meta {
    id: u32,
    phase: Option<u8>,
    chain: bool,
    transforms: Vec<Transform>,
    capture: bool,
    multi_match: bool,
    setvars: Vec<SetVar>,
    ctls: Vec<Ctl>,
    disruptive: Option<Disruptive>,
    skip_after: Option<String>,
    skip: u32,
    msg: Option<Param>,
    logdata: Option<Param>,
    severity: Option<u8>,
    tags: Vec<String>,
}

fn meta(
    actions: &[RawAction],
    default_block: Disruptive,
    warnings: &mut Vec<String>,
) -> Result<Meta, String> {
    let mut m = Meta::default();
    for a in actions {
        let v = a.value.as_deref().unwrap_or("");
        match a.name.to_ascii_lowercase().as_str() {
            "id" => m.id = v.trim().parse().map_err(|_| format!("bad id {v}"))?,
            "phase" => {
                m.phase = Some(match v.trim() {
                    "request" => 2,
                    "response" => 4,
                    "logging" => 5,
                    n => n.parse().map_err(|_| format!("bad phase {n}"))?,
                })
            }
            "chain" => m.chain = true,
            "t" => {
                if v.eq_ignore_ascii_case("none") {
                    m.transforms.clear();
                } else {
                    match Transform::by_name(v) {
                        Some(t) => m.transforms.push(t),
                        None => {
                            let sha =
                                v.eq_ignore_ascii_case("sha1") || v.eq_ignore_ascii_case("md5");
                            if !sha {
                                return Err(format!("unknown transformation t:{v}"));
                            }
                            // Hashes are only used to compare with other hashes: leaving them
                            // out compares the values themselves.
                            warnings.push(format!(
                                "t:{v} is not supported; values are compared unhashed"
                            ));
                        }
                    }
                }
            }
            "capture" => m.capture = true,
            "multimatch" => m.multi_match = true,
            "setvar" => match setvar(v) {
                Ok(s) => m.setvars.push(s),
                Err(e) if e.is_empty() => {}
                Err(e) => return Err(e),
            },
            "ctl" => m.ctls.push(ctl(v)?),
            "pass" => m.disruptive = Some(Disruptive::Pass),
            "block" => m.disruptive = Some(default_block),
            "deny" | "drop" | "redirect" => m.disruptive = Some(Disruptive::Deny),
            "allow" => m.disruptive = Some(Disruptive::Allow),
            "skipafter" => m.skip_after = Some(v.trim().to_string()),
            "skip" => m.skip = v.trim().parse().unwrap_or(0),
            "msg" => m.msg = Some(Param::parse(v)),
            "logdata" => m.logdata = Some(Param::parse(v)),
            "severity" => m.severity = severity(v.trim()),
            "tag" => m.tags.push(v.to_string()),
            // Metadata and logging, and actions on persistent state this engine does not keep.
            "ver"
            | "rev"
            | "maturity"
            | "accuracy"
            | "log"
            | "nolog"
            | "auditlog"
            | "noauditlog"
            | "status"
            | "expirevar"
            | "initcol"
            | "setsid"
            | "setuid"
            | "exec"
            | "sanitisearg"
            | "sanitisematched"
            | "sanitizearg"
            | "sanitizematched"
            | "sanitisematchedbytes"
            | "append"
            | "prepend"
            | "proxy"
            | "pause"
            | "deprecatevar"
            | "xmlns"
            | "setenv"
            | "setrsc"
            | "multimatchs" => {}
            other => warnings.push(format!("action {other} is ignored")),
        }
    }
    Ok(m)
}

/// Builds the set from directives; `data` reads the data files of `@pmFromFile` and friends.
pub struct Builder<'a> {
    data: &'a dyn Fn(&str) -> Result<String, String>,
    out: Compiled,
    errors: Vec<Error>,
    default_block: [Disruptive; 2],
    /// Chain being built: the starter and its members so far.
    pending: Vec<(Rule, bool)>,
    prefix_table: HashMap<Vec<Transform>, u32>,
}

impl<'a> Builder<'a> {
    pub fn new(data: &'a dyn Fn(&str) -> Result<String, String>) -> Builder<'a> {
        Builder {
            data,
            out: Compiled::default(),
            errors: Vec::new(),
            default_block: [Disruptive::Pass; 2],
            pending: Vec::new(),
            prefix_table: HashMap::new(),
        }
    }

    pub fn file(&mut self, name: &str, text: &str) {
        match parse::directives(name, text) {
            Ok(ds) => {
                for d in ds {
                    if let Err(m) = self.directive(&d) {
                        self.errors.push(Error::at(&d.file, d.line, m));
                    }
                }
            }
            Err(e) => self.errors.push(e),
        }
    }

    pub fn finish(mut self) -> Result<Compiled, Vec<Error>> {
        if let Some((r, _)) = self.pending.first() {
            let (f, l) = (r.file.clone(), r.line);
            self.errors
                .push(Error::at(&f, l, "chain without a following rule".into()));
        }
        if self.errors.is_empty() {
            self.out.prefixes = self.prefix_table.len() as u32;
            if std::env::var_os("SECLANG_NO_PREFILTER").is_none() {
                prefilters(&mut self.out);
            }
            Ok(self.out)
        } else {
            Err(self.errors)
        }
    }

    fn prefix_ids(&mut self, ts: &[Transform]) -> Vec<u32> {
        (1..=ts.len())
            .map(|n| {
                let next = self.prefix_table.len() as u32;
                *self.prefix_table.entry(ts[..n].to_vec()).or_insert(next)
            })
            .collect()
    }

    fn directive(&mut self, d: &Directive) -> Result<(), String> {
        let arg = |i: usize| d.args.get(i).map(String::as_str).unwrap_or("");
        match d.name.to_ascii_lowercase().as_str() {
            "secrule" => {
                if d.args.len() < 2 {
                    return Err("SecRule needs variables and an operator".into());
                }
                self.rule(d, Some((arg(0), arg(1))), arg(2))
            }
            "secaction" => self.rule(d, None, arg(0)),
            "secmarker" => {
                let name = arg(0).to_string();
                for p in &mut self.out.phases {
                    p.push(Item::Marker(name.clone()));
                }
                Ok(())
            }
            "secdefaultaction" => {
                let acts = parse::actions(arg(0))?;
                let m = meta(&acts, Disruptive::Pass, &mut self.out.warnings)?;
                let block = match m.disruptive {
                    Some(Disruptive::Deny) => Disruptive::Deny,
                    _ => Disruptive::Pass,
                };
                match m.phase {
                    Some(1) => self.default_block[0] = block,
                    Some(2) => self.default_block[1] = block,
                    _ => {}
                }
                Ok(())
            }
            "secruleremovebyid" => {
                let ranges = id_ranges(&d.args.join(" "))?;
                self.remove(|r| ranges.iter().any(|&(a, b)| r.id >= a && r.id <= b));
                Ok(())
            }
            "secruleremovebytag" => {
                let tag = arg(0).to_string();
                self.remove(|r| r.tags.iter().any(|t| t == &tag));
                Ok(())
            }
            "secruleremovebymsg" => {
                let msg = arg(0).as_bytes().to_vec();
                self.remove(|r| {
                    r.msg
                        .as_ref()
                        .and_then(Param::literal)
                        .is_some_and(|m| m == msg)
                });
                Ok(())
            }
            "secruleupdatetargetbyid" => {
                let ranges = id_ranges(arg(0))?;
                let update = arg(1).to_string();
                self.update_targets(
                    |r| ranges.iter().any(|&(a, b)| r.id >= a && r.id <= b),
                    &update,
                )
            }
            "secruleupdatetargetbytag" => {
                let tag = arg(0).to_string();
                let update = arg(1).to_string();
                self.update_targets(|r| r.tags.iter().any(|t| t == &tag), &update)
            }
            "secruleupdateactionbyid" => {
                let id: u32 = arg(0)
                    .split(':')
                    .next()
                    .unwrap_or("")
                    .parse()
                    .map_err(|_| format!("bad id {}", arg(0)))?;
                let acts = parse::actions(arg(1))?;
                let m = meta(&acts, self.default_block[1], &mut self.out.warnings)?;
                for r in self.rules_mut() {
                    if r.id == id {
                        if let Some(dis) = m.disruptive {
                            r.disruptive = dis;
                        }
                        if m.severity.is_some() {
                            r.severity = m.severity;
                        }
                        if m.msg.is_some() {
                            r.msg = m.msg.clone();
                        }
                        r.tags.extend(m.tags.iter().cloned());
                        r.setvars.extend(m.setvars.iter().cloned());
                    }
                }
                Ok(())
            }
            "include" => Err("Include is not followed: list the files to load instead".into()),
            // Engine settings of a web-server module: nothing to do for a request judge.
            _ => {
                self.out.warnings.push(format!(
                    "{}:{}: directive {} is ignored",
                    d.file, d.line, d.name
                ));
                Ok(())
            }
        }
    }

    fn rules_mut(&mut self) -> impl Iterator<Item = &mut Rule> {
        self.out
            .phases
            .iter_mut()
            .flat_map(|p| p.iter_mut())
            .filter_map(|i| match i {
                Item::Rule(r) => Some(&mut **r),
                Item::Marker(_) => None,
            })
    }

    fn remove(&mut self, f: impl Fn(&Rule) -> bool) {
        for p in &mut self.out.phases {
            p.retain(|i| !matches!(i, Item::Rule(r) if f(r)));
        }
    }

    fn update_targets(&mut self, f: impl Fn(&Rule) -> bool, update: &str) -> Result<(), String> {
        let adds = vars::parse_targets(update)?;
        let mut excl = Vec::new();
        for part in update.split('|') {
            if let Some(p) = part.trim().strip_prefix('!') {
                excl.push(one_target(p)?);
            }
        }
        for r in self.rules_mut() {
            if !f(r) {
                continue;
            }
            for (v, s) in &excl {
                for t in r.targets.iter_mut().filter(|t| t.var == *v) {
                    t.exclusions.push(s.clone());
                }
            }
            r.targets.extend(adds.iter().cloned());
        }
        Ok(())
    }

    fn rule(
        &mut self,
        d: &Directive,
        vo: Option<(&str, &str)>,
        actions: &str,
    ) -> Result<(), String> {
        let acts = parse::actions(actions)?;
        let in_chain = !self.pending.is_empty();
        let phase_hint = self.pending.first().map(|(r, _)| r.phase);
        let def = self.default_block[(phase_hint.unwrap_or(2).clamp(1, 2) - 1) as usize];
        let m = meta(&acts, def, &mut self.out.warnings)?;
        let (targets, op, negated) = match vo {
            Some((v, o)) => {
                let targets = vars::parse_targets(v)?;
                let (neg, o) = match o.strip_prefix('!') {
                    Some(r) => (true, r),
                    None => (false, o),
                };
                let (name, arg) = match o.strip_prefix('@') {
                    Some(r) => match r.split_once(|c: char| c.is_whitespace()) {
                        Some((n, a)) => (n, a.trim_start()),
                        None => (r, ""),
                    },
                    None => ("rx", o),
                };
                let op = Op::build(name, arg, self.data)?;
                if crate::ops::NEVER.contains(&name.to_ascii_lowercase().as_str()) {
                    self.out.warnings.push(format!(
                        "{}:{}: @{name} is not available here; the rule never matches",
                        d.file, d.line
                    ));
                }
                (targets, op, neg)
            }
            None => (Vec::new(), Op::Unconditional, false),
        };
        let phase = if in_chain {
            phase_hint.unwrap_or(2)
        } else {
            m.phase.unwrap_or(2)
        };
        let prefix_ids = self.prefix_ids(&m.transforms);
        let sensitive = m.transforms.iter().fold(0, |a, t| a | t.sensitive());
        let paranoia = m.tags.iter().find_map(|t| {
            t.strip_prefix("paranoia-level/")
                .and_then(|n| n.parse().ok())
        });
        let rule = Rule {
            id: m.id,
            phase,
            targets,
            op,
            negated,
            transforms: m.transforms,
            prefix_ids,
            prefilter: None,
            parts: 0,
            target_group: u32::MAX,
            verdict: u32::MAX,
            sensitive,
            capture: m.capture,
            multi_match: m.multi_match,
            setvars: m.setvars,
            ctls: m.ctls,
            disruptive: m.disruptive.unwrap_or(Disruptive::Pass),
            skip_after: m.skip_after,
            skip: m.skip,
            chain: None,
            msg: m.msg,
            logdata: m.logdata,
            severity: m.severity,
            tags: m.tags,
            paranoia,
            file: d.file.clone(),
            line: d.line,
        };
        if !in_chain && rule.id == 0 {
            return Err("rule without an id".into());
        }
        self.pending.push((rule, m.chain));
        if m.chain {
            return Ok(());
        }
        // Link the chain back to front.
        let mut members = std::mem::take(&mut self.pending);
        let (mut tail, _) = members.pop().unwrap();
        while let Some((mut r, _)) = members.pop() {
            r.chain = Some(Box::new(tail));
            tail = r;
        }
        match tail.phase {
            1 => self.out.phases[0].push(Item::Rule(Box::new(tail))),
            2 => self.out.phases[1].push(Item::Rule(Box::new(tail))),
            // Response and logging phases are not a request judge's business.
            _ => {}
        }
        Ok(())
    }
}
