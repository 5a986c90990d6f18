//! The `rampart` command line: `serve`, `check`, `sign`, `regress`, `migrate`.

pub(crate) mod demo;
pub(crate) mod regress;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use rampart_core::replay::sign::{sign_many, ToSign};

use crate::app::Surface;
use crate::config::{Config, Validated};
use crate::runtime::Runtime;

#[derive(Parser)]
#[command(
    name = "rampart",
    version,
    about = "Rules-driven risk-control engine with an anti-replay core"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the engine (embedded defaults when no config is given).
    Serve {
        /// TOML configuration file.
        #[arg(long, env = "RAMPART_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Validate the configuration (and rules), print the nonce store's sizing, exit non-zero on
    /// any problem.
    Check {
        #[arg(long, env = "RAMPART_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print the anti-replay headers for a request (for integrators, docs and tests).
    Sign(Box<SignArgs>),
    /// Replay recorded samples through a rule set: detection and false-positive rates, per-rule
    /// hits, failing samples, changes against another set.
    Regress(Box<crate::cli::regress::RegressArgs>),
    /// Apply the ClickHouse schema migrations of `[decision_log]` (also done at start unless
    /// `migrate = false`), print what was applied, exit non-zero when ClickHouse refuses.
    Migrate {
        #[arg(long, env = "RAMPART_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Drive realistic mixed traffic (shoppers, a flash-sale rush, floods, coupon abuse, a
    /// lottery rush, WAF probes, replay bursts, bad clocks) against a running engine.
    Demo(Box<crate::cli::demo::DemoArgs>),
    /// Read a password on stdin (one line) and print its argon2id hash for `[[admin.users]]
    /// password_hash`.
    HashPassword,
    /// The control plane's audit log.
    #[command(subcommand)]
    Audit(AuditCmd),
}

#[derive(Subcommand)]
enum AuditCmd {
    /// Check the audit log's hash chain, exports included: every entry parses, follows its
    /// predecessor and carries the hash of its line; the last is the recorded head. Exits 1 on
    /// any break, naming where.
    Verify {
        #[arg(long, env = "RAMPART_CONFIG")]
        config: Option<PathBuf>,
        /// More directories of exported entries (`audit-<first>-<last>.jsonl`), e.g. collected
        /// from other instances (Redis state: each exports to its own control directory).
        #[arg(long)]
        exports: Vec<PathBuf>,
    },
}

#[derive(clap::Args)]
struct SignArgs {
    #[arg(long, default_value = "demo")]
    app: String,
    #[command(flatten)]
    secret: SecretArgs,
    /// The key signed with: sent as `x-key-id` (one signature only); with `--config`, also picks
    /// that key's secret from the app's keys.
    #[arg(long)]
    key_id: Option<String>,
    /// A second signature, with this secret (a client rolling from one key to the next):
    /// `x-signature` carries both entries and `x-key-id` is not sent.
    #[arg(long, conflicts_with_all = ["also_secret_env", "also_key_id"])]
    also_secret: Option<String>,
    /// A second signature, with the secret in this environment variable.
    #[arg(long, conflicts_with = "also_key_id")]
    also_secret_env: Option<String>,
    /// A second signature, with this key of the app in `--config`.
    #[arg(long, requires = "config")]
    also_key_id: Option<String>,
    #[arg(long, default_value = "GET")]
    method: String,
    #[arg(long, default_value = "/")]
    path: String,
    /// Raw query string, without `?`.
    #[arg(long, default_value = "")]
    query: String,
    /// Request body.
    #[arg(long, conflicts_with = "body_file")]
    body: Option<String>,
    #[arg(long)]
    body_file: Option<PathBuf>,
    /// Unix ms; default: now.
    #[arg(long)]
    timestamp: Option<i64>,
    /// Default: 24 random characters.
    #[arg(long)]
    nonce: Option<String>,
    /// Adds `user_id` to the `decide` output.
    #[arg(long)]
    user: Option<String>,
    /// Adds `client.ip` to the `decide` output.
    #[arg(long)]
    ip: Option<String>,
    #[arg(long, value_enum, default_value_t = SignFormat::Headers)]
    format: SignFormat,
    /// Base URL for `--format curl`.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
}

#[derive(Clone, Copy, ValueEnum)]
enum SignFormat {
    /// `name: value` lines.
    Headers,
    /// A JSON object of the headers.
    Json,
    /// A complete `POST /v1/decide` body.
    Decide,
    /// A curl command sending the signed request itself (for forward-auth set-ups).
    Curl,
}

pub fn run() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Serve { config } => serve(config),
        Cmd::Check { config } => check(config),
        Cmd::Regress(args) => crate::cli::regress::run(*args),
        Cmd::Migrate { config } => migrate(config),
        Cmd::HashPassword => hash_password(),
        Cmd::Audit(AuditCmd::Verify { config, exports }) => audit_verify(config, &exports),
        Cmd::Demo(args) => crate::cli::demo::run(*args),
        Cmd::Sign(args) => match sign_cmd(*args) {
            Ok(out) => {
                println!("{out}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rampart sign: {e}");
                ExitCode::from(2)
            }
        },
    }
}

