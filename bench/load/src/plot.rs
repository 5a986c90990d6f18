//! The report: Markdown tables and SVG plots (plotters, SVG backend).

use std::fmt::Write as _;
use std::path::Path;

use plotters::prelude::*;

use crate::Row;

type Res = Result<(), Box<dyn std::error::Error>>;

const COLOURS: [RGBColor; 4] = [
    RGBColor(37, 99, 235),
    RGBColor(220, 38, 38),
    RGBColor(22, 163, 74),
    RGBColor(202, 138, 4),
];

fn bars(path: &Path, title: &str, items: &[(String, f64)]) -> Res {
    let root = SVGBackend::new(path, (760, 380)).into_drawing_area();
    root.fill(&WHITE)?;
    let max = items.iter().map(|i| i.1).fold(1.0, f64::max) * 1.15;
    let n = items.len().max(1);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..n as f64, 0f64..max)?;
    let names: Vec<String> = items.iter().map(|i| i.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                names.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("requests/s")
        .draw()?;
    chart.draw_series(items.iter().enumerate().map(|(i, (_, v))| {
        Rectangle::new(
            [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, *v)],
            COLOURS[i.min(3)].filled(),
        )
    }))?;
    chart.draw_series(items.iter().enumerate().map(|(i, (_, v))| {
        Text::new(
            format!("{v:.0}"),
            (i as f64 + 0.3, *v + max * 0.02),
            ("sans-serif", 14),
        )
    }))?;
    root.present()?;
    Ok(())
}

fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_x: bool,
    series: &[(String, Vec<(f64, f64)>)],
) -> Res {
    let root = SVGBackend::new(path, (760, 380)).into_drawing_area();
    root.fill(&WHITE)?;
    let xs = series.iter().flat_map(|s| s.1.iter().map(|p| p.0));
    let (xmin, xmax) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let ymax = series
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.15;
    let mut builder = ChartBuilder::on(&root);
    let chart = builder
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .draw()?;
            for (i, (label, pts)) in series.iter().enumerate() {
                let c = COLOURS[i % 4];
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))?
                    .label(label.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
                chart.draw_series(pts.iter().map(|p| Circle::new(*p, 4, c.filled())))?;
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.9))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if log_x {
        draw!(chart.build_cartesian_2d((xmin * 0.8..xmax * 1.25).log_scale(), 0f64..ymax)?);
    } else {
        draw!(chart.build_cartesian_2d(xmin - 0.2..xmax + 0.2, 0f64..ymax)?);
    }
    root.present()?;
    Ok(())
}

