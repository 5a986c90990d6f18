//! Signed rule set bundles: what the git pipeline builds and the engine accepts.
//!
//! A bundle is one JSON document: the rule set's files, a manifest naming every file with its
//! SHA-256 and size (plus the set's version, message and git origin), and an Ed25519 signature
//! over the manifest's exact bytes. The manifest travels as a string so that the signed bytes are
//! the bytes received: no canonical JSON is needed, and re-serialising cannot change what was
//! signed.
//!
//! ```json
//! { "format": "rampart-bundle/1",
//!   "manifest": "{\"format\":\"rampart-bundle/1\",\"version\":\"…\",\"files\":{…},…}",
//!   "signature": { "alg": "ed25519", "key_id": "3f2a…", "signature": "<base64, 64 bytes>" },
//!   "files": { "edge/waf-sqli.rhai": "…", "lists/blocklist.ips": "…" } }
//! ```
//!
//! Verification ([`Bundle::verify`]) checks, in order: a signature is present (unless unsigned
//! bundles are allowed), its key is trusted, the signature holds over the manifest (strict
//! Ed25519: no malleable or small-order forms), the manifest parses, and the files are exactly the
//! manifest's files with their hashes and sizes. Anything else is refused with a stable code.

use std::collections::BTreeMap;

use base64ct::{Base64, Encoding};
use ed25519_dalek::{Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::rules::{content_version, Source};

/// The bundle format this code writes and reads.
pub const FORMAT: &str = "rampart-bundle/1";
/// Prefix of a public key in text form (`ed25519:<base64 of 32 bytes>`).
pub const PUBLIC_PREFIX: &str = "ed25519:";
/// Prefix of a secret key file's one line (`ed25519-secret:<base64 of the 32-byte seed>`).
pub const SECRET_PREFIX: &str = "ed25519-secret:";

/// Why a bundle was refused. Each has a stable code and an HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("not a valid bundle: {0}")]
    Invalid(String),
    #[error("the bundle is not signed, and unsigned rule sets are not accepted here")]
    Unsigned,
    #[error("the bundle is signed by key {0}, which is not a trusted key")]
    UntrustedKey(String),
    #[error("the bundle's signature does not verify with key {0}")]
    BadSignature(String),
    #[error("the bundle's content does not match its manifest: {0}")]
    Tampered(String),
}

impl BundleError {
    pub fn code(&self) -> &'static str {
        match self {
            BundleError::Invalid(_) => "BUNDLE_INVALID",
            BundleError::Unsigned => "BUNDLE_UNSIGNED",
            BundleError::UntrustedKey(_) => "BUNDLE_UNTRUSTED_KEY",
            BundleError::BadSignature(_) => "BUNDLE_SIGNATURE_INVALID",
            BundleError::Tampered(_) => "BUNDLE_TAMPERED",
        }
    }

    pub fn status(&self) -> u16 {
        match self {
            BundleError::Unsigned | BundleError::UntrustedKey(_) => 403,
            _ => 400,
        }
    }
}

/// One file in the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileHash {
    /// Lower-case hex SHA-256 of the file's UTF-8 text.
    pub sha256: String,
    pub bytes: u64,
}

impl FileHash {
    pub fn of(text: &str) -> FileHash {
        FileHash {
            sha256: hex::encode(Sha256::digest(text.as_bytes())),
            bytes: text.len() as u64,
        }
    }
}

/// Where the bundle's files came from (filled in by the pipeline from git).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Origin {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The working tree had uncommitted changes under the rule directory.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub dirty: bool,
}

/// What the signature covers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    /// The rule set's version (content hash) as the core computes it.
    pub version: String,
    pub files: BTreeMap<String, FileHash>,
    pub created_ms: i64,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub origin: Origin,
    /// The tool (and its version) that built the bundle.
    #[serde(default)]
    pub tool: String,
}

/// The signature block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    pub alg: String,
    pub key_id: String,
    /// Base64 (standard, padded) of the 64-byte Ed25519 signature.
    pub signature: String,
}

/// A bundle as it travels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    pub format: String,
    /// The manifest's JSON text: the exact signed bytes.
    pub manifest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Signature>,
    pub files: BTreeMap<String, String>,
}

/// A trusted public key.
#[derive(Debug, Clone)]
pub struct PublicKey {
    pub name: String,
    pub id: String,
    key: VerifyingKey,
}

