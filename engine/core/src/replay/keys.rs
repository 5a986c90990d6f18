//! Signing keys and rotation (contract v1.1): an app's keyring, and the signature check that reads
//! several `v1=` entries and an optional `x-key-id`.
//!
//! An app has one or more keys, each with an id, a secret and optional validity bounds
//! (`not_before_ms`, `not_after_ms`, both inclusive, judged against the server's clock, never the
//! request's). It may also remember the ids of retired keys: their secrets are gone, and a
//! request that names one in `x-key-id` is told so.
//!
//! A request passes when some entry of `x-signature` (up to [`MAX_ENTRIES`], comma-separated)
//! matches the MAC of the canonical string under some key that is active now. With `x-key-id`,
//! only that key is tried; without it, every active key is. The work is bounded: the canonical
//! string is built once, each candidate key computes one HMAC (at most [`MAX_KEYS`]), and each MAC
//! is compared with each entry in constant time (`CtOutput`'s equality, through `subtle`). A single
//! entry under a single key costs what signature v1 always cost: one canonical string, one HMAC,
//! one comparison.
//!
//! Why several entries rather than several headers: a client rolling from one secret to the next
//! signs with both (as Stripe's `v1=` list and Standard Webhooks' signature list do), and the
//! engine accepts whichever it knows. Why `x-key-id` is optional: a client that knows which key it
//! uses can say so (as AWS SigV4 and WeChat Pay name theirs), which makes the check one HMAC and
//! the refusal precise; a client in the middle of a roll does not know which key the engine has
//! and names none. The canonical string is unchanged: the key id is not signed, and choosing
//! another key only chooses which MAC the signature must match.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use super::canonical::{HmacSha256, SignedFields, Signer, SIGNATURE_PREFIX};

/// Most `v1=` entries read from one `x-signature`; a fifth is refused without any HMAC.
pub const MAX_ENTRIES: usize = 4;

/// Most keys (with secrets) an app holds, active or scheduled: bounds the HMACs of a request that
/// names no key.
pub const MAX_KEYS: usize = 8;

/// Most retired key ids an app remembers (the oldest are forgotten first).
pub const MAX_RETIRED: usize = 256;

/// The id the plain `secret` of an app gets.
pub const DEFAULT_KEY_ID: &str = "default";

/// A key id: 1–64 characters of `[A-Za-z0-9._-]` (safe in a header, a metric label and a path).
pub fn valid_key_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// How often a key was used, and when last (this process only; carried over when the keyring is
/// rebuilt).
#[derive(Debug, Default)]
pub struct KeyUse {
    uses: AtomicU64,
    last_ms: AtomicI64,
}

impl KeyUse {
    /// Requests whose signature this key matched.
    pub fn uses(&self) -> u64 {
        self.uses.load(Ordering::Relaxed)
    }

    /// Server time of the latest of them (Unix ms), if any.
    pub fn last_used_ms(&self) -> Option<i64> {
        Some(self.last_ms.load(Ordering::Relaxed)).filter(|t| *t > 0)
    }

    fn record(&self, now_ms: i64) {
        self.uses.fetch_add(1, Ordering::Relaxed);
        // Written only when it moves forward, so concurrent requests do not all write the line.
        if self.last_ms.load(Ordering::Relaxed) < now_ms {
            self.last_ms.store(now_ms, Ordering::Relaxed);
        }
    }
}

/// One key of an app: id, secret (as its HMAC key schedule) and validity.
#[derive(Clone)]
pub struct SigningKey {
    id: Arc<str>,
    signer: Signer,
    not_before_ms: Option<i64>,
    not_after_ms: Option<i64>,
    usage: Arc<KeyUse>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("id", &self.id)
            .field("not_before_ms", &self.not_before_ms)
            .field("not_after_ms", &self.not_after_ms)
            .finish_non_exhaustive()
    }
}

/// Whether a key is in force at a given server time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    Active,
    /// Before `not_before_ms`.
    NotYet(i64),
    /// After `not_after_ms`.
    Expired(i64),
}

