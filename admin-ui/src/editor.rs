//! The rule editor: a plain `<textarea>` (so typing, selection, undo and screen readers behave as
//! the browser makes them) laid exactly over a highlighted copy of its text, with line numbers and
//! the validation problems marked at their line.

use yew::prelude::*;

use crate::ui::input_value;

/// One validation problem in the file being edited.
#[derive(Clone, PartialEq)]
pub struct Problem {
    pub line: usize,
    pub column: usize,
    pub message: String,
}

#[derive(Properties, PartialEq)]
pub struct Props {
    pub value: AttrValue,
    pub on_change: Callback<String>,
    #[prop_or_default]
    pub problems: Vec<Problem>,
    pub label: AttrValue,
    #[prop_or_default]
    pub readonly: bool,
}

const KEYWORDS: &[&str] = &[
    "let", "const", "if", "else", "return", "fn", "for", "in", "while", "loop", "break",
    "continue", "true", "false", "switch", "throw", "try", "catch", "do", "until", "this",
    "private", "import", "export", "as",
];

/// Splits one line of Rhai into (class, text) tokens.
pub fn tokens(line: &str) -> Vec<(&'static str, String)> {
    let chars: Vec<char> = line.chars().collect();
    let mut out: Vec<(&'static str, String)> = Vec::new();
    let mut i = 0;
    let push = |out: &mut Vec<(&'static str, String)>, class: &'static str, s: String| {
        if let Some(last) = out.last_mut() {
            if last.0 == class && class.is_empty() {
                last.1.push_str(&s);
                return;
            }
        }
        out.push((class, s));
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            let rest: String = chars[i..].iter().collect();
            let class = if rest.starts_with("//!") {
                "meta"
            } else {
                "comment"
            };
            push(&mut out, class, rest);
            break;
        }
        if c == '/' && chars.get(i + 1) == Some(&'*') {
            let mut j = i + 2;
            while j + 1 < chars.len() && !(chars[j] == '*' && chars[j + 1] == '/') {
                j += 1;
            }
            let end = (j + 2).min(chars.len());
            push(&mut out, "comment", chars[i..end].iter().collect());
            i = end;
            continue;
        }
        if c == '"' || c == '`' || c == '\'' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != c {
                if chars[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            let end = (j + 1).min(chars.len());
            push(&mut out, "string", chars[i..end].iter().collect());
            i = end;
            continue;
        }
        if c.is_ascii_digit() {
            let mut j = i;
            while j < chars.len()
                && (chars[j].is_ascii_alphanumeric() || chars[j] == '_' || chars[j] == '.')
            {
                j += 1;
            }
            push(&mut out, "number", chars[i..j].iter().collect());
            i = j;
            continue;
        }
        if c.is_alphabetic() || c == '_' {
            let mut j = i;
            while j < chars.len() && (chars[j].is_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            let word: String = chars[i..j].iter().collect();
            let mut k = j;
            while k < chars.len() && chars[k] == ' ' {
                k += 1;
            }
            let class = if KEYWORDS.contains(&word.as_str()) {
                "keyword"
            } else if chars.get(k) == Some(&'(') {
                "call"
            } else if word == "req" {
                "req"
            } else {
                ""
            };
            push(&mut out, class, word);
            i = j;
            continue;
        }
        push(&mut out, "", c.to_string());
        i += 1;
    }
    out
}

#[function_component(Editor)]
pub fn editor(p: &Props) -> Html {
    let text = p.value.to_string();
    let lines: Vec<&str> = text.split('\n').collect();
    let oninput = {
        let cb = p.on_change.clone();
        Callback::from(move |e: InputEvent| cb.emit(input_value(&e)))
    };
    // Tab inserts two spaces instead of leaving the editor; Escape then Tab leaves it.
    let onkeydown = {
        let cb = p.on_change.clone();
        Callback::from(move |e: KeyboardEvent| {
            use wasm_bindgen::JsCast;
            if e.key() != "Tab" || e.shift_key() {
                return;
            }
            let Some(t) = e
                .target()
                .and_then(|t| t.dyn_into::<web_sys::HtmlTextAreaElement>().ok())
            else {
                return;
            };
            if t.get_attribute("data-tabs").as_deref() == Some("off") {
                return;
            }
            e.prevent_default();
            let v = t.value();
            let start = t.selection_start().ok().flatten().unwrap_or(0) as usize;
            let end = t.selection_end().ok().flatten().unwrap_or(0) as usize;
            let (a, b): (String, String) = {
                let chars: Vec<char> = v.chars().collect();
                (
                    chars[..start.min(chars.len())].iter().collect(),
                    chars[end.min(chars.len())..].iter().collect(),
                )
            };
            let next = format!("{a}  {b}");
            t.set_value(&next);
            let _ = t.set_selection_range((start + 2) as u32, (start + 2) as u32);
            cb.emit(next);
        })
    };
    let onkeyup = Callback::from(move |e: KeyboardEvent| {
        use wasm_bindgen::JsCast;
        if let Some(t) = e
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlTextAreaElement>().ok())
        {
            if e.key() == "Escape" {
                let _ = t.set_attribute("data-tabs", "off");
            } else if e.key() != "Tab" && e.key() != "Shift" {
                let _ = t.remove_attribute("data-tabs");
            }
        }
    });
    let problem_at = |n: usize| p.problems.iter().find(|x| x.line == n);
    html! {
        <div class="editor">
            <div class="gutter" aria-hidden="true">
                { for (1..=lines.len()).map(|n| html! {
                    <div class={if problem_at(n).is_some() { "ln err" } else { "ln" }}>{ n }</div>
                }) }
            </div>
            <div class="code">
                <pre class="hl" aria-hidden="true">{ for lines.iter().enumerate().map(|(i, l)| {
                    let problem = problem_at(i + 1);
                    html! {
                        <div class={if problem.is_some() { "line err" } else { "line" }} data-line={(i + 1).to_string()}>
                            { for tokens(l).into_iter().map(|(class, t)| if class.is_empty() {
                                html! { { t } }
                            } else {
                                html! { <span class={class}>{ t }</span> }
                            }) }
                            { "\u{200b}" }
                            if let Some(pr) = problem {
                                <span class="inline-err">{ format!("⚠ {}:{} {}", pr.line, pr.column, pr.message) }</span>
                            }
                        </div>
                    }
                }) }</pre>
                <textarea spellcheck="false" autocapitalize="off" autocomplete="off" wrap="off"
                          aria-label={p.label.clone()} id="rule-editor" readonly={p.readonly}
                          rows={lines.len().to_string()} value={p.value.clone()} {oninput} {onkeydown} {onkeyup}
                          aria-describedby="editor-help" />
            </div>
            <p id="editor-help" class="sr-only">{ "Tab indents; press Escape, then Tab, to leave the editor." }</p>
        </div>
    }
}

/// Puts the caret at the start of `line` (1-based) in the editor and focuses it.
pub fn goto_line(line: usize) {
    use wasm_bindgen::JsCast;
    let Some(t) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id("rule-editor"))
        .and_then(|e| e.dyn_into::<web_sys::HtmlTextAreaElement>().ok())
    else {
        return;
    };
    let v = t.value();
    let offset: usize = v
        .split('\n')
        .take(line.saturating_sub(1))
        .map(|l| l.chars().count() + 1)
        .sum();
    let _ = t.focus();
    let _ = t.set_selection_range(offset as u32, offset as u32);
}