/// The key id: the first 8 bytes of SHA-256 over the raw public key, in hex.
fn key_id(key: &VerifyingKey) -> String {
    hex::encode(&Sha256::digest(key.as_bytes())[..8])
}

fn b64_32(text: &str, what: &str) -> Result<[u8; 32], String> {
    let mut buf = [0u8; 32];
    let bytes = Base64::decode(text.trim(), &mut buf).map_err(|_| format!("{what}: not base64"))?;
    <[u8; 32]>::try_from(bytes).map_err(|_| format!("{what}: not 32 bytes"))
}

impl PublicKey {
    /// Parses `ed25519:<base64>`.
    pub fn parse(name: &str, text: &str) -> Result<PublicKey, String> {
        let b64 = text
            .trim()
            .strip_prefix(PUBLIC_PREFIX)
            .ok_or_else(|| format!("public key must start with `{PUBLIC_PREFIX}`"))?;
        let raw = b64_32(b64, "public key")?;
        let key = VerifyingKey::from_bytes(&raw).map_err(|_| "not an Ed25519 public key")?;
        if key.is_weak() {
            return Err("weak (small-order) Ed25519 public key".into());
        }
        Ok(PublicKey {
            name: name.to_string(),
            id: key_id(&key),
            key,
        })
    }

    /// `ed25519:<base64>`.
    pub fn to_text(&self) -> String {
        format!(
            "{PUBLIC_PREFIX}{}",
            Base64::encode_string(self.key.as_bytes())
        )
    }
}

/// A signing key (the pipeline's; the engine never holds one).
pub struct SecretKey(SigningKey);

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretKey")
            .field("key_id", &key_id(&self.0.verifying_key()))
            .finish_non_exhaustive()
    }
}

impl SecretKey {
    /// From 32 random bytes (the caller supplies the randomness: the core does no I/O).
    pub fn from_seed(seed: [u8; 32]) -> SecretKey {
        SecretKey(SigningKey::from_bytes(&seed))
    }

    /// Parses a secret key file's text (`ed25519-secret:<base64>`).
    pub fn parse(text: &str) -> Result<SecretKey, String> {
        let b64 = text
            .trim()
            .strip_prefix(SECRET_PREFIX)
            .ok_or_else(|| format!("secret key must start with `{SECRET_PREFIX}`"))?;
        Ok(SecretKey::from_seed(b64_32(b64, "secret key")?))
    }

    pub fn to_text(&self) -> String {
        format!(
            "{SECRET_PREFIX}{}",
            Base64::encode_string(&self.0.to_bytes())
        )
    }

    pub fn public(&self, name: &str) -> PublicKey {
        let key = self.0.verifying_key();
        PublicKey {
            name: name.to_string(),
            id: key_id(&key),
            key,
        }
    }
}

/// A bundle that passed [`Bundle::verify`].
#[derive(Debug, Clone)]
pub struct Verified {
    pub manifest: Manifest,
    /// The trusted key's name and id, or `None` for an accepted unsigned bundle.
    pub signed_by: Option<(String, String)>,
}

impl Bundle {
    /// An unsigned bundle of `files` (its manifest's version is their content version).
    pub fn new(
        files: BTreeMap<String, String>,
        created_ms: i64,
        message: &str,
        origin: Origin,
        tool: &str,
    ) -> Bundle {
        let manifest = Manifest {
            format: FORMAT.into(),
            version: content_version(&sources_of(&files)),
            files: files
                .iter()
                .map(|(p, t)| (p.clone(), FileHash::of(t)))
                .collect(),
            created_ms,
            message: message.into(),
            origin,
            tool: tool.into(),
        };
        Bundle {
            format: FORMAT.into(),
            manifest: serde_json::to_string(&manifest).expect("a manifest serialises"),
            signature: None,
            files,
        }
    }

    /// Parses a bundle document (without verifying it).
    pub fn parse(bytes: &[u8]) -> Result<Bundle, BundleError> {
        let b: Bundle =
            serde_json::from_slice(bytes).map_err(|e| BundleError::Invalid(e.to_string()))?;
        if b.format != FORMAT {
            return Err(BundleError::Invalid(format!(
                "format {:?} is not {FORMAT:?}",
                b.format
            )));
        }
        Ok(b)
    }

