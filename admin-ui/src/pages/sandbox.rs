//! Run a version against the recorded samples (regression) and the recorded traffic (backtest),
//! compared with the stable set; drill into one sample's full decision trace.

use serde_json::{json, Value};
use yew::prelude::*;

use crate::api::{self, ApiErr};
use crate::ui::{action_badge, input_value, pct, spawn, text, ErrorBox};
use crate::Session;

/// Renders a decision trace (`trace` of the trace endpoint): every step, every rule, their time.
pub fn trace_view(t: &Value) -> Html {
    let steps = t["steps"].as_array().cloned().unwrap_or_default();
    html! {
        <table class="trace" aria-label="Decision trace">
            <thead><tr><th>{ "Step / rule" }</th><th>{ "Outcome" }</th><th class="num">{ "µs" }</th></tr></thead>
            <tbody>
            { for steps.iter().map(|s| {
                let outcome = text(&s["outcome"]);
                let decided = outcome != "pass";
                html! { <>
                    <tr class={if decided { "step decided" } else { "step" }}>
                        <th scope="row">{ text(&s["step"]) }</th>
                        <td>{ outcome }</td>
                        <td class="num">{ format!("{:.1}", s["elapsed_us"].as_f64().unwrap_or(0.0)) }</td>
                    </tr>
                    { for s["rules"].as_array().cloned().unwrap_or_default().iter().map(|r| {
                        let o = text(&r["outcome"]);
                        let class = if o == "no match" || o == "not for this route" { "rule quiet" } else { "rule hit" };
                        html! { <tr class={class}>
                            <td class="indent">{ format!("{}{}", text(&r["rule"]), if r["mode"] == "shadow" { " (shadow)" } else { "" }) }</td>
                            <td>{ o }</td>
                            <td class="num">{ format!("{:.1}", r["elapsed_us"].as_f64().unwrap_or(0.0)) }</td>
                        </tr> }
                    }) }
                </> }
            }) }
            </tbody>
            <tfoot><tr><th>{ "total" }</th><td></td><td class="num">{ format!("{:.1}", t["total_us"].as_f64().unwrap_or(0.0)) }</td></tr></tfoot>
        </table>
    }
}

fn outcome(v: &Value) -> Html {
    html! { <>{ action_badge(v["action"].as_str().unwrap_or("")) }{ format!(" {} {}", text(&v["code"]),
    match (v["tier"].as_str(), v["rule"].as_str()) { (Some(t), Some(r)) => format!("{t}/{r}"), _ => String::new() }) }</> }
}

