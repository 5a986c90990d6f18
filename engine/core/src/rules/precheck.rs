//! The native pre-check: answers "this rule cannot match this request" without running Rhai.
//!
//! Most rules are a few `let`s and one `if … else if …` whose conditions, on ordinary traffic,
//! are false: `req.user_agent == ""`, `in_list("bad-methods", req.method)`, `waf(req) == "sqli"`.
//! Running such a rule through the interpreter costs 1–2 µs (each getter, operator and helper is
//! a resolved, boxed call); reading the same fields here costs a few dozen nanoseconds.
//!
//! Compiled once per rule from its optimised AST. At decision time it evaluates the `let`
//! initialisers and the conditions in the interpreter's order, with its short-circuits, over a
//! small closed set of side-effect-free expressions: literals, `req` and its fields, `param` and
//! `header`, `len`, `type_of`, comparisons of two strings, two integers or two booleans, `!`,
//! `&&`, `||`, and the pure helpers `in_list`, `contains_any`, `ip_in`, `waf`, `waf_part`,
//! `waf_value`. Only when every condition is a definite `false` is the rule skipped, and then
//! the interpreter would have answered nothing too. Anything else (an unsupported expression,
//! a stateful helper such as `rate_limit`, values of mixed types, a missing list, a string over
//! the size limit) ends the pre-check with "run the rule", so errors and outcomes always come
//! from Rhai itself.

use rhai::{ASTFlags, Dynamic, Expr, FnCallExpr, ImmutableString, Stmt, AST};

use super::{Lists, ReqData};

/// A rule's pre-check: its leading `let`s and the conditions of its final `if` chain.
#[derive(Debug, Clone)]
pub(super) struct Precheck {
    lets: Vec<(ImmutableString, Expr)>,
    conditions: Vec<Expr>,
}

/// A value the pre-check can hold. Strings are borrowed from the rule's AST or the request
/// where they can be: the AST is shared by every worker thread, and cloning its strings would
/// bounce their reference counts between cores on every decision.
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
        let mut lets = Vec::with_capacity(init.len());
        for s in init {
            match s {
                Stmt::Var(v, _, _) => lets.push((v.0.name.clone(), v.1.clone())),
                _ => return None,
            }
        }
        let mut conditions = Vec::new();
        let mut stmt = *last;
        loop {
            let Stmt::If(flow, _) = stmt else {
                return None;
            };
            conditions.push(flow.expr.clone());
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
        for (name, init) in &self.lets {
            match cx.eval(init) {
                Some(v) => cx.vars.push((name.as_str(), v)),
                None => return false,
            }
        }
        self.conditions
            .iter()
            .all(|c| matches!(cx.eval(c), Some(V::Bool(false))))
    }
}

struct Cx<'a> {
    req: &'a ReqData,
    lists: &'a Lists,
    max_string: usize,
    vars: Vec<(&'a str, V<'a>)>,
}

impl<'a> Cx<'a> {
    fn eval(&self, e: &'a Expr) -> Option<V<'a>> {
        match e {
            Expr::Unit(_) => Some(V::Unit),
            Expr::BoolConstant(b, _) => Some(V::Bool(*b)),
            Expr::IntegerConstant(i, _) => Some(V::Int(*i)),
            Expr::FloatConstant(..) => Some(V::Float),
            Expr::StringConstant(s, _) => Some(V::Str(s.as_str())),
            Expr::Variable(v, _, _) => {
                let name = v.1.as_str();
                match self.vars.iter().rev().find(|(n, _)| *n == name) {
                    Some((_, v)) => Some(v.clone()),
                    None if name == "req" => Some(V::Req),
                    None => None,
                }
            }
            Expr::Dot(b, flags, _) if !flags.contains(ASTFlags::NEGATED) => {
                let base = self.eval(&b.lhs)?;
                self.chain(base, &b.rhs)
            }
            Expr::And(list, _) => {
                for x in list.iter() {
                    match self.eval(x)? {
                        V::Bool(true) => {}
                        V::Bool(false) => return Some(V::Bool(false)),
                        _ => return None,
                    }
                }
                Some(V::Bool(true))
            }
            Expr::Or(list, _) => {
                for x in list.iter() {
                    match self.eval(x)? {
                        V::Bool(false) => {}
                        V::Bool(true) => return Some(V::Bool(true)),
                        _ => return None,
                    }
                }
                Some(V::Bool(false))
            }
            Expr::FnCall(call, _) => self.call(call),
            _ => None,
        }
    }

    /// `base.rhs`, where `rhs` is a property, a method call, or a further `.` chain.
    fn chain(&self, base: V<'a>, rhs: &'a Expr) -> Option<V<'a>> {
        match rhs {
            Expr::Property(p, _) => self.property(base, &p.2),
            Expr::MethodCall(call, _) => self.method(base, call),
            Expr::Dot(b, flags, _) if !flags.contains(ASTFlags::NEGATED) => {
                let v = self.chain(base, &b.lhs)?;
                self.chain(v, &b.rhs)
            }
            _ => None,
        }
    }

