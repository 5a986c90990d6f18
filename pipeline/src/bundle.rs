//! Signed bundles: `bundle` (manifest of content hashes, Ed25519 signature), `verify`, `keygen`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rampart_core::lifecycle::bundle::{Bundle, PublicKey, SecretKey};
use serde_json::json;

use crate::{compile, git, located, now_ms, pretty, read_sources, Fail, Out, RulesArg};

fn read_key(key: Option<PathBuf>, key_env: Option<String>) -> Result<SecretKey, String> {
    let text = match (key, key_env) {
        (Some(p), _) => std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?,
        (None, Some(var)) => {
            std::env::var(&var).map_err(|_| format!("environment variable {var} is not set"))?
        }
        (None, None) => {
            return Err("give --key FILE or --key-env VAR (or --unsigned for a dev engine)".into())
        }
    };
    SecretKey::parse(&text)
}

pub(crate) fn bundle(
    a: &RulesArg,
    key: Option<PathBuf>,
    key_env: Option<String>,
    unsigned: bool,
    message: Option<String>,
    out: &Path,
) -> Out {
    let key = if unsigned {
        None
    } else {
        Some(read_key(key, key_env)?)
    };
    let sources = read_sources(&a.rules)?;
    let set = compile(&sources).map_err(|errs| {
        Fail::Check(format!(
            "{}not bundled: the rule set does not compile\n",
            located(&errs)
        ))
    })?;
    let origin = git::origin(&a.rules);
    let message = message.unwrap_or_else(|| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(&a.rules)
            .args(["log", "-1", "--format=%s"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    });
    let files: BTreeMap<String, String> = sources.into_iter().map(|s| (s.path, s.text)).collect();
    let mut b = Bundle::new(
        files,
        now_ms(),
        &message,
        origin.clone(),
        concat!("rampart-rules ", env!("CARGO_PKG_VERSION")),
    );
    if let Some(k) = &key {
        b.sign(k);
    }
    let text = serde_json::to_string(&b).map_err(|e| e.to_string())?;
    std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    let key_id = b.signature.as_ref().map(|s| s.key_id.clone());
    Ok(if a.json {
        pretty(&json!({
            "bundle": out, "version": set.version(), "files": b.files.len(),
            "rules": set.rule_count(), "key_id": key_id, "origin": origin,
        }))
    } else {
        format!(
            "{}: version {}, {} rules in {} files, {}{}\n",
            out.display(),
            set.version(),
            set.rule_count(),
            b.files.len(),
            match &key_id {
                Some(id) => format!("signed by key {id}"),
                None => "UNSIGNED (dev engines only)".into(),
            },
            origin
                .commit
                .as_deref()
                .map(|c| format!(
                    ", commit {}{}",
                    &c[..c.len().min(12)],
                    if origin.dirty {
                        " + uncommitted changes"
                    } else {
                        ""
                    }
                ))
                .unwrap_or_default()
        )
    })
}

/// A refused bundle, for people or as JSON.
fn bundle_refused(
    path: &Path,
    e: &rampart_core::lifecycle::bundle::BundleError,
    json: bool,
) -> Fail {
    Fail::Check(if json {
        pretty(&json!({ "ok": false, "code": e.code(), "message": e.to_string() }))
    } else {
        format!("{}: refused: {} ({})\n", path.display(), e, e.code())
    })
}

pub(crate) fn read_bundle(path: &Path, json: bool) -> Result<(Bundle, Vec<u8>), Fail> {
    let bytes = std::fs::read(path).map_err(|e| Fail::Run(format!("{}: {e}", path.display())))?;
    let b = Bundle::parse(&bytes).map_err(|e| bundle_refused(path, &e, json))?;
    Ok((b, bytes))
}

pub(crate) fn verify(path: &Path, keys: &[String], json: bool) -> Out {
    let trusted = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let text = if k.starts_with(rampart_core::lifecycle::bundle::PUBLIC_PREFIX) {
                k.clone()
            } else {
                std::fs::read_to_string(k).map_err(|e| format!("{k}: {e}"))?
            };
            PublicKey::parse(&format!("key{}", i + 1), &text).map_err(|e| format!("{k}: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (b, _) = read_bundle(path, json)?;
    match b.verify(&trusted, false) {
        Ok(v) => Ok(if json {
            pretty(
                &json!({ "ok": true, "version": v.manifest.version, "key_id": v.signed_by.map(|(_, id)| id), "manifest": v.manifest }),
            )
        } else {
            format!(
                "{}: valid, version {}, {} files, signed by key {}\n",
                path.display(),
                v.manifest.version,
                v.manifest.files.len(),
                v.signed_by.map(|(_, id)| id).unwrap_or_default()
            )
        }),
        Err(e) => Err(bundle_refused(path, &e, json)),
    }
}

pub(crate) fn keygen(out: &Path) -> Out {
    let mut seed = [0u8; 32];
    getrandom::getrandom(&mut seed).map_err(|e| format!("no randomness: {e}"))?;
    let key = SecretKey::from_seed(seed);
    let secret = out.with_extension("key");
    let public = out.with_extension("pub");
    for p in [&secret, &public] {
        if p.exists() {
            return Err(Fail::Run(format!(
                "{} exists; not overwriting a key",
                p.display()
            )));
        }
    }
    write_private(&secret, &format!("{}\n", key.to_text()))
        .map_err(|e| format!("{}: {e}", secret.display()))?;
    let pk = key.public("ci");
    std::fs::write(&public, format!("{}\n", pk.to_text()))
        .map_err(|e| format!("{}: {e}", public.display()))?;
    Ok(format!(
        "secret key: {} (keep it in your CI's secret store; never commit it)\npublic key: {} (key id {})\n\nthe engine's config:\n[[admin.bundle_keys]]\nname = \"ci\"\npublic_key = \"{}\"\n",
        secret.display(),
        public.display(),
        pk.id,
        pk.to_text()
    ))
}

/// Creates `path` readable by its owner only.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    o.open(path)?.write_all(text.as_bytes())
}
