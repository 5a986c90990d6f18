//! Challenges a client can pass (DESIGN §3.1): a proof of work issued with a `challenge` answer,
//! and the clearance a solved one earns. Both are stateless tokens authenticated by a keyed MAC;
//! nothing here touches a store (the single use of a solution is recorded by the decision path,
//! after the nonce step).
//!
//! A token is `<kind>.<app>.<subject>.<difficulty>.<expires_ms>.<id>.<mac>`:
//!
//! - `kind`: `p1` for a challenge, `c1` for a clearance (a MAC over different fields, so one can
//!   never stand for the other);
//! - `app`: the app it was issued for;
//! - `subject`: 16 hex digits of SHA-256 over the subject it is bound to (the device id when the
//!   request has one, else the client IP; configurable), so the token does not carry the address;
//! - `difficulty`: leading zero bits asked for (`0` in a clearance);
//! - `expires_ms`: Unix ms;
//! - `id`: 16 hex digits, unique per token (what the single use is recorded under);
//! - `mac`: HMAC-SHA256 over every field above, each followed by a NUL byte, base64url without
//!   padding. Fields are checked for their alphabet before the MAC is computed, so none can be
//!   spliced into another (the expiry into the subject, say).
//!
//! The solution of a challenge is any decimal counter `c` (1–20 ASCII digits) such that SHA-256 of
//! `token + ":" + c` starts with at least `difficulty` zero bits; it is sent as
//! `x-rampart-solution: <token>:<c>`.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::sync::atomic::{AtomicU64, Ordering};

/// Header of a solved challenge: `<token>:<counter>`.
pub const SOLUTION_HEADER: &str = "x-rampart-solution";
/// Header of a clearance earned by a solution.
pub const CLEARANCE_HEADER: &str = "x-rampart-clearance";
/// The cookie a browser behind forward-auth carries its clearance in.
pub const CLEARANCE_COOKIE: &str = "rampart_clearance";

/// Highest difficulty a rule may ask for (2^32 hashes on average is hours on a phone).
pub const MAX_DIFFICULTY: u8 = 32;

/// What the challenge is bound to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Binding {
    /// The device id when the request has one, else the client IP.
    #[default]
    DeviceOrIp,
    /// The client IP only.
    Ip,
}

/// Challenge settings (`[challenge]`).
#[derive(Clone)]
pub struct ChallengeConfig {
    /// MAC keys: the first signs, every one verifies (rotation).
    pub keys: Vec<[u8; 32]>,
    /// Difficulty of `challenge(reason)` and of score-based challenges.
    pub difficulty: u8,
    /// How long a challenge may be solved.
    pub ttl_ms: i64,
    /// How long a clearance lasts.
    pub clearance_ttl_ms: i64,
    pub binding: Binding,
    /// Mixed into token ids (drawn at random once per process by the caller).
    pub seed: u64,
}

impl std::fmt::Debug for ChallengeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChallengeConfig")
            .field("keys", &self.keys.len())
            .field("difficulty", &self.difficulty)
            .field("ttl_ms", &self.ttl_ms)
            .field("clearance_ttl_ms", &self.clearance_ttl_ms)
            .field("binding", &self.binding)
            .finish()
    }
}

impl Default for ChallengeConfig {
    fn default() -> Self {
        ChallengeConfig {
            keys: Vec::new(),
            difficulty: 16,
            ttl_ms: 300_000,
            clearance_ttl_ms: 3_600_000,
            binding: Binding::DeviceOrIp,
            seed: 0,
        }
    }
}

/// A challenge as the answer carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Challenge {
    /// Always `pow`.
    pub kind: &'static str,
    /// Always `sha256`.
    pub algorithm: &'static str,
    pub difficulty: u8,
    pub token: String,
    pub expires_ms: i64,
}

/// A clearance as the answer carries it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Clearance {
    pub token: String,
    pub expires_ms: i64,
}

/// Why a solution or a clearance is refused (`CHALLENGE_FAILED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Not a token of this kind, or not `<token>:<digits>`.
    Malformed,
    /// The MAC does not verify: forged, altered, or made with a retired key.
    Forged,
    Expired,
    /// Issued for another app.
    ForeignApp,
    /// Issued for another device or address.
    ForeignSubject,
    /// The counter does not give enough zero bits.
    Unsolved,
    /// This solution was used before.
    Reused,
}

