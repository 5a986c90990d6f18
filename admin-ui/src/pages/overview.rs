//! Live decisions per second and the action mix per step (from `/metrics`, every 2 s); top rules,
//! latency percentiles and the heat maps by country, ISP and device type (from
//! `/admin/v1/stats` over the last hour, every 5 s).

use std::collections::BTreeMap;

use gloo_timers::callback::Interval;
use serde_json::Value;
use yew::prelude::*;

use crate::api::{self, ApiErr};
use crate::charts::{action_colour, BarChart, HeatMap, LineChart, Series, StackChart};
use crate::ui::{spawn, ErrorBox};

const ACTIONS: [&str; 4] = ["allow", "challenge", "review", "deny"];
const HISTORY: usize = 60;

/// `rampart_decisions_total` per (step, action), summed over codes.
fn parse_decisions(text: &str) -> BTreeMap<(String, String), f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("rampart_decisions_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_string())
                .unwrap_or_default()
        };
        let v: f64 = value
            .split_whitespace()
            .next()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0.0);
        *out.entry((label("step"), label("action"))).or_insert(0.0) += v;
    }
    out
}

/// Counter totals by (step, action).
type Totals = BTreeMap<(String, String), f64>;

#[derive(Default, Clone, PartialEq)]
struct Live {
    /// The previous reading: (seconds, totals).
    last: Option<(f64, Totals)>,
    /// Decisions per second per action, oldest first.
    rates: BTreeMap<String, Vec<f64>>,
    totals: BTreeMap<(String, String), f64>,
}

#[derive(Default, Clone, PartialEq)]
struct Stats {
    rules: Vec<(String, f64)>,
    latency: Value,
    latency_hist: Vec<[f64; 3]>,
    heat: BTreeMap<&'static str, Vec<(String, u64, f64)>>,
    /// Challenges issued, solved, and cleared requests (last hour).
    challenges: Vec<(String, f64)>,
    source: String,
}

