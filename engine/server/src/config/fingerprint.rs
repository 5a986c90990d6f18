//! `[fingerprint]` and `[[routes]]`: duplicate-submission settings, and per-route narrower windows
//! and dedup settings.

use rampart_core::policy::DedupPolicy;
use serde::Deserialize;

use super::apps::AppConfig;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FingerprintConfig {
    pub window_ms: i64,
    pub methods: Vec<String>,
    pub volatile_fields: Vec<String>,
}

impl Default for FingerprintConfig {
    fn default() -> Self {
        let d = DedupPolicy::default();
        FingerprintConfig {
            window_ms: d.window_ms,
            methods: d.methods,
            volatile_fields: d.volatile_fields,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    #[serde(default)]
    pub app: Option<String>,
    pub path: String,
    /// Narrows the app's time window on this route.
    #[serde(default)]
    pub window_ms: Option<i64>,
    #[serde(default)]
    pub dedup_window_ms: Option<i64>,
    #[serde(default)]
    pub methods: Option<Vec<String>>,
    #[serde(default)]
    pub volatile_fields: Option<Vec<String>>,
}

/// Checks `[fingerprint]` and every `[[routes]]` entry (against the apps they name); every problem
/// goes into `errs`.
pub(super) fn check(
    fingerprint: &FingerprintConfig,
    routes: &[RouteConfig],
    apps: &[AppConfig],
    errs: &mut Vec<String>,
) {
    if fingerprint.window_ms < 0 {
        errs.push("fingerprint.window_ms must be ≥ 0 (0 disables)".into());
    }
    for (i, r) in routes.iter().enumerate() {
        if !r.path.starts_with('/') {
            errs.push(format!("routes[{i}]: path must start with '/'"));
        } else if !rampart_core::path::route_is_normal(&r.path) {
            errs.push(format!(
                "routes[{i}]: path {:?} is not in the normal form requests are matched in (no \
                 empty, . or .. segments, no trailing /, unreserved characters not encoded; see \
                 docs/api.md#path-normalisation): it would never match",
                r.path
            ));
        }
        if r.dedup_window_ms.is_some_and(|w| w < 0) {
            errs.push(format!("routes[{i}]: dedup_window_ms must be ≥ 0"));
        }
        if let Some(w) = r.window_ms {
            if w < 1 {
                errs.push(format!("routes[{i}]: window_ms must be ≥ 1"));
            }
        }
        if let Some(app) = &r.app {
            match apps.iter().find(|a| &a.id == app) {
                None => errs.push(format!("routes[{i}]: unknown app {app:?}")),
                Some(a) => {
                    if let Some(w) = r.window_ms.filter(|w| *w > a.window_ms) {
                        errs.push(format!(
                            "routes[{i}]: window_ms = {w} is wider than app {app:?}'s \
                             window_ms = {}; a route can only narrow its app's window",
                            a.window_ms
                        ));
                    }
                }
            }
        }
    }
}