impl Failure {
    pub fn as_str(self) -> &'static str {
        match self {
            Failure::Malformed => "malformed",
            Failure::Forged => "forged",
            Failure::Expired => "expired",
            Failure::ForeignApp => "foreign_app",
            Failure::ForeignSubject => "foreign_subject",
            Failure::Unsolved => "unsolved",
            Failure::Reused => "reused",
        }
    }

    pub const ALL: [Failure; 7] = [
        Failure::Malformed,
        Failure::Forged,
        Failure::Expired,
        Failure::ForeignApp,
        Failure::ForeignSubject,
        Failure::Unsolved,
        Failure::Reused,
    ];
}

/// A solution that verified: its token's id (to record its single use) and expiry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Solved {
    pub id: String,
    pub expires_ms: i64,
    pub difficulty: u8,
}

/// The subject a token is bound to: the device id when there is one (and the binding allows),
/// else the IP; empty when the request has neither.
pub fn subject<'a>(binding: Binding, device_id: Option<&'a str>, ip: Option<&'a str>) -> &'a str {
    match (binding, device_id.filter(|d| !d.is_empty())) {
        (Binding::DeviceOrIp, Some(d)) => d,
        _ => ip.unwrap_or(""),
    }
}

fn subject_hash(subject: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"rampart-subject\0");
    h.update(subject.as_bytes());
    hex::encode(&h.finalize()[..8])
}

fn mac(key: &[u8; 32], fields: &[&str]) -> String {
    use base64ct::Encoding;
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("any key length");
    for f in fields {
        m.update(f.as_bytes());
        m.update(b"\0");
    }
    base64ct::Base64UrlUnpadded::encode_string(&m.finalize().into_bytes())
}

/// An app id that can stand in a token: what `[[apps]] id` allows (no `.` or `:`).
fn token_safe(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn next_id(seed: u64, now_ms: i64) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Unique per process (the counter) and across processes (the seed, the time); unguessable
    // needs nothing here: the MAC covers it.
    let x = seed ^ (now_ms as u64).rotate_left(20) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    format!("{x:016x}")
}

/// Leading zero bits of SHA-256(`token:counter`).
pub fn zero_bits(token: &str, counter: &str) -> u32 {
    let mut h = Sha256::new();
    h.update(token.as_bytes());
    h.update(b":");
    h.update(counter.as_bytes());
    let d = h.finalize();
    let mut bits = 0;
    for b in d.iter() {
        if *b == 0 {
            bits += 8;
        } else {
            bits += b.leading_zeros();
            break;
        }
    }
    bits
}

/// The smallest counter solving `token` at `difficulty` (what the SDKs do; tests and vectors).
pub fn solve(token: &str, difficulty: u8) -> u64 {
    (0u64..)
        .find(|c| zero_bits(token, &c.to_string()) >= difficulty as u32)
        .expect("a counter")
}

/// The parsed fields of a token: kind, app, subject hash, difficulty, expiry, id, mac.
struct Parts<'a> {
    kind: &'a str,
    app: &'a str,
    subject: &'a str,
    difficulty: &'a str,
    expires: &'a str,
    id: &'a str,
    mac: &'a str,
}

fn parse(token: &str) -> Option<Parts<'_>> {
    if token.len() > 256 {
        return None;
    }
    let mut it = token.split('.');
    let p = Parts {
        kind: it.next()?,
        app: it.next()?,
        subject: it.next()?,
        difficulty: it.next()?,
        expires: it.next()?,
        id: it.next()?,
        mac: it.next()?,
    };
    let hex16 = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit());
    let digits = |s: &str, max: usize| {
        !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_digit())
    };
    (it.next().is_none()
        && token_safe(p.app)
        && hex16(p.subject)
        && hex16(p.id)
        && digits(p.difficulty, 2)
        && digits(p.expires, 16)
        && p.mac.len() == 43)
        .then_some(p)
}

/// The challenge a token describes, read without its MAC (for a page that shows it: nothing is
/// trusted from it, the solution is verified in full later). `None` when it is not a well-formed
/// challenge token. Every character of a well-formed token is one of `[A-Za-z0-9._-]`.
pub fn read_challenge(token: &str) -> Option<Challenge> {
    let p = parse(token).filter(|p| p.kind == "p1")?;
    let difficulty: u8 = p.difficulty.parse().ok()?;
    let expires_ms: i64 = p.expires.parse().ok()?;
    let b64url = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    ((1..=MAX_DIFFICULTY).contains(&difficulty) && b64url(p.mac)).then(|| Challenge {
        kind: "pow",
        algorithm: "sha256",
        difficulty,
        token: token.to_string(),
        expires_ms,
    })
}