#[function_component(Sandbox)]
pub fn sandbox() -> Html {
    let session = use_context::<Session>().expect("session");
    let can_run = session.can("author");
    let versions = use_state(Vec::<Value>::new);
    let version = use_state(|| crate::hash_param("version").unwrap_or_default());
    let report = use_state(|| None::<Value>);
    let backtest = use_state(|| None::<Value>);
    let hours = use_state(|| "1".to_string());
    let trace = use_state(|| None::<Value>);
    let busy = use_state(|| false);
    let err = use_state(|| None::<ApiErr>);

    {
        let (versions, version, err) = (versions.clone(), version.clone(), err.clone());
        use_effect_with((), move |_| {
            spawn(async move {
                match api::get("/admin/v1/rulesets").await {
                    Ok(v) => {
                        let list = v["versions"].as_array().cloned().unwrap_or_default();
                        if version.is_empty() {
                            let pick = v["candidate"]["version"]
                                .as_str()
                                .map(str::to_string)
                                .or_else(|| {
                                    list.last()
                                        .and_then(|x| x["version"].as_str())
                                        .map(str::to_string)
                                });
                            version.set(pick.unwrap_or_default());
                        }
                        versions.set(list);
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        });
    }

    let run_regress = {
        let (version, report, err, busy, trace) = (
            version.clone(),
            report.clone(),
            err.clone(),
            busy.clone(),
            trace.clone(),
        );
        Callback::from(move |_: MouseEvent| {
            let (v, report, err, busy, trace) = (
                (*version).clone(),
                report.clone(),
                err.clone(),
                busy.clone(),
                trace.clone(),
            );
            busy.set(true);
            spawn(async move {
                match api::post(&format!("/admin/v1/rulesets/{v}/regress"), &json!({})).await {
                    Ok(r) => {
                        report.set(Some(r));
                        err.set(None);
                        trace.set(None);
                    }
                    Err(e) => err.set(Some(e)),
                }
                busy.set(false);
            });
        })
    };
    let run_backtest = {
        let (version, backtest, err, busy, hours) = (
            version.clone(),
            backtest.clone(),
            err.clone(),
            busy.clone(),
            hours.clone(),
        );
        Callback::from(move |_: MouseEvent| {
            let h: f64 = hours.parse().unwrap_or(1.0);
            let (v, backtest, err, busy) = (
                (*version).clone(),
                backtest.clone(),
                err.clone(),
                busy.clone(),
            );
            busy.set(true);
            spawn(async move {
                match api::post(
                    &format!("/admin/v1/rulesets/{v}/backtest"),
                    &json!({"hours": h}),
                )
                .await
                {
                    Ok(r) => {
                        backtest.set(Some(r));
                        err.set(None);
                    }
                    Err(e) => err.set(Some(e)),
                }
                busy.set(false);
            });
        })
    };
    let open_trace = {
        let (version, trace, err) = (version.clone(), trace.clone(), err.clone());
        Callback::from(move |name: String| {
            let (v, trace, err) = ((*version).clone(), trace.clone(), err.clone());
            spawn(async move {
                match api::post(
                    &format!("/admin/v1/rulesets/{v}/trace"),
                    &json!({"sample": name}),
                )
                .await
                {
                    Ok(t) => {
                        trace.set(Some(t));
                        if let Some(el) = web_sys::window()
                            .and_then(|w| w.document())
                            .and_then(|d| d.get_element_by_id("trace-panel"))
                        {
                            el.scroll_into_view();
                        }
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    let sample_link = |name: &str| {
        let cb = open_trace.clone();
        let n = name.to_string();
        html! { <button class="link sample" onclick={Callback::from(move |_: MouseEvent| cb.emit(n.clone()))}>{ name.to_string() }</button> }
    };

    html! {
        <div class="sandbox">
            <div class="toolbar">
                <label for="sandbox-version">{ "Version" }</label>
                <select id="sandbox-version" onchange={let v = version.clone(); Callback::from(move |e: Event| v.set(input_value(&e)))}>
                    { for versions.iter().rev().map(|x| {
                        let id = text(&x["version"]);
                        html! { <option value={id.clone()} selected={id == *version}>
                            { format!("{id} — {} ({})", text(&x["message"]), text(&x["author"])) }</option> }
                    }) }
                </select>
                if can_run {
                    <button id="run-regress" onclick={run_regress} disabled={*busy || version.is_empty()}>{ "Run regression" }</button>
                    <label for="bt-hours">{ "Backtest hours" }</label>
                    <input id="bt-hours" class="short" type="number" min="0.01" max="168" step="any" value={(*hours).clone()}
                           oninput={let h = hours.clone(); Callback::from(move |e: InputEvent| h.set(input_value(&e)))} />
                    <button id="run-backtest" onclick={run_backtest} disabled={*busy || version.is_empty()}>{ "Run backtest" }</button>
                } else {
                    <span class="muted">{ "Running needs the author role." }</span>
                }
                if *busy { <span role="status">{ "running…" }</span> }
            </div>
            <ErrorBox err={(*err).clone()} />
            if let Some(r) = &*report {
                <section id="regress-report" aria-label="Regression">
                    <h2>{ "Regression" }</h2>
                    <div class="kpis">
                        <div class="kpi"><span class="n" id="rate-detection">{ pct(r["detection"]["hits"].as_f64().unwrap_or(0.0) / r["detection"]["total"].as_f64().unwrap_or(1.0).max(1.0)) }</span>
                            <span>{ format!("detection ({}/{})", r["detection"]["hits"], r["detection"]["total"]) }</span></div>
                        <div class="kpi"><span class="n" id="rate-fp">{ pct(r["false_positives"]["hits"].as_f64().unwrap_or(0.0) / r["false_positives"]["total"].as_f64().unwrap_or(1.0).max(1.0)) }</span>
                            <span>{ format!("false positives ({}/{})", r["false_positives"]["hits"], r["false_positives"]["total"]) }</span></div>
                        <div class="kpi"><span class="n" id="regress-passed">{ format!("{}/{}", r["passed"], r["samples"]) }</span><span>{ "samples as expected" }</span></div>
                        <div class="kpi"><span class="n" id="regress-changes">{ r["changes"].as_array().map_or(0, |a| a.len()) }</span><span>{ format!("changed vs {}", text(&r["against"])) }</span></div>
                    </div>
                    <h3>{ "Samples that change" }</h3>
                    if r["changes"].as_array().is_none_or(|a| a.is_empty()) { <p class="muted">{ "None: every sample gets the same decision as with stable." }</p> }
                    <table class="list" id="changes">
                        <thead><tr><th>{ "Sample" }</th><th>{ "Kind" }</th><th>{ "This version" }</th><th>{ "Stable" }</th></tr></thead>
                        <tbody>
                        { for r["changes"].as_array().cloned().unwrap_or_default().iter().map(|c| html! {
                            <tr><td>{ sample_link(c["name"].as_str().unwrap_or("")) }</td><td>{ text(&c["kind"]) }</td>
                                <td>{ outcome(&c["before"]) }</td><td>{ outcome(&c["after"]) }</td></tr>
                        }) }
                        </tbody>
                    </table>
                    <h3>{ "Failing samples" }</h3>
                    if r["failures"].as_array().is_none_or(|a| a.is_empty()) { <p class="muted">{ "None." }</p> }
                    <table class="list" id="failures">
                        <thead><tr><th>{ "Sample" }</th><th>{ "Kind" }</th><th>{ "Expected" }</th><th>{ "Got" }</th></tr></thead>
                        <tbody>
                        { for r["failures"].as_array().cloned().unwrap_or_default().iter().map(|f| html! {
                            <tr><td>{ sample_link(f["name"].as_str().unwrap_or("")) }</td><td>{ text(&f["kind"]) }</td>
                                <td>{ text(&f["expect"]["action"]) }{ " " }{ text(&f["expect"]["code"]) }</td><td>{ outcome(&f["got"]) }</td></tr>
                        }) }
                        </tbody>
                    </table>
                </section>
            }
            if let Some(t) = &*trace {
                <section id="trace-panel" aria-label="Sample trace" tabindex="-1">
                    <h2>{ format!("Trace of sample {}", text(&t["sample"]["name"])) }</h2>
                    <p>{ text(&t["sample"]["description"]) }</p>
                    <p>{ "Outcome: " }{ outcome(&t["result"]["got"]) }{ format!(" — expected {} {}", text(&t["result"]["expect"]["action"]), text(&t["result"]["expect"]["code"])) }</p>
                    <details><summary>{ "Request" }</summary>
                        <pre class="json">{ serde_json::to_string_pretty(&t["sample"]["request"]).unwrap_or_default() }</pre>
                        if t["sample"]["before"].as_array().is_some_and(|a| !a.is_empty()) {
                            <p>{ format!("After {} earlier request(s) that set up state.", t["sample"]["before"].as_array().map_or(0, |a| a.len())) }</p>
                        }
                    </details>
                    { trace_view(&t["trace"]) }
                </section>
            }
            if let Some(b) = &*backtest {
                <section id="backtest-report" aria-label="Backtest">
                    <h2>{ "Backtest" }</h2>
                    <div class="kpis">
                        <div class="kpi"><span class="n" id="bt-rows">{ b["rows"].as_u64().unwrap_or(0) }</span><span>{ "recorded decisions" }</span></div>
                        <div class="kpi"><span class="n" id="bt-replayed">{ b["replayed"].as_u64().unwrap_or(0) }</span><span>{ "replayed" }</span></div>
                        <div class="kpi"><span class="n" id="bt-changed">{ b["changed"].as_u64().unwrap_or(0) }</span><span>{ "would change" }</span></div>
                    </div>
                    <table class="list">
                        <thead><tr><th>{ "Change" }</th><th class="num">{ "Decisions" }</th></tr></thead>
                        <tbody>{ for b["by_action"].as_object().cloned().unwrap_or_default().iter().map(|(k, v)| html! {
                            <tr><td>{ k.clone() }</td><td class="num">{ v.to_string() }</td></tr> }) }</tbody>
                    </table>
                    <table class="list">
                        <thead><tr><th>{ "Rule" }</th><th class="num">{ "Gains" }</th><th class="num">{ "Losses" }</th></tr></thead>
                        <tbody>{ for b["by_rule"].as_object().cloned().unwrap_or_default().iter().map(|(k, v)| html! {
                            <tr><td>{ k.clone() }</td><td class="num">{ v["gains"].to_string() }</td><td class="num">{ v["losses"].to_string() }</td></tr> }) }</tbody>
                    </table>
                    <table class="list">
                        <thead><tr><th>{ "Route" }</th><th>{ "Recorded" }</th><th>{ "Would be" }</th></tr></thead>
                        <tbody>{ for b["examples"].as_array().cloned().unwrap_or_default().iter().map(|x| html! {
                            <tr><td>{ text(&x["route"]) }</td><td>{ text(&x["before"]) }</td><td>{ text(&x["after"]) }</td></tr> }) }</tbody>
                    </table>
                </section>
            }
        </div>
    }
}
