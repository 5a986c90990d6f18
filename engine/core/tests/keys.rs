//! Signing keys and rotation through the whole decision path: every active key passes and is
//! named in the verdict; keys outside their validity, retired keys and unknown `x-key-id`s are
//! refused with `SIGNATURE_INVALID` and never consume the nonce; two signatures of which one
//! matches pass; five entries are refused; a keyring swapped at run time applies to the next
//! decision.

use std::sync::Arc;

use rampart_core::engine::EngineSettings;
use rampart_core::model::{Code, DecideRequest, JudgedRequest, Step};
use rampart_core::policy::{AppPolicy, DedupPolicy, FailPolicy};
use rampart_core::replay::fingerprint::LocalFingerprintStore;
use rampart_core::replay::keys::{Keyring, SigningKey};
use rampart_core::replay::nonce::ExactNonceStore;
use rampart_core::replay::sign::{sign_many, ToSign};
use rampart_core::rules::LiveRules;
use rampart_core::{Engine, Verdict};

const NOW: i64 = 1_800_000_000_000;

fn keyring() -> Keyring {
    Keyring::new(
        vec![
            // The plain secret of an app is the key `default`; here it ends in an hour.
            SigningKey::new("default", b"old-secret", None, Some(NOW + 3_600_000)),
            SigningKey::new("k2", b"new-secret", Some(NOW - 1_000), None),
            SigningKey::new("k3", b"next-secret", Some(NOW + 86_400_000), None),
        ],
        ["k0".to_string()],
    )
    .unwrap()
}

fn engine() -> Engine {
    Engine::new(
        EngineSettings {
            apps: vec![AppPolicy::with_keys("shop", keyring(), 5_000)],
            routes: vec![],
            default_dedup: DedupPolicy::default(),
            on_store_error: rampart_core::StorePolicies::all(FailPolicy::Deny),
            challenge_status: 401,
        },
        Arc::new(ExactNonceStore::new(10_000, 1_000_000)),
        Arc::new(LocalFingerprintStore::new(1_000_000)),
        Arc::new(LiveRules::empty()),
    )
}

/// A request signed at `ts` with each of `secrets` (one `v1=` entry each), naming `key_id`.
fn request(nonce: &str, ts: i64, secrets: &[&str], key_id: Option<&str>) -> DecideRequest {
    let secrets: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
    let h = sign_many(
        &secrets,
        &ToSign {
            app: "shop",
            method: "GET",
            path: "/api/items",
            query: "",
            body: b"",
            timestamp_ms: ts,
            nonce,
        },
    );
    let mut r = JudgedRequest {
        path: "/api/items".into(),
        ..Default::default()
    };
    r.headers.insert("x-timestamp".into(), h.timestamp);
    r.headers.insert("x-nonce".into(), h.nonce);
    r.headers.insert("x-signature".into(), h.signature);
    if let Some(k) = key_id {
        r.headers.insert("x-key-id".into(), k.into());
    }
    DecideRequest {
        app: "shop".into(),
        request: r,
        ..Default::default()
    }
}

fn decide(e: &Engine, r: &DecideRequest, now: i64) -> Verdict {
    e.decide(r, now).expect("a valid call")
}

fn nonce(tag: &str) -> String {
    format!("keys-test-{tag}-0000000")
}

#[track_caller]
fn refused(v: &Verdict, reason: &str) {
    assert_eq!(
        (v.code, v.status, v.step),
        (Code::SignatureInvalid, 401, Step::Signature),
        "{v:?}"
    );
    assert!(v.reasons[0].message.contains(reason), "{v:?}");
    assert_eq!(v.key_id, None);
}

#[test]
fn each_active_key_passes_and_the_verdict_names_it() {
    let e = engine();
    for (i, (secret, id)) in [("old-secret", "default"), ("new-secret", "k2")]
        .into_iter()
        .enumerate()
    {
        for named in [None, Some(id)] {
            let r = request(
                &nonce(&format!("{i}-{}", named.unwrap_or("none"))),
                NOW,
                &[secret],
                named,
            );
            let v = decide(&e, &r, NOW);
            assert_eq!(v.code, Code::Ok, "{v:?}");
            assert_eq!(v.key_id.as_deref(), Some(id));
            // Every later verdict names the key too: here the replay.
            let v = decide(&e, &r, NOW);
            assert_eq!(v.code, Code::ReplayDuplicate);
            assert_eq!(v.key_id.as_deref(), Some(id));
        }
    }
    let ring = e.keyring("shop").unwrap();
    assert_eq!(ring.get("default").unwrap().usage().uses(), 4);
    assert_eq!(ring.get("k2").unwrap().usage().last_used_ms(), Some(NOW));
    assert_eq!(ring.get("k3").unwrap().usage().uses(), 0);
}

