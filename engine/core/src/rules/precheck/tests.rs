use std::sync::Arc;

use rhai::{Dynamic, Scope};

use super::Precheck;
use crate::rules::lists::{IpList, StringList};
use crate::rules::register::{build_engine, Lists};
use crate::rules::Req;

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
                plan: None,
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
                super::V::Float(f) => v.as_float() == Ok(*f),
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
        Ok(v) => format!("{:?}", v.try_cast::<crate::rules::Outcome>()),
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
        crate::rules::RuleState::local(10_000),
        crate::rules::RuleState::local(10_000),
    );
    let engine_a = build_engine(lists.clone(), Some(a.clone()));
    let engine_b = build_engine(lists.clone(), Some(b.clone()));
    let mut compile_scope = Scope::new();
    compile_scope.push("req", Req::default());
    let (mut ruled_out_after_counting, mut replayed) = (0, 0);
    crate::rules::state::EVAL_NOW.with(|n| n.set(1_767_225_600_000));
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
                let with_precheck = match p.check(req, &lists, engine_a.max_string_size(), Some(&a))
                {
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
                        answer(crate::rules::helpers::with_replay(calls, || {
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
    // Read at run time (cargo sets it for tests): a test binary reused from a build cache made
    // in another checkout must read this checkout's rules, not the other's.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let root = std::path::Path::new(&manifest).join("../../rules");
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
    let state = crate::rules::RuleState::local(1_000);
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
