//! Block and allow lists: entries by list, add (with an optional lifetime) and remove.

use serde_json::{json, Value};
use yew::prelude::*;

use crate::api::{self, ApiErr};
use crate::ui::{input_value, spawn, text, time, ErrorBox, Tick};
use crate::Session;

#[function_component(Lists)]
pub fn lists() -> Html {
    let session = use_context::<Session>().expect("session");
    let entries = use_state(Vec::<Value>::new);
    let err = use_state(|| None::<ApiErr>);
    let reload = use_reducer(Tick::default);
    let list = use_state(|| "block".to_string());
    let kind = use_state(|| "ip".to_string());
    let value = use_state(String::new);
    let ttl = use_state(String::new);
    let note = use_state(String::new);

    {
        let (entries, err) = (entries.clone(), err.clone());
        use_effect_with(reload.0, move |_| {
            spawn(async move {
                match api::get("/admin/v1/lists").await {
                    Ok(v) => entries.set(v["entries"].as_array().cloned().unwrap_or_default()),
                    Err(e) => err.set(Some(e)),
                }
            });
        });
    }
    let add = {
        let (list, kind, value, ttl, note, err, reload) = (
            list.clone(),
            kind.clone(),
            value.clone(),
            ttl.clone(),
            note.clone(),
            err.clone(),
            reload.clone(),
        );
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            let mut body =
                json!({"list": *list, "kind": *kind, "value": value.trim(), "note": *note});
            if let Ok(min) = ttl.trim().parse::<f64>() {
                body["ttl_ms"] = json!((min * 60_000.0) as i64);
            }
            let (err, reload, value) = (err.clone(), reload.clone(), value.clone());
            spawn(async move {
                match api::post("/admin/v1/lists", &body).await {
                    Ok(_) => {
                        err.set(None);
                        value.set(String::new());
                        reload.dispatch(());
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    let remove = {
        let (err, reload) = (err.clone(), reload.clone());
        Callback::from(move |id: u64| {
            let (err, reload) = (err.clone(), reload.clone());
            spawn(async move {
                match api::delete(&format!("/admin/v1/lists/{id}")).await {
                    Ok(_) => {
                        err.set(None);
                        reload.dispatch(());
                    }
                    Err(e) => err.set(Some(e)),
                }
            });
        })
    };
    let can_edit = session.can("author");
    let table = |which: &'static str| {
        let rows: Vec<&Value> = entries.iter().filter(|e| e["list"] == which).collect();
        html! {
            <section aria-label={format!("{which} list")}>
                <h2>{ if which == "block" { "Block list" } else { "Allow list" } }</h2>
                <table class="list" id={format!("list-{which}")}>
                    <thead><tr><th>{ "Kind" }</th><th>{ "Value" }</th><th>{ "Note" }</th><th>{ "By" }</th><th>{ "Expires" }</th><th></th></tr></thead>
                    <tbody>
                    { for rows.iter().map(|e| {
                        let id = e["id"].as_u64().unwrap_or(0);
                        let cb = remove.clone();
                        html! { <tr class={if e["expired"] == true { "expired" } else { "" }}>
                            <td>{ text(&e["kind"]) }</td><td class="mono">{ text(&e["value"]) }</td><td>{ text(&e["note"]) }</td>
                            <td>{ text(&e["by"]) }</td>
                            <td>{ match e["expires_ms"].as_i64() { Some(ms) => format!("{}{}", time(ms), if e["expired"] == true { " (expired)" } else { "" }), None => "never".into() } }</td>
                            <td>if can_edit { <button class="link danger" aria-label={format!("Remove {}", text(&e["value"]))}
                                onclick={Callback::from(move |_: MouseEvent| cb.emit(id))}>{ "Remove" }</button> }</td>
                        </tr> }
                    }) }
                    </tbody>
                </table>
            </section>
        }
    };
    html! {
        <div class="lists">
            <ErrorBox err={(*err).clone()} />
            if can_edit {
                <form class="filters" onsubmit={add} aria-label="Add an entry">
                    <span class="field"><label for="l-list">{ "List" }</label>
                    <select id="l-list" onchange={let l = list.clone(); Callback::from(move |e: Event| l.set(input_value(&e)))}>
                        <option value="block" selected={*list == "block"}>{ "block" }</option>
                        <option value="allow" selected={*list == "allow"}>{ "allow" }</option>
                    </select></span>
                    <span class="field"><label for="l-kind">{ "Kind" }</label>
                    <select id="l-kind" onchange={let k = kind.clone(); Callback::from(move |e: Event| k.set(input_value(&e)))}>
                        { for ["ip", "user", "device", "ja3", "ua"].iter().map(|k| html! { <option value={*k} selected={*kind == *k}>{ *k }</option> }) }
                    </select></span>
                    <span class="field"><label for="l-value">{ "Value" }</label>
                    <input id="l-value" required=true value={(*value).clone()} oninput={let v = value.clone(); Callback::from(move |e: InputEvent| v.set(input_value(&e)))} /></span>
                    <span class="field"><label for="l-ttl">{ "Lifetime (minutes, empty = forever)" }</label>
                    <input id="l-ttl" class="short" type="number" min="1" value={(*ttl).clone()} oninput={let t = ttl.clone(); Callback::from(move |e: InputEvent| t.set(input_value(&e)))} /></span>
                    <span class="field"><label for="l-note">{ "Note" }</label>
                    <input id="l-note" value={(*note).clone()} oninput={let n = note.clone(); Callback::from(move |e: InputEvent| n.set(input_value(&e)))} /></span>
                    <button type="submit" id="l-add">{ "Add" }</button>
                </form>
            }
            { table("block") }
            { table("allow") }
        </div>
    }
}
