//! Rampart's operator console: overview, rules, sandbox, rollouts, decisions, lists, live state and
//! settings, over the admin API. Pages are addressed by the URL fragment (`#/rules`), so the engine serves
//! one `index.html` under `/console/`.

mod api;
mod charts;
mod editor;
mod pages;
mod ui;

use serde_json::Value;
use yew::prelude::*;

/// Who is logged in.
#[derive(Clone, PartialEq)]
pub struct Session {
    pub user: String,
    pub role: String,
}

impl Session {
    fn rank(role: &str) -> u8 {
        match role {
            "viewer" => 1,
            "author" => 2,
            "approver" => 3,
            "admin" => 4,
            _ => 0,
        }
    }

    /// Whether this session's role includes `role`. The console hides what a role cannot do; the
    /// server refuses it anyway.
    pub fn can(&self, role: &str) -> bool {
        Self::rank(&self.role) >= Self::rank(role)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Page {
    Overview,
    Rules,
    Sandbox,
    Rollouts,
    Decisions,
    Lists,
    State,
    Settings,
}

impl Page {
    const ALL: [Page; 8] = [
        Page::Overview,
        Page::Rules,
        Page::Sandbox,
        Page::Rollouts,
        Page::Decisions,
        Page::Lists,
        Page::State,
        Page::Settings,
    ];

    fn slug(self) -> &'static str {
        match self {
            Page::Overview => "overview",
            Page::Rules => "rules",
            Page::Sandbox => "sandbox",
            Page::Rollouts => "rollouts",
            Page::Decisions => "decisions",
            Page::Lists => "lists",
            Page::State => "state",
            Page::Settings => "settings",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Page::Overview => "Overview",
            Page::Rules => "Rules",
            Page::Sandbox => "Sandbox",
            Page::Rollouts => "Rollouts",
            Page::Decisions => "Decisions",
            Page::Lists => "Lists",
            Page::State => "Live state",
            Page::Settings => "Settings",
        }
    }

    fn from_hash(hash: &str) -> Page {
        let slug = hash.trim_start_matches('#').trim_start_matches('/');
        let slug = slug.split(['?', '/']).next().unwrap_or("");
        Page::ALL
            .into_iter()
            .find(|p| p.slug() == slug)
            .unwrap_or(Page::Overview)
    }
}

fn current_hash() -> String {
    web_sys::window()
        .and_then(|w| w.location().hash().ok())
        .unwrap_or_default()
}

/// The query part of the fragment (`#/decisions?code=X` → `code=X`).
fn hash_query() -> String {
    current_hash()
        .split_once('?')
        .map(|(_, q)| q.to_string())
        .unwrap_or_default()
}

/// One parameter of the fragment's query, percent-decoded.
pub fn hash_param(name: &str) -> Option<String> {
    hash_query().split('&').find_map(|kv| {
        let v = kv.strip_prefix(name)?.strip_prefix('=')?;
        js_sys::decode_uri_component(&v.replace('+', " "))
            .ok()
            .map(String::from)
    })
}

#[function_component(App)]
fn app() -> Html {
    let session = use_state(|| None::<Session>);
    let checked = use_state(|| false);
    let page = use_state(|| Page::from_hash(&current_hash()));

    // Restore a session from the cookie, if any.
    {
        let (session, checked) = (session.clone(), checked.clone());
        use_effect_with((), move |_| {
            yew::platform::spawn_local(async move {
                // Ask only when this tab logged in before: an anonymous visit makes no call that
                // is bound to fail (and would log a 401 in the browser console).
                if !api::remembered() {
                    checked.set(true);
                    return;
                }
                if let Ok(s) = api::get("/admin/v1/session").await {
                    if let Some(t) = s["csrf_token"].as_str() {
                        api::set_csrf(t);
                    }
                    session.set(Some(Session {
                        user: s["user"].as_str().unwrap_or("").into(),
                        role: s["role"].as_str().unwrap_or("").into(),
                    }));
                }
                checked.set(true);
            });
        });
    }
    // Follow the fragment.
    {
        let page = page.clone();
        use_effect_with((), move |_| {
            let listener = gloo_listen(move || page.set(Page::from_hash(&current_hash())));
            move || drop(listener)
        });
    }

    let on_login = {
        let session = session.clone();
        Callback::from(move |s: Session| session.set(Some(s)))
    };
    let on_logout = {
        let session = session.clone();
        Callback::from(move |_: MouseEvent| {
            let session = session.clone();
            yew::platform::spawn_local(async move {
                let _ = api::post("/admin/v1/logout", &Value::Null).await;
                api::set_csrf("");
                api::remember(false);
                session.set(None);
            });
        })
    };

    if !*checked {
        return html! { <main class="boot" aria-busy="true">{ "Loading…" }</main> };
    }
    let Some(s) = (*session).clone() else {
        return html! { <pages::login::Login {on_login} /> };
    };
    let current = *page;
    html! {
        <ContextProvider<Session> context={s.clone()}>
            <a class="skip" href="#main">{ "Skip to content" }</a>
            <header class="top">
                <span class="brand">{ "Rampart" }</span>
                <nav aria-label="Pages">
                    <ul>
                    { for Page::ALL.into_iter().map(|p| {
                        let current = (p == current).then_some("page");
                        html! {
                            <li><a href={format!("#/{}", p.slug())} aria-current={current}
                                   id={format!("nav-{}", p.slug())}>{ p.title() }</a></li>
                        }
                    }) }
                    </ul>
                </nav>
                <pages::state::Search />
                <span class="who">
                    <span id="who">{ format!("{} ({})", s.user, s.role) }</span>
                    <button class="link" onclick={on_logout} id="logout">{ "Log out" }</button>
                </span>
            </header>
            <main id="main" tabindex="-1">
                <h1>{ current.title() }</h1>
                { match current {
                    Page::Overview => html! { <pages::overview::Overview /> },
                    Page::Rules => html! { <pages::rules::Rules /> },
                    Page::Sandbox => html! { <pages::sandbox::Sandbox /> },
                    Page::Rollouts => html! { <pages::rollouts::Rollouts /> },
                    Page::Decisions => html! { <pages::decisions::Decisions /> },
                    Page::Lists => html! { <pages::lists::Lists /> },
                    Page::State => html! { <pages::state::State /> },
                    Page::Settings => html! { <pages::settings::Settings /> },
                } }
            </main>
        </ContextProvider<Session>>
    }
}

/// Calls `f` on every `hashchange`, as long as the returned listener lives.
fn gloo_listen(f: impl Fn() + 'static) -> Option<gloo_events::EventListener> {
    let window = web_sys::window()?;
    Some(gloo_events::EventListener::new(
        &window,
        "hashchange",
        move |_| f(),
    ))
}

fn main() {
    yew::Renderer::<App>::new().render();
}
