//! The running configuration (read-only: the configuration file owns it), the apps' signing
//! keys and the log level (both changeable by an admin at run time).

use serde_json::{json, Value};
use yew::prelude::*;

use crate::api::{self, ApiErr};
use crate::ui::{input_value, spawn, text, ErrorBox};
use crate::Session;

fn kv_table(id: &str, v: &Value) -> Html {
    html! {
        <table class="list kv" id={id.to_string()}>
            <tbody>
            { for v.as_object().cloned().unwrap_or_default().iter().map(|(k, x)| html! {
                <tr><th scope="row">{ k.clone() }</th><td class="mono">{ match x {
                    Value::Object(_) | Value::Array(_) => serde_json::to_string(x).unwrap_or_default(),
                    other => text(other),
                } }</td></tr>
            }) }
            </tbody>
        </table>
    }
}

#[function_component(Settings)]
pub fn settings() -> Html {
    let session = use_context::<Session>().expect("session");
    let s = use_state(|| Value::Null);
    let err = use_state(|| None::<ApiErr>);
    let level = use_state(String::new);
    let notice = use_state(String::new);
    {
        let (s, err, level) = (s.clone(), err.clone(), level.clone());
        use_effect_with((), move |_| {
            spawn(async move {
                match api::get("/admin/v1/settings").await {
                    Ok(v) => {
                        level.set(text(&v["log_level"]));
                        s.set(v);
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        });
    }
    let set_level = {
        let (level, err, notice) = (level.clone(), err.clone(), notice.clone());
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            let body = json!({"level": *level});
            let (err, notice) = (err.clone(), notice.clone());
            spawn(async move {
                match api::put("/admin/v1/settings/log-level", &body).await {
                    Ok(v) => {
                        notice.set(format!("log level is now {}", text(&v["level"])));
                        err.set(None);
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    html! {
        <div class="settings">
            <p class="muted">{ "These come from the configuration file and RAMPART_* environment variables; admins can add and retire signing keys and change the log level at run time. Secrets are never shown (a generated key's secret once, when it is made)." }</p>
            <ErrorBox err={(*err).clone()} />
            <section aria-label="Apps">
                <h2>{ "Apps and windows" }</h2>
                <table class="list" id="settings-apps">
                    <thead><tr><th>{ "App" }</th><th class="num">{ "Window (± ms)" }</th></tr></thead>
                    <tbody>{ for s["apps"].as_array().cloned().unwrap_or_default().iter().map(|a| html! {
                        <tr><td>{ text(&a["id"]) }</td><td class="num">{ text(&a["window_ms"]) }</td></tr> }) }</tbody>
                </table>
                <h3>{ "Duplicate-submission windows" }</h3>
                { kv_table("settings-fingerprint", &s["fingerprint"]) }
                if s["routes"].as_array().is_some_and(|r| !r.is_empty()) {
                    <table class="list" id="settings-routes">
                        <thead><tr><th>{ "App" }</th><th>{ "Route" }</th><th class="num">{ "Window (ms)" }</th></tr></thead>
                        <tbody>{ for s["routes"].as_array().cloned().unwrap_or_default().iter().map(|r| html! {
                            <tr><td>{ text(&r["app"]) }</td><td>{ text(&r["path"]) }</td><td class="num">{ text(&r["dedup_window_ms"]) }</td></tr> }) }</tbody>
                    </table>
                }
            </section>
            if session.can("admin") {
                if let Some(apps) = s["apps"].as_array().filter(|a| !a.is_empty()) {
                    <crate::pages::keys::SigningKeys apps={apps.iter().map(|a| text(&a["id"])).collect::<Vec<_>>()} />
                }
            } else {
                <p class="muted" id="keys-admin-only">{ "Signing keys are listed and changed by admins." }</p>
            }
            <section aria-label="State">
                <h2>{ "State and store policies" }</h2>
                { kv_table("settings-state", &s["state"]) }
                <h3>{ "On store error" }</h3>
                { kv_table("settings-policies", &s["state"]["on_store_error"]) }
            </section>
            <section aria-label="Rules"><h2>{ "Rules" }</h2>{ kv_table("settings-rules", &s["rules"]) }</section>
            <section aria-label="Decision log"><h2>{ "Decision log" }</h2>{ kv_table("settings-log", &s["decision_log"]) }</section>
            <section aria-label="Server"><h2>{ "Server limits" }</h2>{ kv_table("settings-server", &s["server"]) }</section>
            <section aria-label="Admin"><h2>{ "Admin" }</h2>{ kv_table("settings-admin", &s["admin"]) }</section>
            <section aria-label="Log level">
                <h2>{ "Log level" }</h2>
                if session.can("admin") {
                    <form onsubmit={set_level} class="filters">
                        <label for="log-level">{ "Filter" }</label>
                        <input id="log-level" value={(*level).clone()} oninput={let l = level.clone(); Callback::from(move |e: InputEvent| l.set(input_value(&e)))} />
                        <button type="submit" id="log-level-set">{ "Set" }</button>
                    </form>
                    if !notice.is_empty() { <p role="status">{ (*notice).clone() }</p> }
                } else {
                    <p class="mono">{ (*level).clone() }</p>
                }
            </section>
        </div>
    }
}
