//! A Redis Cluster master fails over to a replica that missed its last writes: what happens to
//! the nonces the engine accepted just before.
//!
//! Redis replicates asynchronously. A master can acknowledge a nonce write, the engine can accept
//! the request, and the master can die before its replica got the write; the replica that takes
//! over has never seen the nonce, and a replay of that request passes. `[state] replica_acks`
//! makes every anti-replay write wait (`WAIT`) until that many replicas hold it, and refuses the
//! request by the store's policy when they do not answer in time.
//!
//! The scenario is made deterministic, not left to a race: a master's replication link to its
//! replica is cut, so the writes that land on that master from then on are on the master alone;
//! the master is killed and the replica takes over (the cluster's
//! `cluster-replica-validity-factor 0` lets a stale replica do so, as after a real partition).
//! Each request's nonce lands on whichever master holds its Bloom slice or key; about a third
//! land on the failed one.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{nonce, now_ms, temp_dir, Call, Engine, RedisCluster};

const SECRET: &str = "failover-test-secret";

fn config(nodes: &str, prefix: &str, mode: &str, acks: u32) -> String {
    // A wide window: the replays come seconds later, after the failover, and must be judged as
    // replays, not as expired. Duplicate-submission fingerprints are off, so what stops a replay
    // is the nonce alone (what this test measures).
    format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = 60000\n\
         [rules]\ndefaults = false\n\
         [fingerprint]\nwindow_ms = 0\n\
         [state]\nbackend = \"redis\"\nredis_cluster_nodes = [{nodes}]\nredis_prefix = \"{prefix}\"\n\
         nonce_mode = \"{mode}\"\nexpected_rps = 1000\nreplica_acks = {acks}\n\
         replica_ack_timeout_ms = 250\nredis_timeout_ms = 1000\n"
    )
}

fn call(tag: &str, i: u64) -> Value {
    Call {
        app: "shop",
        secret: SECRET.as_bytes(),
        path: "/api/orders",
        body: format!("{{\"order\":{i}}}"),
        user: "u-failover",
        ip: "198.51.100.30",
        device: "dev-failover",
        nonce: nonce(tag, i),
        ts_ms: now_ms(),
        params: Value::Null,
    }
    .json()
}

fn code(v: &Value) -> String {
    v["code"].as_str().unwrap_or("?").to_string()
}

