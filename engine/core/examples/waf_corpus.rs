//! Runs the WAF detectors over a JSON-lines request corpus (the OWASP CRS regression requests)
//! and prints detection rates by family and paranoia level, and how often the CRS "negative"
//! requests are flagged.
//!
//! `cargo run --release -p rampart-core --example waf_corpus -- path/to/crs-requests.jsonl`

use std::collections::BTreeMap;

use rampart_core::waf::scan_request;
use serde_json::Value;

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: waf_corpus FILE.jsonl");
    let text = std::fs::read_to_string(&path).expect("readable corpus");
    // (family, label, paranoia) → (flagged, total)
    let mut table: BTreeMap<(String, String, i64), (u32, u32)> = BTreeMap::new();
    let mut misses: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let r: Value = serde_json::from_str(line).expect("JSON line");
        let uri = r["uri"].as_str().unwrap_or("/");
        let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
        let body = r["body"].as_str().unwrap_or("");
        let headers: Vec<(String, String)> = r["headers"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let hit = scan_request(
            path,
            query,
            body,
            None,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        let key = (
            r["family"].as_str().unwrap_or("?").to_string(),
            r["label"].as_str().unwrap_or("?").to_string(),
            r["paranoia"].as_i64().unwrap_or(0),
        );
        let e = table.entry(key.clone()).or_default();
        e.1 += 1;
        if hit.is_some() {
            e.0 += 1;
        } else if key.1 == "attack" && key.2 == 1 {
            misses.entry(key.0.clone()).or_default().push(format!(
                "{} {uri} {}",
                r["id"],
                &body[..body.len().min(80)]
            ));
        }
    }
    println!(
        "{:<18} {:<9} {:>3} {:>8} {:>7} {:>7}",
        "family", "label", "PL", "flagged", "total", "rate"
    );
    let mut sums: BTreeMap<(String, i64), (u32, u32)> = BTreeMap::new();
    for ((family, label, pl), (hit, total)) in &table {
        println!(
            "{family:<18} {label:<9} {pl:>3} {hit:>8} {total:>7} {:>6.1}%",
            100.0 * *hit as f64 / *total as f64
        );
        let s = sums.entry((label.clone(), *pl)).or_default();
        s.0 += hit;
        s.1 += total;
    }
    println!("\nall families:");
    for ((label, pl), (hit, total)) in &sums {
        println!(
            "{label:<9} PL{pl}: {hit}/{total} flagged ({:.1}%)",
            100.0 * *hit as f64 / *total as f64
        );
    }
    if std::env::var("SHOW_MISSES").is_ok() {
        for (family, list) in misses {
            println!("\nmissed {family} (PL1):");
            let all = std::env::var("SHOW_MISSES").as_deref() == Ok("all");
            for m in list.iter().take(if all { usize::MAX } else { 15 }) {
                println!("  {m}");
            }
        }
    }
}
