//! Browse the live rule set by tier, edit a draft of it, validate the draft (problems shown at
//! their line), compare a file side by side with the live version, and store the draft as a new
//! version for the sandbox and a rollout.

use std::collections::BTreeMap;

use serde_json::{json, Value};
use similar::{ChangeTag, TextDiff};
use yew::prelude::*;

use crate::api::{self, ApiErr};
use crate::editor::{goto_line, Editor, Problem};
use crate::ui::{input_value, spawn, ErrorBox};
use crate::Session;

const TIERS: [&str; 4] = ["edge", "gateway", "business", "lists"];

#[derive(Clone, PartialEq)]
struct FileProblem {
    file: String,
    line: usize,
    column: usize,
    message: String,
}

fn problems_of(v: &Value) -> Vec<FileProblem> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|p| FileProblem {
                    file: p["file"].as_str().unwrap_or("").into(),
                    line: p["line"].as_u64().unwrap_or(0) as usize,
                    column: p["column"].as_u64().unwrap_or(0) as usize,
                    message: p["message"].as_str().unwrap_or("").into(),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[function_component(Rules)]
pub fn rules() -> Html {
    let session = use_context::<Session>().expect("session");
    let can_edit = session.can("author");
    let live = use_state(BTreeMap::<String, String>::new);
    let live_version = use_state(String::new);
    let draft = use_state(BTreeMap::<String, String>::new);
    let selected = use_state(String::new);
    let tier = use_state(|| "edge".to_string());
    let problems = use_state(Vec::<FileProblem>::new);
    let status = use_state(String::new);
    let err = use_state(|| None::<ApiErr>);
    let show_diff = use_state(|| false);
    let message = use_state(String::new);
    let new_name = use_state(String::new);
    let saved = use_state(|| None::<String>);

    {
        let (live, live_version, draft, selected, err) = (
            live.clone(),
            live_version.clone(),
            draft.clone(),
            selected.clone(),
            err.clone(),
        );
        use_effect_with((), move |_| {
            spawn(async move {
                match api::get("/admin/v1/rulesets/stable").await {
                    Ok(v) => {
                        let files: BTreeMap<String, String> =
                            serde_json::from_value(v["sources"].clone()).unwrap_or_default();
                        live_version.set(v["version"].as_str().unwrap_or("").into());
                        selected.set(
                            files
                                .keys()
                                .find(|k| k.starts_with("edge/"))
                                .cloned()
                                .unwrap_or_default(),
                        );
                        draft.set(files.clone());
                        live.set(files);
                    }
                    Err(e) if e.code == "VERSION_NOT_FOUND" => {}
                    Err(e) => err.set(Some(e)),
                }
            });
        });
    }

    let sel = (*selected).clone();
    let text = draft.get(&sel).cloned().unwrap_or_default();
    let on_change = {
        let (draft, sel, status) = (draft.clone(), sel.clone(), status.clone());
        Callback::from(move |t: String| {
            let mut d = (*draft).clone();
            d.insert(sel.clone(), t);
            draft.set(d);
            status.set("edited, not validated".into());
        })
    };
    let validate = {
        let (draft, problems, status, err) =
            (draft.clone(), problems.clone(), status.clone(), err.clone());
        Callback::from(move |_: MouseEvent| {
            let body = json!({ "files": *draft });
            let (problems, status, err) = (problems.clone(), status.clone(), err.clone());
            status.set("validating…".into());
            spawn(async move {
                match api::post("/admin/v1/rulesets/validate", &body).await {
                    Ok(v) => {
                        let ps = problems_of(&v["problems"]);
                        status.set(if v["valid"].as_bool() == Some(true) {
                            format!(
                                "valid: {} rules, version {}",
                                v["rules"].as_array().map_or(0, |a| a.len()),
                                v["version"].as_str().unwrap_or("")
                            )
                        } else {
                            format!("{} problem(s)", ps.len())
                        });
                        problems.set(ps);
                        err.set(None);
                    }
                    Err(e) => {
                        status.set(String::new());
                        err.set(Some(e));
                    }
                }
            });
        })
    };
    let save = {
        let (draft, message, problems, status, err, saved) = (
            draft.clone(),
            message.clone(),
            problems.clone(),
            status.clone(),
            err.clone(),
            saved.clone(),
        );
        Callback::from(move |_: MouseEvent| {
            let body = json!({ "files": *draft, "message": *message });
            let (problems, status, err, saved) =
                (problems.clone(), status.clone(), err.clone(), saved.clone());
            spawn(async move {
                match api::post("/admin/v1/rulesets", &body).await {
                    Ok(v) => {
                        let version = v["version"].as_str().unwrap_or("").to_string();
                        status.set(if v["created"].as_bool() == Some(true) {
                            format!("stored as version {version}")
                        } else {
                            format!("already stored as version {version}")
                        });
                        problems.set(Vec::new());
                        saved.set(Some(version));
                        err.set(None);
                    }
                    Err(e) => {
                        if e.code == "RULESET_INVALID" {
                            problems.set(problems_of(&e.details));
                        }
                        err.set(Some(e));
                    }
                }
            });
        })
    };
    let add_file = {
        let (draft, selected, new_name, tier) = (
            draft.clone(),
            selected.clone(),
            new_name.clone(),
            tier.clone(),
        );
        let owner = session.user.clone();
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            let name = new_name.trim().to_string();
            if name.is_empty() {
                return;
            }
            let path = if name.contains('/') {
                name
            } else {
                format!("{}/{}", *tier, name)
            };
            let mut d = (*draft).clone();
            let stem = path
                .rsplit('/')
                .next()
                .unwrap_or("")
                .trim_end_matches(".rhai")
                .to_string();
            d.entry(path.clone()).or_insert_with(|| {
                if path.ends_with(".rhai") {
                    format!("//! name: {stem}\n//! priority: 50\n//! owner: {owner}\n//! description: \n\n")
                } else {
                    String::new()
                }
            });
            draft.set(d);
            selected.set(path);
            new_name.set(String::new());
        })
    };

    let files_in_tier: Vec<String> = draft
        .keys()
        .filter(|k| k.starts_with(&format!("{}/", *tier)))
        .cloned()
        .collect();
    let file_problems: Vec<Problem> = problems
        .iter()
        .filter(|p| p.file == sel)
        .map(|p| Problem {
            line: p.line,
            column: p.column,
            message: p.message.clone(),
        })
        .collect();
    let changed: Vec<&String> = draft
        .keys()
        .chain(live.keys())
        .filter(|k| draft.get(*k) != live.get(*k))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();

    html! {
        <div class="rules">
            <p class="muted">{ format!("Live (stable) version: {}", if live_version.is_empty() { "none" } else { live_version.as_str() }) }</p>
            <div class="tabs" role="tablist" aria-label="Tiers">
                { for TIERS.iter().map(|t| {
                    let active = *tier == *t;
                    let onclick = { let tier = tier.clone(); let t = t.to_string(); Callback::from(move |_: MouseEvent| tier.set(t.clone())) };
                    html! { <button role="tab" aria-selected={active.to_string()} id={format!("tier-{t}")}
                                    class={if active { "tab active" } else { "tab" }} {onclick}>{ *t }</button> }
                }) }
            </div>
            <div class="split">
                <aside class="files" aria-label="Files">
                    <ul>
                    { for files_in_tier.iter().map(|f| {
                        let onclick = { let s = selected.clone(); let f = f.clone(); Callback::from(move |_: MouseEvent| s.set(f.clone())) };
                        let mark = if changed.contains(&f) { " •" } else { "" };
                        html! { <li><button class={if *f == sel { "file active" } else { "file" }} {onclick}
                                            aria-current={(*f == sel).then_some("true")}>
                                    { format!("{}{mark}", f.split_once('/').map_or(f.as_str(), |x| x.1)) }</button></li> }
                    }) }
                    </ul>
                    if can_edit {
                        <form onsubmit={add_file} class="new-file">
                            <label for="new-file">{ "New file" }</label>
                            <input id="new-file" placeholder="name.rhai" value={(*new_name).clone()}
                                   oninput={let n = new_name.clone(); Callback::from(move |e: InputEvent| n.set(input_value(&e)))} />
                            <button type="submit" id="new-file-add">{ "Add" }</button>
                        </form>
                    }
                </aside>
                <section class="edit" aria-label="Editor">
                    <div class="toolbar">
                        <strong id="current-file">{ &sel }</strong>
                        <label class="check"><input type="checkbox" id="show-diff" checked={*show_diff}
                            onchange={let d = show_diff.clone(); Callback::from(move |_: Event| d.set(!*d))} />{ " Side by side with live" }</label>
                        if can_edit {
                            <button id="validate" onclick={validate}>{ "Validate" }</button>
                        }
                        <span class="status" id="rules-status" role="status">{ (*status).clone() }</span>
                    </div>
                    if *show_diff {
                        { side_by_side(live.get(&sel).map(String::as_str).unwrap_or(""), &text) }
                    } else {
                        <Editor value={AttrValue::from(text.clone())} {on_change} problems={file_problems}
                                label={format!("Rule file {sel}")} readonly={!can_edit} />
                    }
                    if !problems.is_empty() {
                        <ul class="problems" id="problems" aria-label="Problems">
                            { for problems.iter().map(|p| {
                                let onclick = {
                                    let (selected, file, line) = (selected.clone(), p.file.clone(), p.line);
                                    Callback::from(move |_: MouseEvent| {
                                        selected.set(file.clone());
                                        gloo_timers::callback::Timeout::new(50, move || goto_line(line)).forget();
                                    })
                                };
                                html! { <li><button class="link" {onclick}>{ format!("{}:{}:{}", p.file, p.line, p.column) }</button>{ format!(" {}", p.message) }</li> }
                            }) }
                        </ul>
                    }
                    <ErrorBox err={(*err).clone()} />
                    if can_edit {
                        <div class="save">
                            <label for="save-message">{ "What the change is for" }</label>
                            <input id="save-message" value={(*message).clone()}
                                   oninput={let m = message.clone(); Callback::from(move |e: InputEvent| m.set(input_value(&e)))} />
                            <button id="save" onclick={save} disabled={changed.is_empty()}>{ format!("Store as a new version ({} file(s) changed)", changed.len()) }</button>
                            if let Some(v) = &*saved {
                                <a id="to-sandbox" href={format!("#/sandbox?version={v}")}>{ format!("Test {v} in the sandbox →") }</a>
                            }
                        </div>
                    }
                </section>
            </div>
        </div>
    }
}