fn load(config: Option<&std::path::Path>) -> Result<Validated, String> {
    Config::load(config)
        .and_then(|c| c.validate())
        .map_err(|e| e.to_string())
}

/// [`load`], the TLS files read and the CRS compiled: what `serve` and `check` need before
/// binding a port.
fn load_serving(config: Option<&std::path::Path>) -> Result<Validated, String> {
    Config::load(config)
        .and_then(|c| c.validate())
        .and_then(Validated::with_tls)
        .and_then(Validated::with_crs)
        .map_err(|e| e.to_string())
}

fn serve(config: Option<PathBuf>) -> ExitCode {
    let v = match load_serving(config.as_deref()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rampart: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&v);
    for w in v.warnings() {
        tracing::warn!("{w}");
    }
    let bind = |addr: std::net::SocketAddr| {
        std::net::TcpListener::bind(addr).map_err(|e| {
            eprintln!("rampart: cannot listen on {addr}: {e}");
            ExitCode::from(2)
        })
    };
    let listener = match bind(v.listen) {
        Ok(l) => l,
        Err(code) => return code,
    };
    let admin_listener = match v.raw.server.admin_addr().map(bind).transpose() {
        Ok(l) => l,
        Err(code) => return code,
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let workers = match v.raw.server.workers {
        // With Redis state, decisions wait on Redis on a pool of their own
        // (`[state] decision_threads`); without it each round trip parks its worker, so more
        // workers than cores keep the cores busy.
        0 if v.raw.state.backend == crate::config::Backend::Redis
            && v.raw.state.decision_threads == 0 =>
        {
            cores * 8
        }
        0 => cores,
        n => n,
    };
    let rt = match Runtime::build(v) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rampart: {e}");
            return ExitCode::from(2);
        }
    };
    rt.start_background();
    // The address bound, not the configured one: with port 0 the OS chose it, and this line is
    // how a supervisor (or a test harness) learns it.
    let addr = listener.local_addr().unwrap_or(rt.config.listen);
    let tls = rt.config.tls.clone();
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, workers, "rampart listening on {scheme}://{addr}");
    let result = actix_web::rt::System::new().block_on(async {
        match admin_listener {
            None => run_listener(&rt, Surface::All, listener, workers).await,
            Some(admin) => {
                let addr = admin.local_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                tracing::info!(%addr, "operator plane (admin API, console, /metrics) on {scheme}://{addr}");
                // The operator plane gets its own workers: a busy console or a slow scrape
                // never holds a decision worker, and the reverse.
                tokio::try_join!(
                    run_listener(&rt, Surface::Decisions, listener, workers),
                    run_listener(&rt, Surface::Operator, admin, 1),
                )
                .map(|_| ())
            }
        }
    });
    rt.shutdown();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rampart: server error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Serves `surface` on `listener` until the server stops (a signal, or an error).