/// Writes the plots into `out` and returns the Markdown report.
pub fn write_all(
    out: &Path,
    rows: &[Row],
    rules: &[(usize, Row)],
    workers: &[(usize, Row, Row)],
    memory: &[(u64, i64, u64)],
    base_rps: Option<f64>,
) -> String {
    let mut md = String::new();
    let warn = |r: Res, what: &str| {
        if let Err(e) = r {
            eprintln!("rampart-load: plot {what}: {e}");
        }
    };
    if !rows.is_empty() {
        md.push_str("| server | req/s | vs baseline | server CPU µs/request | generator CPU at max | p50 / p99 at max (µs) | rate at half load | p50 / p99 / p99.9 at half load (µs) | errors |\n|---|---|---|---|---|---|---|---|---|\n");
        for r in rows {
            let _ = writeln!(
                md,
                "| {} | {:.0} | {} | {} | {:.0}%{} | {:.0} / {:.0} | {:.0} | {:.0} / {:.0} / {:.0} | {} |",
                r.name,
                r.max.rps(),
                base_rps.map_or("—".into(), |b| format!("{:.1}%", 100.0 * r.max.rps() / b)),
                r.max
                    .server_us_per_request()
                    .map_or("—".into(), |u| format!("{u:.1}")),
                r.max.generator_load() * 100.0,
                if r.max.generator_saturated() {
                    " (saturated)"
                } else {
                    ""
                },
                r.max.pct(0.5),
                r.max.pct(0.99),
                r.half.rps(),
                r.half.pct(0.5),
                r.half.pct(0.99),
                r.half.pct(0.999),
                r.max.errors + r.half.errors
            );
        }
        let items: Vec<(String, f64)> = rows
            .iter()
            .map(|r| {
                let short = r
                    .name
                    .split(" (")
                    .next()
                    .unwrap_or(&r.name)
                    .replace("engine, ", "");
                (short, r.max.rps())
            })
            .collect();
        warn(
            bars(
                &out.join("throughput.svg"),
                "POST /v1/decide: maximum rate (same generator, same run)",
                &items,
            ),
            "throughput",
        );
        md.push_str("\n![throughput](throughput.svg)\n\n");
    }
    if !rules.is_empty() {
        let r20 = rules
            .iter()
            .find(|(n, _)| *n == 20)
            .map(|(_, r)| r.max.rps());
        md.push_str("| rules | req/s | vs 20 rules | p99 at half load (µs) |\n|---|---|---|---|\n");
        for (n, r) in rules {
            let _ = writeln!(
                md,
                "| {n} | {:.0} | {} | {:.0} |",
                r.max.rps(),
                r20.map_or("—".into(), |b| format!("{:.1}%", 100.0 * r.max.rps() / b)),
                r.half.pct(0.99)
            );
        }
        let pts = rules
            .iter()
            .map(|(n, r)| (*n as f64, r.max.rps()))
            .collect();
        warn(
            lines(
                &out.join("rules.svg"),
                "Throughput vs rule count (local state)",
                "rules in the set",
                "requests/s",
                true,
                &[("engine".into(), pts)],
            ),
            "rules",
        );
        md.push_str("\n![rules](rules.svg)\n\n");
    }
    if !workers.is_empty() {
        md.push_str(
            "| workers | baseline req/s | engine req/s | engine / baseline |\n|---|---|---|---|\n",
        );
        for (w, b, e) in workers {
            let _ = writeln!(
                md,
                "| {w} | {:.0} | {:.0} | {:.1}% |",
                b.max.rps(),
                e.max.rps(),
                100.0 * e.max.rps() / b.max.rps().max(1.0)
            );
        }
        let b = workers
            .iter()
            .map(|(w, b, _)| (*w as f64, b.max.rps()))
            .collect();
        let e = workers
            .iter()
            .map(|(w, _, e)| (*w as f64, e.max.rps()))
            .collect();
        warn(
            lines(
                &out.join("workers.svg"),
                "Throughput vs server workers",
                "workers",
                "requests/s",
                false,
                &[("baseline".into(), b), ("engine".into(), e)],
            ),
            "workers",
        );
        md.push_str("\n![workers](workers.svg)\n\n");
    }
    if !memory.is_empty() {
        md.push_str("| expected req/s | window | RSS after start-up (MiB) |\n|---|---|---|\n");
        for (r, w, m) in memory {
            let _ = writeln!(
                md,
                "| {r} | ±{} s | {:.1} |",
                w / 1000,
                *m as f64 / 1048576.0
            );
        }
        let mut windows: Vec<i64> = memory.iter().map(|m| m.1).collect();
        windows.dedup();
        let series: Vec<(String, Vec<(f64, f64)>)> = windows
            .iter()
            .map(|w| {
                (
                    format!("window ±{} s", w / 1000),
                    memory
                        .iter()
                        .filter(|m| m.1 == *w)
                        .map(|m| (m.0 as f64, m.2 as f64 / 1048576.0))
                        .collect(),
                )
            })
            .collect();
        warn(
            lines(
                &out.join("memory.svg"),
                "Engine memory vs expected rate and window",
                "expected requests/s",
                "RSS (MiB)",
                true,
                &series,
            ),
            "memory",
        );
        md.push_str("\n![memory](memory.svg)\n");
    }
    md
}

/// The soak's memory curve: RSS (MiB) over minutes, with the faults marked.
pub fn rss_curve(path: &Path, title: &str, rss: &[(f64, f64)], marks: &[(f64, &str)]) -> Res {
    let root = SVGBackend::new(path, (900, 400)).into_drawing_area();
    root.fill(&WHITE)?;
    let xmax = rss.iter().map(|p| p.0).fold(1.0, f64::max);
    let ymax = rss.iter().map(|p| p.1).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)?;
    chart
        .configure_mesh()
        .x_desc("minutes")
        .y_desc("RSS (MiB)")
        .draw()?;
    for (i, (x, label)) in marks.iter().enumerate() {
        let c = COLOURS[1 + i.min(2)];
        chart
            .draw_series(LineSeries::new([(*x, 0.0), (*x, ymax)], c.stroke_width(1)))?
            .label(*label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], c));
    }
    chart
        .draw_series(LineSeries::new(
            rss.iter().copied(),
            COLOURS[0].stroke_width(2),
        ))?
        .label("engine RSS")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], COLOURS[0]));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
