//! `RAMPART_<SECTION>_<KEY>` environment overrides, applied to the parsed TOML (the file's or the
//! embedded defaults') before it becomes a [`Config`].

use super::{Config, ConfigError};

/// Sections that `RAMPART_<SECTION>_<KEY>` may override (longest match first).
const SECTIONS: [&str; 9] = [
    "decision_log",
    "challenge",
    "admin",
    "fingerprint",
    "server",
    "state",
    "rules",
    "waf",
    "log",
];

/// Environment variables with the `RAMPART_` prefix that are not config overrides.
const NOT_OVERRIDES: [&str; 1] = ["RAMPART_CONFIG"];

pub(super) fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(), ConfigError> {
    let mut errs = Vec::new();
    for (k, v) in env {
        let Some(rest) = k.strip_prefix("RAMPART_") else {
            continue;
        };
        if NOT_OVERRIDES.contains(&k.as_str()) {
            continue;
        }
        let lower = rest.to_ascii_lowercase();
        // Variables that name no section are not overrides (e.g. a secret referenced by
        // `secret_env`); a known section with an unknown key is refused by the parser.
        let Some(section) = SECTIONS
            .iter()
            .find(|s| lower.starts_with(&format!("{s}_")))
        else {
            continue;
        };
        let key = &lower[section.len() + 1..];
        let value = parse_scalar(&v);
        let entry = table
            .entry(section.to_string())
            .or_insert_with(|| toml::Value::Table(Default::default()));
        match entry.as_table_mut() {
            Some(t) => {
                t.insert(key.to_string(), value);
            }
            None => errs.push(format!(
                "environment variable {k}: [{section}] is not a table"
            )),
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid(errs))
    }
}

/// An override's value: a TOML scalar or array when it parses as one, else a string.
fn parse_scalar(v: &str) -> toml::Value {
    let wrapped = format!("x = {v}");
    match wrapped.parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("x")
            .unwrap_or_else(|| toml::Value::String(v.into())),
        Err(_) => toml::Value::String(v.to_string()),
    }
}

/// The embedded defaults as TOML (so the environment overrides apply to them the same way).
#[derive(serde::Serialize)]
pub(super) struct EmbeddedToml {
    apps: Vec<toml::Table>,
    admin: toml::Table,
}

impl From<Config> for EmbeddedToml {
    fn from(c: Config) -> Self {
        EmbeddedToml {
            apps: c
                .apps
                .into_iter()
                .map(|a| {
                    let mut t = toml::Table::new();
                    t.insert("id".into(), a.id.into());
                    if let Some(s) = a.secret {
                        t.insert("secret".into(), s.into());
                    }
                    t.insert("window_ms".into(), a.window_ms.into());
                    t
                })
                .collect(),
            admin: toml::Table::from_iter([(
                "allow_unsigned_uploads".to_string(),
                c.admin.allow_unsigned_uploads.into(),
            )]),
        }
    }
}