fn breakdown(v: &Value) -> Vec<(String, u64, f64)> {
    v["breakdown"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|b| {
                    (
                        b["key"].as_str().unwrap_or("").to_string(),
                        b["n"].as_u64().unwrap_or(0),
                        b["refused_ratio"].as_f64().unwrap_or(0.0),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[function_component(Overview)]
pub fn overview() -> Html {
    let live = use_state(Live::default);
    let stats = use_state(Stats::default);
    let err = use_state(|| None::<ApiErr>);
    // Accumulated across ticks (a state handle captured by a timer would see a stale value).
    let live_acc = use_mut_ref(Live::default);
    let stats_acc = use_mut_ref(Stats::default);

    {
        let (live, acc) = (live.clone(), live_acc.clone());
        use_effect_with((), move |_| {
            let tick = move || {
                let (live, acc) = (live.clone(), acc.clone());
                spawn(async move {
                    let Ok(text) = api::metrics().await else {
                        return;
                    };
                    let now = js_sys::Date::now() / 1000.0;
                    let cur = parse_decisions(&text);
                    let mut next = acc.borrow().clone();
                    if let Some((t0, prev)) = &next.last {
                        let dt = (now - t0).max(0.001);
                        for a in ACTIONS {
                            let sum = |m: &BTreeMap<(String, String), f64>| {
                                m.iter()
                                    .filter(|((_, act), _)| act == a)
                                    .map(|(_, v)| v)
                                    .sum::<f64>()
                            };
                            let r = ((sum(&cur) - sum(prev)) / dt).max(0.0);
                            let s = next.rates.entry(a.to_string()).or_default();
                            s.push(r);
                            if s.len() > HISTORY {
                                s.remove(0);
                            }
                        }
                    }
                    next.totals = cur.clone();
                    next.last = Some((now, cur));
                    *acc.borrow_mut() = next.clone();
                    live.set(next);
                });
            };
            tick();
            let interval = Interval::new(2_000, tick);
            move || drop(interval)
        });
    }
    {
        let (stats, err, acc) = (stats.clone(), err.clone(), stats_acc.clone());
        use_effect_with((), move |_| {
            let tick = move || {
                let (stats, err, acc) = (stats.clone(), err.clone(), acc.clone());
                spawn(async move {
                    let mut next = acc.borrow().clone();
                    match api::get("/admin/v1/stats?by=rule").await {
                        Ok(v) => {
                            next.rules = breakdown(&v)
                                .into_iter()
                                .filter(|(k, _, _)| !k.is_empty())
                                .take(10)
                                .map(|(k, n, _)| (k, n as f64))
                                .collect();
                            let l = &v["latency_us"];
                            next.latency_hist.push([
                                l["p50"].as_f64().unwrap_or(0.0),
                                l["p99"].as_f64().unwrap_or(0.0),
                                l["p999"].as_f64().unwrap_or(0.0),
                            ]);
                            if next.latency_hist.len() > HISTORY {
                                next.latency_hist.remove(0);
                            }
                            next.latency = l.clone();
                            next.source = v["source"].as_str().unwrap_or("").to_string();
                            err.set(None);
                        }
                        Err(e) => {
                            err.set(Some(e));
                            return;
                        }
                    }
                    if let Ok(v) = api::get("/admin/v1/stats?by=challenge").await {
                        let b = breakdown(&v);
                        next.challenges = ["issued", "solved", "cleared"]
                            .iter()
                            .map(|k| {
                                let n = b.iter().find(|(key, _, _)| key == k).map_or(0, |x| x.1);
                                (k.to_string(), n as f64)
                            })
                            .collect();
                    }
                    for by in ["country", "isp", "device_type"] {
                        if let Ok(v) = api::get(&format!("/admin/v1/stats?by={by}")).await {
                            next.heat
                                .insert(by, breakdown(&v).into_iter().take(18).collect());
                        }
                    }
                    *acc.borrow_mut() = next.clone();
                    stats.set(next);
                });
            };
            tick();
            let interval = Interval::new(5_000, tick);
            move || drop(interval)
        });
    }

    let rate_series: Vec<Series> = ACTIONS
        .iter()
        .map(|a| Series {
            label: a.to_string(),
            colour: action_colour(a),
            points: live.rates.get(*a).cloned().unwrap_or_default(),
        })
        .collect();
    let total_rate: f64 = ACTIONS
        .iter()
        .filter_map(|a| live.rates.get(*a).and_then(|s| s.last()))
        .sum();
    // Action mix per step since this instance started.
    let mut steps: BTreeMap<String, BTreeMap<String, f64>> = BTreeMap::new();
    for ((step, action), v) in &live.totals {
        if *v > 0.0 {
            let step = if step.is_empty() { "none" } else { step };
            *steps
                .entry(step.to_string())
                .or_default()
                .entry(action.clone())
                .or_insert(0.0) += v;
        }
    }
    let mix: Vec<_> = steps
        .into_iter()
        .map(|(step, acts)| {
            let segs = ACTIONS
                .iter()
                .map(|a| {
                    (
                        a.to_string(),
                        acts.get(*a).copied().unwrap_or(0.0),
                        action_colour(a),
                    )
                })
                .collect();
            (step, segs)
        })
        .collect();
    let lat = &stats.latency;
    let lat_series = ["p50", "p99", "p99.9"]
        .iter()
        .enumerate()
        .map(|(i, label)| Series {
            label: label.to_string(),
            colour: ["#0ea5e9", "#f97316", "#7c3aed"][i],
            points: stats.latency_hist.iter().map(|h| h[i]).collect(),
        })
        .collect::<Vec<_>>();
    html! {
        <div class="overview">
            <ErrorBox err={(*err).clone()} />
            <section class="kpis" aria-label="Now">
                <div class="kpi"><span class="n" id="kpi-rate">{ format!("{total_rate:.1}") }</span><span>{ "decisions/s" }</span></div>
                <div class="kpi"><span class="n" id="kpi-p50">{ format!("{:.0}", lat["p50"].as_f64().unwrap_or(0.0)) }</span><span>{ "p50 µs (1 h)" }</span></div>
                <div class="kpi"><span class="n" id="kpi-p99">{ format!("{:.0}", lat["p99"].as_f64().unwrap_or(0.0)) }</span><span>{ "p99 µs (1 h)" }</span></div>
                <div class="kpi"><span class="n" id="kpi-n">{ format!("{:.0}", lat["n"].as_f64().unwrap_or(0.0)) }</span><span>{ format!("decisions (1 h, {})", stats.source) }</span></div>
            </section>
            <div class="grid">
                <LineChart id="chart-rate" title="Decisions per second, by action (live, this instance)" series={rate_series} />
                <StackChart id="chart-mix" title="Action mix per step (since this instance started)" rows={mix} />
                <BarChart id="chart-rules" title="Top rules (last hour)"
                          bars={stats.rules.iter().map(|(k, n)| (k.clone(), *n, "#dc2626")).collect::<Vec<_>>()} />
                <LineChart id="chart-latency" title="Latency percentiles (last hour, µs)" series={lat_series} unit=" µs" />
                <BarChart id="chart-challenges" title="Challenges issued, solved, and cleared requests (last hour)"
                          bars={stats.challenges.iter().map(|(k, n)| (k.clone(), *n, "#ca8a04")).collect::<Vec<_>>()} />
                <HeatMap id="heat-country" title="Refused share by region" cells={stats.heat.get("country").cloned().unwrap_or_default()} />
                <HeatMap id="heat-isp" title="Refused share by ISP" cells={stats.heat.get("isp").cloned().unwrap_or_default()} />
                <HeatMap id="heat-device" title="Refused share by device type" cells={stats.heat.get("device_type").cloned().unwrap_or_default()} />
            </div>
        </div>
    }
}