impl SigningKey {
    pub fn new(
        id: &str,
        secret: &[u8],
        not_before_ms: Option<i64>,
        not_after_ms: Option<i64>,
    ) -> SigningKey {
        SigningKey {
            id: id.into(),
            signer: Signer::new(secret),
            not_before_ms,
            not_after_ms,
            usage: Arc::default(),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The id, shared (what a verdict carries).
    pub fn id_arc(&self) -> &Arc<str> {
        &self.id
    }

    pub fn not_before_ms(&self) -> Option<i64> {
        self.not_before_ms
    }

    pub fn not_after_ms(&self) -> Option<i64> {
        self.not_after_ms
    }

    pub fn usage(&self) -> &Arc<KeyUse> {
        &self.usage
    }

    /// Counts one request this key verified, at server time `now_ms`.
    pub fn record_use(&self, now_ms: i64) {
        self.usage.record(now_ms);
    }

    /// In force at `now_ms` when `not_before_ms ≤ now_ms ≤ not_after_ms` (absent bounds are open).
    pub fn validity(&self, now_ms: i64) -> Validity {
        match (self.not_before_ms, self.not_after_ms) {
            (Some(nb), _) if now_ms < nb => Validity::NotYet(nb),
            (_, Some(na)) if now_ms > na => Validity::Expired(na),
            _ => Validity::Active,
        }
    }
}

/// Why a keyring cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyringError {
    #[error("key id {0:?} must be 1–64 characters of [A-Za-z0-9._-]")]
    BadId(String),
    #[error("key {0:?} appears twice")]
    Duplicate(String),
    #[error("key {0:?} has an empty secret")]
    EmptySecret(String),
    #[error("key {0:?}: not_before_ms must be before not_after_ms")]
    Bounds(String),
    #[error("key {0:?} was retired: a retired id is never used again")]
    RetiredId(String),
    #[error("an app holds at most {MAX_KEYS} keys")]
    TooMany,
}

/// Checks one key's fields (id syntax, secret, bounds in order): what the configuration and the
/// admin API refuse before a keyring is built.
pub fn check_key(
    id: &str,
    secret: &[u8],
    not_before_ms: Option<i64>,
    not_after_ms: Option<i64>,
) -> Result<(), KeyringError> {
    if !valid_key_id(id) {
        return Err(KeyringError::BadId(id.into()));
    }
    if secret.is_empty() {
        return Err(KeyringError::EmptySecret(id.into()));
    }
    if let (Some(nb), Some(na)) = (not_before_ms, not_after_ms) {
        if nb >= na {
            return Err(KeyringError::Bounds(id.into()));
        }
    }
    Ok(())
}

/// Why a signature was not accepted (`SIGNATURE_INVALID`; the message is the reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("x-signature must look like v1=<64 lower-case hex characters>")]
    Malformed,
    #[error("x-signature carries {0} entries; at most {MAX_ENTRIES} comma-separated v1= entries are read")]
    TooManyEntries(usize),
    #[error("signature does not match the canonical string")]
    Mismatch,
    #[error("signature does not match the canonical string under key {0:?} (named by x-key-id)")]
    MismatchNamed(String),
    #[error("x-key-id {0:?} names no key of this app")]
    UnknownKey(String),
    #[error("x-key-id names no key of this app (a key id is 1–64 characters of [A-Za-z0-9._-])")]
    BadKeyId,
    #[error("key {0:?} (named by x-key-id) was retired; sign with a current key")]
    Retired(String),
    #[error("key {0:?} (named by x-key-id) is not valid before {1} (Unix ms)")]
    NotYetValid(String, i64),
    #[error("key {0:?} (named by x-key-id) expired at {1} (Unix ms)")]
    Expired(String, i64),
}

/// The keys of one app, and the ids it retired.
#[derive(Clone, Debug, Default)]
pub struct Keyring {
    keys: Vec<SigningKey>,
    retired: Vec<Arc<str>>,
}

impl Keyring {
    /// One key, `default`, always valid: an app configured with a plain secret.
    pub fn single(secret: &[u8]) -> Keyring {
        Keyring {
            keys: vec![SigningKey::new(DEFAULT_KEY_ID, secret, None, None)],
            retired: Vec::new(),
        }
    }

    /// A keyring of `keys`, oldest first (a request that names no key and matches several is
    /// credited to the newest), remembering the `retired` ids (newest last; beyond
    /// [`MAX_RETIRED`] the oldest are forgotten). Refuses bad or duplicate ids, more than [`MAX_KEYS`] keys and a
    /// key whose id was retired.
    pub fn new(
        keys: Vec<SigningKey>,
        retired: impl IntoIterator<Item = String>,
    ) -> Result<Keyring, KeyringError> {
        if keys.len() > MAX_KEYS {
            return Err(KeyringError::TooMany);
        }
        let mut retired: Vec<Arc<str>> = retired.into_iter().map(Arc::from).collect();
        if retired.len() > MAX_RETIRED {
            retired.drain(..retired.len() - MAX_RETIRED);
        }
        for (i, k) in keys.iter().enumerate() {
            if !valid_key_id(&k.id) {
                return Err(KeyringError::BadId(k.id.to_string()));
            }
            if keys[..i].iter().any(|o| o.id == k.id) {
                return Err(KeyringError::Duplicate(k.id.to_string()));
            }
            if retired.contains(&k.id) {
                return Err(KeyringError::RetiredId(k.id.to_string()));
            }
        }
        Ok(Keyring { keys, retired })
    }