async fn run_listener(
    rt: &Arc<Runtime>,
    surface: Surface,
    listener: std::net::TcpListener,
    workers: usize,
) -> std::io::Result<()> {
    let server_rt = rt.clone();
    let srv = rt.config.raw.server.clone();
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new()
            .wrap(actix_web::middleware::from_fn(crate::http::header_limit))
            .wrap(actix_web::middleware::from_fn(
                crate::http::reqid::middleware,
            ))
            .configure(crate::app::configure_surface(
                Arc::clone(&server_rt),
                surface,
            ))
    })
    .workers(workers)
    .max_connections(srv.max_connections)
    .max_connection_rate(srv.max_connection_rate)
    .client_request_timeout(std::time::Duration::from_millis(
        srv.client_request_timeout_ms,
    ))
    .client_disconnect_timeout(std::time::Duration::from_millis(
        srv.client_disconnect_timeout_ms,
    ))
    .keep_alive(if srv.keep_alive_ms == 0 {
        actix_web::http::KeepAlive::Disabled
    } else {
        actix_web::http::KeepAlive::Timeout(std::time::Duration::from_millis(srv.keep_alive_ms))
    })
    .shutdown_timeout(5);
    let server = match &rt.config.tls {
        Some(tls) => server.listen_rustls_0_23(listener, (**tls).clone())?,
        None => server.listen(listener)?,
    };
    server.run().await
}

fn hash_password() -> ExitCode {
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() {
        eprintln!("rampart hash-password: cannot read stdin");
        return ExitCode::from(2);
    }
    let pw = line.trim_end_matches(['\r', '\n']);
    if pw.len() < 8 {
        eprintln!("rampart hash-password: a password of at least 8 characters, please");
        return ExitCode::from(2);
    }
    match crate::auth::hash_password(pw) {
        Ok(h) => {
            println!("{h}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rampart hash-password: {e}");
            ExitCode::FAILURE
        }
    }
}

