//! Logging set-up (text or JSON lines on stderr) with a log level that can change at run time
//! (`PUT /admin/v1/settings/log-level`).

use std::sync::{Mutex, OnceLock};

type Setter = Box<dyn Fn(tracing_subscriber::EnvFilter) -> Result<(), String> + Send + Sync>;

static SETTER: OnceLock<Setter> = OnceLock::new();
static LEVEL: Mutex<String> = Mutex::new(String::new());

/// Installs the global subscriber; `level` is a tracing filter directive (`info`,
/// `warn,rampart=debug`, …), `json` selects JSON lines.
pub fn init(level: &str, json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    *LEVEL.lock().unwrap_or_else(|e| e.into_inner()) = level.to_string();
    // Colours only on a terminal: escape codes have no place in a log file or a collector, and
    // styling every request span's fields costs time on each request.
    let base = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        let b = base
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_filter_reloading();
        let h = b.reload_handle();
        if b.try_init().is_ok() {
            let _ = SETTER.set(Box::new(move |f| h.reload(f).map_err(|e| e.to_string())));
        }
    } else {
        let b = base.with_filter_reloading();
        let h = b.reload_handle();
        if b.try_init().is_ok() {
            let _ = SETTER.set(Box::new(move |f| h.reload(f).map_err(|e| e.to_string())));
        }
    }
}

/// The current filter directive.
pub fn level() -> String {
    LEVEL.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Replaces the filter directive; refuses one that does not parse.
pub fn set_level(level: &str) -> Result<(), String> {
    if level.is_empty() || level.len() > 500 {
        return Err("a filter directive of 1–500 characters".into());
    }
    let f = tracing_subscriber::EnvFilter::try_new(level).map_err(|e| e.to_string())?;
    let set = SETTER
        .get()
        .ok_or_else(|| "logging is not managed by this process".to_string())?;
    set(f)?;
    *LEVEL.lock().unwrap_or_else(|e| e.into_inner()) = level.to_string();
    Ok(())
}
