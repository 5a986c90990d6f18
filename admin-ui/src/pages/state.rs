//! Live state: look up a subject (reputation, list entries, the rate limits keyed by it, last
//! decisions), reset its reputation and clear one of its limits; the hottest rate-limit and
//! counter keys; this instance's circuit breakers, closed or forced open; a claim pool's claims and
//! refills; the last repairs. Every repair goes through the admin API, audited, and reaches every
//! instance within `poll_ms`.
//!
//! A subject opens from the fragment (`#/state?kind=ip&value=203.0.113.50`), so any page can link
//! an IP, user or device here.

use serde_json::{json, Value};
use yew::prelude::*;

use crate::api::{self, enc, ApiErr};
use crate::ui::{action_badge, input_value, spawn, text, time, ErrorBox, Tick};
use crate::{hash_param, Session};

/// The fragment that opens a subject on this page.
pub fn subject_href(kind: &str, value: &str) -> String {
    format!("#/state?kind={}&value={}", enc(kind), enc(value))
}

/// What an operator typed into the search box, as a subject: `ip`, `user`, `device` or `ja3`
/// named before a colon (`device:d-42`), else an address is an IP, 32 hex digits a JA3 hash, and
/// anything else a user id.
pub fn subject_of(query: &str) -> (&'static str, String) {
    let q = query.trim();
    for kind in ["ip", "user", "device", "ja3"] {
        if let Some(v) = q.strip_prefix(kind).and_then(|r| r.strip_prefix(':')) {
            if !v.trim().is_empty() {
                return (kind, v.trim().to_string());
            }
        }
    }
    if q.parse::<std::net::IpAddr>().is_ok() {
        ("ip", q.to_string())
    } else if q.len() == 32 && q.bytes().all(|b| b.is_ascii_hexdigit()) {
        ("ja3", q.to_ascii_lowercase())
    } else {
        ("user", q.to_string())
    }
}

/// The search box on every page: a subject, opened on the live state page.
#[function_component(Search)]
pub fn search() -> Html {
    let input = use_node_ref();
    let submit = {
        let input = input.clone();
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            let Some(el) = input.cast::<web_sys::HtmlInputElement>() else {
                return;
            };
            let q = el.value();
            if q.trim().is_empty() {
                return;
            }
            let (kind, value) = subject_of(&q);
            el.set_value("");
            if let Some(w) = web_sys::window() {
                let _ = w.location().set_hash(&subject_href(kind, &value)[1..]);
            }
        })
    };
    html! {
        <form class="search" role="search" onsubmit={submit}>
            <input id="search" ref={input} type="search" aria-label="Look up an IP, user, device or JA3"
                placeholder="IP, user, device:…, JA3" autocomplete="off" />
        </form>
    }
}

/// A link to a subject, or nothing for an empty value.
pub fn subject_link(kind: &str, value: &Value) -> Html {
    let v = text(value);
    if v.is_empty() {
        return html! {};
    }
    html! { <a class="mono subject" href={subject_href(kind, &v)} title={format!("Look up {kind} {v}")}>{ v }</a> }
}

