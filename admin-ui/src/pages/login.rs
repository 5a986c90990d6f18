use serde_json::json;
use yew::prelude::*;

use crate::api::{self, ApiErr};
use crate::ui::{input_value, spawn, ErrorBox};
use crate::Session;

#[derive(Properties, PartialEq)]
pub struct Props {
    pub on_login: Callback<Session>,
}

#[function_component(Login)]
pub fn login(p: &Props) -> Html {
    let user = use_state(String::new);
    let password = use_state(String::new);
    let err = use_state(|| None::<ApiErr>);
    let busy = use_state(|| false);
    let onsubmit = {
        let (user, password, err, busy, on_login) = (
            user.clone(),
            password.clone(),
            err.clone(),
            busy.clone(),
            p.on_login.clone(),
        );
        Callback::from(move |e: SubmitEvent| {
            e.prevent_default();
            let body = json!({"user": *user, "password": *password});
            let (err, busy, on_login) = (err.clone(), busy.clone(), on_login.clone());
            busy.set(true);
            spawn(async move {
                match api::post("/admin/v1/login", &body).await {
                    Ok(s) => {
                        api::set_csrf(s["csrf_token"].as_str().unwrap_or(""));
                        api::remember(true);
                        err.set(None);
                        on_login.emit(Session {
                            user: s["user"].as_str().unwrap_or("").into(),
                            role: s["role"].as_str().unwrap_or("").into(),
                        });
                    }
                    Err(e) => err.set(Some(e)),
                }
                busy.set(false);
            });
        })
    };
    html! {
        <main class="login" id="main">
            <h1>{ "Rampart console" }</h1>
            <form {onsubmit} aria-label="Log in">
                <label for="login-user">{ "User" }</label>
                <input id="login-user" name="user" autocomplete="username" required=true
                       value={(*user).clone()}
                       oninput={let u = user.clone(); Callback::from(move |e: InputEvent| u.set(input_value(&e)))} />
                <label for="login-password">{ "Password" }</label>
                <input id="login-password" name="password" type="password" required=true
                       autocomplete="current-password" value={(*password).clone()}
                       oninput={let pw = password.clone(); Callback::from(move |e: InputEvent| pw.set(input_value(&e)))} />
                <button type="submit" id="login-submit" disabled={*busy}>{ "Log in" }</button>
                <ErrorBox err={(*err).clone()} />
            </form>
        </main>
    }
}
