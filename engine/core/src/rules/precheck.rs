//! The native pre-check: answers "this rule cannot match this request" without running Rhai.
//!
//! Most rules are a few `let`s and one `if … else if …` whose conditions, on ordinary traffic,
//! are false: `req.user_agent == ""`, `in_list("bad-methods", req.method)`, `waf(req) == "sqli"`.
//! Running such a rule through the interpreter costs 1–2 µs (each getter, operator and helper is
//! a resolved, boxed call); reading the same fields here costs a few dozen nanoseconds.
//!
//! Compiled once per rule from its optimised AST into a small tree of its own. At decision time
//! it evaluates the `let` initialisers and the conditions in the interpreter's order, with its
//! short-circuits, over a small closed set of expressions: literals, `req` and its fields,
//! `param` and `header`, `len`, `type_of`, comparisons of two strings, two integers or two
//! booleans, `!`, `&&`, `||`, `+` of two strings, the helpers that only read the request and the
//! lists (`in_list`, `contains_any`, `ip_in`, `waf`, `waf_part`, `waf_value`), and the counting
//! helpers (`rate_limit`, `count`, `distinct`, `reputation`). Only when every condition is a
//! definite `false` is the rule skipped, and then the interpreter would have answered nothing
//! too. Anything else (an unsupported expression, values of mixed types, a missing list, a
//! string over the size limit, a helper's error) ends the pre-check with "run the rule", so
//! errors and outcomes always come from Rhai itself.
//!
//! The counting helpers change state, so each must run once per decision whoever runs it. The
//! pre-check calls the very function the interpreter would, and records the answer; when it then
//! hands the rule to the interpreter, which makes the same calls in the same order (it evaluates
//! in that order, and stops where the pre-check stopped or later), each recorded call is answered
//! from the record instead of being made again (`super::with_replay`). Counting calls inside a
//! `.` chain (`req.param(count(…))`) are not pre-checked: there the interpreter's order of
//! evaluation is not the obvious one.

use crate::store::limits::Planned;
use rhai::{ASTFlags, Dynamic, Expr, FnCallExpr, ImmutableString, Stmt, AST};

use super::helpers::{Counting, Recorded};
use super::register::Lists;
use super::request::{or_empty, waf_value, ReqData};
use super::state::RuleState;

/// What the pre-check found.
#[derive(Debug)]
pub(super) enum Checked {
    /// The rule answers nothing for this request: every condition is `false`.
    RuledOut,
    /// Run the rule, with the counting calls the pre-check made (in order), to be answered from
    /// this record.
    Run(Vec<Recorded>),
}

/// A rule's pre-check: its leading `let`s and the conditions of its final `if` chain, compiled.
#[derive(Debug, Clone)]
pub(super) struct Precheck {
    lets: Vec<P>,
    conditions: Vec<P>,
}

/// A compiled pre-check expression. Names are resolved when the rule compiles (variables to
/// `let` slots, properties to request fields, calls to helpers), and the tree is small and laid
/// out together: walking Rhai's own AST instead missed the cache on nearly every node.
#[derive(Debug, Clone)]
enum P {
    Unit,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(Box<str>),
    Req,
    /// The value of the `let` in this slot.
    Var(usize),
    Field(Box<P>, Getter),
    /// `req.cleared`.
    Cleared(Box<P>),
    Len(Box<P>),
    Param(Box<P>, Box<P>),
    Header(Box<P>, Box<P>),
    Not(Box<P>),
    And(Vec<P>),
    Or(Vec<P>),
    Cmp(Op, Box<P>, Box<P>),
    TypeOf(Box<P>),
    /// `waf(r)`, or `waf_part(r)` when `true`.
    Waf(Box<P>, bool),
    /// `crs(r)`.
    Crs(Box<P>),
    WafValue(Box<P>),
    List(ListFn, Box<P>, Box<P>),
    /// `a + b` of two strings.
    Concat(Box<P>, Box<P>),
    /// A counting helper and its arguments.
    Counting(Counting, Vec<P>),
    /// Something the pre-check does not read: reaching it ends the pre-check ("run the rule").
    Stop,
}

