//! The state a rule set keys by one subject of the request: each rate limit, counter and distinct
//! set whose key is a literal prefix followed by a request field —
//! `rate_limit("ip:" + req.ip, 20, 40)`, `count("orders:" + req.user, 600000)`,
//! `distinct("dev-acct:" + req.device_id, req.user, 3600000)`, with literal figures — found in the
//! rules' syntax trees. An operator asking why an IP is refused reads where each stands
//! (`GET /admin/v1/subjects/{kind}/{value}`); a key built any other way (a computed prefix,
//! several fields) is not listed.

use rhai::{ASTNode, Expr};

/// What a subject-keyed helper keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Keeps {
    /// `rate_limit(key, rate, burst)`.
    RateLimit { rate_per_sec: f64, burst: u32 },
    /// `count(key, window_ms)`.
    Count { window_ms: i64 },
    /// `distinct(key, item, window_ms)`.
    Distinct { window_ms: i64 },
}

/// One helper call keyed by a request field.
#[derive(Debug, Clone, PartialEq)]
pub struct SubjectKey {
    /// The rule that calls it.
    pub rule: String,
    /// The key's literal part: the key is `prefix` followed by the field's value.
    pub prefix: String,
    /// The request field the key ends with (`ip`, `user`, `device_id`, `ja3`, …).
    pub field: String,
    pub keeps: Keeps,
}

/// The subject-keyed helper calls of one rule's syntax tree, appended to `out` (once each).
pub(super) fn find(rule: &str, ast: &rhai::AST, out: &mut Vec<SubjectKey>) {
    ast.walk(&mut |path: &[ASTNode]| {
        let Some(ASTNode::Expr(Expr::FnCall(call, _))) = path.last() else {
            return true;
        };
        if call.op_token.is_some() {
            return true;
        }
        let keeps = match (call.name.as_str(), call.args.as_slice()) {
            ("rate_limit", [_, rate, burst]) => match (number(rate), number(burst)) {
                (Some(rate), Some(burst))
                    if rate > 0.0
                        && (1.0..=u32::MAX as f64).contains(&burst)
                        && burst.fract() == 0.0 =>
                {
                    Some(Keeps::RateLimit {
                        rate_per_sec: rate,
                        burst: burst as u32,
                    })
                }
                _ => None,
            },
            ("count", [_, window]) => window_ms(window).map(|window_ms| Keeps::Count { window_ms }),
            ("distinct", [_, _, window]) => {
                window_ms(window).map(|window_ms| Keeps::Distinct { window_ms })
            }
            _ => None,
        };
        if let (Some(keeps), Some((prefix, field))) = (keeps, call.args.first().and_then(key_parts))
        {
            let key = SubjectKey {
                rule: rule.to_string(),
                prefix,
                field,
                keeps,
            };
            if !out.contains(&key) {
                out.push(key);
            }
        }
        true
    });
}

/// `"<prefix>" + req.<field>`: the prefix and the field.
fn key_parts(e: &Expr) -> Option<(String, String)> {
    let Expr::FnCall(plus, _) = e else {
        return None;
    };
    let [Expr::StringConstant(prefix, _), Expr::Dot(d, _, _)] = plus.args.as_slice() else {
        return None;
    };
    if plus.name.as_str() != "+" {
        return None;
    }
    let (Expr::Variable(v, _, _), Expr::Property(p, _)) = (&d.lhs, &d.rhs) else {
        return None;
    };
    (v.1.as_str() == "req").then(|| (prefix.to_string(), p.2.to_string()))
}

fn number(e: &Expr) -> Option<f64> {
    match e {
        Expr::IntegerConstant(i, _) => Some(*i as f64),
        Expr::FloatConstant(f, _) => Some(**f),
        _ => None,
    }
}

fn window_ms(e: &Expr) -> Option<i64> {
    match e {
        Expr::IntegerConstant(i, _) if *i > 0 => Some(*i),
        _ => None,
    }
}
