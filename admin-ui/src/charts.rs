//! Charts drawn as SVG (no script library, nothing inline-styled: colours are SVG attributes and
//! CSS classes, so the console's Content-Security-Policy needs no `unsafe-inline`).

use yew::prelude::*;

/// One line of a [`LineChart`].
#[derive(Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub colour: &'static str,
    pub points: Vec<f64>,
}

#[derive(Properties, PartialEq)]
pub struct LineProps {
    pub id: AttrValue,
    pub title: AttrValue,
    pub series: Vec<Series>,
    /// Unit shown after the top value.
    #[prop_or_default]
    pub unit: AttrValue,
}

const W: f64 = 640.0;
const H: f64 = 200.0;
const PAD: f64 = 36.0;

fn fmt(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.1}k", v / 1000.0)
    } else if v >= 10.0 || v == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Lines over time, newest point on the right.
#[function_component(LineChart)]
pub fn line_chart(p: &LineProps) -> Html {
    let max = p
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let n = p.series.iter().map(|s| s.points.len()).max().unwrap_or(0);
    let x = |i: usize| PAD + (W - PAD - 8.0) * (i as f64) / ((n.max(2) - 1) as f64);
    let y = |v: f64| H - 20.0 - (H - 30.0) * v / max;
    let summary = p
        .series
        .iter()
        .map(|s| {
            format!(
                "{} {}",
                s.label,
                fmt(s.points.last().copied().unwrap_or(0.0))
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    html! {
        <figure class="chart" id={p.id.clone()}>
            <figcaption>{ &p.title }</figcaption>
            <svg viewBox={format!("0 0 {W} {H}")} role="img"
                 aria-label={format!("{}: latest {}", p.title, summary)}>
                <line x1={PAD.to_string()} y1={(H - 20.0).to_string()} x2={W.to_string()}
                      y2={(H - 20.0).to_string()} class="axis" />
                <line x1={PAD.to_string()} y1="10" x2={PAD.to_string()} y2={(H - 20.0).to_string()}
                      class="axis" />
                <text x="2" y="16" class="tick">{ format!("{}{}", fmt(max), p.unit) }</text>
                <text x="2" y={(H - 22.0).to_string()} class="tick">{ "0" }</text>
                { for p.series.iter().map(|s| {
                    let d = s.points.iter().enumerate()
                        .map(|(i, v)| format!("{}{:.1},{:.1}", if i == 0 { "M" } else { "L" }, x(i), y(*v)))
                        .collect::<String>();
                    html! { <path d={d} fill="none" stroke={s.colour} stroke-width="2"
                                  data-series={s.label.clone()} /> }
                }) }
            </svg>
            <ul class="legend">
                { for p.series.iter().map(|s| html! {
                    <li><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill={s.colour} /></svg>
                        { format!(" {} ({})", s.label, fmt(s.points.last().copied().unwrap_or(0.0))) }</li>
                }) }
            </ul>
        </figure>
    }
}

#[derive(Properties, PartialEq)]
pub struct BarProps {
    pub id: AttrValue,
    pub title: AttrValue,
    /// (label, value, colour)
    pub bars: Vec<(String, f64, &'static str)>,
}

/// Horizontal bars, largest first as given.
#[function_component(BarChart)]
pub fn bar_chart(p: &BarProps) -> Html {
    let max = p.bars.iter().map(|b| b.1).fold(0.0_f64, f64::max).max(1.0);
    let row = 22.0;
    let h = (p.bars.len().max(1) as f64) * row + 4.0;
    html! {
        <figure class="chart" id={p.id.clone()}>
            <figcaption>{ &p.title }</figcaption>
            if p.bars.is_empty() {
                <p class="muted">{ "Nothing yet." }</p>
            } else {
                <svg viewBox={format!("0 0 {W} {h}")} role="img" aria-label={p.title.clone()}>
                    { for p.bars.iter().enumerate().map(|(i, (label, v, colour))| {
                        let y = 2.0 + i as f64 * row;
                        let w = (W - 260.0) * v / max;
                        html! { <g>
                            <text x="0" y={(y + 15.0).to_string()} class="label">{ label.clone() }</text>
                            <rect x="200" y={y.to_string()} width={format!("{w:.1}")} height={(row - 6.0).to_string()} fill={*colour} />
                            <text x={format!("{:.1}", 204.0 + w)} y={(y + 15.0).to_string()} class="value">{ fmt(*v) }</text>
                        </g> }
                    }) }
                </svg>
            }
        </figure>
    }
}

/// One segment of a stacked bar: (label, value, colour).
pub type Segment = (String, f64, &'static str);

#[derive(Properties, PartialEq)]
pub struct StackProps {
    pub id: AttrValue,
    pub title: AttrValue,
    /// Rows: (label, [(segment label, value, colour)])
    pub rows: Vec<(String, Vec<Segment>)>,
}

/// One bar per row, split into segments (the action mix per tier).
#[function_component(StackChart)]
pub fn stack_chart(p: &StackProps) -> Html {
    let row = 26.0;
    let h = (p.rows.len().max(1) as f64) * row + 4.0;
    html! {
        <figure class="chart" id={p.id.clone()}>
            <figcaption>{ &p.title }</figcaption>
            <svg viewBox={format!("0 0 {W} {h}")} role="img" aria-label={p.title.clone()}>
                { for p.rows.iter().enumerate().map(|(i, (label, segs))| {
                    let y = 2.0 + i as f64 * row;
                    let total: f64 = segs.iter().map(|s| s.1).sum::<f64>().max(1.0);
                    let mut x = 120.0;
                    let parts = segs.iter().filter(|s| s.1 > 0.0).map(|(name, v, colour)| {
                        let w = (W - 130.0) * v / total;
                        let r = html! { <rect x={format!("{x:.1}")} y={y.to_string()} width={format!("{w:.1}")}
                                        height={(row - 8.0).to_string()} fill={*colour}>
                                        <title>{ format!("{label} {name}: {v}") }</title></rect> };
                        x += w;
                        r
                    }).collect::<Html>();
                    html! { <g><text x="0" y={(y + 14.0).to_string()} class="label">{ label.clone() }</text>{ parts }</g> }
                }) }
            </svg>
        </figure>
    }
}

#[derive(Properties, PartialEq)]
pub struct HeatProps {
    pub id: AttrValue,
    pub title: AttrValue,
    /// (key, decisions, refused ratio)
    pub cells: Vec<(String, u64, f64)>,
}

/// The colour of a refused ratio: pale for clean traffic, dark red for mostly refused.
fn heat(r: f64) -> &'static str {
    match r {
        r if r >= 0.5 => "#7f1d1d",
        r if r >= 0.25 => "#b91c1c",
        r if r >= 0.1 => "#ef4444",
        r if r >= 0.03 => "#fca5a5",
        r if r > 0.0 => "#fee2e2",
        _ => "#ecfdf5",
    }
}

/// Tiles per key, coloured by the share of refused decisions.
#[function_component(HeatMap)]
pub fn heat_map(p: &HeatProps) -> Html {
    let cols = 6usize;
    let (cw, ch) = (W / cols as f64, 44.0);
    let rows = p.cells.len().div_ceil(cols).max(1);
    let h = rows as f64 * ch;
    html! {
        <figure class="chart heat" id={p.id.clone()}>
            <figcaption>{ &p.title }</figcaption>
            if p.cells.is_empty() {
                <p class="muted">{ "Nothing yet." }</p>
            } else {
                <svg viewBox={format!("0 0 {W} {h}")} role="img" aria-label={p.title.clone()}>
                    { for p.cells.iter().enumerate().map(|(i, (key, n, r))| {
                        let (x, y) = ((i % cols) as f64 * cw, (i / cols) as f64 * ch);
                        let dark = *r >= 0.1;
                        html! { <g>
                            <rect x={format!("{:.1}", x + 1.0)} y={format!("{:.1}", y + 1.0)} width={format!("{:.1}", cw - 2.0)}
                                  height={(ch - 2.0).to_string()} fill={heat(*r)}>
                                <title>{ format!("{key}: {n} decisions, {:.1}% refused", r * 100.0) }</title></rect>
                            <text x={format!("{:.1}", x + 6.0)} y={(y + 18.0).to_string()}
                                  class={if dark { "cell dark" } else { "cell" }}>{ if key.is_empty() { "(none)".to_string() } else { key.clone() } }</text>
                            <text x={format!("{:.1}", x + 6.0)} y={(y + 36.0).to_string()}
                                  class={if dark { "cell dark" } else { "cell" }}>{ format!("{n} · {:.1}%", r * 100.0) }</text>
                        </g> }
                    }) }
                </svg>
            }
        </figure>
    }
}

/// Colour of each action, the same on every chart.
pub fn action_colour(a: &str) -> &'static str {
    match a {
        "allow" => "#16a34a",
        "challenge" => "#ca8a04",
        "review" => "#2563eb",
        "deny" => "#dc2626",
        _ => "#6b7280",
    }
}
