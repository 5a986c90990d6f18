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
//!
//! All of it happens under load: client threads send fresh signed requests back to back to two
//! engines (one with plain writes, one with `replica_acks = 1`) through every phase — healthy,
//! replica cut off, master dead, replica promoted, settled — and afterwards every accepted
//! request is replayed once: that fixed set of replays measures what the failover forgot.

mod support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{agent, nonce, now_ms, temp_dir, Call, Engine, RedisCluster};

const SECRET: &str = "failover-test-secret";

fn config(nodes: &str, prefix: &str, mode: &str, acks: u32) -> String {
    // A wide window: the replays come seconds later, after the failover, and must be judged as
    // replays, not as expired. The Bloom filters are sized for the load (thousands of decisions
    // a second), so that a fresh nonce is not taken for a replay by a false positive. Duplicate-submission fingerprints are off, so what stops a replay
    // is the nonce alone (what this test measures).
    format!(
        "[[apps]]\nid = \"shop\"\nsecret = \"{SECRET}\"\nwindow_ms = 60000\n\
         [rules]\ndefaults = false\n\
         [fingerprint]\nwindow_ms = 0\n\
         [state]\nbackend = \"redis\"\nredis_cluster_nodes = [{nodes}]\nredis_prefix = \"{prefix}\"\n\
         nonce_mode = \"{mode}\"\nexpected_rps = 10000\nreplica_acks = {acks}\n\
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

/// What the traffic of one engine met, phase by phase.
#[derive(Default)]
struct Seen {
    /// Accepted requests and the phase each was sent in.
    accepted: Vec<(usize, Value)>,
    /// Answers per phase (the phase each answer came back in).
    answered: [usize; PHASES],
    /// `STORE_UNAVAILABLE` (503) answers per phase.
    refused: [usize; PHASES],
    /// Anything else (a wrong code, an HTTP error): must stay empty.
    unexpected: Vec<String>,
    /// When the last `STORE_UNAVAILABLE` came back.
    last_refusal: Option<Instant>,
    /// How many refusals gave each reason (the message, digits removed).
    reasons: std::collections::BTreeMap<String, usize>,
}

impl Seen {
    fn merge(&mut self, o: Seen) {
        self.accepted.extend(o.accepted);
        for p in 0..PHASES {
            self.answered[p] += o.answered[p];
            self.refused[p] += o.refused[p];
        }
        self.unexpected.extend(o.unexpected);
        self.last_refusal = self.last_refusal.max(o.last_refusal);
        for (k, n) in o.reasons {
            *self.reasons.entry(k).or_default() += n;
        }
    }
}

/// The phases of a scenario, in order.
const HEALTHY: usize = 0;
/// The replica is cut off from its master: writes landing there are on the master alone.
const CUT: usize = 1;
/// The master is dead and its replica not yet promoted (or the promotion not yet seen by all).
const DOWN: usize = 2;
/// The replica is master and the cluster ok again; the engines find the new slot map. The new
/// master has no replica yet.
const PROMOTED: usize = 3;
/// The failed master is restarting and rejoining as the new master's replica.
const REJOINING: usize = 4;
/// One second after the old master is a replica in sync: service must be back, on every slot.
const SETTLED: usize = 5;
const PHASES: usize = 6;
const PHASE_NAMES: [&str; PHASES] = ["healthy", "cut", "down", "promoted", "rejoining", "settled"];

/// Client threads per engine.
const CLIENTS: usize = 3;

/// One client: fresh signed requests back to back on `e` until `stop`, on its own keep-alive
/// connection.
fn client(e: &Engine, tag: &str, phase: &AtomicUsize, stop: &AtomicBool) -> Seen {
    let agent = agent();
    let url = format!("{}/v1/decide", e.base);
    let mut seen = Seen::default();
    for i in 0.. {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let sent_in = phase.load(Ordering::SeqCst);
        let body = call(tag, i);
        let answer = agent
            .post(&url)
            .header("content-type", "application/json")
            .send(body.to_string());
        let now = phase.load(Ordering::SeqCst);
        let (s, v) = match answer {
            Ok(mut r) => (
                r.status().as_u16(),
                serde_json::from_str::<Value>(&r.body_mut().read_to_string().unwrap_or_default())
                    .unwrap_or(Value::Null),
            ),
            Err(e) => {
                seen.unexpected.push(format!("{}: {e}", PHASE_NAMES[now]));
                continue;
            }
        };
        seen.answered[now] += 1;
        match (s, v["status"].as_u64(), code(&v).as_str()) {
            (200, Some(200), "OK") => seen.accepted.push((sent_in, body)),
            (200, Some(503), "STORE_UNAVAILABLE") => {
                seen.refused[now] += 1;
                seen.last_refusal = Some(Instant::now());
                let why: String = v["reasons"][0]["message"]
                    .as_str()
                    .unwrap_or("?")
                    .chars()
                    .filter(|c| !c.is_ascii_digit())
                    .collect();
                *seen.reasons.entry(why).or_default() += 1;
            }
            _ => seen
                .unexpected
                .push(format!("{}: HTTP {s} {v}", PHASE_NAMES[now])),
        }
    }
    seen
}

/// Replays every accepted request on `e` (from `CLIENTS` threads); how many passed, by the phase
/// the original was sent in. Every replay must be refused as one or pass; nothing else.
fn replays_passed(e: &Engine, accepted: &[(usize, Value)]) -> [usize; PHASES] {
    let chunk = accepted.len().div_ceil(CLIENTS).max(1);
    let parts: Vec<[usize; PHASES]> = std::thread::scope(|s| {
        let hs: Vec<_> = accepted
            .chunks(chunk)
            .map(|part| {
                s.spawn(move || {
                    let agent = agent();
                    let url = format!("{}/v1/decide", e.base);
                    let mut passed = [0; PHASES];
                    for (p, body) in part {
                        let mut r = agent
                            .post(&url)
                            .header("content-type", "application/json")
                            .send(body.to_string())
                            .expect("a replay after the failover");
                        let v: Value =
                            serde_json::from_str(&r.body_mut().read_to_string().unwrap()).unwrap();
                        let c = code(&v);
                        assert!(
                            r.status() == 200 && (c == "OK" || c == "REPLAY_DUPLICATE"),
                            "a replay after the failover got {v}"
                        );
                        if c == "OK" {
                            passed[*p] += 1;
                        }
                    }
                    passed
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut out = [0; PHASES];
    for p in parts {
        for i in 0..PHASES {
            out[i] += p[i];
        }
    }
    out
}

/// One engine's traffic through a failover.
struct Round {
    seen: Seen,
    /// Replays that passed after the failover, by the phase their original was sent in.
    replays: [usize; PHASES],
    /// Decisions per second while the cluster was healthy (both engines loaded at once).
    healthy_rate: f64,
    /// Requests accepted per second between the master's death and the promotion.
    down_rate: f64,
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
    let (m, r) = *cluster
        .pairs()
        .first()
        .expect("a master with a live replica");
    let phase = AtomicUsize::new(HEALTHY);
    let stop = AtomicBool::new(false);
    let mut marks = [Duration::ZERO; PHASES + 1];
    let t0 = Instant::now();
    let (mut p, mut a) = (Seen::default(), Seen::default());
    std::thread::scope(|s| {
        let (phase, stop) = (&phase, &stop);
        let mut handles = Vec::new();
        for (e, name) in [(&plain, "p"), (&acked, "a")] {
            for c in 0..CLIENTS {
                let tag = format!("{name}-{mode}-{c}");
                handles.push((name, s.spawn(move || client(e, &tag, phase, stop))));
            }
        }
        let enter = |next: usize, marks: &mut [Duration; PHASES + 1]| {
            marks[next] = t0.elapsed();
            phase.store(next, Ordering::SeqCst);
        };
        std::thread::sleep(Duration::from_millis(1500));
        enter(CUT, &mut marks);
        cut_replication(cluster, m, r);
        std::thread::sleep(Duration::from_millis(1500));
        enter(DOWN, &mut marks);
        cluster.nodes[m].kill();
        while cluster.nodes[r].role() != "master" {
            assert!(
                t0.elapsed() - marks[DOWN] < Duration::from_secs(30),
                "the replica did not take over"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The promotion reaches the other nodes a moment later; until then a node may still
        // answer CLUSTERDOWN for the failed master's slots.
        while !cluster
            .nodes
            .iter()
            .filter(|n| n.alive())
            .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(
                t0.elapsed() - marks[DOWN] < Duration::from_secs(30),
                "the cluster did not become ok after the failover"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        enter(PROMOTED, &mut marks);
        std::thread::sleep(Duration::from_secs(2));
        // The failed master comes back and rejoins as the new master's replica (so that the next
        // scenario starts from three masters with a replica each, too).
        enter(REJOINING, &mut marks);
        cluster.nodes[m].restart();
        cluster.wait_replicated(3);
        std::thread::sleep(Duration::from_secs(1));
        enter(SETTLED, &mut marks);
        std::thread::sleep(Duration::from_millis(1500));
        marks[PHASES] = t0.elapsed();
        stop.store(true, Ordering::SeqCst);
        for (name, h) in handles {
            let seen = h.join().unwrap();
            if name == "p" {
                p.merge(seen)
            } else {
                a.merge(seen)
            }
        }
    });
    let healthy = marks[CUT].as_secs_f64();
    let down = (marks[PROMOTED] - marks[DOWN]).as_secs_f64();
    let accepted_in =
        |s: &Seen, phase: usize| s.accepted.iter().filter(|(p, _)| *p == phase).count();
    let last = |s: &Seen| {
        s.last_refusal
            .map(|t| format!("{:.2} s", t.duration_since(t0).as_secs_f64()))
            .unwrap_or_else(|| "none".into())
    };
    println!(
        "{mode}: {CLIENTS} clients per engine; replica cut off at {:.2} s, master killed at {:.2} \
         s, replica promoted and the cluster ok at {:.2} s ({} ms after the kill), old master \
         restarted at {:.2} s and a replica in sync at {:.2} s; last refusal at {} (plain) and \
         {} (replica_acks = 1); no engine restarted",
        marks[CUT].as_secs_f64(),
        marks[DOWN].as_secs_f64(),
        marks[PROMOTED].as_secs_f64(),
        (marks[PROMOTED] - marks[DOWN]).as_millis(),
        marks[REJOINING].as_secs_f64(),
        (marks[SETTLED] - Duration::from_secs(1)).as_secs_f64(),
        last(&p),
        last(&a),
    );
    let p = Round {
        replays: replays_passed(&plain, &p.accepted),
        healthy_rate: p.answered[HEALTHY] as f64 / healthy,
        down_rate: accepted_in(&p, DOWN) as f64 / down,
        seen: p,
    };
    let a = Round {
        replays: replays_passed(&acked, &a.accepted),
        healthy_rate: a.answered[HEALTHY] as f64 / healthy,
        down_rate: accepted_in(&a, DOWN) as f64 / down,
        seen: a,
    };
    for (name, x) in [("plain", &p), ("replica_acks = 1", &a)] {
        let by_phase = |f: &dyn Fn(usize) -> usize| {
            (0..PHASES)
                .map(|i| format!("{} {}", PHASE_NAMES[i], f(i)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "{mode}, {name}: {:.0} decisions/s while healthy, {:.0} accepted/s while the master was \
             down; answered: {}; refused (STORE_UNAVAILABLE): {}; accepted {} and replayed each \
             after the failover, replays that passed by the phase the original was sent in: {}",
            x.healthy_rate,
            x.down_rate,
            by_phase(&|i| x.seen.answered[i]),
            by_phase(&|i| x.seen.refused[i]),
            x.seen.accepted.len(),
            by_phase(&|i| x.replays[i]),
        );
        println!("{mode}, {name}: refusals by reason: {:?}", x.seen.reasons);
    }
    (p, a)
}

#[test]
fn a_failover_under_load_forgets_accepted_nonces_unless_replicas_acknowledged_them() {
    let mut cluster = RedisCluster::start_replicated(3);
    let dir = temp_dir("failover");
    let nodes = cluster.toml_nodes();
    for mode in ["bloom", "exact"] {
        let (plain, acked) = scenario(&mut cluster, &dir, &nodes, mode);
        for (name, x) in [("plain", &plain), ("replica_acks = 1", &acked)] {
            // Every answer, before, during and after the failover, is a decision or the declared
            // policy's refusal (`on_store_error = "deny"`: `STORE_UNAVAILABLE`); never an HTTP
            // error or another code.
            assert!(
                x.seen.unexpected.is_empty(),
                "{mode}, {name}: {:?}",
                &x.seen.unexpected[..x.seen.unexpected.len().min(5)]
            );
            assert_eq!(
                x.seen.refused[HEALTHY], 0,
                "{mode}, {name}: refused while healthy"
            );
            // Service came back by itself, without restarting the engine.
            assert!(
                x.seen.answered[SETTLED] > 0,
                "{mode}, {name}: no traffic after"
            );
            assert_eq!(
                x.seen.refused[SETTLED], 0,
                "{mode}, {name}: still refusing once the cluster is whole again"
            );
            // Writes made once the replica is master are on it: nothing accepted then is lost.
            assert_eq!(
                x.replays[PROMOTED..].iter().sum::<usize>(),
                0,
                "{mode}, {name}: a nonce accepted after the promotion was forgotten"
            );
        }
        // Plain writes serve every slot as soon as the engine sees the promotion (2 s before the
        // old master even restarts).
        assert_eq!(
            plain.seen.refused[REJOINING] + plain.seen.refused[SETTLED],
            0,
            "{mode}: plain writes still refused after the promotion"
        );
        // With `replica_acks = 1` and one replica per master, the promoted master has no replica:
        // its anti-replay writes are refused by policy until one is back (here the old master,
        // rejoining; in production a spare replica that Redis Cluster migrates to it).
        assert!(
            acked.seen.refused[PROMOTED] > 0,
            "{mode}: the promoted master without a replica acknowledged writes"
        );
        // Plain asynchronous replication: nothing waits for the cut-off replica, the dead
        // master's slots are refused until the promotion, and requests accepted on that master
        // while its replica was cut off pass again. (If none did, the scenario proved nothing.)
        assert_eq!(plain.seen.refused[CUT], 0, "{mode}");
        assert!(
            plain.seen.refused[DOWN] > 0,
            "{mode}: no request met the dead master"
        );
        // The other masters go on serving: one dead node does not take the engine down with it.
        // (Two thirds of the slots are alive; a process-wide cool-down once refused nearly all.)
        assert!(
            plain.down_rate > 0.2 * plain.healthy_rate,
            "{mode}: {:.0} accepted/s while one master was down, {:.0}/s healthy",
            plain.down_rate,
            plain.healthy_rate
        );
        assert!(
            plain.replays.iter().sum::<usize>() > 0,
            "{mode}: no write was lost; the scenario did not test anything"
        );
        // With an acknowledging replica: what landed on the master whose replica was cut off was
        // refused by policy (503), everything accepted is on a replica, and no replay passes.
        assert!(
            acked.seen.refused[CUT] > 0,
            "{mode}: nothing waited for the cut-off replica"
        );
        assert!(
            acked.seen.accepted.iter().any(|(p, _)| *p == CUT),
            "{mode}: the healthy masters accept"
        );
        assert_eq!(
            acked.replays, [0; PHASES],
            "{mode}: a replay passed after the failover"
        );
    }
}