#[test]
fn keys_outside_their_validity_are_refused_by_server_time() {
    let e = engine();
    // k3 is not valid for another day: refused now, whatever the request's own timestamp says.
    let early = request(&nonce("early"), NOW, &["next-secret"], None);
    refused(
        &decide(&e, &early, NOW),
        "signature does not match the canonical string",
    );
    let named = request(&nonce("early-named"), NOW, &["next-secret"], Some("k3"));
    refused(
        &decide(&e, &named, NOW),
        "\"k3\" (named by x-key-id) is not valid before",
    );
    // The refusals consumed nothing: the same nonce passes once the key is valid.
    let later = NOW + 86_400_000;
    let r = request(&nonce("early"), later, &["next-secret"], None);
    assert_eq!(decide(&e, &r, later).key_id.as_deref(), Some("k3"));
    // After not_after_ms the old default key is refused.
    let late = NOW + 3_600_001;
    let old = request(&nonce("late"), late, &["old-secret"], None);
    refused(&decide(&e, &old, late), "does not match");
    let old = request(&nonce("late-named"), late, &["old-secret"], Some("default"));
    refused(
        &decide(&e, &old, late),
        "\"default\" (named by x-key-id) expired at",
    );
}

#[test]
fn two_signatures_of_which_one_matches_pass_and_five_entries_are_refused() {
    let e = engine();
    // Both keys match: the newer one is credited, in either order of the entries.
    let roll = request(&nonce("roll"), NOW, &["new-secret", "old-secret"], None);
    assert_eq!(decide(&e, &roll, NOW).key_id.as_deref(), Some("k2"));
    let roll = request(&nonce("roll-2"), NOW, &["old-secret", "new-secret"], None);
    assert_eq!(decide(&e, &roll, NOW).key_id.as_deref(), Some("k2"));
    let one_good = request(&nonce("one-good"), NOW, &["unknown", "old-secret"], None);
    assert_eq!(
        decide(&e, &one_good, NOW).key_id.as_deref(),
        Some("default")
    );
    let none_good = request(&nonce("none-good"), NOW, &["unknown", "other"], None);
    refused(&decide(&e, &none_good, NOW), "does not match");
    let four = request(&nonce("four"), NOW, &["a", "b", "c", "new-secret"], None);
    assert_eq!(decide(&e, &four, NOW).key_id.as_deref(), Some("k2"));
    let five = request(
        &nonce("five"),
        NOW,
        &["a", "b", "c", "d", "new-secret"],
        None,
    );
    refused(
        &decide(&e, &five, NOW),
        "x-signature carries 5 entries; at most 4",
    );
    // A refused request never consumed its nonce.
    let again = request(&nonce("five"), NOW, &["new-secret"], None);
    assert_eq!(decide(&e, &again, NOW).code, Code::Ok);
}

#[test]
fn unknown_and_retired_key_ids_are_refused_and_named_only_when_named() {
    let e = engine();
    let unknown = request(&nonce("unknown"), NOW, &["new-secret"], Some("k9"));
    refused(
        &decide(&e, &unknown, NOW),
        "x-key-id \"k9\" names no key of this app",
    );
    let junk = request(&nonce("junk"), NOW, &["new-secret"], Some("k9\u{7f}<x>"));
    refused(&decide(&e, &junk, NOW), "x-key-id names no key");
    assert!(!decide(&e, &junk, NOW).reasons[0].message.contains("<x>"));
    // An empty x-key-id names no key: every active key is tried.
    let empty = request(&nonce("empty"), NOW, &["new-secret"], Some(""));
    assert_eq!(decide(&e, &empty, NOW).key_id.as_deref(), Some("k2"));

    // Retire k2 at run time (its secret leaked): the next decision refuses it.
    let mut ring = Keyring::new(
        vec![SigningKey::new(
            "default",
            b"old-secret",
            None,
            Some(NOW + 3_600_000),
        )],
        ["k0".to_string(), "k2".to_string()],
    )
    .unwrap();
    ring.adopt_usage(&keyring());
    e.set_keyring("shop", ring).unwrap();
    let named = request(&nonce("retired-named"), NOW, &["new-secret"], Some("k2"));
    refused(
        &decide(&e, &named, NOW),
        "key \"k2\" (named by x-key-id) was retired",
    );
    let unnamed = request(&nonce("retired"), NOW, &["new-secret"], None);
    let v = decide(&e, &unnamed, NOW);
    refused(&v, "signature does not match the canonical string");
    assert!(!v.reasons[0].message.contains("k2"), "{v:?}");
    // The use counter of the key that stays carried over.
    let old = request(&nonce("stays"), NOW, &["old-secret"], None);
    assert_eq!(decide(&e, &old, NOW).key_id.as_deref(), Some("default"));
    assert_eq!(
        e.keyring("shop")
            .unwrap()
            .get("default")
            .unwrap()
            .usage()
            .uses(),
        1
    );
    assert_eq!(
        e.set_keyring("nope", Keyring::default())
            .unwrap_err()
            .code(),
        "UNKNOWN_APP"
    );
}