impl ChallengeConfig {
    fn token(
        &self,
        kind: &str,
        app: &str,
        subject: &str,
        difficulty: u8,
        expires: i64,
        now: i64,
    ) -> String {
        let (s, d, e, id) = (
            subject_hash(subject),
            difficulty.to_string(),
            expires.to_string(),
            next_id(self.seed, now),
        );
        let key = self.keys.first().copied().unwrap_or([0; 32]);
        let m = mac(&key, &[kind, app, &s, &d, &e, &id]);
        format!("{kind}.{app}.{s}.{d}.{e}.{id}.{m}")
    }

    /// A challenge for `app` and `subject` at `difficulty` (clamped to 1–[`MAX_DIFFICULTY`]).
    pub fn issue(&self, app: &str, subject: &str, difficulty: u8, now_ms: i64) -> Challenge {
        let difficulty = difficulty.clamp(1, MAX_DIFFICULTY);
        let expires_ms = now_ms + self.ttl_ms;
        Challenge {
            kind: "pow",
            algorithm: "sha256",
            difficulty,
            token: self.token("p1", app, subject, difficulty, expires_ms, now_ms),
            expires_ms,
        }
    }

    /// The clearance a verified solution earns.
    pub fn clearance(&self, app: &str, subject: &str, now_ms: i64) -> Clearance {
        let expires_ms = now_ms + self.clearance_ttl_ms;
        Clearance {
            token: self.token("c1", app, subject, 0, expires_ms, now_ms),
            expires_ms,
        }
    }

