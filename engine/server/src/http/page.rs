//! `GET /v1/authz-page`: the page a forward-auth proxy shows for a refused browser request. For a
//! `challenge` it is the challenge page: it solves the proof of work in a Web Worker (the JS
//! solver of `sdk/js/rampart-pow.mjs`, inlined), sends the page's own URL again with
//! `x-rampart-solution`, whose answer carries the clearance cookie, and reloads. For any other
//! refusal it is a short page with the decision's status and code.
//!
//! The proxy fills it from the `/v1/authz` answer (see `docs/integration/nginx.conf`):
//! `X-Rampart-Status`, `X-Rampart-Code`, `X-Rampart-Challenge` and `X-Rampart-Decision-Id`. Nothing
//! here is trusted: the token is only shown to the browser (its solution is verified in full by
//! `/v1/authz`), every value is checked for its alphabet before it is written into the page, and
//! the page runs under a Content-Security-Policy that allows its one inline script (by hash), the
//! solver it loads from a `blob:` URL, and requests to its own origin only.

use actix_web::http::header::HeaderMap;
use actix_web::{HttpRequest, HttpResponse};
use rampart_core::challenge::Challenge;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// The solver, served inside the page (no request for it, so the proxy needs no extra route).
const POW_JS: &str = include_str!("../../../../sdk/js/rampart-pow.mjs");

const STYLE: &str = "body{font:16px/1.5 system-ui,sans-serif;margin:0;display:flex;\
min-height:100vh;align-items:center;justify-content:center;background:#f6f7f9;color:#1d2330}\
main{max-width:28rem;padding:2rem;background:#fff;border-radius:12px;\
box-shadow:0 2px 12px rgba(0,0,0,.08)}h1{font-size:1.3rem;margin:0 0 .5rem}\
progress{width:100%;height:.6rem}small{color:#5a6275}button{font:inherit;padding:.4rem 1rem}";

/// The page's one script: reads the challenge, solves it in a worker with progress, sends the
/// solution with the page's own URL, and reloads once the answer has set the clearance cookie.
const SCRIPT: &str = r#"
const data = JSON.parse(document.getElementById("rampart-challenge").textContent);
const status = document.getElementById("status");
const bar = document.getElementById("bar");
const again = document.getElementById("again");
again.addEventListener("click", () => location.reload());
const fail = (text) => { status.textContent = text; again.hidden = false; bar.hidden = true; };
async function run() {
  if (!navigator.cookieEnabled) return fail("This site needs cookies to remember that the check passed. Allow cookies for it and try again.");
  // A page that keeps coming back means the clearance is not kept: stop instead of looping.
  const tries = Number(sessionStorage.getItem("rampart-tries") || 0) + 1;
  sessionStorage.setItem("rampart-tries", String(tries));
  if (tries > 3) { sessionStorage.removeItem("rampart-tries"); return fail("The check passed but the browser did not keep its result."); }
  const src = document.getElementById("rampart-pow").textContent;
  const url = URL.createObjectURL(new Blob([src], { type: "text/javascript" }));
  const { solveInWorker } = await import(url);
  const expected = 2 ** data.difficulty;
  const t0 = performance.now();
  const counter = await solveInWorker(data, { onProgress: (n) => { bar.value = Math.min(0.95, n / expected); } });
  bar.value = 1;
  status.textContent = "Checked in " + ((performance.now() - t0) / 1000).toFixed(1) + " s. Loading the page…";
  const r = await fetch(location.href, {
    headers: { "x-rampart-solution": data.token + ":" + counter },
    credentials: "same-origin", cache: "no-store", redirect: "manual",
  });
  if (r.ok || r.type === "opaqueredirect") { sessionStorage.removeItem("rampart-tries"); location.reload(); return; }
  fail("The check did not pass (" + (r.headers.get("x-rampart-code") || r.status) + ").");
}
run().catch((e) => fail("The check could not run: " + e));
"#;

/// `sha256-<base64>` of a CSP source.
fn csp_hash(text: &str) -> String {
    use base64ct::Encoding;
    format!(
        "'sha256-{}'",
        base64ct::Base64::encode_string(&Sha256::digest(text.as_bytes()))
    )
}

/// The challenge page's Content-Security-Policy (built once).
fn challenge_csp() -> &'static str {
    static CSP: OnceLock<String> = OnceLock::new();
    CSP.get_or_init(|| {
        format!(
            "default-src 'none'; script-src {} blob:; worker-src blob:; connect-src 'self'; \
             style-src {}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            csp_hash(SCRIPT),
            csp_hash(STYLE)
        )
    })
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// The refusal status the proxy passed on (checked by [`page`]).
fn status_of(h: &HeaderMap) -> u16 {
    header(h, "x-rampart-status")
        .and_then(|s| s.parse::<u16>().ok())
        .unwrap_or(403)
}

