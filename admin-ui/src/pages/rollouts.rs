//! What is stable, canary and shadow; stage (a canary percentage, restricted to apps, device types
//! or countries), read the candidate's diff against stable and then approve (another person), roll
//! back, re-activate an earlier stable version; the history with each version's diff; the audit
//! log.

use serde_json::{json, Value};
use yew::prelude::*;

use crate::api::{self, ApiErr};
use crate::ui::{input_value, spawn, text, time, ErrorBox, Tick};
use crate::Session;

fn arm(v: &Value, name: &str) -> Html {
    let a = &v[name];
    let d = a["decisions"].as_f64().unwrap_or(0.0);
    let r = a["refusals"].as_f64().unwrap_or(0.0);
    html! { <tr><th scope="row">{ name.to_string() }</th><td class="num">{ d }</td><td class="num">{ r }</td>
    <td class="num">{ if d > 0.0 { format!("{:.2}%", 100.0 * r / d) } else { "—".into() } }</td>
    <td class="num">{ a["errors"].as_u64().unwrap_or(0) }</td></tr> }
}

#[function_component(Rollouts)]
pub fn rollouts() -> Html {
    let session = use_context::<Session>().expect("session");
    let state = use_state(|| Value::Null);
    let versions = use_state(|| Value::Null);
    let audit = use_state(Vec::<Value>::new);
    let err = use_state(|| None::<ApiErr>);
    let notice = use_state(String::new);
    let stage_version = use_state(String::new);
    let percent = use_state(|| "10".to_string());
    // The canary's filter, as comma-separated lists (empty: everyone).
    let f_apps = use_state(String::new);
    let f_devices = use_state(String::new);
    let f_countries = use_state(String::new);
    let diff = use_state(|| None::<Value>);
    let reload = use_reducer(Tick::default);

    {
        let (state, versions, audit, err, stage_version) = (
            state.clone(),
            versions.clone(),
            audit.clone(),
            err.clone(),
            stage_version.clone(),
        );
        use_effect_with(reload.0, move |_| {
            spawn(async move {
                match api::get("/admin/v1/rollout").await {
                    Ok(v) => state.set(v),
                    Err(e) => err.set(Some(e)),
                }
                if let Ok(v) = api::get("/admin/v1/rulesets").await {
                    if stage_version.is_empty() {
                        let stable = v["stable"].as_str().unwrap_or("");
                        if let Some(last) = v["versions"].as_array().and_then(|a| {
                            a.iter()
                                .rev()
                                .map(|x| text(&x["version"]))
                                .find(|x| x != stable)
                        }) {
                            stage_version.set(last);
                        }
                    }
                    versions.set(v);
                }
                if let Ok(a) = api::get("/admin/v1/audit?limit=50").await {
                    audit.set(a["entries"].as_array().cloned().unwrap_or_default());
                }
            });
        });
    }
    // Refresh the arm counts every 5 s.
    {
        let reload = reload.clone();
        use_effect_with((), move |_| {
            let i = gloo_timers::callback::Interval::new(5_000, move || reload.dispatch(()));
            move || drop(i)
        });
    }

    let act = |path: &'static str, body: Value, done: &'static str| {
        let (state, err, notice, reload) =
            (state.clone(), err.clone(), notice.clone(), reload.clone());
        move || {
            let (state, err, notice, reload, body) = (
                state.clone(),
                err.clone(),
                notice.clone(),
                reload.clone(),
                body.clone(),
            );
            spawn(async move {
                match api::post(path, &body).await {
                    Ok(v) => {
                        state.set(v);
                        err.set(None);
                        notice.set(done.to_string());
                        reload.dispatch(());
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        }
    };
    let pct: f64 = percent.parse().unwrap_or(0.0);
    let stage_shadow = {
        let f = act(
            "/admin/v1/rollout",
            json!({"version": *stage_version, "stage": "shadow"}),
            "staged in shadow",
        );
        Callback::from(move |_: MouseEvent| f())
    };
    let stage_canary = {
        let target = if state["candidate"].is_object() {
            "candidate".to_string()
        } else {
            (*stage_version).clone()
        };
        let mut body = json!({"version": target, "stage": "canary", "percent": pct});
        let filter = canary_filter(&f_apps, &f_devices, &f_countries);
        if filter.as_object().is_some_and(|o| !o.is_empty()) {
            body["filter"] = filter;
        }
        let f = act("/admin/v1/rollout", body, "canary set");
        Callback::from(move |_: MouseEvent| f())
    };
    // An earlier stable version, stable again at once (no new approval: it was approved before).
    let activate = {
        let (state, err, notice, reload) =
            (state.clone(), err.clone(), notice.clone(), reload.clone());
        Callback::from(move |v: String| {
            let (state, err, notice, reload) =
                (state.clone(), err.clone(), notice.clone(), reload.clone());
            spawn(async move {
                match api::post(
                    &format!("/admin/v1/rulesets/{}/activate", api::enc(&v)),
                    &Value::Null,
                )
                .await
                {
                    Ok(s) => {
                        state.set(s);
                        err.set(None);
                        notice.set(format!("{v} is stable again"));
                        reload.dispatch(());
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    let approve = {
        let v = text(&state["candidate"]["version"]);
        let f = act(
            "/admin/v1/rollout/approve",
            json!({"version": v}),
            "approved: the candidate is stable",
        );
        Callback::from(move |_: MouseEvent| f())
    };
    let rollback = {
        let f = act(
            "/admin/v1/rollout/rollback",
            json!({"reason": "rolled back from the console"}),
            "rolled back",
        );
        Callback::from(move |_: MouseEvent| f())
    };
    let show_diff = {
        let (diff, err) = (diff.clone(), err.clone());
        Callback::from(move |(v, against): (String, String)| {
            let (diff, err) = (diff.clone(), err.clone());
            spawn(async move {
                match api::get(&format!("/admin/v1/rulesets/{v}/diff?against={against}")).await {
                    Ok(d) => diff.set(Some(d)),
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };

    let cand = &state["candidate"];
    let has_cand = cand.is_object();
    let stable = text(&state["stable"]);
    // The approver reads what changes before approving: the diff of the candidate against stable.
    let reviewed = diff.as_ref().is_some_and(|d| {
        has_cand && text(&d["version"]) == text(&cand["version"]) && text(&d["against"]) == stable
    });
    let review = {
        let (cb, v, against) = (show_diff.clone(), text(&cand["version"]), stable.clone());
        Callback::from(move |_: MouseEvent| cb.emit((v.clone(), against.clone())))
    };
    // Versions that have been stable (approved, activated or imported): they can be again.
    let was_stable: std::collections::HashSet<String> = state["history"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|h| {
            let stable_now = matches!(
                h["action"].as_str(),
                Some("approve" | "activate" | "import")
            );
            [
                stable_now.then(|| text(&h["version"])),
                Some(text(&h["stable_before"])),
            ]
        })
        .flatten()
        .filter(|v| !v.is_empty())
        .collect();
    // Newest first, as the history lists them.
    let mut earlier: Vec<String> = Vec::new();
    for h in state["history"].as_array().into_iter().flatten() {
        for v in [text(&h["version"]), text(&h["stable_before"])] {
            if v != stable && was_stable.contains(&v) && !earlier.contains(&v) {
                earlier.push(v);
            }
        }
    }
    html! {
        <div class="rollouts">
            <ErrorBox err={(*err).clone()} />
            if !notice.is_empty() { <p class="notice" role="status" id="rollout-notice">{ (*notice).clone() }</p> }
            <section class="stages" aria-label="Stages">
                <div class="stage-card"><h2>{ "Stable" }</h2><p class="mono" id="stable-version">{ if stable.is_empty() { "none".into() } else { stable.clone() } }</p></div>
                <div class="stage-card"><h2>{ "Candidate" }</h2>
                    if has_cand {
                        <p class="mono" id="candidate-version">{ text(&cand["version"]) }</p>
                        <p id="candidate-stage">{ match cand["stage"].as_str() {
                            Some("canary") => format!("canary {}%", cand["percent"].as_f64().unwrap_or(0.0)),
                            Some(s) => s.to_string(), None => String::new() } }</p>
                        if let Some(f) = filter_text(&cand["filter"]) { <p id="candidate-filter">{ f }</p> }
                        <p class="muted">{ format!("staged by {} at {}", text(&cand["by"]), time(cand["since_ms"].as_i64().unwrap_or(0))) }</p>
                    } else {
                        <p id="candidate-version">{ "none" }</p>
                    }
                </div>
            </section>
            if state["stats"].is_object() {
                <table class="list" id="arm-counts" aria-label="Arm counts on this instance">
                    <thead><tr><th>{ "Arm" }</th><th class="num">{ "Decisions" }</th><th class="num">{ "Refused" }</th><th class="num">{ "Refused %" }</th><th class="num">{ "Errors" }</th></tr></thead>
                    <tbody>{ arm(&state["stats"], "stable") }{ arm(&state["stats"], "canary") }{ arm(&state["stats"], "shadow") }</tbody>
                </table>
            }
            if session.can("author") {
                <section class="controls" aria-label="Stage a version">
                    <h2>{ "Stage" }</h2>
                    if !has_cand {
                        <label for="stage-version">{ "Version" }</label>
                        <select id="stage-version" onchange={let s = stage_version.clone(); Callback::from(move |e: Event| s.set(input_value(&e)))}>
                            { for versions["versions"].as_array().cloned().unwrap_or_default().iter().rev().filter(|x| text(&x["version"]) != stable).map(|x| {
                                let id = text(&x["version"]);
                                html! { <option value={id.clone()} selected={id == *stage_version}>{ format!("{id} — {} ({})", text(&x["message"]), text(&x["author"])) }</option> }
                            }) }
                        </select>
                        <button id="stage-shadow" onclick={stage_shadow}>{ "Shadow" }</button>
                    }
                    <label for="canary-percent">{ "Canary %" }</label>
                    <input id="canary-percent" class="short" type="number" min="0.01" max="100" step="any" value={(*percent).clone()}
                           oninput={let p = percent.clone(); Callback::from(move |e: InputEvent| p.set(input_value(&e)))} />
                    <label for="canary-apps">{ "Only apps" }</label>
                    <input id="canary-apps" class="short" placeholder="all" value={(*f_apps).clone()}
                           oninput={let f = f_apps.clone(); Callback::from(move |e: InputEvent| f.set(input_value(&e)))} />
                    <label for="canary-devices">{ "device types" }</label>
                    <input id="canary-devices" class="short" placeholder="all" value={(*f_devices).clone()}
                           oninput={let f = f_devices.clone(); Callback::from(move |e: InputEvent| f.set(input_value(&e)))} />
                    <label for="canary-countries">{ "countries" }</label>
                    <input id="canary-countries" class="short" placeholder="all" value={(*f_countries).clone()}
                           oninput={let f = f_countries.clone(); Callback::from(move |e: InputEvent| f.set(input_value(&e)))} />
                    <button id="stage-canary" onclick={stage_canary}>{ if has_cand { "Set canary percentage" } else { "Canary" } }</button>
                    if has_cand {
                        <button id="rollback" class="danger" onclick={rollback}>{ "Roll back" }</button>
                    }
                    if has_cand {
                        <button id="review-diff" onclick={review}>{ "Diff against stable" }</button>
                    }
                    if has_cand && session.can("approver") {
                        <button id="approve" class="primary" onclick={approve} disabled={!reviewed}
                            title={if reviewed { "" } else { "Read the diff against stable first" }}>{ "Approve for stable" }</button>
                    }
                </section>
            }
            if session.can("author") && !earlier.is_empty() {
                <section class="controls" aria-label="Earlier stable versions" id="earlier-stable">
                    <h2>{ "Earlier stable" }</h2>
                    { for earlier.iter().map(|v| {
                        let (a, v) = (activate.clone(), v.clone());
                        html! { <button aria-label={format!("Make {v} stable again")}
                            onclick={let v = v.clone(); Callback::from(move |_: MouseEvent| a.emit(v.clone()))}>
                            { format!("Re-activate {v}") }</button> }
                    }) }
                </section>
            }
            <section aria-label="History">
                <h2>{ "History" }</h2>
                <table class="list" id="history">
                    <thead><tr><th>{ "When" }</th><th>{ "Who" }</th><th>{ "What" }</th><th>{ "Version" }</th><th>{ "Diff" }</th></tr></thead>
                    <tbody>
                    { for state["history"].as_array().cloned().unwrap_or_default().iter().map(|h| {
                        let (v, before) = (text(&h["version"]), text(&h["stable_before"]));
                        let cb = show_diff.clone();
                        let can_diff = !before.is_empty() && before != v;
                        html! { <tr>
                            <td>{ time(h["time_ms"].as_i64().unwrap_or(0)) }</td><td>{ text(&h["actor"]) }</td>
                            <td>{ format!("{}{}", text(&h["action"]), match h["stage"].as_str() { Some("canary") => format!(" canary {}%", h["percent"]), Some(s) => format!(" {s}"), None => String::new() }) }</td>
                            <td class="mono">{ v.clone() }</td>
                            <td>if can_diff { <button class="link" onclick={Callback::from(move |_: MouseEvent| cb.emit((v.clone(), before.clone())))}>{ "diff" }</button> }</td>
                        </tr> }
                    }) }
                    </tbody>
                </table>
                if let Some(d) = &*diff {
                    <div id="history-diff">
                        <h3>{ format!("{} against {}", text(&d["version"]), text(&d["against"])) }</h3>
                        { for d["files"].as_array().cloned().unwrap_or_default().iter().map(|f| html! {
                            <details open=true><summary>{ format!("{} ({})", text(&f["path"]), text(&f["status"])) }</summary>
                                <pre class="unified">{ for text(&f["unified"]).lines().map(|l| {
                                    let class = if l.starts_with('+') { "add" } else if l.starts_with('-') { "del" } else { "" };
                                    html! { <span class={class}>{ format!("{l}\n") }</span> }
                                }) }</pre></details>
                        }) }
                    </div>
                }
            </section>
            <section aria-label="Audit log">
                <h2>{ "Audit log" }</h2>
                <table class="list" id="audit">
                    <thead><tr><th>{ "When" }</th><th>{ "Who" }</th><th>{ "Action" }</th><th>{ "Target" }</th></tr></thead>
                    <tbody>
                    { for audit.iter().map(|a| html! { <tr>
                        <td>{ time(a["time_ms"].as_i64().unwrap_or(0)) }</td>
                        <td>{ format!("{} ({})", text(&a["actor"]), text(&a["role"])) }</td>
                        <td>{ text(&a["action"]) }</td><td class="mono">{ text(&a["target"]) }</td>
                    </tr> }) }
                    </tbody>
                </table>
            </section>
        </div>
    }
}

/// The canary filter of the three comma-separated inputs: only the lists that name something.
fn canary_filter(apps: &str, devices: &str, countries: &str) -> Value {
    let list = |s: &str| -> Vec<String> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    let mut f = serde_json::Map::new();
    for (k, v) in [
        ("apps", apps),
        ("device_types", devices),
        ("countries", countries),
    ] {
        let l = list(v);
        if !l.is_empty() {
            f.insert(k.into(), json!(l));
        }
    }
    Value::Object(f)
}

/// A candidate's canary filter as a sentence (`None` when it takes everyone).
fn filter_text(f: &Value) -> Option<String> {
    let parts: Vec<String> = [
        ("apps", "apps"),
        ("device_types", "devices"),
        ("countries", "countries"),
    ]
    .iter()
    .filter_map(|(k, name)| {
        let l: Vec<String> = f[*k].as_array()?.iter().map(text).collect();
        (!l.is_empty()).then(|| format!("{name} {}", l.join(", ")))
    })
    .collect();
    (!parts.is_empty()).then(|| format!("only {}", parts.join("; ")))
}
