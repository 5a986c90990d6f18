//! The native pre-check: answers "this rule cannot match this request" without running Rhai.
//!
//! Most rules are a few `let`s and one `if … else if …` whose conditions, on ordinary traffic,
//! are false: `req.user_agent == ""`, `in_list("bad-methods", req.method)`, `waf(req) == "sqli"`.
//! Running such a rule through the interpreter costs 1–2 µs (each getter, operator and helper is
//! a resolved, boxed call); reading the same fields here costs a few dozen nanoseconds.
//!
//! Compiled once per rule from its optimised AST into a small tree of its own. At decision time
//! it evaluates the `let` initialisers and the conditions in the interpreter's order, with its
//! short-circuits, over a small closed set of side-effect-free expressions: literals, `req` and its fields, `param` and
//! `header`, `len`, `type_of`, comparisons of two strings, two integers or two booleans, `!`,
//! `&&`, `||`, and the pure helpers `in_list`, `contains_any`, `ip_in`, `waf`, `waf_part`,
//! `waf_value`. Only when every condition is a definite `false` is the rule skipped, and then
//! the interpreter would have answered nothing too. Anything else (an unsupported expression,
//! a stateful helper such as `rate_limit`, values of mixed types, a missing list, a string over
//! the size limit) ends the pre-check with "run the rule", so errors and outcomes always come
//! from Rhai itself.

use rhai::{ASTFlags, Dynamic, Expr, FnCallExpr, ImmutableString, Stmt, AST};

use super::{waf_value, Lists, ReqData};

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
            P::Param(a, b) | P::Header(a, b) | P::Cmp(_, a, b) | P::List(_, a, b) => {
                a.size() + b.size()
            }
            P::And(list) | P::Or(list) => list.iter().map(P::size).sum(),
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
pub(super) type Getter = fn(&ReqData) -> &ImmutableString;

/// The request's string getters (`req.ip`, …): the rule engine registers these, and the pre-check
/// reads the same.
pub(super) const FIELDS: [(&str, Getter); 13] = [
    ("app", |r| &r.app),
    ("method", |r| &r.method),
    ("path", |r| &r.path),
    ("query", |r| &r.query),
    ("body", |r| &r.body),
    ("user", |r| &r.user),
    ("ip", |r| &r.ip),
    ("device_id", |r| &r.device_id),
    ("ja3", |r| &r.ja3),
    ("country", |r| &r.country),
    ("isp", |r| &r.isp),
    ("device_type", |r| &r.device_type),
    ("user_agent", |r| &r.user_agent),
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
                    lets.push(compile_expr(&v.1, &names));
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
            conditions.push(compile_expr(&flow.expr, &names));
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

    /// True when the rule certainly answers nothing for `req`: every condition is `false`.
    pub(super) fn rules_out(&self, req: &ReqData, lists: &Lists, max_string: usize) -> bool {
        let mut cx = Cx {
            req,
            lists,
            max_string,
            vars: Vec::with_capacity(self.lets.len()),
        };
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

/// Compiles `e`, where `names` are the `let`s in scope (the last one of a name wins).
fn compile_expr(e: &Expr, names: &[&str]) -> P {
    let b = |e: &Expr| Box::new(compile_expr(e, names));
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
            chain(compile_expr(&d.lhs, names), &d.rhs, names)
        }
        Expr::And(list, _) => P::And(list.iter().map(|x| compile_expr(x, names)).collect()),
        Expr::Or(list, _) => P::Or(list.iter().map(|x| compile_expr(x, names)).collect()),
        Expr::FnCall(call, _) => {
            let args = call.args.as_slice();
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
        ("param", [name]) => P::Param(Box::new(base), Box::new(compile_expr(name, names))),
        ("header", [name]) => P::Header(Box::new(base), Box::new(compile_expr(name, names))),
        ("len", []) => P::Len(Box::new(base)),
        _ => P::Stop,
    }
}

struct Cx<'a> {
    req: &'a ReqData,
    lists: &'a Lists,
    max_string: usize,
    vars: Vec<V<'a>>,
}

impl<'a> Cx<'a> {
    fn eval(&self, p: &'a P) -> Option<V<'a>> {
        match p {
            P::Unit => Some(V::Unit),
            P::Bool(b) => Some(V::Bool(*b)),
            P::Int(i) => Some(V::Int(*i)),
            P::Float => Some(V::Float),
            P::Str(s) => Some(V::Str(s)),
            P::Req => Some(V::Req),
            P::Var(slot) => self.vars.get(*slot).cloned(),
            P::Field(base, get) => match self.eval(base)? {
                V::Req => self.string(V::Str(get(self.req).as_str())),
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
                self.string(V::Owned(self.req.header(name.as_str()?)))
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
            P::Stop => None,
        }
    }

    /// `&&` (`decides` = false) or `||` (`decides` = true), left to right: the first operand equal
    /// to `decides` is the answer; an operand that is not a boolean ends the pre-check.
    fn short_circuit(&self, list: &'a [P], decides: bool) -> Option<V<'a>> {
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
                if p.rules_out(req, &lists, engine.max_string_size()) {
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
                for op in ["==", "!=", "<", "<=", ">", ">=", "&&", "||"] {
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
                for op in ["==", "!=", "<", "<=", ">", ">=", "&&", "||"] {
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
                let cx = super::Cx {
                    req,
                    lists: &lists,
                    max_string: engine.max_string_size(),
                    vars: Vec::new(),
                };
                let compiled = super::compile_expr(&var.1, &[]);
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
        assert!(p.rules_out(req, &lists(), 0));
        assert!(p.rules_out(req, &lists(), 8));
        assert!(!p.rules_out(req, &lists(), 7));
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

    /// The default rules that read only the request and the lists are pre-checked, and an
    /// ordinary request rules them out.
    #[test]
    fn the_default_request_only_rules_are_pre_checked() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../rules");
        let engine = build_engine(lists(), None);
        let mut scope = Scope::new();
        scope.push("req", Req::default());
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
            let text = std::fs::read_to_string(root.join(name)).unwrap();
            let ast = engine.compile_with_scope(&scope, &text).unwrap();
            let p = Precheck::compile(&ast).unwrap_or_else(|| panic!("{name}: no pre-check"));
            let req = &requests()[0];
            assert!(p.rules_out(req, &lists(), 0), "{name}");
            assert_eq!(interpreted(&engine, &ast, req), Ok(true), "{name}");
        }
    }
}