/// One side of a diff row: (line number, text), or nothing.
type Side = Option<(usize, String)>;

/// Two columns, live on the left and the draft on the right, changed lines marked.
fn side_by_side(old: &str, new: &str) -> Html {
    let diff = TextDiff::from_lines(old, new);
    let mut rows: Vec<(Side, Side, &'static str)> = Vec::new();
    for change in diff.iter_all_changes() {
        let line = change.value().trim_end_matches('\n').to_string();
        match change.tag() {
            ChangeTag::Equal => rows.push((
                change.old_index().map(|i| (i + 1, line.clone())),
                change.new_index().map(|i| (i + 1, line)),
                "same",
            )),
            ChangeTag::Delete => {
                rows.push((change.old_index().map(|i| (i + 1, line)), None, "del"))
            }
            ChangeTag::Insert => {
                // Pair an insert with the deletion just before it, as a modified line.
                if let Some(last) = rows.last_mut() {
                    if last.2 == "del" && last.1.is_none() {
                        last.1 = change.new_index().map(|i| (i + 1, line));
                        last.2 = "mod";
                        continue;
                    }
                }
                rows.push((None, change.new_index().map(|i| (i + 1, line)), "ins"))
            }
        }
    }
    let cell = |c: &Option<(usize, String)>| match c {
        Some((n, t)) => html! { <><td class="n">{ *n }</td><td class="t">{ t.clone() }</td></> },
        None => html! { <><td class="n"></td><td class="t"></td></> },
    };
    html! {
        <table class="diff" id="diff" aria-label="Live version (left) and draft (right)">
            <thead><tr><th colspan="2">{ "live" }</th><th colspan="2">{ "draft" }</th></tr></thead>
            <tbody>
            { for rows.iter().map(|(l, r, kind)| html! {
                <tr class={*kind}>{ cell(l) }{ cell(r) }</tr>
            }) }
            </tbody>
        </table>
    }
}
