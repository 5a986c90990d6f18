//! Talking to a running engine's admin API: `promote` (upload a signed bundle and stage it, or
//! approve it) and `record` (download recent decisions as recorded traffic for `diff`).

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::bundle::read_bundle;
use crate::{bar, now_ms, pretty, Fail, Out};

/// A small admin API client.
struct Api {
    base: String,
    token: String,
    agent: ureq::Agent,
}

impl Api {
    fn new(engine: &str, token_env: &str, ca_file: Option<&Path>) -> Result<Api, String> {
        let token = std::env::var(token_env).map_err(|_| {
            format!("environment variable {token_env} (the admin API token) is not set")
        })?;
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(path) = ca_file {
            if !engine.starts_with("https://") {
                return Err(format!(
                    "--ca-file is for an https:// engine; {engine} would get the token in clear"
                ));
            }
            let pem =
                std::fs::read(path).map_err(|e| format!("--ca-file {}: {e}", path.display()))?;
            let mut certs: Vec<ureq::tls::Certificate<'static>> = Vec::new();
            for item in ureq::tls::parse_pem(&pem) {
                // A damaged file is refused whole, even when one certificate in it parses.
                if let ureq::tls::PemItem::Certificate(c) =
                    item.map_err(|e| format!("--ca-file {}: {e}", path.display()))?
                {
                    certs.push(c);
                }
            }
            if certs.is_empty() {
                return Err(format!(
                    "--ca-file {}: no PEM certificate in it",
                    path.display()
                ));
            }
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&certs));
        }
        Ok(Api {
            base: engine.trim_end_matches('/').to_string(),
            token,
            agent: ureq::Agent::config_builder()
                .http_status_as_error(false)
                .timeout_global(Some(Duration::from_secs(120)))
                .tls_config(tls.build())
                .build()
                .into(),
        })
    }

    fn call(&self, method: &str, path: &str, body: Option<String>) -> Result<(u16, Value), String> {
        let url = format!("{}{path}", self.base);
        let auth = format!("Bearer {}", self.token);
        let r = match body {
            Some(b) => self
                .agent
                .post(&url)
                .header("authorization", &auth)
                .header("content-type", "application/json")
                .send(b),
            None if method == "GET" => self.agent.get(&url).header("authorization", &auth).call(),
            None => self
                .agent
                .post(&url)
                .header("authorization", &auth)
                .send_empty(),
        };
        let mut r = r.map_err(|e| format!("{url}: {e}"))?;
        let status = r.status().as_u16();
        let text = r
            .body_mut()
            .with_config()
            .limit(256 << 20)
            .read_to_string()
            .map_err(|e| format!("{url}: {e}"))?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v))
    }
}

/// An engine's refusal as the command's failure.
fn refused(what: &str, status: u16, v: &Value) -> Fail {
    Fail::Check(format!(
        "{what} refused: HTTP {status} {}: {}\n",
        v["error"]["code"].as_str().unwrap_or("-"),
        v["error"]["message"]
            .as_str()
            .map_or_else(|| v.to_string(), str::to_string)
    ))
}

pub(crate) fn promote(
    path: &Path,
    engine: &str,
    stage: &str,
    token_env: &str,
    ca_file: Option<&Path>,
    json: bool,
) -> Out {
    let (stage_name, percent) = match stage.split_once(':') {
        None if stage == "shadow" || stage == "stable" => (stage, None),
        Some(("canary", p)) => match p.parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 100.0 => ("canary", Some(p)),
            _ => {
                return Err(Fail::Run(format!(
                    "--stage canary:{p}: the percentage must be in (0, 100]"
                )))
            }
        },
        _ => {
            return Err(Fail::Run(format!(
                "--stage {stage:?}: use shadow, canary:<percent> or stable"
            )))
        }
    };
    let (_, bytes) = read_bundle(path, json)?;
    let api = Api::new(engine, token_env, ca_file)?;
    let (status, up) = api.call(
        "POST",
        "/admin/v1/rulesets",
        Some(String::from_utf8_lossy(&bytes).into_owned()),
    )?;
    if status != 200 && status != 201 {
        return Err(refused("upload", status, &up));
    }
    let version = up["version"].as_str().unwrap_or_default().to_string();
    let (status, state) = if stage_name == "stable" {
        api.call(
            "POST",
            "/admin/v1/rollout/approve",
            Some(json!({ "version": version }).to_string()),
        )?
    } else {
        api.call(
            "POST",
            "/admin/v1/rollout",
            Some(
                json!({ "version": version, "stage": stage_name, "percent": percent }).to_string(),
            ),
        )?
    };
    if status != 200 {
        return Err(refused(
            &format!("{stage_name} of {version}"),
            status,
            &state,
        ));
    }
    Ok(if json {
        pretty(
            &json!({ "version": version, "created": up["created"], "stage": stage, "rollout": state }),
        )
    } else {
        format!(
            "uploaded {version} ({}); {}\nstable: {}, candidate: {}\n",
            if up["created"] == true {
                "new"
            } else {
                "already known"
            },
            match stage_name {
                "stable" => "approved: it is now stable".to_string(),
                "canary" => format!("canary at {}%", percent.unwrap_or_default()),
                _ => "in shadow".to_string(),
            },
            state["stable"].as_str().unwrap_or("-"),
            state["candidate"]["version"].as_str().unwrap_or("-")
        )
    })
}

pub(crate) fn record(
    engine: &str,
    hours: f64,
    max: usize,
    out: &Path,
    token_env: &str,
    ca_file: Option<&Path>,
) -> Out {
    if !(hours > 0.0 && hours <= 24.0 * 31.0) {
        return Err(Fail::Run("--hours must be in (0, 744]".into()));
    }
    let api = Api::new(engine, token_env, ca_file)?;
    let to = now_ms() + 1;
    let from = to - (hours * 3_600_000.0) as i64;
    let mut cursor: Option<String> = None;
    let mut text = String::new();
    let mut n = 0usize;
    let pb = bar(max, "decisions", false);
    while n < max {
        let mut q = format!(
            "/admin/v1/decisions?from={from}&to={to}&limit={}",
            (max - n).min(1000)
        );
        if let Some(c) = &cursor {
            q.push_str(&format!("&cursor={}", c.replace(':', "%3A")));
        }
        let (status, page) = api.call("GET", &q, None)?;
        if status != 200 {
            return Err(refused("decision query", status, &page));
        }
        let rows = page["decisions"].as_array().cloned().unwrap_or_default();
        for r in &rows {
            text.push_str(&r.to_string());
            text.push('\n');
        }
        n += rows.len();
        pb.inc(rows.len() as u64);
        match page["next"].as_str() {
            Some(c) if !rows.is_empty() => cursor = Some(c.to_string()),
            _ => break,
        }
    }
    pb.finish_and_clear();
    std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(format!(
        "{}: {n} decisions from the last {hours} h\n",
        out.display()
    ))
}