    pub fn keys(&self) -> &[SigningKey] {
        &self.keys
    }

    pub fn retired(&self) -> impl Iterator<Item = &str> {
        self.retired.iter().map(|r| &**r)
    }

    pub fn get(&self, id: &str) -> Option<&SigningKey> {
        self.keys.iter().find(|k| &*k.id == id)
    }

    /// Keeps the use counters of `old`'s keys for the keys of the same id here (a keyring rebuilt
    /// after a change keeps counting where it was).
    pub fn adopt_usage(&mut self, old: &Keyring) {
        for k in &mut self.keys {
            if let Some(o) = old.get(&k.id) {
                k.usage = o.usage.clone();
            }
        }
    }

    /// The key an `x-signature` header (and optional `x-key-id`) verifies with at server time
    /// `now_ms`, or why none does.
    pub fn verify(
        &self,
        fields: &SignedFields<'_>,
        header: &str,
        key_id: Option<&str>,
        now_ms: i64,
    ) -> Result<&SigningKey, VerifyError> {
        let mut given = [[0u8; 32]; MAX_ENTRIES];
        let n = parse_entries(header, &mut given)?;
        let given = &given[..n];
        match key_id {
            Some(id) => {
                let Some(key) = self.get(id) else {
                    return Err(if !valid_key_id(id) {
                        VerifyError::BadKeyId
                    } else if self.retired.iter().any(|r| &**r == id) {
                        VerifyError::Retired(id.into())
                    } else {
                        VerifyError::UnknownKey(id.into())
                    });
                };
                match key.validity(now_ms) {
                    Validity::Active => {}
                    Validity::NotYet(t) => return Err(VerifyError::NotYetValid(id.into(), t)),
                    Validity::Expired(t) => return Err(VerifyError::Expired(id.into(), t)),
                }
                let canonical = fields.canonical_string();
                if matches_any(&key.signer.mac_of(canonical.as_bytes()), given) {
                    Ok(key)
                } else {
                    Err(VerifyError::MismatchNamed(id.into()))
                }
            }
            None => {
                let canonical = fields.canonical_string();
                // Newest first: while clients roll from one key to the next, a request signed with
                // both names the new key, so the old key's use falls to zero once every client
                // knows the new one (the sign that the old key can be retired).
                self.keys
                    .iter()
                    .rev()
                    .filter(|k| k.validity(now_ms) == Validity::Active)
                    .find(|k| matches_any(&k.signer.mac_of(canonical.as_bytes()), given))
                    .ok_or(VerifyError::Mismatch)
            }
        }
    }
}

/// Whether `mac` equals one of the `given` MACs. Every comparison is constant-time and every
/// entry is compared (no early exit), so the time says nothing about which entry matched.
#[inline]
fn matches_any(mac: &hmac::digest::CtOutput<HmacSha256>, given: &[[u8; 32]]) -> bool {
    let mut hit = false;
    for g in given {
        hit |= *mac == hmac::digest::CtOutput::new((*g).into());
    }
    hit
}

/// Whether an `x-signature` value has the form the signature step reads: one to
/// [`MAX_ENTRIES`] comma-separated `v1=<64 hex>` entries (spaces around an entry allowed).
pub fn well_formed_signature(header: &str) -> bool {
    let mut out = [[0u8; 32]; MAX_ENTRIES];
    parse_entries(header, &mut out).is_ok()
}

/// Reads up to [`MAX_ENTRIES`] comma-separated `v1=<64 hex>` entries (spaces around an entry are
/// allowed) into `out`; returns how many. More entries are refused before any is decoded.
#[inline]
fn parse_entries(header: &str, out: &mut [[u8; 32]; MAX_ENTRIES]) -> Result<usize, VerifyError> {
    // The common case, one entry: one scan for a comma, no splitting.
    if !header.contains(',') {
        decode_entry(header, &mut out[0])?;
        return Ok(1);
    }
    let count = header.bytes().filter(|b| *b == b',').count() + 1;
    if count > MAX_ENTRIES {
        return Err(VerifyError::TooManyEntries(count));
    }
    for (entry, slot) in header.split(',').zip(out.iter_mut()) {
        decode_entry(entry, slot)?;
    }
    Ok(count)
}

