//! `[log]`: the level (or a tracing filter) and the format of the engine's own log lines.

use serde::Deserialize;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug`, `trace`, or a tracing filter directive.
    pub level: String,
    /// `json` or `text`.
    pub format: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: "text".into(),
        }
    }
}

impl LogConfig {
    /// Checks `[log]`; every problem goes into `errs`.
    pub(super) fn check(&self, errs: &mut Vec<String>) {
        if !["json", "text"].contains(&self.format.as_str()) {
            errs.push("log.format must be \"json\" or \"text\"".into());
        }
    }
}