/// The largest pre-check, in nodes: far below the interpreter's operation limit for the same
/// expressions.
const MAX_NODES: usize = 1_000;

impl P {
    /// Nodes in this tree.
    fn size(&self) -> usize {
        1 + match self {
            P::Field(a, _)
            | P::Cleared(a)
            | P::Len(a)
            | P::Not(a)
            | P::TypeOf(a)
            | P::Waf(a, _)
            | P::Crs(a)
            | P::WafValue(a) => a.size(),
            P::Param(a, b)
            | P::Header(a, b)
            | P::Cmp(_, a, b)
            | P::List(_, a, b)
            | P::Concat(a, b) => a.size() + b.size(),
            P::And(list) | P::Or(list) | P::Counting(_, list) => list.iter().map(P::size).sum(),
            P::Unit
            | P::Bool(_)
            | P::Int(_)
            | P::Float(_)
            | P::Str(_)
            | P::Req
            | P::Var(_)
            | P::Stop => 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

#[derive(Debug, Clone, Copy)]
enum ListFn {
    InList,
    ContainsAny,
    IpIn,
}

/// A request field's getter.
pub(super) type Getter = fn(&ReqData) -> &str;

/// The request's string getters (`req.ip`, …): the rule engine registers these, and the pre-check
/// reads the same.
/// The names of [`FIELDS`]: the properties `req` has.
pub(super) const FIELD_NAMES: [&str; 14] = [
    "cleared",
    "app",
    "method",
    "path",
    "query",
    "body",
    "user",
    "ip",
    "device_id",
    "ja3",
    "country",
    "isp",
    "device_type",
    "user_agent",
];

pub(super) const FIELDS: [(&str, Getter); 13] = [
    ("app", |r| r.app()),
    ("method", |r| r.method()),
    ("path", |r| r.path()),
    ("query", |r| &r.request().request.query),
    ("body", |r| {
        r.request().request.body.as_deref().unwrap_or("")
    }),
    ("user", |r| r.user()),
    ("ip", |r| r.ip()),
    ("device_id", |r| r.device_id()),
    ("ja3", |r| r.ja3()),
    ("country", |r| or_empty(&r.request().client.country)),
    ("isp", |r| or_empty(&r.request().client.isp)),
    ("device_type", |r| or_empty(&r.request().client.device_type)),
    ("user_agent", |r| r.user_agent()),
];

/// A value the pre-check can hold. Strings are borrowed from the pre-check or the request where
/// they can be.
#[derive(Debug, Clone)]
enum V<'a> {
    Unit,
    Bool(bool),
    Int(i64),
    /// A float: read as a rate limit's rate and by `type_of`; comparisons of floats go to the
    /// interpreter.
    Float(f64),
    Str(&'a str),
    /// A string made for this decision (a parameter, a header).
    Owned(ImmutableString),
    /// The `req` constant.
    Req,
}

impl V<'_> {
    fn as_str(&self) -> Option<&str> {
        match self {
            V::Str(s) => Some(s),
            V::Owned(s) => Some(s.as_str()),
            _ => None,
        }
    }
}

impl Precheck {
    /// The pre-check of a rule shaped `let …; … if c1 { … } else if c2 { … }` (no final `else`
    /// with statements, nothing after the `if`), or `None` for any other shape. Rules that define
    /// functions get none: their functions may shadow the helpers.
    pub(super) fn compile(ast: &AST) -> Option<Precheck> {
        if ast.has_functions() {
            return None;
        }
        let stmts: Vec<&Stmt> = ast
            .statements()
            .iter()
            .filter(|s| !matches!(s, Stmt::Noop(_)))
            .collect();
        let (last, init) = stmts.split_last()?;
        let mut names: Vec<&str> = Vec::with_capacity(init.len());
        let mut lets = Vec::with_capacity(init.len());
        for s in init {
            match s {
                Stmt::Var(v, _, _) => {
                    // The initialiser sees the earlier lets only.
                    lets.push(compile_expr(&v.1, &names, true));
                    names.push(v.0.name.as_str());
                }
                _ => return None,
            }
        }
        let mut conditions = Vec::new();
        let mut stmt = *last;
        loop {
            let Stmt::If(flow, _) = stmt else {
                return None;
            };
            conditions.push(compile_expr(&flow.expr, &names, true));
            let rest: Vec<&Stmt> = flow
                .branch
                .iter()
                .filter(|s| !matches!(s, Stmt::Noop(_)))
                .collect();
            match rest.as_slice() {
                [] => break,
                [next] => stmt = next,
                _ => return None,
            }
        }
        // The interpreter stops a rule after `max_operations` (20,000) steps; a condition long
        // enough to reach that is an error there, so it is not pre-checked here.
        let nodes: usize = lets.iter().chain(&conditions).map(P::size).sum();
        if nodes > MAX_NODES {
            return None;
        }
        Some(Precheck { lets, conditions })
    }

    /// Evaluates the pre-check for `req`. `state` is the rule set's (`None`: the counting
    /// helpers other than `rate_limit` and `count` do not exist, as in the interpreter).
    pub(super) fn check(
        &self,
        req: &ReqData,
        lists: &Lists,
        max_string: usize,
        state: Option<&RuleState>,
    ) -> Checked {
        // The record's buffer is kept per thread for the next check while rules are ruled out
        // (nearly always): no allocation per rule that counts.
        thread_local! {
            static CALLS: std::cell::Cell<Vec<Recorded>> = const { std::cell::Cell::new(Vec::new()) };
        }
        let mut calls = CALLS.take();
        calls.clear();
        let mut cx = Cx {
            req,
            lists,
            max_string,
            state,
            vars: Vec::with_capacity(self.lets.len()),
            calls,
            plan: None,
        };
        let ruled_out = self.rules_out_in(&mut cx);
        if ruled_out {
            let mut calls = cx.calls;
            calls.clear();
            CALLS.set(calls);
            Checked::RuledOut
        } else {
            Checked::Run(cx.calls)
        }
    }

    /// Plans the rule for `req` as if every rate limit it calls allowed the request, spending
    /// nothing: `Some((calls, false))` — the `rate_limit` calls it makes, in order — when it is
    /// then ruled out (every condition `false`); `Some((calls, true))` when it reaches a
    /// `distinct(key, item, window)` with an item: the calls up to and with it, after which
    /// nothing more can be planned; `None` when it is not ruled out, or when a condition needs
    /// anything else (another counting helper, an unsupported expression, a refusal this
    /// instance remembers, a bad argument). Exact by construction: the calls the rule will make
    /// for real are these, in this order, for as long as the limits allow; the first that
    /// refuses ends the plan's validity, and the rule then runs as usual.
    pub(super) fn plan(
        &self,
        req: &ReqData,
        lists: &Lists,
        max_string: usize,
        state: &RuleState,
    ) -> Option<(Vec<Planned>, bool)> {
        let mut cx = Cx {
            req,
            lists,
            max_string,
            state: Some(state),
            vars: Vec::with_capacity(self.lets.len()),
            calls: Vec::new(),
            plan: Some(Vec::new()),
        };
        let ruled_out = self.rules_out_in(&mut cx);
        let plan = cx.plan?;
        if matches!(plan.last(), Some(Planned::Distinct { .. })) {
            // A distinct count was planned: the calls up to it are the rule's, and nothing after
            // it can be planned (its answer is not known ahead).
            Some((plan, true))
        } else if ruled_out {
            Some((plan, false))
        } else {
            None
        }
    }

    fn rules_out_in<'a>(&'a self, cx: &mut Cx<'a>) -> bool {
        for init in &self.lets {
            match cx.eval(init) {
                Some(v) => cx.vars.push(v),
                None => return false,
            }
        }
        self.conditions
            .iter()
            .all(|c| matches!(cx.eval(c), Some(V::Bool(false))))
    }
}

/// Compiles `e`, where `names` are the `let`s in scope (the last one of a name wins). Counting
/// helpers are compiled only where `counting` (see the module's notes).
fn compile_expr(e: &Expr, names: &[&str], counting: bool) -> P {
    let b = |e: &Expr| Box::new(compile_expr(e, names, counting));
    match e {
        Expr::Unit(_) => P::Unit,
        Expr::BoolConstant(v, _) => P::Bool(*v),
        Expr::IntegerConstant(i, _) => P::Int(*i),
        Expr::FloatConstant(f, _) => P::Float(**f),
        Expr::StringConstant(s, _) => P::Str(s.as_str().into()),
        Expr::Variable(v, _, _) => {
            let name = v.1.as_str();
            match names.iter().rposition(|n| *n == name) {
                Some(slot) => P::Var(slot),
                None if name == "req" => P::Req,
                None => P::Stop,
            }
        }
        Expr::Dot(d, flags, _) if !flags.contains(ASTFlags::NEGATED) => {
            chain(compile_expr(&d.lhs, names, false), &d.rhs, names)
        }
        Expr::And(list, _) => P::And(list.iter().map(|x| *b(x)).collect()),
        Expr::Or(list, _) => P::Or(list.iter().map(|x| *b(x)).collect()),
        Expr::FnCall(call, _) => {
            let args = call.args.as_slice();
            let counted = |f| P::Counting(f, args.iter().map(|x| *b(x)).collect());
            if call.op_token.is_some() {
                let op = match call.name.as_str() {
                    "==" => Op::Eq,
                    "!=" => Op::Ne,
                    "<" => Op::Lt,
                    "<=" => Op::Le,
                    ">" => Op::Gt,
                    ">=" => Op::Ge,
                    "!" => {
                        return match args {
                            [a] => P::Not(b(a)),
                            _ => P::Stop,
                        }
                    }
                    "+" => {
                        return match args {
                            [x, y] => P::Concat(b(x), b(y)),
                            _ => P::Stop,
                        }
                    }
                    _ => return P::Stop,
                };
                return match args {
                    [x, y] => P::Cmp(op, b(x), b(y)),
                    _ => P::Stop,
                };
            }
            match (call.name.as_str(), args) {
                ("type_of", [a]) => P::TypeOf(b(a)),
                ("waf", [r]) => P::Waf(b(r), false),
                ("crs", [r]) => P::Crs(b(r)),
                ("waf_part", [r]) => P::Waf(b(r), true),
                ("waf_value", [v]) => P::WafValue(b(v)),
                ("in_list", [l, v]) => P::List(ListFn::InList, b(l), b(v)),
                ("contains_any", [l, v]) => P::List(ListFn::ContainsAny, b(l), b(v)),
                ("ip_in", [l, v]) => P::List(ListFn::IpIn, b(l), b(v)),
                _ if !counting => P::Stop,
                ("rate_limit", [_, _, _]) => counted(Counting::RateLimit),
                ("count", [_, _]) => counted(Counting::Count),
                ("distinct", [_, _, _]) => counted(Counting::Distinct),
                ("reputation", [_, _]) => counted(Counting::Reputation),
                ("reputation", [_]) => counted(Counting::ReputationOfRequest),
                _ => P::Stop,
            }
        }
        _ => P::Stop,
    }
}

/// `base.rhs`, where `rhs` is a property, a method call, or a further `.` chain.
fn chain(base: P, rhs: &Expr, names: &[&str]) -> P {
    match rhs {
        Expr::Property(p, _) => {
            let name = p.2.as_str();
            if name == "len" {
                return P::Len(Box::new(base));
            }
            if name == "cleared" {
                return P::Cleared(Box::new(base));
            }
            match FIELDS.iter().find(|(n, _)| *n == name) {
                Some((_, get)) => P::Field(Box::new(base), *get),
                None => P::Stop,
            }
        }
        Expr::MethodCall(call, _) => method(base, call, names),
        Expr::Dot(d, flags, _) if !flags.contains(ASTFlags::NEGATED) => {
            let v = chain(base, &d.lhs, names);
            chain(v, &d.rhs, names)
        }
        _ => P::Stop,
    }
}

fn method(base: P, call: &FnCallExpr, names: &[&str]) -> P {
    match (call.name.as_str(), call.args.as_slice()) {
        ("param", [name]) => P::Param(Box::new(base), Box::new(compile_expr(name, names, false))),
        ("header", [name]) => P::Header(Box::new(base), Box::new(compile_expr(name, names, false))),
        ("len", []) => P::Len(Box::new(base)),
        _ => P::Stop,
    }
}

struct Cx<'a> {
    req: &'a ReqData,
    lists: &'a Lists,
    max_string: usize,
    state: Option<&'a RuleState>,
    vars: Vec<V<'a>>,
    /// The counting calls made, in order.
    calls: Vec<Recorded>,
    /// Planning (see [`Precheck::plan`]): the counting calls the rule would make, none made. A
    /// distinct count is always the last: evaluation stops at it (its answer is not known ahead).
    plan: Option<Vec<Planned>>,
}

