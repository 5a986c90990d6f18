//! A restart does not reopen the replay window (local state): after a graceful stop the nonce
//! filter, the exact store and the fingerprints are read back, so a replay of a request accepted
//! before the stop is still `REPLAY_DUPLICATE`; after a kill -9 nothing was saved, and the restart
//! quarantine refuses the timestamps the engine can no longer judge (`STORE_UNAVAILABLE`) until
//! they leave the window.

mod support;

use serde_json::Value;
use support::{now_ms, temp_dir, Call, Engine};

const SECRET: &[u8] = b"restart-secret";

fn config(mode: &str, window_ms: i64, rps: u64) -> String {
    format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"restart-secret\"\nwindow_ms = {window_ms}\n\
         [state]\nnonce_mode = \"{mode}\"\nexpected_rps = {rps}\n"
    )
}

/// A signed request; its body and user name the nonce, so distinct calls are distinct
/// submissions.
fn call(nonce: &str, ts_ms: i64) -> Value {
    Call {
        app: "shop",
        secret: SECRET,
        path: "/api/order/pay",
        body: format!(r#"{{"order":"{nonce}"}}"#),
        user: nonce,
        ip: "203.0.113.9",
        device: "d-1",
        nonce: nonce.into(),
        ts_ms,
        params: serde_json::json!({}),
    }
    .json()
}

fn code(e: &Engine, body: &Value) -> (u16, String, Value) {
    let (s, v) = e.decide(body);
    (s, v["code"].as_str().unwrap_or("").to_string(), v)
}

#[test]
fn a_replay_across_a_graceful_restart_is_still_a_duplicate_in_both_modes() {
    for mode in ["bloom", "exact"] {
        let d = temp_dir(&format!("restart-graceful-{mode}"));
        let cfg = config(mode, 30_000, 2_000);
        let mut e = Engine::start(&d, "r", &cfg);
        let first = call(&format!("graceful-{mode}-0001"), now_ms());
        assert_eq!(code(&e, &first).1, "OK");
        assert!(e.stop().success());

        let mut e = Engine::start(&d, "r", &cfg);
        let (_, c, v) = code(&e, &first);
        assert_eq!(c, "REPLAY_DUPLICATE", "{mode}: {v}");
        // A fresh request is judged as usual: no quarantine after a graceful stop.
        let (_, c, v) = code(&e, &call(&format!("graceful-{mode}-0002"), now_ms()));
        assert_eq!(c, "OK", "{mode}: {v}");
        assert!(e.stop().success());

        // Started with another filter sizing, the snapshot cannot be used: the quarantine
        // applies instead of a silent reopening.
        let e = Engine::start(&d, "r", &config(mode, 30_000, 4_000));
        let (s, c, v) = code(&e, &first);
        if mode == "bloom" {
            assert_eq!((s, c.as_str()), (200, "STORE_UNAVAILABLE"), "{v}");
        } else {
            // The exact store does not depend on the filter's sizing: still read back.
            assert_eq!(c, "REPLAY_DUPLICATE", "{v}");
        }
    }
}

#[test]
fn a_replay_across_a_kill_is_refused_by_the_quarantine_which_then_ends() {
    let d = temp_dir("restart-kill");
    let window = 2_000;
    let cfg = config("bloom", window, 2_000);
    let e = Engine::start(&d, "r", &cfg);
    let first = call("killed-0000000001", now_ms() + window / 2);
    assert_eq!(code(&e, &first).1, "OK");
    drop(e); // SIGKILL: nothing is saved

    let e = Engine::start(&d, "r", &cfg);
    let (s, c, v) = code(&e, &first);
    assert_eq!((s, c.as_str()), (200, "STORE_UNAVAILABLE"), "{v}");
    assert_eq!(v["status"], 503);
    assert_eq!(v["rule"], "nonce");
    assert!(v["retry_after_ms"].as_u64().unwrap() <= window as u64 + 2_500);
    // The cost to honest clients: a fresh request is refused too while its timestamp could have
    // been accepted before the kill...
    let (_, c, _) = code(&e, &call("killed-0000000002", now_ms()));
    assert_eq!(c, "STORE_UNAVAILABLE");
    // ...and judged as usual once it cannot have been (retry_after_ms later).
    let wait = v["retry_after_ms"].as_u64().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(wait + 50));
    let (_, c, v) = code(&e, &call("killed-0000000003", now_ms()));
    assert_eq!(c, "OK", "{v}");
    // The replay of the request accepted before the kill is never judged new: still refused, or
    // out of the window by now.
    let (_, c, v) = code(&e, &first);
    assert!(c == "STORE_UNAVAILABLE" || c == "TIMESTAMP_SKEW", "{v}");
}