#[inline]
fn decode_entry(entry: &str, out: &mut [u8; 32]) -> Result<(), VerifyError> {
    let hex_part = entry
        .trim_matches(' ')
        .strip_prefix(SIGNATURE_PREFIX)
        .ok_or(VerifyError::Malformed)?;
    if hex_part.len() != 64 {
        return Err(VerifyError::Malformed);
    }
    hex::decode_to_slice(hex_part, out).map_err(|_| VerifyError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::canonical::body_sha256_hex;

    fn fields() -> SignedFields<'static> {
        let hash: &'static str =
            Box::leak(body_sha256_hex(br#"{"order":"A1","amount":100}"#).into_boxed_str());
        SignedFields {
            app: "demo",
            method: "POST",
            path: "/api/order/pay",
            query: "b=2&a=1",
            timestamp: "1700000000000",
            nonce: "n0nce-0123456789AB",
            body_sha256: hash,
        }
    }

    fn sig(secret: &str) -> String {
        Signer::new(secret.as_bytes()).sign(&fields())
    }

    const NOW: i64 = 1_800_000_000_000;

    fn ring() -> Keyring {
        Keyring::new(
            vec![
                SigningKey::new("k1", b"old-secret", None, Some(NOW + 1000)),
                SigningKey::new("k2", b"new-secret", Some(NOW - 1000), None),
                SigningKey::new("k3", b"next-secret", Some(NOW + 5000), None),
            ],
            ["k0".to_string()],
        )
        .unwrap()
    }

    #[test]
    fn the_contract_vector_verifies_under_a_single_default_key() {
        let r = Keyring::single(b"demo-secret");
        let h = "v1=09ba5cee4392c0a5d0e4ba4b3f783a3ab4a46db1412d55c78a1ff25b30142c33";
        assert_eq!(r.verify(&fields(), h, None, NOW).unwrap().id(), "default");
        assert_eq!(
            r.verify(&fields(), h, Some("default"), NOW).unwrap().id(),
            "default"
        );
    }

    #[test]
    fn each_active_key_passes_and_names_itself() {
        let r = ring();
        assert_eq!(
            r.verify(&fields(), &sig("old-secret"), None, NOW)
                .unwrap()
                .id(),
            "k1"
        );
        assert_eq!(
            r.verify(&fields(), &sig("new-secret"), None, NOW)
                .unwrap()
                .id(),
            "k2"
        );
        assert_eq!(
            r.verify(&fields(), &sig("new-secret"), Some("k2"), NOW)
                .unwrap()
                .id(),
            "k2"
        );
    }

    #[test]
    fn bounds_are_inclusive_and_judged_by_server_time() {
        let r = ring();
        // k3 starts at NOW + 5000; k1 ends at NOW + 1000.
        let next = sig("next-secret");
        assert_eq!(
            r.verify(&fields(), &next, None, NOW + 4999).err(),
            Some(VerifyError::Mismatch)
        );
        assert_eq!(
            r.verify(&fields(), &next, Some("k3"), NOW + 4999).err(),
            Some(VerifyError::NotYetValid("k3".into(), NOW + 5000))
        );
        assert_eq!(
            r.verify(&fields(), &next, None, NOW + 5000).unwrap().id(),
            "k3"
        );
        let old = sig("old-secret");
        assert_eq!(
            r.verify(&fields(), &old, None, NOW + 1000).unwrap().id(),
            "k1"
        );
        assert_eq!(
            r.verify(&fields(), &old, None, NOW + 1001).err(),
            Some(VerifyError::Mismatch)
        );
        assert_eq!(
            r.verify(&fields(), &old, Some("k1"), NOW + 1001).err(),
            Some(VerifyError::Expired("k1".into(), NOW + 1000))
        );
    }

    #[test]
    fn two_signatures_of_which_one_matches_pass() {
        let r = ring();
        let unknown = sig("never-configured");
        let both = format!("{unknown},{}", sig("new-secret"));
        assert_eq!(r.verify(&fields(), &both, None, NOW).unwrap().id(), "k2");
        let spaced = format!("{}, {unknown}", sig("old-secret"));
        assert_eq!(r.verify(&fields(), &spaced, None, NOW).unwrap().id(), "k1");
        // Named: only that key is tried, against every entry.
        assert_eq!(
            r.verify(&fields(), &both, Some("k2"), NOW).unwrap().id(),
            "k2"
        );
        assert_eq!(
            r.verify(&fields(), &both, Some("k1"), NOW).err(),
            Some(VerifyError::MismatchNamed("k1".into()))
        );
        let four = format!("{},{}", [unknown.as_str(); 3].join(","), sig("old-secret"));
        assert_eq!(r.verify(&fields(), &four, None, NOW).unwrap().id(), "k1");
    }

    #[test]
    fn five_entries_are_refused_before_any_mac() {
        let r = ring();
        let five = vec![sig("new-secret"); 5].join(",");
        assert_eq!(
            r.verify(&fields(), &five, None, NOW).err(),
            Some(VerifyError::TooManyEntries(5))
        );
        let many = ",".repeat(10_000);
        assert_eq!(
            r.verify(&fields(), &many, None, NOW).err(),
            Some(VerifyError::TooManyEntries(10_001))
        );
    }

    #[test]
    fn malformed_entries_are_refused() {
        let r = ring();
        let good = sig("new-secret");
        for h in [
            String::new(),
            "v1=".into(),
            format!("{good},"),
            format!(",{good}"),
            format!("{good},v2=00"),
            format!("{good};{good}"),
            good.replace("v1=", "V1="),
            "v1=zz".repeat(13),
        ] {
            assert_eq!(
                r.verify(&fields(), &h, None, NOW).err(),
                Some(VerifyError::Malformed),
                "{h}"
            );
        }
    }

    #[test]
    fn named_keys_that_cannot_be_used_say_why() {
        let r = ring();
        let good = sig("new-secret");
        assert_eq!(
            r.verify(&fields(), &good, Some("k0"), NOW).err(),
            Some(VerifyError::Retired("k0".into()))
        );
        assert_eq!(
            r.verify(&fields(), &good, Some("k9"), NOW).err(),
            Some(VerifyError::UnknownKey("k9".into()))
        );
        assert_eq!(
            r.verify(&fields(), &good, Some("<script>"), NOW).err(),
            Some(VerifyError::BadKeyId)
        );
        // Unnamed, a retired key is just a mismatch: its secret is gone.
        assert!(VerifyError::Retired("k0".into()).to_string().contains("k0"));
        assert!(!VerifyError::Mismatch.to_string().contains("k0"));
    }

    #[test]
    fn keyrings_refuse_bad_sets_and_keep_usage_across_rebuilds() {
        let k = |id: &str| SigningKey::new(id, b"s", None, None);
        assert_eq!(
            Keyring::new(vec![k("a"), k("a")], []).unwrap_err(),
            KeyringError::Duplicate("a".into())
        );
        assert_eq!(
            Keyring::new(vec![k("a b")], []).unwrap_err(),
            KeyringError::BadId("a b".into())
        );
        assert_eq!(
            Keyring::new(vec![k("a")], ["a".to_string()]).unwrap_err(),
            KeyringError::RetiredId("a".into())
        );
        assert_eq!(
            Keyring::new((0..9).map(|i| k(&format!("k{i}"))).collect(), []).unwrap_err(),
            KeyringError::TooMany
        );
        assert_eq!(
            check_key("k", b"", None, None),
            Err(KeyringError::EmptySecret("k".into()))
        );
        assert_eq!(
            check_key("k", b"s", Some(5), Some(5)),
            Err(KeyringError::Bounds("k".into()))
        );
        let old = ring();
        old.get("k2").unwrap().record_use(NOW);
        old.get("k2").unwrap().record_use(NOW - 5);
        let mut new = Keyring::new(
            vec![
                SigningKey::new("k2", b"new-secret", None, None),
                SigningKey::new("k4", b"x", None, None),
            ],
            ["k0".to_string(), "k1".to_string()],
        )
        .unwrap();
        new.adopt_usage(&old);
        let u = new.get("k2").unwrap().usage();
        assert_eq!((u.uses(), u.last_used_ms()), (2, Some(NOW)));
        assert_eq!(new.get("k4").unwrap().usage().last_used_ms(), None);
        let retired = Keyring::new(vec![], (0..300).map(|i| format!("r{i}"))).unwrap();
        assert_eq!(retired.retired().count(), MAX_RETIRED);
        assert_eq!(retired.retired().next(), Some("r44"));
    }
}
