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

use rhai::{ASTFlags, Dynamic, Expr, FnCallExpr, ImmutableString, Stmt, AST};

use super::{or_empty, waf_value, Counting, Lists, Recorded, ReqData, RuleState};

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
    Float,
    Str(Box<str>),
    Req,
    /// The value of the `let` in this slot.
    Var(usize),
    Field(Box<P>, Getter),
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
            | P::Len(a)
            | P::Not(a)
            | P::TypeOf(a)
            | P::Waf(a, _)
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
            | P::Float
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
    /// A float: only its type is read (`type_of`); comparisons of floats go to the interpreter.
    Float,
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
        Expr::FloatConstant(..) => P::Float,
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
}

impl<'a> Cx<'a> {
    fn eval(&mut self, p: &'a P) -> Option<V<'a>> {
        match p {
            P::Unit => Some(V::Unit),
            P::Bool(b) => Some(V::Bool(*b)),
            P::Int(i) => Some(V::Int(*i)),
            P::Float => Some(V::Float),
            P::Str(s) => Some(V::Str(s)),
            P::Req => Some(V::Req),
            P::Var(slot) => self.vars.get(*slot).cloned(),
            P::Field(base, get) => match self.eval(base)? {
                V::Req => self.string(V::Str(get(self.req))),
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
        use super::call_id;
        let st = self.state;
        let (id, answer) = match (f, args) {
            (Counting::RateLimit, [key, V::Int(rate), V::Int(burst)]) => {
                let (key, rate) = (key.as_str()?, *rate as f64);
                let id = call_id(key, "", [rate, *burst as f64]);
                (id, super::rate_limit(st, key, rate, *burst).map(i64::from))
            }
            (Counting::Count, [key, V::Int(window)]) => {
                let key = key.as_str()?;
                let id = call_id(key, "", [*window as f64, 0.0]);
                (id, super::count(st, key, *window))
            }
            (Counting::Distinct, [key, item, V::Int(window)]) => {
                let (st, key, item) = (st?, key.as_str()?, item.as_str()?);
                let id = call_id(key, item, [*window as f64, 0.0]);
                (id, super::distinct(st, key, item, *window))
            }
            (Counting::Reputation, [kind, value]) => {
                let (st, kind, value) = (st?, kind.as_str()?, value.as_str()?);
                let id = call_id(kind, value, [0.0, 0.0]);
                (id, super::reputation(st, kind, value))
            }
            (Counting::ReputationOfRequest, [V::Req]) => {
                let id = call_id("", "", [0.0, 0.0]);
                (id, super::reputation_of_request(st?, self.req))
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
        } else if d.as_float().is_ok() {
            Some(V::Float)
        } else {
            self.string(V::Owned(d.into_immutable_string().ok()?))
        }
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
        V::Float => "f64",
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
mod tests {
    use std::sync::Arc;

    use rhai::{Dynamic, Scope};

    use super::super::lists::{IpList, StringList};
    use super::super::{build_engine, Lists, Req};
    use super::Precheck;

    fn lists() -> Arc<Lists> {
        let mut l = Lists::default();
        l.strings
            .insert("l".into(), StringList::from_entries(["GET", "curl", "bad"]));
        l.ips.insert(
            "ips".into(),
            IpList::from_entries(["10.0.0.0/8", "2001:db8::/32"]).unwrap(),
        );
        Arc::new(l)
    }

    fn requests() -> Vec<Req> {
        let bodies = [
            serde_json::json!({"app": "shop",
                "request": {"method": "post", "path": "/api/cart/add", "query": "a=1",
                    "body": "{\"sku\":12}", "headers": {"User-Agent": "Mozilla/5.0", "X-Tag": "é"}},
                "client": {"ip": "10.1.2.3", "country": "DE", "device_id": "d-1"},
                "user_id": "u-1",
                "params": {"sku": 12, "n": "12", "f": 2.5, "b": true, "z": null, "o": {"k": [1]}}}),
            serde_json::json!({"app": "shop", "request": {"method": "GET", "path": "/"}}),
            serde_json::json!({"app": "demo",
                "request": {"method": "GET", "path": "/ünïcödé/ç", "query": "id=1' OR '1'='1",
                    "headers": {"user-agent": "curl/8.0"}},
                "client": {"ip": "not an ip", "ja3": "abc", "user_agent": "sqlmap"},
                "user_id": 42, "params": {"sku": "12", "n": 12}}),
            serde_json::json!({"app": "shop",
                "request": {"method": "DELETE", "path": "/x", "body": "<script>alert(1)</script>"},
                "client": {"ip": "2001:db8::1", "isp": "Hosting Inc"},
                "params": {"sku": -1, "f": 1e300}}),
        ];
        bodies
            .into_iter()
            .map(|b| Req::from_request(&serde_json::from_value(b).unwrap(), 1_767_225_600_000))
            .collect()
    }

    /// The pre-check's answer without rule state.
    fn rules_out(p: &Precheck, req: &Req, lists: &Lists, max_string: usize) -> bool {
        matches!(
            p.check(req, lists, max_string, None),
            super::Checked::RuledOut
        )
    }

    /// What the interpreter answers for `text` and `req`: `Ok(true)` for "no outcome".
    fn interpreted(engine: &rhai::Engine, ast: &rhai::AST, req: &Req) -> Result<bool, String> {
        let mut scope = Scope::new();
        scope.push_constant("req", req.clone());
        engine
            .eval_ast_with_scope::<Dynamic>(&mut scope, ast)
            .map(|v| v.is_unit())
            .map_err(|e| e.to_string())
    }

    /// Checks every (rule, request) pair: a pre-check that rules the rule out must agree with the
    /// interpreter, which answers nothing and raises no error. Returns how many it ruled out.
    fn check(rules: &[String]) -> usize {
        let lists = lists();
        let engine = build_engine(lists.clone(), None);
        let reqs = requests();
        let mut compile_scope = Scope::new();
        compile_scope.push("req", Req::default());
        let mut ruled_out = 0;
        for text in rules {
            // Some generated pairs do not compile (`x && ""`): nothing to compare.
            let Ok(ast) = engine.compile_with_scope(&compile_scope, text) else {
                continue;
            };
            let Some(p) = Precheck::compile(&ast) else {
                continue;
            };
            for (i, req) in reqs.iter().enumerate() {
                if rules_out(&p, req, &lists, engine.max_string_size()) {
                    ruled_out += 1;
                    assert_eq!(
                        interpreted(&engine, &ast, req),
                        Ok(true),
                        "the pre-check ruled out `{text}` for request {i}, the interpreter did not"
                    );
                }
            }
        }
        ruled_out
    }

    const ATOMS: &[&str] = &[
        "req.ip",
        "req.user",
        "req.method",
        "req.path",
        "req.query",
        "req.user_agent",
        "req.ja3",
        "req.isp",
        "req.nope",
        "req.path.len()",
        "req.path.len",
        "req.body.len()",
        "req.param(\"sku\")",
        "req.param(\"n\")",
        "req.param(\"f\")",
        "req.param(\"b\")",
        "req.param(\"z\")",
        "req.param(\"o\")",
        "req.header(\"user-agent\")",
        "req.header(\"X-TAG\")",
        "type_of(req.param(\"sku\"))",
        "type_of(req.param(\"f\"))",
        "type_of(req.param(\"z\"))",
        "type_of(req)",
        "waf(req)",
        "waf_part(req)",
        "waf_value(req.query)",
        "in_list(\"l\", req.method)",
        "contains_any(\"l\", req.user_agent)",
        "ip_in(\"ips\", req.ip)",
        "in_list(\"missing\", req.method)",
        "ip_in(\"l\", req.ip)",
        "\"\"",
        "\"GET\"",
        "\"12\"",
        "\"string\"",
        "\"i64\"",
        "\"sqli\"",
        "\"ip:\" + req.ip",
        // Joined past the pre-check's 64-byte stack buffer for some requests, not others.
        "\"a prefix of fifty-five bytes, to cross the buffer: ip=\" + req.ip",
        "req.user + req.method",
        "12",
        "0",
        "-1",
        "2.5",
        "true",
        "false",
        "()",
    ];

    /// Conditions built from pairs of atoms under every operator the pre-check reads (and some
    /// it does not), each as a whole rule: the pre-check never disagrees with the interpreter.
    #[test]
    fn a_ruled_out_rule_is_one_the_interpreter_answers_nothing_for() {
        let mut rules = Vec::new();
        for a in ATOMS {
            rules.push(format!("if {a} {{ deny(\"x\") }}"));
            rules.push(format!("if !{a} {{ deny(\"x\") }}"));
            rules.push(format!("let v = {a}; if v == \"\" {{ deny(\"x\") }}"));
            for b in ATOMS {
                for op in ["==", "!=", "<", "<=", ">", ">=", "&&", "||", "+"] {
                    rules.push(format!("if {a} {op} {b} {{ deny(\"x\") }}"));
                }
            }
        }
        let ruled_out = check(&rules);
        // Not vacuous: most of these conditions are decidable, and false for some request.
        assert!(ruled_out > 2_000, "only {ruled_out} pairs were ruled out");
    }

    /// Every value the pre-check computes is the interpreter's value for the same expression,
    /// in both directions (a wrong `true` would only cost time; a wrong `false` would skip a rule).
    #[test]
    fn every_value_it_computes_is_the_interpreters() {
        let lists = lists();
        let engine = build_engine(lists.clone(), None);
        let mut compile_scope = Scope::new();
        compile_scope.push("req", Req::default());
        let mut exprs: Vec<String> = Vec::new();
        for a in ATOMS {
            exprs.push(a.to_string());
            exprs.push(format!("!{a}"));
            for b in ATOMS {
                for op in ["==", "!=", "<", "<=", ">", ">=", "&&", "||", "+"] {
                    exprs.push(format!("{a} {op} {b}"));
                }
            }
        }
        let mut compared = 0;
        for text in &exprs {
            // The interpreter runs the very AST the pre-check reads (compiled with `req` a
            // variable, as rules are), then answers `v`.
            let Ok(ast) = engine.compile_with_scope(&compile_scope, format!("let v = {text}; v"))
            else {
                continue;
            };
            let Some(rhai::Stmt::Var(var, _, _)) = ast.statements().first() else {
                panic!("{text}: not a let");
            };
            for (i, req) in requests().iter().enumerate() {
                let mut cx = super::Cx {
                    req,
                    lists: &lists,
                    max_string: engine.max_string_size(),
                    state: None,
                    vars: Vec::new(),
                    calls: Vec::new(),
                };
                let compiled = super::compile_expr(&var.1, &[], true);
                let Some(native) = cx.eval(&compiled) else {
                    continue;
                };
                compared += 1;
                let mut scope = Scope::new();
                scope.push_constant("req", req.clone());
                let v = engine
                    .eval_ast_with_scope::<Dynamic>(&mut scope, &ast)
                    .unwrap_or_else(|e| panic!("`{text}` on request {i}: the pre-check got {native:?}, the interpreter failed: {e}"));
                let same = match &native {
                    super::V::Unit => v.is_unit(),
                    super::V::Bool(b) => v.as_bool() == Ok(*b),
                    super::V::Int(n) => v.as_int() == Ok(*n),
                    super::V::Float => v.is_float(),
                    super::V::Str(_) | super::V::Owned(_) => {
                        v.clone().into_immutable_string().ok().as_deref() == native.as_str()
                    }
                    super::V::Req => v.is::<Req>(),
                };
                assert!(
                    same,
                    "`{text}` on request {i}: the pre-check got {native:?}, the interpreter {v:?}"
                );
            }
        }
        assert!(compared > 5_000, "only {compared} values compared");
    }

    #[test]
    fn shapes_and_scoping_match_the_interpreter() {
        let rules: Vec<String> = [
            // else-if chains: all conditions must be false
            "if req.ip == \"\" { deny(\"a\") } else if req.method == \"DELETE\" { deny(\"b\") }",
            "if req.ip == \"\" { deny(\"a\") } else if req.method == \"DELETE\" { deny(\"b\") } else { }",
            "if req.ip == \"\" { deny(\"a\") } else if req.user == \"\" { deny(\"b\") } else if req.method == \"DELETE\" { deny(\"c\") }",
            "if req.ip == \"\" { deny(\"a\") } else if req.user == \"\" { deny(\"b\") } else { deny(\"c\") }",
            // const, and a switch the optimiser turns into an if
            "const M = \"DELETE\"; if req.method == M { deny(\"a\") }",
            "switch 1 { 1 => if req.ip == \"\" { deny(\"a\") } }",
            "if req?.ip == \"\" { deny(\"a\") }",
            // lets, in order, shadowing each other and `req`
            "let a = req.ip; let a = req.method; if a == \"POST\" { deny(\"a\") }",
            "let req = 5; if req == 5 { deny(\"a\") }",
            "let r = req; if r.user == \"u-1\" { deny(\"a\") }",
            "let a = waf(req); if a == \"sqli\" || a == \"xss\" { deny(a) }",
            // short-circuits protect what the pre-check cannot read
            "if req.ip == \"nobody\" && rate_limit(\"k\", 1, 1) { deny(\"a\") }",
            "if req.ip != \"nobody\" || rate_limit(\"k\", 1, 1) { deny(\"a\") }",
            // non-booleans in conditions and operators are the interpreter's errors
            "if req.ip { deny(\"a\") }",
            "if req.ip && true { deny(\"a\") }",
            "if 1 < \"2\" { deny(\"a\") }",
            // an unknown helper (an unknown variable does not compile: strict variables)
            "if nothing(req) { deny(\"a\") }",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let engine = build_engine(lists(), None);
        let mut scope = Scope::new();
        scope.push("req", Req::default());
        for r in &rules {
            engine
                .compile_with_scope(&scope, r)
                .unwrap_or_else(|e| panic!("{r}: {e}"));
        }
        // Not vacuous: the plain shapes are pre-checked and ruled out for some requests.
        assert!(check(&rules) >= 10);
    }

    /// `header` is case-insensitive, the exact spelling first; the WAF scans every spelling.
    #[test]
    fn headers_in_several_spellings() {
        let r: crate::model::DecideRequest = serde_json::from_value(serde_json::json!({
            "app": "shop",
            "request": {"headers": {"X-Tag": "<script>alert(1)</script>", "x-tag": "b", "Accept": "c"}}
        }))
        .unwrap();
        let req = Req::from_request(&r, 0);
        assert_eq!(req.header("x-tag"), "b");
        assert_eq!(req.header("X-Tag"), "<script>alert(1)</script>");
        assert_eq!(req.header("ACCEPT"), "c");
        assert_eq!(req.header("nope"), "");
        assert_eq!(req.waf_name(), "xss");
    }

    /// A string over the interpreter's size limit is its error: the pre-check stops there.
    #[test]
    fn a_string_over_the_size_limit_is_left_to_the_interpreter() {
        let engine = build_engine(lists(), None);
        let mut scope = Scope::new();
        scope.push("req", Req::default());
        let ast = engine
            .compile_with_scope(&scope, "if req.ip == \"x\" { deny(\"a\") }")
            .unwrap();
        let p = Precheck::compile(&ast).unwrap();
        let req = &requests()[0]; // ip 10.1.2.3: 8 bytes
        assert!(rules_out(&p, req, &lists(), 0));
        assert!(rules_out(&p, req, &lists(), 8));
        assert!(!rules_out(&p, req, &lists(), 7));
        // and to a string made by `+`: "ip=" + ip is 11 bytes
        let ast = engine
            .compile_with_scope(&scope, "if \"ip=\" + req.ip == \"x\" { deny(\"a\") }")
            .unwrap();
        let p = Precheck::compile(&ast).unwrap();
        assert!(rules_out(&p, req, &lists(), 11));
        assert!(!rules_out(&p, req, &lists(), 10));
    }

    #[test]
    fn only_plain_let_and_if_rules_get_a_pre_check() {
        let engine = build_engine(lists(), None);
        let mut scope = Scope::new();
        scope.push("req", Req::default());
        let compiled = |t: &str| {
            let ast = engine.compile_with_scope(&scope, t).unwrap();
            Precheck::compile(&ast).is_some()
        };
        assert!(compiled("if req.ip == \"\" { deny(\"a\") }"));
        assert!(compiled(
            "let a = 1;\nif a == 2 { deny(\"a\") } else if a == 3 { deny(\"b\") }"
        ));
        // An else with statements runs when the conditions are false.
        assert!(!compiled(
            "if req.ip == \"\" { deny(\"a\") } else { deny(\"b\") }"
        ));
        // Something after the if, or a statement before it.
        assert!(!compiled("if req.ip == \"\" { deny(\"a\") }\ndeny(\"b\")"));
        assert!(!compiled(
            "report(req, 1);\nif req.ip == \"\" { deny(\"a\") }"
        ));
        // A rule's own functions may shadow the helpers.
        assert!(!compiled(
            "fn waf(r) { \"sqli\" }\nif waf(req) == \"\" { deny(\"a\") }"
        ));
        assert!(!compiled("deny(\"always\")"));
        // Over 1,000 nodes (600 `let`s), far more than any real rule: no pre-check, which keeps it
        // well inside the interpreter's operation limit (a long condition does not even parse:
        // expressions are depth-limited).
        let lets = |n: usize| -> String {
            (0..n)
                .map(|i| format!("let v{i} = req.ip == \"{i}\";\n"))
                .collect()
        };
        assert!(compiled(&format!("{}if v1 {{ deny(\"a\") }}", lets(60))));
        assert!(!compiled(&format!("{}if v1 {{ deny(\"a\") }}", lets(600))));
    }

    /// What one evaluation answered: the outcome, "nothing", or the error text.
    fn answer(r: Result<Dynamic, Box<rhai::EvalAltResult>>) -> String {
        match r {
            Ok(v) if v.is_unit() => "nothing".into(),
            Ok(v) => format!("{:?}", v.try_cast::<super::super::Outcome>()),
            Err(e) => format!("error: {e}"),
        }
    }

    /// Rules with counting helpers, run as `RuleSet::eval` runs them (pre-check, then the
    /// interpreter with the pre-check's calls replayed) against one state, and by the interpreter
    /// alone against another, on the same sequence of requests: every answer is the same, so each
    /// call was made exactly once (a call made twice would cross a limit sooner). Also returns
    /// how many evaluations the pre-check ruled out after counting, and how many it handed over
    /// with calls to replay (neither may be zero).
    #[test]
    fn counting_rules_count_once_whoever_answers() {
        let rules = [
            "if req.ip != \"\" && !rate_limit(\"ip:\" + req.ip, 1, 2) { deny(\"RATE_LIMITED\", \"ip\") }",
            "let n = count(\"c:\" + req.user, 60000); if n > 4 { deny(\"n\") } else if n > 2 { challenge(\"n\") }",
            "if req.device_id != \"\" && distinct(\"d:\" + req.device_id, req.user + \"\", 3600000) > 1 { score(10, \"d\") }",
            "let r = reputation(req); if r >= 10 { deny(\"r\") } else if r >= 5 { challenge(\"r\") }",
            "if reputation(\"ip\", req.ip) > 0 || count(\"k\", 60000) > 3 { deny(\"x\") }",
            // the pre-check stops after counting: the interpreter must not count again
            "let n = count(\"s\", 60000); if n > 2 && req.param(\"f\") > 1.0 { deny(\"f\") }",
            "if count(\"t\", 60000) > 1 && rate_limit(\"u\", 1, 3) && req.param(\"sku\") > 1.5 { deny(\"t\") }",
            "if count(\"v\" + req.param(\"sku\"), 60000) > 1 { deny(\"v\") }",
            // errors are the interpreter's, once
            "if rate_limit(\"e\", 1, -1) { deny(\"e\") }",
            "if count(\"w\", 60000) > 0 && reputation(\"nope\", req.ip) > 0 { deny(\"w\") }",
            "if distinct(\"x\", req.user, 60000) > 0 && rate_limit(\"x\", 1.5, 1) { deny(\"x\") }",
            // counting inside a `.` chain is left to the interpreter
            "if req.header(\"h\" + count(\"h\", 60000)) == \"\" && count(\"h2\", 60000) > 2 { deny(\"h\") }",
            // (an error after counting both; the interpreter's order there is not left to right)
            "if count(\"a\", 60000).param(count(\"b\", 60000)) == \"\" { deny(\"p\") }",
            // 24 evaluations above: "a" and "b" were each counted 24 times, no more
            "let a = count(\"a\", 60000); let b = count(\"b\", 60000); if a == 25 && b == 25 { deny(\"24\") } else if a != b || a < 25 { deny(\"!\") }",
            // a variable as first argument (the interpreter looks it up last), `type_of`, `+` of
            // a string and a number (the pre-check stops after counting), a skipped right side
            "let k = \"c2:\" + req.user; if count(k, 60000) > 1 { deny(\"k\") }",
            "let r = req; if reputation(r) >= 5 { deny(\"r2\") }",
            "if type_of(count(\"t2\", 60000)) == \"i64\" && count(\"t3\", 60000) > 3 { deny(\"t2\") }",
            "if in_list(\"l\", \"\" + count(\"il\", 60000)) { deny(\"il\") }",
            "if rate_limit(\"o1\", 1, 2) || count(\"o2\", 60000) > 0 { deny(\"o\") }",
        ]
        .iter()
        .map(|r| r.to_string())
        .collect::<Vec<_>>();
        // Pairs of counting and plain atoms under the operators, each a rule of its own.
        let counting = [
            "count(\"g1\", 60000)",
            "rate_limit(\"g2\", 1, 2)",
            "distinct(\"g3\", req.user, 60000)",
            "reputation(req)",
            "reputation(\"ip\", req.ip)",
            "count(\"g4:\" + req.user, 60000)",
        ];
        let plain = [
            "req.ip",
            "1",
            "\"x\"",
            "true",
            "req.param(\"f\")",
            "waf(req)",
        ];
        let mut rules = rules;
        for x in counting.iter().chain(&plain) {
            for y in counting.iter().chain(&plain) {
                for op in ["==", "!=", "<", ">=", "&&", "||"] {
                    rules.push(format!("if {x} {op} {y} {{ deny(\"g\") }}"));
                }
            }
        }
        let lists = lists();
        let (a, b) = (
            super::super::RuleState::local(10_000),
            super::super::RuleState::local(10_000),
        );
        let engine_a = build_engine(lists.clone(), Some(a.clone()));
        let engine_b = build_engine(lists.clone(), Some(b.clone()));
        let mut compile_scope = Scope::new();
        compile_scope.push("req", Req::default());
        let (mut ruled_out_after_counting, mut replayed) = (0, 0);
        super::super::EVAL_NOW.with(|n| n.set(1_767_225_600_000));
        for text in &rules {
            // Some generated pairs do not compile (`1 && "x"`): nothing to compare.
            let Ok(ast) = engine_a.compile_with_scope(&compile_scope, text) else {
                assert!(text.ends_with("{ deny(\"g\") }"), "{text} does not compile");
                continue;
            };
            // (Generated pairs of constants fold to a bare `deny`: no pre-check.)
            let Some(p) = Precheck::compile(&ast) else {
                assert!(text.ends_with("{ deny(\"g\") }"), "{text}: no pre-check");
                continue;
            };
            for round in 0..6 {
                for (i, req) in requests().iter().enumerate() {
                    if round == 3 {
                        // Reputation comes from elsewhere (`report`, decisions): both states.
                        for st in [&a, &b] {
                            st.report("ip", req.ip(), 4, 1_767_225_600_000).unwrap();
                        }
                    }
                    let mut scope = Scope::new();
                    scope.push_constant("req", req.clone());
                    let with_precheck =
                        match p.check(req, &lists, engine_a.max_string_size(), Some(&a)) {
                            super::Checked::RuledOut => {
                                // (only a rule with a counting call can have counted)
                                ruled_out_after_counting += usize::from(
                                    text.contains("count(")
                                        || text.contains("rate_limit(")
                                        || text.contains("distinct(")
                                        || text.contains("reputation("),
                                );
                                "nothing".to_string()
                            }
                            super::Checked::Run(calls) => {
                                replayed += usize::from(!calls.is_empty());
                                answer(super::super::with_replay(calls, || {
                                    engine_a.eval_ast_with_scope::<Dynamic>(&mut scope, &ast)
                                }))
                            }
                        };
                    let mut scope = Scope::new();
                    scope.push_constant("req", req.clone());
                    let alone = answer(engine_b.eval_ast_with_scope::<Dynamic>(&mut scope, &ast));
                    assert_eq!(
                        with_precheck, alone,
                        "`{text}`, round {round}, request {i}: pre-check and interpreter disagree"
                    );
                }
            }
        }
        assert!(ruled_out_after_counting > 50, "{ruled_out_after_counting}");
        assert!(replayed > 20, "{replayed}");
    }

    /// The default rules that read only the request and the lists, and those that count, are
    /// pre-checked, and an ordinary request rules them out.
    #[test]
    fn the_default_rules_are_pre_checked() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rules");
        let engine = build_engine(lists(), None);
        let mut scope = Scope::new();
        scope.push("req", Req::default());
        let compiled = |name: &str| {
            let text = std::fs::read_to_string(root.join(name)).unwrap();
            let ast = engine.compile_with_scope(&scope, &text).unwrap();
            let p = Precheck::compile(&ast).unwrap_or_else(|| panic!("{name}: no pre-check"));
            (ast, p)
        };
        let req = &requests()[0];
        for name in [
            "edge/waf-sqli.rhai",
            "edge/waf-xss.rhai",
            "edge/waf-rce.rhai",
            "edge/waf-traversal.rhai",
            "edge/waf-protocol.rhai",
            "edge/no-user-agent.rhai",
            "edge/oversized.rhai",
            "gateway/hot-sku.rhai",
        ] {
            let (ast, p) = compiled(name);
            assert!(rules_out(&p, req, &lists(), 0), "{name}");
            assert_eq!(interpreted(&engine, &ast, req), Ok(true), "{name}");
        }
        // The counting ones too, with rule state: a first request is within every limit.
        let state = super::super::RuleState::local(1_000);
        for name in [
            "edge/reputation.rhai",
            "gateway/ip-rate.rhai",
            "gateway/user-rate.rhai",
            "business/device-many-accounts.rhai",
        ] {
            let (_, p) = compiled(name);
            let checked = p.check(req, &lists(), 0, Some(&state));
            assert!(
                matches!(checked, super::Checked::RuledOut),
                "{name}: {checked:?}"
            );
        }
    }
}
