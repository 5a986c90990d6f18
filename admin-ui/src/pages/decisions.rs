//! The decision explorer: filters, keyset pages, one decision in full and its trace.

use serde_json::{json, Value};
use yew::prelude::*;

use crate::api::{self, enc, ApiErr};
use crate::pages::sandbox::trace_view;
use crate::pages::state::subject_link;
use crate::ui::{action_badge, input_value, now_ms, spawn, text, time, ErrorBox, Tick};
use crate::Session;

const FILTERS: [(&str, &str); 8] = [
    ("app", "App"),
    ("route", "Route"),
    ("user", "User"),
    ("ip", "IP"),
    ("tier", "Tier"),
    ("rule", "Rule"),
    ("code", "Code"),
    ("challenge", "Challenge"),
];

#[function_component(Decisions)]
pub fn decisions() -> Html {
    let session = use_context::<Session>().expect("session");
    let filters = use_state(|| {
        // `#/decisions?code=RATE_LIMITED` pre-fills the filters.
        FILTERS
            .iter()
            .map(|(k, _)| crate::hash_param(k).unwrap_or_default())
            .collect::<Vec<_>>()
    });
    // What the filter boxes hold while typed, before a change (Enter, leaving the box) applies
    // it. The boxes show these, not `filters`: a live refresh re-renders the page, and a box
    // showing the applied filter would lose what was typed since.
    let drafts = use_state(|| (*filters).clone());
    let action = use_state(|| crate::hash_param("action").unwrap_or_default());
    let minutes = use_state(|| "60".to_string());
    let rows = use_state(Vec::<Value>::new);
    let next = use_state(|| None::<String>);
    // Cursors of the pages before this one (the first page's is "").
    let cursors = use_state(Vec::<String>::new);
    let cursor = use_state(String::new);
    let selected = use_state(|| None::<Value>);
    let trace = use_state(|| None::<Value>);
    let live = use_state(|| true);
    let source = use_state(String::new);
    let err = use_state(|| None::<ApiErr>);
    let tick = use_reducer(Tick::default);

    let query = {
        let mut q = vec![
            format!("limit=50"),
            format!(
                "from={}",
                now_ms() - minutes.parse::<i64>().unwrap_or(60) * 60_000
            ),
        ];
        for ((k, _), v) in FILTERS.iter().zip(filters.iter()) {
            if !v.is_empty() {
                q.push(format!("{k}={}", enc(v)));
            }
        }
        if !action.is_empty() {
            q.push(format!("action={}", enc(&action)));
        }
        if !cursor.is_empty() {
            q.push(format!("cursor={}", enc(&cursor)));
        }
        q.join("&")
    };
    // Fetch on every change of the query, and on every tick of the live refresh. The `from` part
    // moves with the clock, so it is left out of the dependency.
    let deps = (
        filters.clone(),
        (*action).clone(),
        (*minutes).clone(),
        (*cursor).clone(),
        tick.0,
    );
    {
        let (rows, next, err, source, q) = (
            rows.clone(),
            next.clone(),
            err.clone(),
            source.clone(),
            query.clone(),
        );
        use_effect_with(
            (deps.0.to_vec(), deps.1, deps.2, deps.3, deps.4),
            move |_| {
                spawn(async move {
                    match api::get(&format!("/admin/v1/decisions?{q}")).await {
                        Ok(v) => {
                            rows.set(v["decisions"].as_array().cloned().unwrap_or_default());
                            next.set(v["next"].as_str().map(str::to_string));
                            source.set(text(&v["source"]));
                            err.set(None);
                        }
                        Err(e) => err.set(Some(e)),
                    }
                });
            },
        );
    }
    {
        let (tick, live, cursor) = (tick.clone(), *live, cursor.is_empty());
        use_effect_with((live, cursor), move |(live, first)| {
            let i = (*live && *first)
                .then(|| gloo_timers::callback::Interval::new(3_000, move || tick.dispatch(())));
            move || drop(i)
        });
    }

    let on_draft = |i: usize| {
        let drafts = drafts.clone();
        Callback::from(move |e: InputEvent| {
            let mut d = (*drafts).clone();
            d[i] = input_value(&e);
            drafts.set(d);
        })
    };
    let on_filter = |i: usize| {
        let (filters, cursor, cursors) = (filters.clone(), cursor.clone(), cursors.clone());
        Callback::from(move |e: Event| {
            let mut f = (*filters).clone();
            f[i] = input_value(&e).trim().to_string();
            filters.set(f);
            cursor.set(String::new());
            cursors.set(Vec::new());
        })
    };
    let next_page = {
        let (next, cursor, cursors) = (next.clone(), cursor.clone(), cursors.clone());
        Callback::from(move |_: MouseEvent| {
            if let Some(n) = &*next {
                let mut c = (*cursors).clone();
                c.push((*cursor).clone());
                cursors.set(c);
                cursor.set(n.clone());
            }
        })
    };
    let prev_page = {
        let (cursor, cursors) = (cursor.clone(), cursors.clone());
        Callback::from(move |_: MouseEvent| {
            let mut c = (*cursors).clone();
            if let Some(p) = c.pop() {
                cursor.set(p);
                cursors.set(c);
            }
        })
    };
    let run_trace = {
        let (selected, trace, err) = (selected.clone(), trace.clone(), err.clone());
        Callback::from(move |_: MouseEvent| {
            let Some(row) = (*selected).clone() else {
                return;
            };
            let (trace, err) = (trace.clone(), err.clone());
            let v = text(&row["ruleset_version"]);
            spawn(async move {
                match api::post(
                    &format!("/admin/v1/rulesets/{v}/trace"),
                    &json!({"decision": row}),
                )
                .await
                {
                    Ok(t) => {
                        trace.set(Some(t));
                        err.set(None);
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };

    html! {
        <div class="decisions">
            <form class="filters" aria-label="Filters" onsubmit={Callback::from(|e: SubmitEvent| e.prevent_default())}>
                { for FILTERS.iter().enumerate().map(|(i, (k, label))| html! {
                    <span class="field"><label for={format!("f-{k}")}>{ *label }</label>
                    <input id={format!("f-{k}")} value={drafts[i].clone()} oninput={on_draft(i)} onchange={on_filter(i)} /></span>
                }) }
                <span class="field"><label for="f-action">{ "Action" }</label>
                <select id="f-action" onchange={let a = action.clone(); let c = cursor.clone(); Callback::from(move |e: Event| { a.set(input_value(&e)); c.set(String::new()); })}>
                    { for ["", "allow", "challenge", "review", "deny"].iter().map(|a| html! {
                        <option value={*a} selected={*action == *a}>{ if a.is_empty() { "any" } else { a } }</option> }) }
                </select></span>
                <span class="field"><label for="f-range">{ "Range" }</label>
                <select id="f-range" onchange={let m = minutes.clone(); Callback::from(move |e: Event| m.set(input_value(&e)))}>
                    { for [("15", "15 min"), ("60", "1 hour"), ("360", "6 hours"), ("1440", "24 hours"), ("10080", "7 days")].iter().map(|(v, l)| html! {
                        <option value={*v} selected={*minutes == *v}>{ *l }</option> }) }
                </select></span>
                <label class="check"><input type="checkbox" id="live" checked={*live}
                    onchange={let l = live.clone(); Callback::from(move |_: Event| l.set(!*l))} />{ " Live" }</label>
            </form>
            <ErrorBox err={(*err).clone()} />
            <p class="muted" id="decision-count">{ format!("{} decision(s) on this page, from the {} log", rows.len(), *source) }</p>
            <div class="table-wrap">
            <table class="list" id="decision-table">
                <thead><tr><th>{ "Time" }</th><th>{ "Action" }</th><th>{ "Code" }</th><th>{ "Tier / rule" }</th><th>{ "Route" }</th><th>{ "User" }</th><th>{ "IP" }</th><th class="num">{ "µs" }</th></tr></thead>
                <tbody>
                { for rows.iter().map(|r| {
                    let onclick = { let s = selected.clone(); let t = trace.clone(); let r = r.clone(); Callback::from(move |_: MouseEvent| { s.set(Some(r.clone())); t.set(None); }) };
                    let is_sel = selected.as_ref().is_some_and(|s| s["decision_id"] == r["decision_id"]);
                    html! { <tr class={if is_sel { "selected" } else { "" }}>
                        <td><button class="link" {onclick} aria-label={format!("Open decision {}", text(&r["decision_id"]))}>{ time(r["time_ms"].as_i64().unwrap_or(0)) }</button></td>
                        <td>{ action_badge(r["action"].as_str().unwrap_or("")) }</td>
                        <td>{ text(&r["code"]) }</td>
                        <td>{ if text(&r["tier"]).is_empty() { String::new() } else { format!("{}/{}", text(&r["tier"]), text(&r["rule"])) } }</td>
                        <td>{ format!("{} {}", text(&r["method"]), text(&r["route"])) }</td>
                        <td>{ subject_link("user", &r["user"]) }</td><td>{ subject_link("ip", &r["ip"]) }</td>
                        <td class="num">{ text(&r["latency_us"]) }</td>
                    </tr> }
                }) }
                </tbody>
            </table>
            </div>
            <div class="pager">
                <button id="prev-page" onclick={prev_page} disabled={cursors.is_empty()}>{ "← Newer" }</button>
                <button id="next-page" onclick={next_page} disabled={next.is_none()}>{ "Older →" }</button>
            </div>
            if let Some(r) = &*selected {
                <section id="decision-detail" aria-label="Decision">
                    <h2>{ format!("Decision {}", text(&r["decision_id"])) }</h2>
                    <dl class="fields">
                        { for ["time_ms", "app", "method", "route", "user", "ip", "country", "isp", "device_type", "ua_family", "ja3",
                               "tier", "rule", "action", "code", "status", "score", "ruleset_version", "arm", "latency_us", "degraded", "instance",
                               "key_id", "challenge"].iter().map(|k| html! {
                            <><dt>{ *k }</dt><dd>{ match *k {
                                "time_ms" => html! { time(r[*k].as_i64().unwrap_or(0)) },
                                "user" | "ip" | "ja3" => subject_link(k, &r[*k]),
                                _ => html! { text(&r[*k]) },
                            } }</dd></>
                        }) }
                    </dl>
                    <h3>{ "Reasons" }</h3>
                    <ul id="decision-reasons">{ for r["reasons"].as_array().cloned().unwrap_or_default().iter().map(|x| html! {
                        <li>{ if x["message"].is_string() { text(&x["message"]) } else { text(x) } }</li> }) }</ul>
                    if r["shadow"].as_array().is_some_and(|a| !a.is_empty()) {
                        <h3>{ "Shadow" }</h3>
                        <ul>{ for r["shadow"].as_array().cloned().unwrap_or_default().iter().map(|x| html! {
                            <li>{ if x.is_object() { format!("{}/{}: {} {} {}", text(&x["tier"]), text(&x["rule"]), text(&x["action"]), text(&x["code"]), text(&x["reason"])) } else { text(x) } }</li> }) }</ul>
                    }
                    <details><summary>{ "Recorded request" }</summary><pre class="json">{ serde_json::to_string_pretty(&r["request"]).unwrap_or_default() }</pre></details>
                    if session.can("author") {
                        <button id="trace-decision" onclick={run_trace}>{ "Trace through its rule set" }</button>
                    }
                    if let Some(t) = &*trace {
                        <div id="decision-trace">
                            <p>{ format!("Replayed through {} in a fresh world at its recorded time (the rule tiers; the anti-replay steps are as recorded): ", text(&t["version"])) }
                               { "recorded " }{ action_badge(t["recorded"]["action"].as_str().unwrap_or("")) }{ format!(" {}", text(&t["recorded"]["code"])) }
                               { ", replayed " }{ action_badge(t["replayed"]["action"].as_str().unwrap_or("")) }{ format!(" {}", text(&t["replayed"]["code"])) }</p>
                            { trace_view(&t["trace"]) }
                        </div>
                    }
                </section>
            }
        </div>
    }
}