    /// Checks a token of `kind` for `app` and `subject` at `now_ms`: its form, its MAC (any key),
    /// then what it says.
    fn check<'t>(
        &self,
        kind: &str,
        token: &'t str,
        app: &str,
        subject: &str,
        now_ms: i64,
    ) -> Result<Parts<'t>, Failure> {
        let p = parse(token)
            .filter(|p| p.kind == kind)
            .ok_or(Failure::Malformed)?;
        let fields = [p.kind, p.app, p.subject, p.difficulty, p.expires, p.id];
        let authentic = self.keys.iter().any(|k| {
            use subtle::ConstantTimeEq;
            bool::from(mac(k, &fields).as_bytes().ct_eq(p.mac.as_bytes()))
        });
        if !authentic {
            return Err(Failure::Forged);
        }
        if p.app != app {
            return Err(Failure::ForeignApp);
        }
        if p.subject != subject_hash(subject) {
            return Err(Failure::ForeignSubject);
        }
        if p.expires.parse::<i64>().map_or(true, |e| now_ms >= e) {
            return Err(Failure::Expired);
        }
        Ok(p)
    }

    /// Verifies `x-rampart-solution` (`<token>:<counter>`) for `app` and `subject`, without any
    /// store: whether it was used before is for the caller to record.
    pub fn verify_solution(
        &self,
        header: &str,
        app: &str,
        subject: &str,
        now_ms: i64,
    ) -> Result<Solved, Failure> {
        let (token, counter) = header.trim().rsplit_once(':').ok_or(Failure::Malformed)?;
        if counter.is_empty() || counter.len() > 20 || !counter.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(Failure::Malformed);
        }
        let p = self.check("p1", token, app, subject, now_ms)?;
        let difficulty: u8 = p.difficulty.parse().map_err(|_| Failure::Malformed)?;
        if zero_bits(token, counter) < difficulty as u32 {
            return Err(Failure::Unsolved);
        }
        Ok(Solved {
            id: p.id.to_string(),
            expires_ms: p.expires.parse().unwrap_or(now_ms),
            difficulty,
        })
    }

    /// Verifies a clearance (`x-rampart-clearance` or the cookie) for `app` and `subject`.
    pub fn verify_clearance(
        &self,
        token: &str,
        app: &str,
        subject: &str,
        now_ms: i64,
    ) -> Result<(), Failure> {
        self.check("c1", token.trim(), app, subject, now_ms)
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ChallengeConfig {
        ChallengeConfig {
            keys: vec![[7; 32]],
            difficulty: 8,
            ..ChallengeConfig::default()
        }
    }

    #[test]
    fn a_solved_challenge_verifies_once_bound_to_its_app_and_subject() {
        let c = cfg();
        let ch = c.issue("shop", "dev-1", 8, 1_000);
        assert_eq!((ch.kind, ch.algorithm, ch.difficulty), ("pow", "sha256", 8));
        let n = solve(&ch.token, 8);
        let sol = format!("{}:{n}", ch.token);
        let ok = c.verify_solution(&sol, "shop", "dev-1", 2_000).unwrap();
        assert_eq!(ok.expires_ms, 1_000 + c.ttl_ms);
        assert_eq!(
            c.verify_solution(&sol, "blog", "dev-1", 2_000),
            Err(Failure::ForeignApp)
        );
        assert_eq!(
            c.verify_solution(&sol, "shop", "dev-2", 2_000),
            Err(Failure::ForeignSubject)
        );
        assert_eq!(
            c.verify_solution(&sol, "shop", "dev-1", ch.expires_ms),
            Err(Failure::Expired)
        );
        // A counter that does not solve it (the smallest one is the first that does).
        if n > 0 {
            let wrong = format!("{}:{}", ch.token, n - 1);
            assert_eq!(
                c.verify_solution(&wrong, "shop", "dev-1", 2_000),
                Err(Failure::Unsolved)
            );
        }
        // Another key (a retired one) does not verify; rotation keeps the old one verifying.
        let other = ChallengeConfig {
            keys: vec![[8; 32]],
            ..cfg()
        };
        assert_eq!(
            other.verify_solution(&sol, "shop", "dev-1", 2_000),
            Err(Failure::Forged)
        );
        let rotated = ChallengeConfig {
            keys: vec![[8; 32], [7; 32]],
            ..cfg()
        };
        assert!(rotated
            .verify_solution(&sol, "shop", "dev-1", 2_000)
            .is_ok());
    }

    /// Fields spliced between tokens, or a clearance standing for a challenge, never verify.
    #[test]
    fn spliced_or_swapped_tokens_are_refused() {
        let c = cfg();
        let ch = c.issue("shop", "dev-1", 1, 1_000);
        let parts: Vec<&str> = ch.token.split('.').collect();
        // A later expiry, a lower difficulty, another subject: the MAC no longer matches.
        for (i, v) in [(4, "9999999999999"), (3, "0"), (2, "0000000000000000")] {
            let mut p = parts.clone();
            p[i] = v;
            let t = p.join(".");
            let n = solve(&t, 1);
            let r = c.verify_solution(&format!("{t}:{n}"), "shop", "dev-1", 2_000);
            assert!(
                matches!(r, Err(Failure::Forged | Failure::ForeignSubject)),
                "{i}: {r:?}"
            );
        }
        let cl = c.clearance("shop", "dev-1", 1_000);
        assert!(c
            .verify_clearance(&cl.token, "shop", "dev-1", 2_000)
            .is_ok());
        assert_eq!(
            c.verify_clearance(&ch.token, "shop", "dev-1", 2_000),
            Err(Failure::Malformed)
        );
        let as_challenge = format!("p1{}:0", &cl.token[2..]);
        assert_eq!(
            c.verify_solution(&as_challenge, "shop", "dev-1", 2_000),
            Err(Failure::Forged)
        );
        for junk in [
            "",
            ":",
            "x:1",
            &format!("{}:", ch.token),
            &format!("{}:1a", ch.token),
            &format!("{}:{}", ch.token, "9".repeat(21)),
        ] {
            assert_eq!(
                c.verify_solution(junk, "shop", "dev-1", 2_000),
                Err(Failure::Malformed),
                "{junk}"
            );
        }
    }

    #[test]
    fn a_page_reads_a_challenge_token_and_nothing_else() {
        let c = cfg();
        let ch = c.issue("shop", "203.0.113.9", 12, 1_000);
        assert_eq!(read_challenge(&ch.token), Some(ch.clone()));
        let cl = c.clearance("shop", "203.0.113.9", 1_000);
        assert_eq!(
            read_challenge(&cl.token),
            None,
            "a clearance is no challenge"
        );
        // A MAC field of the right length but with markup in it.
        let markup = format!(
            "p1.shop.0123456789abcdef.12.1000.0123456789abcdef.{:x<43}",
            "<script>alert(1)</script>"
        );
        for bad in [
            "",
            "p1.shop",
            &markup,
            &ch.token.replace(".12.", ".99."),
            &format!("{}.x", ch.token),
        ] {
            assert_eq!(read_challenge(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn zero_bits_counts_from_the_first_byte() {
        // Found by search: SHA-256("abc:0") etc. are checked against the bit count's definition.
        let t = "p1.shop.0000000000000000.4.1.0000000000000000.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";
        for c in 0..200u64 {
            let d = {
                let mut h = Sha256::new();
                h.update(format!("{t}:{c}").as_bytes());
                h.finalize()
            };
            let bits = d
                .iter()
                .map(|b| format!("{b:08b}"))
                .collect::<String>()
                .find('1')
                .unwrap_or(256) as u32;
            assert_eq!(zero_bits(t, &c.to_string()), bits);
        }
    }
}