    fn property(&self, base: V<'a>, name: &str) -> Option<V<'a>> {
        match base {
            V::Req => {
                let r = self.req;
                let s = match name {
                    "app" => &r.app,
                    "method" => &r.method,
                    "path" => &r.path,
                    "query" => &r.query,
                    "body" => &r.body,
                    "user" => &r.user,
                    "ip" => &r.ip,
                    "device_id" => &r.device_id,
                    "ja3" => &r.ja3,
                    "country" => &r.country,
                    "isp" => &r.isp,
                    "device_type" => &r.device_type,
                    "user_agent" => &r.user_agent,
                    _ => return None,
                };
                self.string(V::Str(s.as_str()))
            }
            _ if name == "len" => Some(V::Int(str_len(base.as_str()?))),
            _ => None,
        }
    }

    fn method(&self, base: V<'a>, call: &'a FnCallExpr) -> Option<V<'a>> {
        match (&base, call.name.as_str(), call.args.as_slice()) {
            (V::Req, "param", [name]) => {
                let name = self.eval(name)?;
                self.dynamic(self.req.param(name.as_str()?))
            }
            (V::Req, "header", [name]) => {
                let name = self.eval(name)?;
                self.string(V::Owned(self.req.header(name.as_str()?)))
            }
            (_, "len", []) => Some(V::Int(str_len(base.as_str()?))),
            _ => None,
        }
    }

    fn call(&self, call: &'a FnCallExpr) -> Option<V<'a>> {
        let args = call.args.as_slice();
        if call.op_token.is_some() {
            return match (call.name.as_str(), args) {
                ("!", [a]) => match self.eval(a)? {
                    V::Bool(b) => Some(V::Bool(!b)),
                    _ => None,
                },
                (op, [a, b]) => compare(op, self.eval(a)?, self.eval(b)?),
                _ => None,
            };
        }
        match (call.name.as_str(), args) {
            ("type_of", [a]) => Some(V::Str(type_name(&self.eval(a)?))),
            ("waf", [r]) => {
                self.is_req(r)?;
                Some(V::Str(
                    self.req.waf().map(|(a, _)| a.as_str()).unwrap_or(""),
                ))
            }
            ("waf_part", [r]) => {
                self.is_req(r)?;
                Some(V::Str(self.req.waf().map(|(_, p)| p).unwrap_or("")))
            }
            ("waf_value", [v]) => {
                let v = self.eval(v)?;
                let attack = crate::waf::scan_value(v.as_str()?);
                Some(V::Str(attack.map(|a| a.as_str()).unwrap_or("")))
            }
            (helper @ ("in_list" | "contains_any" | "ip_in"), [list, value]) => {
                let (list, value) = (self.eval(list)?, self.eval(value)?);
                let (list, value) = (list.as_str()?, value.as_str()?);
                let hit = match helper {
                    "in_list" => self.lists.strings.get(list)?.contains(value),
                    "contains_any" => self.lists.strings.get(list)?.contains_any(value),
                    _ => self.lists.ips.get(list)?.contains_str(value),
                };
                Some(V::Bool(hit))
            }
            _ => None,
        }
    }

    fn is_req(&self, e: &'a Expr) -> Option<()> {
        matches!(self.eval(e)?, V::Req).then_some(())
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
fn compare<'a>(op: &str, a: V<'a>, b: V<'a>) -> Option<V<'a>> {
    if let (Some(a), Some(b)) = (a.as_str(), b.as_str()) {
        return match op {
            "==" => Some(V::Bool(a == b)),
            "!=" => Some(V::Bool(a != b)),
            _ => None,
        };
    }
    let r = match (a, b) {
        (V::Bool(a), V::Bool(b)) => match op {
            "==" => a == b,
            "!=" => a != b,
            _ => return None,
        },
        (V::Int(a), V::Int(b)) => match op {
            "==" => a == b,
            "!=" => a != b,
            "<" => a < b,
            "<=" => a <= b,
            ">" => a > b,
            ">=" => a >= b,
            _ => return None,
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
                for op in ["==", "!=", "<", ">=", "&&", "||"] {
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
            let Ok(ast) = engine.compile_with_scope(&compile_scope, format!("let v = {text};"))
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
                let Some(native) = cx.eval(&var.1) else {
                    continue;
                };
                compared += 1;
                let mut scope = Scope::new();
                scope.push_constant("req", req.clone());
                let v = engine
                    .eval_with_scope::<Dynamic>(&mut scope, text)
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
            // an unknown helper or variable
            "if nothing(req) { deny(\"a\") }",
            "if x == 1 { deny(\"a\") }",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        check(&rules);
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
