//! The operators' console (`admin-ui/`, Yew compiled to WebAssembly), served under `/console/`
//! from files embedded at build time. Every answer carries the console's security headers: a
//! strict Content-Security-Policy (own origin only, the inline bootstrap allowed by its hash, no
//! framing), `nosniff`, no referrer. The console talks to the admin API with the session cookie
//! (`HttpOnly`, `SameSite=Strict`) and sends the session's CSRF token on every change.

pub mod files;

use actix_web::http::header;
use actix_web::{web, HttpResponse};

mod assets {
    include!(concat!(env!("OUT_DIR"), "/console_assets.rs"));
}

/// Whether this binary was built with the console.
pub fn built() -> bool {
    !assets::CONSOLE_FILES.is_empty()
}

/// For console development: serve this directory (a trunk `dist/`) instead of the embedded files,
/// so a rebuilt console is picked up without rebuilding the engine.
fn dev_dir() -> Option<&'static std::path::Path> {
    static DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        std::env::var_os("RAMPART_CONSOLE_DIR")
            .filter(|d| !d.is_empty())
            .map(Into::into)
    })
    .as_deref()
}

fn policy(hashes: &str) -> String {
    format!(
        "default-src 'self'; script-src 'self' 'wasm-unsafe-eval' {hashes}; style-src 'self'; \
         img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
         form-action 'self'; frame-ancestors 'none'"
    )
}

/// The Content-Security-Policy of every console answer: built once for the embedded files, per
/// answer for a development directory (whose index.html may be rebuilt meanwhile).
pub fn csp() -> String {
    static EMBEDDED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    match dev_dir() {
        Some(d) => policy(&crate::console::files::inline_script_hashes(
            &std::fs::read_to_string(d.join("index.html")).unwrap_or_default(),
        )),
        None => EMBEDDED
            .get_or_init(|| policy(assets::CONSOLE_SCRIPT_HASHES))
            .clone(),
    }
}

/// The security headers of every console answer.
fn security_headers() -> [(header::HeaderName, String); 7] {
    [
        (header::CONTENT_SECURITY_POLICY, csp()),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".into()),
        (header::X_FRAME_OPTIONS, "DENY".into()),
        (header::REFERRER_POLICY, "no-referrer".into()),
        (
            header::HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin".into(),
        ),
        (
            header::HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin".into(),
        ),
        (
            header::HeaderName::from_static("permissions-policy"),
            "camera=(), microphone=(), geolocation=(), payment=()".into(),
        ),
    ]
}

fn secured(mut b: actix_web::HttpResponseBuilder) -> actix_web::HttpResponseBuilder {
    for h in security_headers() {
        b.insert_header(h);
    }
    b
}

async fn index(req: actix_web::HttpRequest) -> HttpResponse {
    file("index.html", accepts_gzip(&req))
}

async fn asset(req: actix_web::HttpRequest, path: web::Path<String>) -> HttpResponse {
    file(&path, accepts_gzip(&req))
}

/// Whether the client takes `Content-Encoding: gzip` (`Accept-Encoding` names it without
/// `q=0`).
fn accepts_gzip(req: &actix_web::HttpRequest) -> bool {
    req.headers()
        .get_all(header::ACCEPT_ENCODING)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|part| {
            let mut it = part.split(';');
            let name = it.next().unwrap_or("").trim();
            let refused = it.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

async fn redirect() -> HttpResponse {
    secured(HttpResponse::PermanentRedirect())
        .insert_header((header::LOCATION, "/console/"))
        .finish()
}

fn file(name: &str, gzip: bool) -> HttpResponse {
    use actix_web::web::Bytes;
    let found = match dev_dir() {
        // `{file}` never holds a `/`; hidden files (the build hash) are not served.
        Some(d) if !name.starts_with('.') && !name.ends_with(".gz") => {
            std::fs::read(d.join(name)).ok().map(|b| {
                (
                    name,
                    crate::console::files::mime(name),
                    Bytes::from(b),
                    None,
                )
            })
        }
        Some(_) => None,
        None => assets::CONSOLE_FILES
            .iter()
            .find(|(n, _, _, _)| *n == name)
            .map(|(n, m, b, gz)| {
                (
                    *n,
                    (*m).into(),
                    Bytes::from_static(b),
                    gz.map(Bytes::from_static),
                )
            }),
    };
    match found {
        Some((n, mime, bytes, gz)) => {
            // trunk names every asset but index.html after its content hash.
            let cache = if n == "index.html" {
                "no-cache"
            } else {
                "public, max-age=31536000, immutable"
            };
            let mut r = secured(HttpResponse::Ok());
            r.content_type(mime.as_ref())
                .insert_header((header::CACHE_CONTROL, cache));
            // Compressed when the build made a smaller twin (scripts/console.sh); caches keep
            // both forms apart.
            if gz.is_some() {
                r.insert_header((header::VARY, "Accept-Encoding"));
            }
            match gz.filter(|_| gzip) {
                Some(z) => {
                    r.insert_header((header::CONTENT_ENCODING, "gzip"));
                    r.body(z)
                }
                None => r.body(bytes),
            }
        }
        None if !built() && dev_dir().is_none() => secured(HttpResponse::NotFound())
            .content_type("text/plain; charset=utf-8")
            .body(
                "The console is not built into this binary. Build it with ./scripts/console.sh \
                 (or run ./scripts/serve.sh), then rebuild rampart.\n",
            ),
        None => {
            let mut r = actix_web::ResponseError::error_response(&crate::error::ApiError::new(
                404,
                "NOT_FOUND",
                format!("no console file {name:?}"),
            ));
            for (k, v) in security_headers() {
                if let Ok(v) = header::HeaderValue::try_from(v) {
                    r.headers_mut().insert(k, v);
                }
            }
            r
        }
    }
}

/// Registers `/console`, `/console/` and `/console/{file}` (GET and HEAD).
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/console")
            .route(web::get().to(redirect))
            .route(web::head().to(redirect))
            .default_service(web::to(crate::error::method_not_allowed)),
    )
    .service(
        web::resource("/console/")
            .route(web::get().to(index))
            .route(web::head().to(index))
            .default_service(web::to(crate::error::method_not_allowed)),
    )
    .service(
        web::resource("/console/{file}")
            .route(web::get().to(asset))
            .route(web::head().to(asset))
            .default_service(web::to(crate::error::method_not_allowed)),
    );
}
