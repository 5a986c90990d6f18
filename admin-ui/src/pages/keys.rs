//! An app's signing keys, for admins: each key with its validity, state and use on this instance,
//! pending and retired ids; add a key (the generated secret is shown once, here, and never
//! again) and retire one (two clicks: retiring is for good).

use serde_json::{json, Value};
use yew::prelude::*;

use crate::api::{self, enc, ApiErr};
use crate::ui::{input_value, spawn, text, time, ErrorBox, Tick};

#[derive(Properties, PartialEq)]
pub struct Props {
    /// The configured apps.
    pub apps: Vec<String>,
}

/// `datetime-local` input text (local time) as Unix ms.
fn local_ms(v: &str) -> Option<i64> {
    if v.trim().is_empty() {
        return None;
    }
    let ms = js_sys::Date::new(&wasm_bindgen::JsValue::from_str(v)).get_time();
    ms.is_finite().then_some(ms as i64)
}

fn when(v: &Value) -> String {
    v.as_i64().map(time).unwrap_or_else(|| "—".into())
}

#[function_component(SigningKeys)]
pub fn signing_keys(p: &Props) -> Html {
    let app = use_state(|| p.apps.first().cloned().unwrap_or_default());
    let listing = use_state(|| Value::Null);
    let err = use_state(|| None::<ApiErr>);
    let reload = use_reducer(Tick::default);
    let new_id = use_state(String::new);
    let from = use_state(String::new);
    let until = use_state(String::new);
    let secret = use_state(|| None::<(String, String)>);
    let confirm = use_state(|| None::<String>);
    let notice = use_state(String::new);

    {
        let (listing, err, app) = (listing.clone(), err.clone(), (*app).clone());
        use_effect_with((reload.0, app.clone()), move |_| {
            spawn(async move {
                if app.is_empty() {
                    return;
                }
                match api::get(&format!("/admin/v1/apps/{}/keys", enc(&app))).await {
                    Ok(v) => listing.set(v),
                    Err(e) => err.set(Some(e)),
                }
            });
        });
    }
    let add = {
        let (app, new_id, from, until, err, reload, secret, notice) = (
            app.clone(),
            new_id.clone(),
            from.clone(),
            until.clone(),
            err.clone(),
            reload.clone(),
            secret.clone(),
            notice.clone(),
        );
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            let mut body = json!({});
            if !new_id.trim().is_empty() {
                body["id"] = json!(new_id.trim());
            }
            if let Some(ms) = local_ms(&from) {
                body["not_before_ms"] = json!(ms);
            }
            if let Some(ms) = local_ms(&until) {
                body["not_after_ms"] = json!(ms);
            }
            let (app, err, reload, secret, new_id, notice) = (
                (*app).clone(),
                err.clone(),
                reload.clone(),
                secret.clone(),
                new_id.clone(),
                notice.clone(),
            );
            spawn(async move {
                match api::post(&format!("/admin/v1/apps/{}/keys", enc(&app)), &body).await {
                    Ok(v) => {
                        err.set(None);
                        new_id.set(String::new());
                        notice.set(String::new());
                        secret.set(
                            v["secret"]
                                .as_str()
                                .map(|s| (text(&v["id"]), s.to_string())),
                        );
                        reload.dispatch(());
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    let act = {
        let (app, err, reload, confirm, notice) = (
            app.clone(),
            err.clone(),
            reload.clone(),
            confirm.clone(),
            notice.clone(),
        );
        Callback::from(move |(id, approve): (String, bool)| {
            let (app, err, reload, confirm, notice) = (
                (*app).clone(),
                err.clone(),
                reload.clone(),
                confirm.clone(),
                notice.clone(),
            );
            spawn(async move {
                let path = format!("/admin/v1/apps/{}/keys/{}", enc(&app), enc(&id));
                let r = if approve {
                    api::post(&format!("{path}/approve"), &json!({})).await
                } else {
                    api::delete(&path).await
                };
                match r {
                    Ok(v) => {
                        err.set(None);
                        confirm.set(None);
                        notice.set(match v["warning"].as_str() {
                            Some(w) => w.to_string(),
                            None if approve => format!("key {id} approved"),
                            None => format!("key {id} retired on every instance"),
                        });
                        reload.dispatch(());
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    let keys = listing["keys"].as_array().cloned().unwrap_or_default();
    let retired = listing["retired"].as_array().cloned().unwrap_or_default();
    html! {
        <section aria-label="Signing keys" id="signing-keys">
            <h2>{ "Signing keys" }</h2>
            <p class="muted">{ "Add a key, ship clients that sign with it (and the old one during the roll), watch the old key's uses fall to zero, then retire it. Uses and last use are this instance's; every instance applies a change within the admin poll interval." }</p>
            <ErrorBox err={(*err).clone()} />
            if let Some((id, s)) = &*secret {
                <div class="notice secret-once" role="alert" id="new-key-secret">
                    <p>{ format!("The secret of key {id}, shown this once — copy it now, it cannot be read back:") }</p>
                    <code class="mono" id="new-key-secret-value">{ s.clone() }</code>
                    <p><button id="new-key-secret-done" onclick={let s = secret.clone(); Callback::from(move |_: MouseEvent| s.set(None))}>{ "I have copied it" }</button></p>
                </div>
            }
            if !notice.is_empty() { <p class="notice" role="status" id="keys-notice">{ (*notice).clone() }</p> }
            <form class="filters" onsubmit={add} aria-label="Add a key">
                <span class="field"><label for="k-app">{ "App" }</label>
                <select id="k-app" onchange={let a = app.clone(); let s = secret.clone(); Callback::from(move |e: Event| { s.set(None); a.set(input_value(&e)) })}>
                    { for p.apps.iter().map(|a| html! { <option value={a.clone()} selected={*app == *a}>{ a.clone() }</option> }) }
                </select></span>
                <span class="field"><label for="k-id">{ "Key id (empty: generated)" }</label>
                <input id="k-id" value={(*new_id).clone()} oninput={let v = new_id.clone(); Callback::from(move |e: InputEvent| v.set(input_value(&e)))} /></span>
                <span class="field"><label for="k-from">{ "Valid from (empty: now)" }</label>
                <input id="k-from" type="datetime-local" value={(*from).clone()} oninput={let v = from.clone(); Callback::from(move |e: InputEvent| v.set(input_value(&e)))} /></span>
                <span class="field"><label for="k-until">{ "Valid until (empty: no end)" }</label>
                <input id="k-until" type="datetime-local" value={(*until).clone()} oninput={let v = until.clone(); Callback::from(move |e: InputEvent| v.set(input_value(&e)))} /></span>
                <button type="submit" id="k-add">{ "Add key" }</button>
            </form>
            <table class="list" id="keys-table">
                <thead><tr><th>{ "Key" }</th><th>{ "Source" }</th><th>{ "State" }</th><th>{ "Valid from" }</th><th>{ "Valid until" }</th>
                    <th class="num">{ "Uses" }</th><th>{ "Last use" }</th><th></th></tr></thead>
                <tbody>
                { for keys.iter().map(|k| {
                    let id = text(&k["id"]);
                    let state = text(&k["state"]);
                    let asking = confirm.as_deref() == Some(id.as_str());
                    let (act, act2, confirm, confirm2) = (act.clone(), act.clone(), confirm.clone(), confirm.clone());
                    let (id2, id3, id4) = (id.clone(), id.clone(), id.clone());
                    html! { <tr class={if state == "expired" { "expired" } else { "" }} data-key={id.clone()}>
                        <td class="mono">{ id.clone() }</td><td>{ text(&k["source"]) }</td><td class="key-state">{ state.clone() }</td>
                        <td>{ when(&k["not_before_ms"]) }</td><td>{ when(&k["not_after_ms"]) }</td>
                        <td class="num key-uses">{ text(&k["uses"]) }</td><td class="key-last-use">{ when(&k["last_used_ms"]) }</td>
                        <td>
                            if state == "pending" {
                                <button class="link" aria-label={format!("Approve {id}")} onclick={Callback::from(move |_: MouseEvent| act.emit((id2.clone(), true)))}>{ "Approve" }</button>
                            }
                            if asking {
                                <button class="danger" aria-label={format!("Yes, retire {id}")} id={format!("retire-confirm-{id}")}
                                    onclick={Callback::from(move |_: MouseEvent| act2.emit((id3.clone(), false)))}>{ "Yes, retire for good" }</button>
                                <button class="link" onclick={Callback::from(move |_: MouseEvent| confirm2.set(None))}>{ "Cancel" }</button>
                            } else {
                                <button class="link danger" aria-label={format!("Retire {id}")} id={format!("retire-{id}")}
                                    onclick={Callback::from(move |_: MouseEvent| confirm.set(Some(id4.clone())))}>{ "Retire" }</button>
                            }
                        </td>
                    </tr> }
                }) }
                </tbody>
            </table>
            if !retired.is_empty() {
                <h3>{ "Retired" }</h3>
                <ul id="keys-retired">
                { for retired.iter().map(|r| html! {
                    <li><span class="mono">{ text(&r["id"]) }</span>{ format!(" — {} by {}", when(&r["retired_ms"]), text(&r["retired_by"])) }</li>
                }) }
                </ul>
            }
        </section>
    }
}