/// A value that may be written into the page as it is: a code (`RULE_CHALLENGE`) or an id.
fn plain<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    header(h, name).filter(|v| {
        v.len() <= 64
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    })
}

/// `GET|HEAD /v1/authz-page`.
pub(super) async fn authz_page(req: HttpRequest) -> HttpResponse {
    let h = req.headers();
    let challenge =
        header(h, "x-rampart-challenge").and_then(rampart_core::challenge::read_challenge);
    page(
        status_of(h),
        plain(h, "x-rampart-code"),
        plain(h, "x-rampart-decision-id"),
        challenge,
    )
    .finish()
}

/// Whether a forward-auth call comes from a browser's page load: its `Accept` names HTML. Such a
/// refused call is answered with the page itself (Traefik and Envoy show the check's answer to
/// the client as it is; nginx drops it and asks `/v1/authz-page`).
pub(super) fn wants_html(req: &HttpRequest) -> bool {
    header(req.headers(), "accept").is_some_and(|a| a.contains("text/html"))
}

/// The page for a refusal with `status`, `code` and decision `id`: the challenge page when there
/// is a challenge (and the status is a 4xx), else a short refusal page.
pub(super) struct Page<'a> {
    status: u16,
    code: Option<&'a str>,
    id: Option<&'a str>,
    challenge: Option<Challenge>,
}

/// [`Page`] from its parts (`status` outside 400–599 stands for 403).
pub(super) fn page<'a>(
    status: u16,
    code: Option<&'a str>,
    id: Option<&'a str>,
    challenge: Option<Challenge>,
) -> Page<'a> {
    let status = if (400..=599).contains(&status) {
        status
    } else {
        403
    };
    Page {
        status,
        code,
        id,
        challenge: challenge.filter(|_| status < 500),
    }
}

impl Page<'_> {
    /// The answer, with the page's headers; `extra` adds headers before the body is set.
    pub(super) fn finish_with(
        self,
        extra: impl FnOnce(&mut actix_web::HttpResponseBuilder),
    ) -> HttpResponse {
        let mut r = HttpResponse::build(
            actix_web::http::StatusCode::from_u16(self.status)
                .unwrap_or(actix_web::http::StatusCode::FORBIDDEN),
        );
        r.content_type("text/html; charset=utf-8")
            .insert_header(("Cache-Control", "no-store"))
            .insert_header(("X-Content-Type-Options", "nosniff"))
            .insert_header(("X-Frame-Options", "DENY"))
            .insert_header(("Referrer-Policy", "no-referrer"));
        if let Some(c) = self.code {
            r.insert_header(("X-Rampart-Code", c));
        }
        extra(&mut r);
        let footer = match self.id {
            Some(id) => format!("<p><small>Reference: {id}</small></p>"),
            None => String::new(),
        };
        match self.challenge {
            Some(c) => {
                // Only `[A-Za-z0-9._-]` and digits: nothing to escape, `<` included.
                let data = serde_json::to_string(&c).unwrap_or_else(|_| "{}".into());
                r.insert_header(("Content-Security-Policy", challenge_csp()));
                r.body(format!(
                    "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
                     <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
                     <meta name=\"robots\" content=\"noindex\"><title>Checking your browser</title>\
                     <style>{STYLE}</style></head><body><main><h1>Checking your browser</h1>\
                     <p id=\"status\">This takes a moment; the page opens by itself.</p>\
                     <progress id=\"bar\" max=\"1\" value=\"0\"></progress>\
                     <p><button id=\"again\" hidden>Try again</button></p>\
                     <noscript><p>This check needs JavaScript.</p></noscript>{footer}</main>\
                     <script type=\"application/json\" id=\"rampart-challenge\">{data}</script>\
                     <script type=\"text/plain\" id=\"rampart-pow\">{POW_JS}</script>\
                     <script type=\"module\">{SCRIPT}</script></body></html>"
                ))
            }
            None => {
                let what = self.code.unwrap_or("REFUSED");
                let status = self.status;
                r.insert_header((
                    "Content-Security-Policy",
                    format!(
                        "default-src 'none'; style-src {}; frame-ancestors 'none'",
                        csp_hash(STYLE)
                    ),
                ));
                r.body(format!(
                    "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
                     <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
                     <title>Request refused</title><style>{STYLE}</style></head><body><main>\
                     <h1>Request refused</h1><p>{status} {what}</p>{footer}</main></body></html>"
                ))
            }
        }
    }

    pub(super) fn finish(self) -> HttpResponse {
        self.finish_with(|_| {})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The solver sits inside a `<script type="text/plain">`: it must not be able to end it.
    #[test]
    fn the_inlined_solver_cannot_close_its_script_element() {
        let lower = POW_JS.to_ascii_lowercase();
        assert!(!lower.contains("</script"));
        assert!(!lower.contains("<!--"));
        assert!(!SCRIPT.to_ascii_lowercase().contains("</script"));
    }
}