#[function_component(State)]
pub fn state() -> Html {
    let session = use_context::<Session>().expect("session");
    let can_repair = session.can("author");
    let err = use_state(|| None::<ApiErr>);
    let done = use_state(|| None::<String>);
    let reload = use_reducer(Tick::default);
    let kind = use_state(|| hash_param("kind").unwrap_or_else(|| "ip".into()));
    let value = use_state(|| hash_param("value").unwrap_or_default());
    let subject = use_state(|| None::<Value>);
    let breakers = use_state(Vec::<Value>::new);
    let hot = use_state(Vec::<Value>::new);
    let repairs = use_state(Vec::<Value>::new);
    let pool_name = use_state(|| hash_param("pool").unwrap_or_default());
    let pool = use_state(|| None::<Value>);
    let add = use_state(|| "10".to_string());

    // Everything shown, read again after each repair.
    {
        let (err, subject, breakers, repairs, pool) = (
            err.clone(),
            subject.clone(),
            breakers.clone(),
            repairs.clone(),
            pool.clone(),
        );
        let (kind, value, pool_name) = ((*kind).clone(), (*value).clone(), (*pool_name).clone());
        use_effect_with(reload.0, move |_| {
            spawn(async move {
                if !value.trim().is_empty() {
                    let path = format!("/admin/v1/subjects/{}/{}", enc(&kind), enc(value.trim()));
                    match api::get(&path).await {
                        Ok(v) => subject.set(Some(v)),
                        Err(e) => {
                            subject.set(None);
                            err.set(Some(e));
                        }
                    }
                }
                match api::get("/admin/v1/breakers").await {
                    Ok(v) => breakers.set(v["breakers"].as_array().cloned().unwrap_or_default()),
                    Err(e) => err.set(Some(e)),
                }
                match api::get("/admin/v1/repairs").await {
                    Ok(v) => repairs.set(v["repairs"].as_array().cloned().unwrap_or_default()),
                    Err(e) => err.set(Some(e)),
                }
                if !pool_name.trim().is_empty() {
                    match api::get(&format!("/admin/v1/pools/{}", enc(pool_name.trim()))).await {
                        Ok(v) => pool.set(Some(v)),
                        Err(e) => err.set(Some(e)),
                    }
                }
            });
        });
    }
    // The hottest keys, read again every 5 s (and after each repair).
    {
        let (hot, err) = (hot.clone(), err.clone());
        use_effect_with(reload.0, move |_| {
            let load = move || {
                let (hot, err) = (hot.clone(), err.clone());
                spawn(async move {
                    match api::get("/admin/v1/hot-keys?limit=15").await {
                        Ok(v) => hot.set(v["keys"].as_array().cloned().unwrap_or_default()),
                        Err(e) => err.set(Some(e)),
                    }
                });
            };
            load();
            let i = gloo_timers::callback::Interval::new(5_000, load);
            move || drop(i)
        });
    }
    // Follow the fragment (a subject link clicked on this page or another).
    {
        let (kind, value, reload) = (kind.clone(), value.clone(), reload.clone());
        use_effect_with((), move |_| {
            let listener = web_sys::window().map(|w| {
                gloo_events::EventListener::new(&w, "hashchange", move |_| {
                    if let (Some(k), Some(v)) = (hash_param("kind"), hash_param("value")) {
                        kind.set(k);
                        value.set(v);
                        reload.dispatch(());
                    }
                })
            });
            move || drop(listener)
        });
    }

    // A repair: POST, then show what changed.
    let repair = {
        let (err, done, reload) = (err.clone(), done.clone(), reload.clone());
        Callback::from(move |(path, body, what): (String, Value, String)| {
            let (err, done, reload) = (err.clone(), done.clone(), reload.clone());
            spawn(async move {
                match api::post(&path, &body).await {
                    Ok(_) => {
                        err.set(None);
                        done.set(Some(what));
                        reload.dispatch(());
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    // Clears one rate-limit or counter key on every instance (`what` names it in the notice).
    let clear_key = {
        let repair = repair.clone();
        move |key: String, what: &'static str| {
            let repair = repair.clone();
            Callback::from(move |_: MouseEvent| {
                repair.emit((
                    "/admin/v1/limits/reset".to_string(),
                    json!({ "key": key }),
                    format!("The {what} {key} was cleared on every instance."),
                ))
            })
        }
    };
    let look_up = {
        let (kind, value, done, reload) =
            (kind.clone(), value.clone(), done.clone(), reload.clone());
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            done.set(None);
            // Into the fragment, so the lookup can be linked and reloaded.
            if let Some(w) = web_sys::window() {
                let _ = w
                    .location()
                    .set_hash(&subject_href(&kind, value.trim())[1..]);
            }
            reload.dispatch(());
        })
    };
    let look_up_pool = {
        let (done, reload) = (done.clone(), reload.clone());
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            done.set(None);
            reload.dispatch(());
        })
    };

    let subject_view = match &*subject {
        None => html! {},
        Some(s) => {
            let rep = &s["reputation"];
            let (k, v) = (text(&s["kind"]), text(&s["value"]));
            let reset = {
                let (repair, k, v) = (repair.clone(), k.clone(), v.clone());
                Callback::from(move |_: MouseEvent| {
                    repair.emit((
                        format!(
                            "/admin/v1/subjects/{}/{}/reputation/reset",
                            enc(&k),
                            enc(&v)
                        ),
                        Value::Null,
                        format!("The reputation of {k} {v} was reset."),
                    ))
                })
            };
            let decisions = s["decisions"].as_array().cloned().unwrap_or_default();
            let lists = s["lists"].as_array().cloned().unwrap_or_default();
            let limits = s["limits"].as_array().cloned().unwrap_or_default();
            // Counters (`count`) and distinct sets (`distinct`); a counter can be cleared.
            let counted: Vec<(bool, Value)> = s["counters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| (true, c.clone()))
                .chain(
                    s["distinct"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|c| (false, c.clone())),
                )
                .collect();
            let counted_rows = counted.iter().map(|(is_counter, c)| {
                let key = text(&c["key"]);
                let clear = clear_key(key.clone(), "counter");
                let now = match c["error"].as_str() {
                    Some(e) => format!("unreadable: {e}"),
                    None => text(&c["count"]),
                };
                html! { <tr>
                    <td>{ text(&c["rule"]) }</td>
                    <td class="mono">{ key.clone() }</td>
                    <td>{ if *is_counter { "requests" } else { "distinct items" } }</td>
                    <td>{ duration(c["window_ms"].as_u64().unwrap_or(0)) }</td>
                    <td>{ now }</td>
                    <td>if can_repair && *is_counter && c["count"].as_i64().unwrap_or(0) > 0 {
                        <button class="link" aria-label={format!("Clear the counter {key}")} onclick={clear}>{ "Clear" }</button>
                    }</td>
                </tr> }
            });
            let limit_rows = limits.iter().map(|l| {
                let key = text(&l["key"]);
                let clear = clear_key(key.clone(), "rate limit");
                let burst = l["burst"].as_u64().unwrap_or(0);
                let state = match (l["remaining"].as_u64(), l["error"].as_str()) {
                    (_, Some(e)) => format!("unreadable: {e}"),
                    (Some(0), _) => format!(
                        "none left, next in {}",
                        duration(l["retry_after_ms"].as_u64().unwrap_or(0))
                    ),
                    (Some(r), _) => format!("{r} of {burst} left"),
                    (None, _) => String::new(),
                };
                let spent = l["remaining"].as_u64().is_some_and(|r| r < burst);
                html! { <tr>
                    <td>{ text(&l["rule"]) }</td>
                    <td class="mono">{ key.clone() }</td>
                    <td>{ format!("{}/s, bursts of {burst}", text(&l["rate_per_sec"])) }</td>
                    <td class={if l["remaining"].as_u64() == Some(0) { "exhausted" } else { "" }}>{ state }</td>
                    <td>if can_repair && spent {
                        <button class="link" aria-label={format!("Clear the rate limit {key}")} onclick={clear}>{ "Clear" }</button>
                    }</td>
                </tr> }
            });
            html! {
                <section aria-label="Subject" id="subject">
                    <h2>{ format!("{k} ") }<span class="mono">{ v.clone() }</span></h2>
                    <dl class="facts">
                        <dt>{ "Reputation" }</dt>
                        <dd id="subject-points">{ match rep["points"].as_i64() {
                            Some(p) => format!("{p} points"),
                            None => format!("unreadable: {}", text(&rep["error"])),
                        } }</dd>
                        <dt>{ "Earned per refusal" }</dt>
                        <dd>{ format!("deny +{}, challenge +{}, summed over {} min",
                            text(&rep["deny_points"]), text(&rep["challenge_points"]),
                            rep["window_ms"].as_i64().unwrap_or(0) / 60_000) }</dd>
                        <dt>{ "Lists" }</dt>
                        <dd>{ if lists.is_empty() { "none".to_string() } else {
                            lists.iter().map(|l| format!("{} {} ({})", text(&l["list"]), text(&l["value"]), text(&l["kind"]))).collect::<Vec<_>>().join(", ")
                        } }</dd>
                    </dl>
                    if can_repair {
                        <button id="reset-reputation" onclick={reset}
                            disabled={rep["points"].as_i64().unwrap_or(0) == 0}>{ "Reset reputation" }</button>
                    }
                    <h3>{ "Rate limits" }</h3>
                    if limits.is_empty() {
                        <p class="muted">{ "No rule of the active set keys a rate limit by this subject." }</p>
                    } else {
                        <div class="table-wrap">
                        <table class="list" id="subject-limits">
                            <thead><tr><th>{ "Rule" }</th><th>{ "Key" }</th><th>{ "Limit" }</th><th>{ "Now" }</th><th></th></tr></thead>
                            <tbody>{ for limit_rows }</tbody>
                        </table>
                        </div>
                    }
                    if !counted.is_empty() {
                        <h3>{ "Counters and distinct counts" }</h3>
                        <div class="table-wrap">
                        <table class="list" id="subject-counters">
                            <thead><tr><th>{ "Rule" }</th><th>{ "Key" }</th><th>{ "Counts" }</th><th>{ "Window" }</th><th>{ "Now" }</th><th></th></tr></thead>
                            <tbody>{ for counted_rows }</tbody>
                        </table>
                        </div>
                    }
                    if let Some(held) = s["claims"].as_array().filter(|c| !c.is_empty()) {
                        <h3>{ "Claims held" }</h3>
                        <ul id="subject-claims" class="plain">
                        { for held.iter().map(|c| {
                            let name = text(&c["pool"]);
                            let open = {
                                let (pool_name, reload, name) = (pool_name.clone(), reload.clone(), name.clone());
                                Callback::from(move |_: MouseEvent| {
                                    pool_name.set(name.clone());
                                    reload.dispatch(());
                                })
                            };
                            html! { <li><button class="link mono" aria-label={format!("Look up the pool {name}")} onclick={open}>{ name.clone() }</button></li> }
                        }) }
                        </ul>
                    }
                    if let Some(e) = s["claims"]["error"].as_str() {
                        <p class="muted">{ format!("Claims unreadable: {e}") }</p>
                    }
                    <h3>{ "Last decisions" }</h3>
                    if let Some(e) = s["decisions_error"].as_str() { <p class="muted">{ e.to_string() }</p> }
                    <div class="table-wrap">
                    <table class="list" id="subject-decisions">
                        <thead><tr><th>{ "Time" }</th><th>{ "Route" }</th><th>{ "Action" }</th><th>{ "Code" }</th><th>{ "Rule" }</th></tr></thead>
                        <tbody>
                        { for decisions.iter().map(|d| html! { <tr>
                            <td>{ d["time_ms"].as_i64().map(time).unwrap_or_default() }</td>
                            <td class="mono">{ text(&d["route"]) }</td>
                            <td>{ action_badge(d["action"].as_str().unwrap_or("")) }</td>
                            <td class="mono">{ text(&d["code"]) }</td>
                            <td>{ text(&d["rule"]) }</td>
                        </tr> }) }
                        </tbody>
                    </table>
                    </div>
                </section>
            }
        }
    };

    let breaker_rows = breakers.iter().map(|b| {
        let (app, route) = (text(&b["app"]), text(&b["route"]));
        let state = text(&b["state"]);
        let act = |open: bool| {
            let (repair, app, route) = (repair.clone(), app.clone(), route.clone());
            Callback::from(move |_: MouseEvent| {
                let verb = if open { "open" } else { "close" };
                let mut body = json!({"app": app, "route": route});
                if open {
                    // Ten minutes, then it probes as after a trip.
                    body["for_ms"] = json!(600_000);
                }
                repair.emit((
                    format!("/admin/v1/breakers/{verb}"),
                    body,
                    format!("The breaker of {app} {route} is {verb}{} on every instance.", if open { "ed for 10 min" } else { "d" }),
                ))
            })
        };
        html! { <tr>
            <td>{ app.clone() }</td><td class="mono">{ route.clone() }</td>
            <td><span class={format!("badge {}", if state == "closed" { "allow" } else if state == "open" { "deny" } else { "challenge" })}>{ state.clone() }</span></td>
            <td>{ text(&b["requests"]) }</td>
            <td>{ format!("{:.0}%", b["error_ratio"].as_f64().unwrap_or(0.0) * 100.0) }</td>
            <td>{ format!("{:.0}%", b["slow_ratio"].as_f64().unwrap_or(0.0) * 100.0) }</td>
            <td>{ b["open_until_ms"].as_i64().map(time).unwrap_or_default() }</td>
            <td>if can_repair {
                if state == "closed" {
                    <button class="link danger" aria-label={format!("Open the breaker of {route}")} onclick={act(true)}>{ "Force open" }</button>
                } else {
                    <button class="link" aria-label={format!("Close the breaker of {route}")} onclick={act(false)}>{ "Close" }</button>
                }
            }</td>
        </tr> }
    });

    let pool_view = match &*pool {
        None => html! {},
        Some(p) => {
            let name = text(&p["pool"]);
            let refill = {
                let (repair, add, name) = (repair.clone(), add.clone(), name.clone());
                Callback::from(move |e: SubmitEvent| {
                    e.prevent_default();
                    let n: u64 = add.trim().parse().unwrap_or(0);
                    repair.emit((
                        format!("/admin/v1/pools/{}/refill", enc(&name)),
                        json!({"add": n}),
                        format!("Pool {name} was refilled by {n}."),
                    ))
                })
            };
            let segments = p["segments"].as_array().cloned().unwrap_or_default();
            html! {
                <div id="pool">
                    <dl class="facts">
                        <dt>{ "Claimed" }</dt><dd id="pool-claimed">{ text(&p["claimed"]) }</dd>
                        <dt>{ "Refilled" }</dt><dd id="pool-refilled">{ text(&p["refilled"]) }</dd>
                        <dt>{ "Held" }</dt><dd>{ if p["shared"] == true { "in Redis, for every instance" } else { "by this instance" } }</dd>
                    </dl>
                    if !segments.is_empty() {
                        <p class="muted">{ "Claims per segment: " }{ segments.iter().map(|s| format!("{} {}", text(&s["segment"]), text(&s["claimed"]))).collect::<Vec<_>>().join(" · ") }</p>
                    }
                    if can_repair {
                        <form class="filters" onsubmit={refill} aria-label="Refill the pool">
                            <span class="field"><label for="p-add">{ "More claims" }</label>
                            <input id="p-add" class="short" type="number" min="1" max="10000000" value={(*add).clone()}
                                oninput={let a = add.clone(); Callback::from(move |e: InputEvent| a.set(input_value(&e)))} /></span>
                            <button type="submit" id="p-refill">{ "Refill" }</button>
                        </form>
                    }
                </div>
            }
        }
    };

    html! {
        <div class="state">
            <ErrorBox err={(*err).clone()} />
            if let Some(d) = &*done { <p class="notice" role="status" id="repair-done">{ d.clone() }</p> }
            <form class="filters" onsubmit={look_up} aria-label="Look up a subject">
                <span class="field"><label for="s-kind">{ "Kind" }</label>
                <select id="s-kind" onchange={let k = kind.clone(); Callback::from(move |e: Event| k.set(input_value(&e)))}>
                    { for ["ip", "user", "device", "ja3"].iter().map(|k| html! { <option value={*k} selected={*kind == *k}>{ *k }</option> }) }
                </select></span>
                <span class="field"><label for="s-value">{ "Value" }</label>
                <input id="s-value" required=true value={(*value).clone()}
                    oninput={let v = value.clone(); Callback::from(move |e: InputEvent| v.set(input_value(&e)))} /></span>
                <button type="submit" id="s-look">{ "Look up" }</button>
            </form>
            { subject_view }
            <section aria-label="Circuit breakers">
                <h2>{ "Circuit breakers (this instance)" }</h2>
                if breakers.is_empty() { <p class="muted">{ "No breaker has seen traffic yet." }</p> } else {
                    <div class="table-wrap">
                    <table class="list" id="breakers">
                        <thead><tr><th>{ "App" }</th><th>{ "Route" }</th><th>{ "State" }</th><th>{ "Requests" }</th><th>{ "Errors" }</th><th>{ "Slow" }</th><th>{ "Probes at" }</th><th></th></tr></thead>
                        <tbody>{ for breaker_rows }</tbody>
                    </table>
                    </div>
                }
            </section>
            <section aria-label="Hottest keys">
                <h2>{ "Hottest keys (this instance, last 2 min)" }</h2>
                if hot.is_empty() { <p class="muted">{ "No rate limit or counter was called in the last two minutes." }</p> } else {
                    <div class="table-wrap">
                    <table class="list" id="hot-keys">
                        <thead><tr><th>{ "Helper" }</th><th>{ "Key" }</th><th class="num">{ "Calls" }</th><th class="num">{ "Refused" }</th><th></th></tr></thead>
                        <tbody>{ for hot.iter().map(|k| {
                            let key = text(&k["key"]);
                            let clear = clear_key(key.clone(), "key");
                            let error = k["error"].as_u64().unwrap_or(0);
                            html! { <tr>
                                <td>{ if k["kind"] == "count" { "count" } else { "rate_limit" } }</td>
                                <td class="mono">{ key.clone() }</td>
                                <td class="num" title={if error > 0 { format!("at most {error} of them may be another key's") } else { String::new() }}>
                                    { if error > 0 { format!("≤ {}", text(&k["calls"])) } else { text(&k["calls"]) } }</td>
                                <td class="num">{ text(&k["refused"]) }</td>
                                <td>if can_repair {
                                    <button class="link" aria-label={format!("Clear {key}")} onclick={clear}>{ "Clear" }</button>
                                }</td>
                            </tr> }
                        }) }</tbody>
                    </table>
                    </div>
                }
            </section>
            <section aria-label="Claim pools">
                <h2>{ "Claim pool" }</h2>
                <form class="filters" onsubmit={look_up_pool} aria-label="Look up a pool">
                    <span class="field"><label for="p-name">{ "Pool" }</label>
                    <input id="p-name" required=true placeholder="lottery:e42" value={(*pool_name).clone()}
                        oninput={let p = pool_name.clone(); Callback::from(move |e: InputEvent| p.set(input_value(&e)))} /></span>
                    <button type="submit" id="p-look">{ "Show" }</button>
                </form>
                { pool_view }
            </section>
            <section aria-label="Repairs">
                <h2>{ "Last repairs" }</h2>
                <div class="table-wrap">
                <table class="list" id="repairs">
                    <thead><tr><th>{ "Time" }</th><th>{ "Kind" }</th><th>{ "What" }</th><th>{ "By" }</th></tr></thead>
                    <tbody>
                    { for repairs.iter().take(20).map(|r| {
                        let what = match r["kind"].as_str().unwrap_or("") {
                            "reputation" => format!("{} {}", text(&r["subject"]), text(&r["value"])),
                            "limit" => text(&r["key"]),
                            "breaker" => format!("{} {}{}", text(&r["app"]), text(&r["route"]), if r["open_until_ms"].is_null() { " closed" } else { " opened" }),
                            "pool" => format!("{} +{}", text(&r["pool"]), text(&r["add"])),
                            _ => String::new(),
                        };
                        html! { <tr>
                            <td>{ r["at_ms"].as_i64().map(time).unwrap_or_default() }</td>
                            <td>{ text(&r["kind"]) }</td><td class="mono">{ what }</td><td>{ text(&r["by"]) }</td>
                        </tr> }
                    }) }
                    </tbody>
                </table>
                </div>
            </section>
        </div>
    }
}

/// A wait, as an operator reads it: `850 ms`, `42 s`, `17 min`, `3 h`.
fn duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1_000..=119_999 => format!("{} s", ms.div_ceil(1_000)),
        120_000..=7_199_999 => format!("{} min", ms.div_ceil(60_000)),
        _ => format!("{} h", ms.div_ceil(3_600_000)),
    }
}