    /// Signs the manifest (replacing any signature).
    pub fn sign(&mut self, key: &SecretKey) {
        let sig = key.0.sign(self.manifest.as_bytes());
        self.signature = Some(Signature {
            alg: "ed25519".into(),
            key_id: key_id(&key.0.verifying_key()),
            signature: Base64::encode_string(&sig.to_bytes()),
        });
    }

    /// Checks the signature against `trusted`, the files against the manifest, and that they hash
    /// to the manifest's version. An unsigned bundle passes only with `allow_unsigned` (its files
    /// are still checked).
    pub fn verify(
        &self,
        trusted: &[PublicKey],
        allow_unsigned: bool,
    ) -> Result<Verified, BundleError> {
        let signed_by = match &self.signature {
            None if allow_unsigned => None,
            None => return Err(BundleError::Unsigned),
            Some(s) => {
                if s.alg != "ed25519" {
                    return Err(BundleError::Invalid(format!(
                        "signature algorithm {:?} is not \"ed25519\"",
                        s.alg
                    )));
                }
                let key = trusted
                    .iter()
                    .find(|k| k.id == s.key_id)
                    .ok_or_else(|| BundleError::UntrustedKey(short(&s.key_id)))?;
                let mut buf = [0u8; 64];
                let raw = Base64::decode(&s.signature, &mut buf)
                    .ok()
                    .and_then(|b| <[u8; 64]>::try_from(b).ok())
                    .ok_or_else(|| {
                        BundleError::Invalid("signature: not 64 bytes of base64".into())
                    })?;
                let sig = ed25519_dalek::Signature::from_bytes(&raw);
                key.key
                    .verify_strict(self.manifest.as_bytes(), &sig)
                    .map_err(|_| BundleError::BadSignature(key.id.clone()))?;
                Some((key.name.clone(), key.id.clone()))
            }
        };
        let manifest: Manifest = serde_json::from_str(&self.manifest)
            .map_err(|e| BundleError::Invalid(format!("manifest: {e}")))?;
        if manifest.format != FORMAT {
            return Err(BundleError::Invalid(format!(
                "manifest format {:?} is not {FORMAT:?}",
                manifest.format
            )));
        }
        for (path, want) in &manifest.files {
            match self.files.get(path) {
                None => {
                    return Err(BundleError::Tampered(format!(
                        "{} is in the manifest but not in the bundle",
                        short(path)
                    )))
                }
                Some(text) if FileHash::of(text) != *want => {
                    return Err(BundleError::Tampered(format!(
                        "{} does not match its hash in the manifest",
                        short(path)
                    )))
                }
                Some(_) => {}
            }
        }
        if let Some(extra) = self.files.keys().find(|p| !manifest.files.contains_key(*p)) {
            return Err(BundleError::Tampered(format!(
                "{} is not in the manifest",
                short(extra)
            )));
        }
        let version = content_version(&self.sources());
        if version != manifest.version {
            return Err(BundleError::Tampered(format!(
                "the files hash to version {version}, the manifest says {}",
                short(&manifest.version)
            )));
        }
        Ok(Verified {
            manifest,
            signed_by,
        })
    }

    /// The files as rule sources.
    pub fn sources(&self) -> Vec<Source> {
        sources_of(&self.files)
    }
}

fn sources_of(files: &BTreeMap<String, String>) -> Vec<Source> {
    files
        .iter()
        .map(|(p, t)| Source {
            path: p.clone(),
            text: t.clone(),
        })
        .collect()
}