impl<'a> Cx<'a> {
    fn eval(&mut self, p: &'a P) -> Option<V<'a>> {
        match p {
            P::Unit => Some(V::Unit),
            P::Bool(b) => Some(V::Bool(*b)),
            P::Int(i) => Some(V::Int(*i)),
            P::Float(f) => Some(V::Float(*f)),
            P::Str(s) => Some(V::Str(s)),
            P::Req => Some(V::Req),
            P::Var(slot) => self.vars.get(*slot).cloned(),
            P::Field(base, get) => match self.eval(base)? {
                V::Req => self.string(V::Str(get(self.req))),
                _ => None,
            },
            P::Cleared(base) => match self.eval(base)? {
                V::Req => Some(V::Bool(self.req.cleared())),
                _ => None,
            },
            P::Len(base) => {
                let v = self.eval(base)?;
                Some(V::Int(str_len(v.as_str()?)))
            }
            P::Param(base, name) => {
                let V::Req = self.eval(base)? else {
                    return None;
                };
                let name = self.eval(name)?;
                self.dynamic(self.req.param(name.as_str()?))
            }
            P::Header(base, name) => {
                let V::Req = self.eval(base)? else {
                    return None;
                };
                let name = self.eval(name)?;
                self.string(V::Str(self.req.header(name.as_str()?)))
            }
            P::Not(a) => match self.eval(a)? {
                V::Bool(b) => Some(V::Bool(!b)),
                _ => None,
            },
            P::And(list) => self.short_circuit(list, false),
            P::Or(list) => self.short_circuit(list, true),
            P::Cmp(op, a, b) => compare(*op, self.eval(a)?, self.eval(b)?),
            P::TypeOf(a) => Some(V::Str(type_name(&self.eval(a)?))),
            P::Waf(r, part) => {
                let V::Req = self.eval(r)? else {
                    return None;
                };
                Some(V::Str(if *part {
                    self.req.waf_part()
                } else {
                    self.req.waf_name()
                }))
            }
            P::Crs(r) => {
                let V::Req = self.eval(r)? else {
                    return None;
                };
                let crs = self.state.and_then(|s| s.crs.as_deref());
                Some(V::Str(self.req.crs_name(crs)))
            }
            P::WafValue(v) => {
                let v = self.eval(v)?;
                Some(V::Str(waf_value(v.as_str()?)))
            }
            P::List(f, list, value) => {
                let (list, value) = (self.eval(list)?, self.eval(value)?);
                let (list, value) = (list.as_str()?, value.as_str()?);
                let hit = match f {
                    ListFn::InList => self.lists.in_list(list, value)?,
                    ListFn::ContainsAny => self.lists.contains_any(list, value)?,
                    ListFn::IpIn => self.lists.ip_in(list, value)?,
                };
                Some(V::Bool(hit))
            }
            P::Concat(a, b) => {
                let (a, b) = (self.eval(a)?, self.eval(b)?);
                let (a, b) = (a.as_str()?, b.as_str()?);
                // A short join is made on the stack: the interpreter's string then takes one
                // allocation, not two (a `String` first).
                let mut buf = [0u8; 64];
                let joined = match buf.get_mut(..a.len() + b.len()) {
                    Some(out) => {
                        out[..a.len()].copy_from_slice(a.as_bytes());
                        out[a.len()..].copy_from_slice(b.as_bytes());
                        ImmutableString::from(std::str::from_utf8(out).ok()?)
                    }
                    None => ImmutableString::from(format!("{a}{b}")),
                };
                self.string(V::Owned(joined))
            }
            P::Counting(f, args) => {
                // Arguments first, left to right, as the interpreter evaluates them.
                let mut vals: [V<'a>; 3] = [V::Unit, V::Unit, V::Unit];
                for (slot, arg) in vals.iter_mut().zip(args) {
                    *slot = self.eval(arg)?;
                }
                self.count(*f, &vals[..args.len()])
            }
            P::Stop => None,
        }
    }

    /// Calls counting helper `f` where the interpreter would find it for these arguments (else
    /// `None`, its "function not found", with nothing counted), and records the answer; an error
    /// ends the pre-check.
    fn count(&mut self, f: Counting, args: &[V<'a>]) -> Option<V<'a>> {
        use super::helpers::call_id;
        let st = self.state;
        if let Some(plan) = self.plan.as_mut() {
            // Planning: a rate limit is taken as allowing; a distinct count with an item is the
            // plan's last call; anything else stops the plan.
            if let (Counting::Distinct, [key, item, V::Int(window)]) = (f, args) {
                let (key, item) = (key.as_str()?, item.as_str()?);
                if item.is_empty() || *window <= 0 || st.is_none() {
                    return None;
                }
                plan.push(Planned::Distinct {
                    key: super::state::ns_key(key).into_owned(),
                    item: item.to_string(),
                    window_ms: *window,
                });
                return None;
            }
            let (Counting::RateLimit, [key, rate, V::Int(burst)]) = (f, args) else {
                return None;
            };
            let (st, key, rate) = (st?, key.as_str()?, rate_of(rate)?);
            let burst = u32::try_from(*burst).ok().filter(|b| *b > 0)?;
            if !(rate > 0.0 && rate.is_finite()) {
                return None;
            }
            let key = super::state::ns_key(key).into_owned();
            let now = super::state::EVAL_NOW.with(|n| n.get());
            if st.limiter.refusal_cached(&key, now, rate, burst) {
                return None;
            }
            plan.push(Planned::RateLimit(crate::store::limits::LimitCall {
                key,
                rate_per_sec: rate,
                burst,
            }));
            return Some(V::Bool(true));
        }
        let (id, answer) = match (f, args) {
            (Counting::RateLimit, [key, rate, V::Int(burst)]) => {
                let (key, rate) = (key.as_str()?, rate_of(rate)?);
                let id = call_id(key, "", [rate, *burst as f64]);
                (
                    id,
                    super::helpers::rate_limit(st, key, rate, *burst).map(i64::from),
                )
            }
            (Counting::Count, [key, V::Int(window)]) => {
                let key = key.as_str()?;
                let id = call_id(key, "", [*window as f64, 0.0]);
                (id, super::helpers::count(st, key, *window))
            }
            (Counting::Distinct, [key, item, V::Int(window)]) => {
                let (st, key, item) = (st?, key.as_str()?, item.as_str()?);
                let id = call_id(key, item, [*window as f64, 0.0]);
                (id, super::helpers::distinct(st, key, item, *window))
            }
            (Counting::Reputation, [kind, value]) => {
                let (st, kind, value) = (st?, kind.as_str()?, value.as_str()?);
                let id = call_id(kind, value, [0.0, 0.0]);
                (id, super::helpers::reputation(st, kind, value))
            }
            (Counting::ReputationOfRequest, [V::Req]) => {
                let id = call_id("", "", [0.0, 0.0]);
                (id, super::helpers::reputation_of_request(st?, self.req))
            }
            _ => return None,
        };
        let value = match &answer {
            Ok(n) if f == Counting::RateLimit => Some(V::Bool(*n != 0)),
            Ok(n) => Some(V::Int(*n)),
            // An error ends the pre-check: the interpreter raises it from the record.
            Err(_) => None,
        };
        self.calls.push(Recorded {
            helper: f,
            id,
            answer,
        });
        value
    }

    /// `&&` (`decides` = false) or `||` (`decides` = true), left to right: the first operand equal
    /// to `decides` is the answer; an operand that is not a boolean ends the pre-check.
    fn short_circuit(&mut self, list: &'a [P], decides: bool) -> Option<V<'a>> {
        for x in list {
            match self.eval(x)? {
                V::Bool(b) if b == decides => return Some(V::Bool(decides)),
                V::Bool(_) => {}
                _ => return None,
            }
        }
        Some(V::Bool(!decides))
    }

    /// A string the interpreter would also have accepted (its size limit, 0 = none, applies to
    /// results).
    fn string(&self, s: V<'a>) -> Option<V<'a>> {
        let len = s.as_str()?.len();
        (self.max_string == 0 || len <= self.max_string).then_some(s)
    }

    fn dynamic(&self, d: Dynamic) -> Option<V<'a>> {
        if d.is_unit() {
            Some(V::Unit)
        } else if let Ok(b) = d.as_bool() {
            Some(V::Bool(b))
        } else if let Ok(i) = d.as_int() {
            Some(V::Int(i))
        } else if let Ok(f) = d.as_float() {
            Some(V::Float(f))
        } else {
            self.string(V::Owned(d.into_immutable_string().ok()?))
        }
    }
}

/// A rate limit's rate: an integer or a float, as the two `rate_limit`s the interpreter has.
fn rate_of(v: &V<'_>) -> Option<f64> {
    match v {
        V::Int(i) => Some(*i as f64),
        V::Float(f) => Some(*f),
        _ => None,
    }
}

/// Rhai's `len` of a string: its characters.
fn str_len(s: &str) -> i64 {
    i64::try_from(s.chars().count()).unwrap_or(i64::MAX)
}

/// Rhai's `type_of` names for the values the pre-check holds.
fn type_name(v: &V<'_>) -> &'static str {
    match v {
        V::Unit => "()",
        V::Bool(_) => "bool",
        V::Int(_) => "i64",
        V::Float(_) => "f64",
        V::Str(_) | V::Owned(_) => "string",
        V::Req => "Request",
    }
}

/// A comparison of two values of one type (strings and booleans: equality only). Mixed types,
/// floats and everything else are left to the interpreter.
fn compare<'a>(op: Op, a: V<'a>, b: V<'a>) -> Option<V<'a>> {
    if let (Some(a), Some(b)) = (a.as_str(), b.as_str()) {
        return match op {
            Op::Eq => Some(V::Bool(a == b)),
            Op::Ne => Some(V::Bool(a != b)),
            _ => None,
        };
    }
    let r = match (a, b) {
        (V::Bool(a), V::Bool(b)) => match op {
            Op::Eq => a == b,
            Op::Ne => a != b,
            _ => return None,
        },
        (V::Int(a), V::Int(b)) => match op {
            Op::Eq => a == b,
            Op::Ne => a != b,
            Op::Lt => a < b,
            Op::Le => a <= b,
            Op::Gt => a > b,
            Op::Ge => a >= b,
        },
        _ => return None,
    };
    Some(V::Bool(r))
}

#[cfg(test)]
mod tests;