/// Sends fresh requests until one is accepted (the cluster has settled after the failover and the
/// engine found the new master by itself); how long that took. Meanwhile every refusal is the
/// declared policy's (`on_store_error = "deny"`: `STORE_UNAVAILABLE`), nothing else.
fn until_serving(e: &Engine, tag: &str) -> Duration {
    let t = Instant::now();
    for i in 0.. {
        let (s, v) = e.decide(&call(tag, 1_000_000 + i));
        assert_eq!(s, 200, "{tag}: {v}");
        if code(&v) == "OK" {
            return t.elapsed();
        }
        assert_eq!(
            (code(&v).as_str(), v["status"].as_u64()),
            ("STORE_UNAVAILABLE", Some(503)),
            "{tag}: during the failover: {v}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{tag}: the engine does not serve again after the failover: {s} {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    unreachable!()
}

struct Round {
    accepted: usize,
    refused: usize,
    replays_passed: usize,
}

/// `n` fresh requests on `e` while the replica is cut off; after the failover, each accepted
/// one again.
fn sent(e: &Engine, tag: &str, n: u64) -> (Vec<Value>, usize) {
    let mut accepted = Vec::new();
    let mut refused = 0;
    for i in 0..n {
        let body = call(tag, i);
        let (s, v) = e.decide(&body);
        assert_eq!(s, 200, "{tag}: {v}");
        match (v["status"].as_u64(), code(&v).as_str()) {
            (Some(200), "OK") => accepted.push(body),
            // A write the replicas did not acknowledge in time: the nonce step's policy (deny).
            (Some(503), "STORE_UNAVAILABLE") => refused += 1,
            _ => panic!("{tag}: unexpected answer {v}"),
        }
    }
    (accepted, refused)
}

fn replays_passed(e: &Engine, accepted: &[Value]) -> usize {
    accepted
        .iter()
        .filter(|b| {
            let (s, v) = e.decide(b);
            assert_eq!(s, 200, "{v}");
            let c = code(&v);
            assert!(
                c == "OK" || c == "REPLAY_DUPLICATE",
                "a replay after the failover got {v}"
            );
            c == "OK"
        })
        .count()
}

/// Cuts the replication link from master `m` to its replica `r` and keeps it cut: the replica
/// can no longer log in to its master (`masteruser` names no user there), and the master drops
/// the link it had. The master goes on accepting writes its replica never gets, as a master cut
/// off from its replica by the network does. (Stopping the replica with SIGSTOP is not enough:
/// what the master already wrote to the socket waits in the replica's kernel buffer, and the
/// replica reads it on waking.)
fn cut_replication(cluster: &RedisCluster, m: usize, r: usize) {
    let (m, r) = (&cluster.nodes[m], &cluster.nodes[r]);
    assert_eq!(
        r.cli(&["CONFIG", "SET", "masteruser", "no-such-user"]),
        "OK"
    );
    assert_eq!(
        r.cli(&["CONFIG", "SET", "masterauth", "no-such-password"]),
        "OK"
    );
    let t = Instant::now();
    loop {
        m.cli(&["CLIENT", "KILL", "TYPE", "replica"]);
        if m.cli(&["INFO", "replication"])
            .contains("connected_slaves:0")
        {
            std::thread::sleep(Duration::from_millis(300));
            if m.cli(&["INFO", "replication"])
                .contains("connected_slaves:0")
            {
                return;
            }
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the replica keeps reconnecting"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Mean wall time of `n` sequential fresh decisions on a healthy cluster (printed, not asserted).
fn mean_ms(e: &Engine, tag: &str, n: u64) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        let (s, v) = e.decide(&call(tag, 2_000_000 + i));
        assert_eq!((s, code(&v).as_str()), (200, "OK"), "{tag}: {v}");
    }
    t.elapsed().as_secs_f64() * 1000.0 / n as f64
}

fn scenario(cluster: &mut RedisCluster, dir: &Path, nodes: &str, mode: &str) -> (Round, Round) {
    let plain = Engine::start(
        dir,
        &format!("plain-{mode}"),
        &config(nodes, &format!("fo-plain-{mode}"), mode, 0),
    );
    let acked = Engine::start(
        dir,
        &format!("acked-{mode}"),
        &config(nodes, &format!("fo-acked-{mode}"), mode, 1),
    );
    let (p_ms, a_ms) = (
        mean_ms(&plain, &format!("p-{mode}-warm"), 200),
        mean_ms(&acked, &format!("a-{mode}-warm"), 200),
    );
    println!(
        "{mode}: healthy cluster, sequential decisions: plain {p_ms:.3} ms, replica_acks = 1 \
         {a_ms:.3} ms per decision"
    );

    let (m, r) = *cluster
        .pairs()
        .first()
        .expect("a master with a live replica");
    cut_replication(cluster, m, r);
    let (p_acc, p_ref) = sent(&plain, &format!("p-{mode}"), 60);
    let (a_acc, a_ref) = sent(&acked, &format!("a-{mode}"), 60);
    cluster.nodes[m].kill();
    let t = Instant::now();
    // Between the master's death and the promotion: the policy answers for its slots.
    let mut during = (0, 0);
    for i in 0..30 {
        let (_, v) = plain.decide(&call(&format!("p-{mode}-gap"), i));
        match (code(&v).as_str(), v["status"].as_u64()) {
            ("OK", _) => during.0 += 1,
            ("STORE_UNAVAILABLE", Some(503)) => during.1 += 1,
            _ => panic!("{mode}: during the failover: {v}"),
        }
    }
    println!(
        "{mode}: 30 requests right after the master died: {} accepted (other masters' slots), {} \
         STORE_UNAVAILABLE",
        during.0, during.1
    );
    assert!(during.1 > 0, "{mode}: no request met the dead master");
    while cluster.nodes[r].role() != "master" {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the replica did not take over"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = t.elapsed();
    // The promotion reaches the other nodes a moment later; until then a node may still answer
    // CLUSTERDOWN for the failed master's slots.
    while !cluster
        .nodes
        .iter()
        .filter(|n| n.alive())
        .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
    {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the cluster did not become ok after the failover"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let back = (
        until_serving(&plain, &format!("p-{mode}-back")),
        until_serving(&acked, &format!("a-{mode}-back")),
    );
    println!(
        "{mode}: replica promoted {} ms after the master died; engines serving again after \
         {} / {} ms more (no restart)",
        took.as_millis(),
        back.0.as_millis(),
        back.1.as_millis()
    );
    let p = Round {
        accepted: p_acc.len(),
        refused: p_ref,
        replays_passed: replays_passed(&plain, &p_acc),
    };
    let a = Round {
        accepted: a_acc.len(),
        refused: a_ref,
        replays_passed: replays_passed(&acked, &a_acc),
    };
    for (name, x) in [("plain", &p), ("replica_acks = 1", &a)] {
        println!(
            "{mode}, {name}: 60 requests while the replica was cut off: {} accepted, {} refused \
             (STORE_UNAVAILABLE); replays of the accepted ones after the failover: {} passed",
            x.accepted, x.refused, x.replays_passed
        );
    }
    // The failed master comes back (it rejoins as the new master's replica), so that the next
    // scenario starts from three masters with a replica each.
    cluster.nodes[m].restart();
    cluster.wait_replicated(3);
    (p, a)
}

#[test]
fn a_failover_forgets_accepted_nonces_unless_replicas_acknowledged_them() {
    let mut cluster = RedisCluster::start_replicated(3);
    let dir = temp_dir("failover");
    let nodes = cluster.toml_nodes();
    for mode in ["bloom", "exact"] {
        let (plain, acked) = scenario(&mut cluster, &dir, &nodes, mode);
        // Plain asynchronous replication: every request was accepted, and the ones whose nonce
        // was on the failed master pass again. (If none did, the scenario proved nothing.)
        assert_eq!(plain.refused, 0, "{mode}");
        assert!(
            plain.replays_passed > 0,
            "{mode}: no write was lost; the scenario did not test anything"
        );
        // With an acknowledging replica: what landed on the master whose replica was cut off was
        // refused by policy (503), everything accepted is on a replica, and no replay passes.
        assert!(
            acked.refused > 0,
            "{mode}: nothing waited for the cut-off replica"
        );
        assert!(acked.accepted > 0, "{mode}: the healthy masters accept");
        assert_eq!(
            acked.replays_passed, 0,
            "{mode}: a replay passed after the failover"
        );
    }
}