/// Caller-controlled text in an error message, cut to a sane length.
fn short(s: &str) -> String {
    let mut out: String = s.chars().take(120).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> BTreeMap<String, String> {
        [
            ("edge/a.rhai".to_string(), "deny(\"X\", \"y\")".to_string()),
            ("lists/l.txt".to_string(), "a\nb\n".to_string()),
        ]
        .into_iter()
        .collect()
    }

    fn signed(seed: u8) -> (Bundle, PublicKey) {
        let key = SecretKey::from_seed([seed; 32]);
        let mut b = Bundle::new(files(), 1, "m", Origin::default(), "t");
        b.sign(&key);
        (b, key.public("ci"))
    }

    #[test]
    fn a_signed_bundle_verifies_and_round_trips() {
        let (b, pk) = signed(7);
        let text = serde_json::to_vec(&b).unwrap();
        let back = Bundle::parse(&text).unwrap();
        let v = back.verify(std::slice::from_ref(&pk), false).unwrap();
        assert_eq!(v.signed_by, Some(("ci".into(), pk.id.clone())));
        assert_eq!(v.manifest.version, content_version(&back.sources()));
        assert_eq!(back.sources().len(), 2);
        // Keys round-trip through their text forms.
        let sk = SecretKey::from_seed([7; 32]);
        assert_eq!(
            SecretKey::parse(&sk.to_text()).unwrap().public("x").id,
            pk.id
        );
        assert_eq!(PublicKey::parse("ci", &pk.to_text()).unwrap().id, pk.id);
    }

    #[test]
    fn every_kind_of_tampering_is_refused_with_its_code() {
        let (b, pk) = signed(7);
        let trusted = [pk];
        let code = |b: &Bundle, allow: bool| b.verify(&trusted, allow).unwrap_err().code();

        let mut t = b.clone();
        t.files.insert("edge/a.rhai".into(), "allow()".into());
        assert_eq!(code(&t, false), "BUNDLE_TAMPERED");
        let mut t = b.clone();
        t.files.insert("edge/extra.rhai".into(), "allow()".into());
        assert_eq!(code(&t, false), "BUNDLE_TAMPERED");
        let mut t = b.clone();
        t.files.remove("lists/l.txt");
        assert_eq!(code(&t, false), "BUNDLE_TAMPERED");
        // Editing the manifest (even one byte of whitespace) breaks the signature.
        let mut t = b.clone();
        t.manifest.push(' ');
        assert_eq!(code(&t, false), "BUNDLE_SIGNATURE_INVALID");
        // A manifest rewritten to match edited files still fails the signature.
        let mut t = b.clone();
        t.files.insert("edge/a.rhai".into(), "allow()".into());
        let mut m: Manifest = serde_json::from_str(&t.manifest).unwrap();
        m.files
            .insert("edge/a.rhai".into(), FileHash::of("allow()"));
        t.manifest = serde_json::to_string(&m).unwrap();
        assert_eq!(code(&t, false), "BUNDLE_SIGNATURE_INVALID");
        // Re-signed with another key: not trusted.
        let mut t = b.clone();
        t.sign(&SecretKey::from_seed([8; 32]));
        assert_eq!(code(&t, false), "BUNDLE_UNTRUSTED_KEY");
        // Unsigned: refused unless allowed; when allowed its files are still checked.
        let mut t = b.clone();
        t.signature = None;
        assert_eq!(code(&t, false), "BUNDLE_UNSIGNED");
        assert!(t.verify(&trusted, true).unwrap().signed_by.is_none());
        t.files.insert("edge/a.rhai".into(), "allow()".into());
        assert_eq!(code(&t, true), "BUNDLE_TAMPERED");
        // Files and manifest rewritten together, but the manifest keeps a version the files do
        // not hash to.
        let mut t = b.clone();
        t.signature = None;
        let mut m: Manifest = serde_json::from_str(&t.manifest).unwrap();
        m.version = "0000000000000000".into();
        t.manifest = serde_json::to_string(&m).unwrap();
        assert_eq!(code(&t, true), "BUNDLE_TAMPERED");
        // Garbage signatures and formats.
        let mut t = b.clone();
        t.signature.as_mut().unwrap().signature = "AAAA".into();
        assert_eq!(code(&t, false), "BUNDLE_INVALID");
        let mut t = b.clone();
        t.signature.as_mut().unwrap().alg = "rsa".into();
        assert_eq!(code(&t, false), "BUNDLE_INVALID");
        assert_eq!(
            Bundle::parse(br#"{"format":"x","manifest":"","files":{}}"#)
                .unwrap_err()
                .code(),
            "BUNDLE_INVALID"
        );
        assert_eq!(Bundle::parse(b"[").unwrap_err().code(), "BUNDLE_INVALID");
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(PublicKey::parse("k", "ed25519:AAAA").is_err());
        assert!(PublicKey::parse("k", "rsa:AAAA").is_err());
        // The identity point is a small-order key.
        let mut id = [0u8; 32];
        id[0] = 1;
        let text = format!("ed25519:{}", Base64::encode_string(&id));
        assert!(PublicKey::parse("k", &text).is_err());
        assert!(SecretKey::parse("ed25519-secret:!!").is_err());
    }
}