fn audit_verify(config: Option<PathBuf>, exports: &[PathBuf]) -> ExitCode {
    let fail = |e: String| {
        eprintln!("rampart audit verify: {e}");
        ExitCode::from(2)
    };
    let v = match load(config.as_deref()) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let redis = match v.raw.state.backend {
        crate::config::Backend::Redis => match crate::redis_state::Redis::start(
            &v.raw.state.redis_settings(),
            Default::default(),
        ) {
            Ok(r) => Some(r),
            Err(e) => return fail(e),
        },
        crate::config::Backend::Local => None,
    };
    let log = match crate::runtime::control_store(&v, redis.as_ref())
        .and_then(|s| s.audit_lines().map_err(|e| e.to_string()))
    {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let mut lines = Vec::new();
    for d in exports {
        if let Err(e) = crate::control::store::read_exports(d, &mut lines) {
            return fail(e.to_string());
        }
    }
    // Entries exported twice (the same file collected from two places) are read once.
    let mut seen = std::collections::HashSet::new();
    lines.extend(log.lines);
    lines.retain(|(_, l)| seen.insert(crate::control::audit::line_hash(l)));
    lines.sort_by_key(|(_, l)| {
        serde_json::from_str::<serde_json::Value>(l)
            .ok()
            .and_then(|v| v["seq"].as_u64())
            .unwrap_or(0)
    });
    let r = crate::control::audit::verify_chain(
        lines.iter().map(|(at, l)| (at.as_str(), l.as_str())),
        log.head.as_deref(),
    );
    for p in &r.problems {
        println!("BROKEN {p}");
    }
    println!(
        "audit log: {} entries, {} from before the chain began{}; {}",
        r.entries,
        r.unchained,
        r.last
            .as_ref()
            .map(|(seq, h)| format!("; last entry {seq}, hash {h}"))
            .unwrap_or_default(),
        if r.problems.is_empty() {
            "chain intact".to_string()
        } else {
            format!("{} breaks", r.problems.len())
        }
    );
    if r.problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

fn migrate(config: Option<PathBuf>) -> ExitCode {
    let v = match load(config.as_deref()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rampart migrate: {e}");
            return ExitCode::from(2);
        }
    };
    let dl = &v.raw.decision_log;
    if dl.clickhouse_url.is_none() {
        eprintln!("rampart migrate: [decision_log] clickhouse_url is not set (the local log has no schema)");
        return ExitCode::from(2);
    }
    let s = crate::declog::ch_settings(dl);
    match crate::declog::clickhouse::migrate(&s) {
        Ok(applied) if applied.is_empty() => {
            println!(
                "clickhouse schema up to date ({} migrations)",
                crate::declog::clickhouse::MIGRATIONS.len()
            );
            ExitCode::SUCCESS
        }
        Ok(applied) => {
            for a in applied {
                println!("applied {a}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rampart migrate: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(v: &Validated) {
    crate::runtime::logging::init(&v.raw.log.level, v.raw.log.format == "json");
}

fn check(config: Option<PathBuf>) -> ExitCode {
    let name = config
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "<embedded defaults>".into());
    let v = match load_serving(config.as_deref()) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("rampart check: {e}");
            return ExitCode::from(2);
        }
    };
    println!("configuration OK: {name}");
    match &v.raw.server.tls_cert_file {
        Some(cert) => println!(
            "listen: https://{} (certificate {})",
            v.listen,
            cert.display()
        ),
        None => println!("listen: http://{}", v.listen),
    }
    for a in &v.apps {
        println!("app {}: window ±{} ms", a.id, a.window_ms);
    }
    for line in v.keys_report(crate::clock::now_ms()) {
        println!("{line}");
    }
    match (&v.crs, v.raw.waf.dir()) {
        (Some(crs), Some(dir)) => {
            let (left, folded) = crs.rule_counts();
            println!(
                "waf: OWASP CRS {} from {}, paranoia {}, threshold {}: {} rules per request ({} folded at load), {} files",
                if crs.version.is_empty() { "(unversioned)" } else { crs.version.as_str() },
                dir.display(),
                crs.options.paranoia,
                crs.options.threshold,
                left,
                folded,
                crs.files.len()
            );
            for w in crs.warnings().iter().filter(|w| !w.contains("is ignored")) {
                println!("warning: waf: {w}");
            }
        }
        _ if !v.raw.waf.crs => println!("waf: CRS off ([waf] crs = false); crs(req) finds nothing"),
        _ => println!(
            "warning: waf: no CRS rules directory ([waf] crs_dir, or Debian's modsecurity-crs at {}); crs(req) finds nothing",
            crate::config::DEBIAN_CRS_DIR
        ),
    }
    for r in v.raw.routes.iter().filter(|r| r.window_ms.is_some()) {
        println!(
            "route {}{}: window ±{} ms (narrower of this and the app's)",
            r.app
                .as_deref()
                .map(|a| format!("{a} "))
                .unwrap_or_default(),
            r.path,
            r.window_ms.unwrap_or_default()
        );
    }
    for w in v.warnings() {
        println!("warning: {w}");
    }
    println!("{}", v.sizing_report());
    let mut state = rampart_core::rules::RuleState::local(v.raw.rules.max_limiter_keys);
    state.reputation.window_ms = v.raw.rules.reputation_window_ms;
    match crate::runtime::load_rules(&v, &state) {
        Ok(set) => {
            match &v.raw.rules.dir {
                Some(dir) => println!(
                    "rules: {} rules in {}, version {}",
                    set.rule_count(),
                    dir.display(),
                    set.version()
                ),
                None if v.raw.rules.defaults => println!(
                    "rules: the built-in default set, {} rules, version {}",
                    set.rule_count(),
                    set.version()
                ),
                None => println!("rules: none ([rules] defaults = false and no dir)"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rampart check: {e}");
            ExitCode::from(2)
        }
    }
}

fn random_nonce() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut b = [0u8; 24];
    let _ = getrandom::getrandom(&mut b);
    b.iter()
        .map(|x| ALPHABET[(*x as usize) % ALPHABET.len()] as char)
        .collect()
}

/// Where a client command takes an app's secret from.
#[derive(clap::Args)]
pub struct SecretArgs {
    /// The app's secret.
    #[arg(long, conflicts_with_all = ["secret_env", "config"])]
    secret: Option<String>,
    /// Read the secret from this environment variable.
    #[arg(long, conflicts_with = "config")]
    secret_env: Option<String>,
    /// Take the app's secret from this configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
}

impl SecretArgs {
    /// The secret of `app` (of its key `key_id` when the secret comes from `--config`), or `None`
    /// when no source was given.
    pub fn resolve(&self, app: &str, key_id: Option<&str>) -> Result<Option<Vec<u8>>, String> {
        Ok(Some(match (&self.secret, &self.secret_env, &self.config) {
            (Some(s), _, _) => s.clone().into_bytes(),
            (_, Some(var), _) => std::env::var(var)
                .map_err(|_| format!("{var} is not set"))?
                .into_bytes(),
            (_, _, Some(path)) => {
                let v = load(Some(path))?;
                v.apps
                    .iter()
                    .find(|a| a.id == app)
                    .ok_or_else(|| format!("app {app:?} is not in {}", path.display()))?
                    .secret(key_id)?
                    .to_vec()
            }
            _ => return Ok(None),
        }))
    }
}

fn sign_cmd(a: SignArgs) -> Result<String, String> {
    let secret = a
        .secret
        .resolve(&a.app, a.key_id.as_deref())?
        .ok_or("give --secret, --secret-env or --config")?;
    let also = match (&a.also_secret, &a.also_secret_env, &a.also_key_id) {
        (Some(s), _, _) => Some(s.clone().into_bytes()),
        (_, Some(var), _) => Some(
            std::env::var(var)
                .map_err(|_| format!("{var} is not set"))?
                .into_bytes(),
        ),
        (_, _, Some(id)) => a.secret.resolve(&a.app, Some(id))?,
        _ => None,
    };
    // A client mid-roll does not know which key the engine holds: it names none.
    let key_id = a.key_id.clone().filter(|_| also.is_none());
    if let Some(id) = &key_id {
        if !rampart_core::replay::keys::valid_key_id(id) {
            return Err(format!(
                "--key-id {id:?}: a key id is 1–64 characters of [A-Za-z0-9._-]"
            ));
        }
    }
    let body = match (&a.body, &a.body_file) {
        (Some(b), _) => b.clone().into_bytes(),
        (_, Some(p)) => std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?,
        _ => Vec::new(),
    };
    let nonce = a.nonce.clone().unwrap_or_else(random_nonce);
    let method = a.method.to_ascii_uppercase();
    let mut secrets: Vec<&[u8]> = vec![&secret];
    secrets.extend(also.as_deref());
    let h = sign_many(
        &secrets,
        &ToSign {
            app: &a.app,
            method: &method,
            path: &a.path,
            query: &a.query,
            body: &body,
            timestamp_ms: a.timestamp.unwrap_or_else(crate::clock::now_ms),
            nonce: &nonce,
        },
    );
    let mut headers = serde_json::json!({
        "x-timestamp": h.timestamp,
        "x-nonce": h.nonce,
        "x-signature": h.signature,
    });
    if let Some(id) = &key_id {
        headers["x-key-id"] = id.as_str().into();
    }
    let key_line = key_id
        .as_ref()
        .map(|id| format!("\nx-key-id: {id}"))
        .unwrap_or_default();
    Ok(match a.format {
        SignFormat::Headers => format!(
            "x-timestamp: {}\nx-nonce: {}\nx-signature: {}{key_line}\nx-content-sha256: {}",
            h.timestamp, h.nonce, h.signature, h.body_sha256
        ),
        SignFormat::Json => headers.to_string(),
        SignFormat::Decide => {
            let mut req = serde_json::json!({
                "app": a.app,
                "request": {
                    "method": method,
                    "path": a.path,
                    "query": a.query,
                    "headers": headers,
                    "body": String::from_utf8_lossy(&body),
                },
            });
            if let Some(u) = a.user {
                req["user_id"] = u.into();
            }
            if let Some(ip) = a.ip {
                req["client"] = serde_json::json!({ "ip": ip });
            }
            req.to_string()
        }
        SignFormat::Curl => {
            let q = if a.query.is_empty() {
                String::new()
            } else {
                format!("?{}", a.query)
            };
            let mut cmd = format!(
                "curl -s -X {method} '{}{}{q}' -H 'x-app: {}' -H 'x-timestamp: {}' -H 'x-nonce: {}' -H 'x-signature: {}' -H 'x-content-sha256: {}'",
                a.url.trim_end_matches('/'),
                a.path,
                a.app,
                h.timestamp,
                h.nonce,
                h.signature,
                h.body_sha256
            );
            if let Some(id) = &key_id {
                cmd.push_str(&format!(" -H 'x-key-id: {id}'"));
            }
            if !body.is_empty() {
                cmd.push_str(&format!(
                    " --data-raw '{}'",
                    String::from_utf8_lossy(&body).replace('\'', "'\\''")
                ));
            }
            cmd
        }
    })
}
