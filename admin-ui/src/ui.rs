//! Small shared pieces: error boxes, badges, number and time formatting.

use serde_json::Value;
use yew::prelude::*;

use crate::api::ApiErr;

#[derive(Properties, PartialEq)]
pub struct ErrProps {
    pub err: Option<ApiErr>,
}

/// An API error with its stable code, announced to screen readers.
#[function_component(ErrorBox)]
pub fn error_box(p: &ErrProps) -> Html {
    match &p.err {
        None => html! {},
        Some(e) => html! {
            <div class="error" role="alert">
                <strong class="code">{ &e.code }</strong>{ " " }{ &e.message }
            </div>
        },
    }
}

/// An action as a coloured badge.
pub fn action_badge(action: &str) -> Html {
    let class = match action {
        "allow" => "badge allow",
        "challenge" => "badge challenge",
        "review" => "badge review",
        "deny" => "badge deny",
        _ => "badge",
    };
    html! { <span class={class}>{ action.to_string() }</span> }
}

/// Unix ms as local `YYYY-MM-DD HH:MM:SS`.
pub fn time(ms: i64) -> String {
    let d = js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(ms as f64));
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        d.get_full_year(),
        d.get_month() + 1,
        d.get_date(),
        d.get_hours(),
        d.get_minutes(),
        d.get_seconds()
    )
}

pub fn now_ms() -> i64 {
    js_sys::Date::now() as i64
}

/// A JSON value as short text (strings without quotes).
pub fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// Runs a future on the browser's event loop.
pub fn spawn(f: impl std::future::Future<Output = ()> + 'static) {
    yew::platform::spawn_local(f);
}

/// The value of an input, select or textarea from its event.
pub fn input_value(e: &Event) -> String {
    use wasm_bindgen::JsCast;
    let Some(t) = e.target() else {
        return String::new();
    };
    if let Some(i) = t.dyn_ref::<web_sys::HtmlInputElement>() {
        return i.value();
    }
    if let Some(s) = t.dyn_ref::<web_sys::HtmlSelectElement>() {
        return s.value();
    }
    if let Some(a) = t.dyn_ref::<web_sys::HtmlTextAreaElement>() {
        return a.value();
    }
    String::new()
}

/// A counter to re-run an effect: `dispatch(())` from any callback or timer (a state handle
/// captured by a timer would keep adding one to a stale value).
#[derive(Default, PartialEq)]
pub struct Tick(pub u32);

impl Reducible for Tick {
    type Action = ();
    fn reduce(self: std::rc::Rc<Self>, _: ()) -> std::rc::Rc<Self> {
        std::rc::Rc::new(Tick(self.0.wrapping_add(1)))
    }
}
