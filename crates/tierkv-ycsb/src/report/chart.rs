//! `--chart FILE.svg`: a hand-written SVG that reads without the table. Two panels share
//! the workloads on their x axes, with one bar per target in each workload's group:
//! throughput (operations per second, higher is better) and p99 latency over all the
//! workload's operations (microseconds, lower is better). A title, the run's setup, a legend
//! of the targets, axis titles with units, gridlines with tick labels, the value on every
//! bar, `n/a` where a target could not run a workload, and a key to the workload names.
//!
//! A panel's axis is logarithmic when its values span more than [`LOG_SPAN`]× (a DRAM engine
//! next to a synced LSM tree), linear from zero otherwise; the axis title says which.
//!
//! Thread safety: pure functions.

use std::fmt::Write as _;
use std::path::Path;

use super::BenchReport;
use crate::runner::PhaseStatus;
use crate::workload::Phase;

/// Above this max/min ratio a panel uses a log scale.
pub const LOG_SPAN: f64 = 50.0;
/// Target colours (Tableau 10), reused in order.
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];
const WIDTH: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 30.0;
const PANEL_HEIGHT: f64 = 250.0;
const PANEL_GAP: f64 = 95.0;
const FIRST_PANEL_TOP: f64 = 120.0;

/// One panel's data: per workload, one value per target (`None`: no value).
struct Panel<'a> {
    title: &'a str,
    unit: &'a str,
    groups: Vec<(String, Vec<Option<f64>>)>,
}

/// A value axis.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
}

impl Scale {
    fn fit(values: impl Iterator<Item = f64>) -> Scale {
        let positive: Vec<f64> = values.filter(|v| v.is_finite() && *v > 0.0).collect();
        let max = positive.iter().copied().fold(0.0_f64, f64::max);
        let min = positive.iter().copied().fold(f64::INFINITY, f64::min);
        if positive.is_empty() {
            return Scale {
                lo: 0.0,
                hi: 1.0,
                log: false,
            };
        }
        if max / min > LOG_SPAN {
            Scale {
                lo: 10f64.powf(min.log10().floor()),
                hi: 10f64.powf(max.log10().ceil()),
                log: true,
            }
        } else {
            Scale {
                lo: 0.0,
                hi: nice_ceiling(max),
                log: false,
            }
        }
    }

    /// Where `v` falls between the bottom (0) and the top (1) of the axis.
    fn fraction(&self, v: f64) -> f64 {
        let f = if self.log {
            (v.max(self.lo).log10() - self.lo.log10()) / (self.hi.log10() - self.lo.log10())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        };
        f.clamp(0.0, 1.0)
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (
                self.lo.log10().round() as i32,
                self.hi.log10().round() as i32,
            );
            (a..=b).map(|e| 10f64.powi(e)).collect()
        } else {
            let step = self.hi / 5.0;
            (0..=5).map(|i| self.lo + step * f64::from(i)).collect()
        }
    }
}

/// Five round ticks (steps of 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × 10^k) reaching `max`.
fn nice_ceiling(max: f64) -> f64 {
    let raw_step = max / 5.0;
    let mag = 10f64.powf(raw_step.log10().floor());
    let step = [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw_step)
        .unwrap_or(10.0 * mag);
    step * 5.0
}

/// `1234567` as `1.23M`: three significant figures and an SI suffix.
pub fn compact(v: f64) -> String {
    let (scaled, suffix) = [(1e9, "G"), (1e6, "M"), (1e3, "k")]
        .iter()
        .find(|(f, _)| v >= *f)
        .map_or((v, ""), |(f, s)| (v / f, *s));
    let digits = if scaled >= 100.0 {
        0
    } else if scaled >= 10.0 {
        1
    } else {
        2
    };
    let text = format!("{scaled:.digits$}");
    let text = if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    };
    format!("{text}{suffix}")
}

/// Escapes text for XML content and attributes.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// The chart of `report` as an SVG document.
pub fn render(report: &BenchReport) -> String {
    let phases = report.phases_in_run_order();
    let engines: Vec<&str> = report.targets.iter().map(|t| t.label.as_str()).collect();
    let value =
        |phase: &Phase, engine: &str, f: &dyn Fn(&crate::runner::PhaseResult) -> Option<f64>| {
            report
                .result(engine, phase.name())
                .filter(|r| !matches!(r.status, PhaseStatus::Unsupported(_)))
                .and_then(f)
        };
    let groups = |f: &dyn Fn(&crate::runner::PhaseResult) -> Option<f64>| -> Vec<(String, Vec<Option<f64>>)> {
        phases
            .iter()
            .map(|p| (p.name().to_owned(), engines.iter().map(|e| value(p, e, f)).collect()))
            .collect()
    };
    let throughput = Panel {
        title: "Throughput (higher is better)",
        unit: "operations per second",
        groups: groups(&|r| Some(r.ops_per_sec())),
    };
    let p99 = Panel {
        title: "p99 latency over all operations (lower is better)",
        unit: "microseconds",
        groups: groups(&|r| {
            r.ops
                .all()
                .ok()
                .filter(|h| h.count() > 0)
                .map(|h| h.summary().p99_us)
        }),
    };
    let height = FIRST_PANEL_TOP + 2.0 * PANEL_HEIGHT + PANEL_GAP + 90.0;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">"#
    );
    let _ = writeln!(
        svg,
        r#"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    heading(&mut svg, report);
    legend(&mut svg, &engines);
    draw_panel(&mut svg, &throughput, FIRST_PANEL_TOP);
    draw_panel(&mut svg, &p99, FIRST_PANEL_TOP + PANEL_HEIGHT + PANEL_GAP);
    workload_key(&mut svg, &phases, height - 20.0);
    svg.push_str("</svg>\n");
    svg
}

/// Writes the chart to `path`.
pub fn write(report: &BenchReport, path: &Path) -> anyhow::Result<()> {
    use anyhow::Context as _;
    std::fs::write(path, render(report)).with_context(|| format!("writing {}", path.display()))
}

fn heading(svg: &mut String, report: &BenchReport) {
    let c = &report.config;
    let quota = match (c.ops, c.duration_s) {
        (Some(o), _) => format!("{} ops per workload", compact(o as f64)),
        (None, Some(d)) => format!("{d} s per workload"),
        (None, None) => String::new(),
    };
    let sub = format!(
        "{} records of {} B, {quota}, {} client threads, seed {}; pmem {} ({})",
        compact(c.records as f64),
        c.value_bytes,
        c.threads,
        c.seed,
        c.pmem_mode,
        c.pmem_path
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="32" font-size="20" font-weight="bold" text-anchor="middle">tierkv bench: YCSB throughput and p99 latency per workload</text>"#,
        WIDTH / 2.0
    );
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="54" font-size="12" fill="#444" text-anchor="middle">{}</text>"##,
        WIDTH / 2.0,
        escape(&sub)
    );
}

fn legend(svg: &mut String, engines: &[&str]) {
    let mut x = LEFT;
    let y = 78.0;
    for (i, e) in engines.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="{}" width="14" height="14" fill="{colour}"/><text x="{}" y="{}" font-size="13">{}</text>"#,
            y - 11.0,
            x + 20.0,
            y,
            escape(e)
        );
        x += 40.0 + 7.5 * e.chars().count() as f64;
    }
}

fn draw_panel(svg: &mut String, panel: &Panel<'_>, top: f64) {
    let bottom = top + PANEL_HEIGHT;
    let plot_w = WIDTH - LEFT - RIGHT;
    let scale = Scale::fit(
        panel
            .groups
            .iter()
            .flat_map(|(_, v)| v.iter().flatten().copied()),
    );
    let axis = if scale.log { "log scale" } else { "linear" };
    let _ = writeln!(
        svg,
        r#"<text x="{LEFT}" y="{}" font-size="15" font-weight="bold">{}</text>"#,
        top - 12.0,
        escape(panel.title)
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(22 {}) rotate(-90)" font-size="12" text-anchor="middle">{} ({axis})</text>"#,
        top + PANEL_HEIGHT / 2.0,
        escape(panel.unit)
    );
    for t in scale.ticks() {
        let y = bottom - scale.fraction(t) * PANEL_HEIGHT;
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            compact(t)
        );
    }
    let groups = panel.groups.len().max(1) as f64;
    let group_w = plot_w / groups;
    for (g, (name, values)) in panel.groups.iter().enumerate() {
        let gx = LEFT + group_w * g as f64;
        let bar_w = group_w * 0.8 / values.len().max(1) as f64;
        for (i, v) in values.iter().enumerate() {
            let x = gx + group_w * 0.1 + bar_w * i as f64;
            bar(
                svg,
                x,
                bar_w,
                bottom,
                *v,
                &scale,
                PALETTE[i % PALETTE.len()],
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{}" font-size="13" text-anchor="middle">{}</text>"#,
            gx + group_w / 2.0,
            bottom + 18.0,
            escape(name)
        );
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="black"/><line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" stroke="black"/>"#,
        WIDTH - RIGHT
    );
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">workload</text>"#,
        LEFT + plot_w / 2.0,
        bottom + 36.0
    );
}

fn bar(svg: &mut String, x: f64, w: f64, bottom: f64, v: Option<f64>, scale: &Scale, colour: &str) {
    let cx = x + w / 2.0;
    let Some(v) = v else {
        let _ = writeln!(
            svg,
            r##"<text x="{cx:.1}" y="{:.1}" font-size="10" fill="#888" text-anchor="middle">n/a</text>"##,
            bottom - 4.0
        );
        return;
    };
    let h = scale.fraction(v) * PANEL_HEIGHT;
    let top = bottom - h;
    let _ = writeln!(
        svg,
        r#"<rect x="{x:.1}" y="{top:.1}" width="{:.1}" height="{h:.1}" fill="{colour}"><title>{}</title></rect>"#,
        (w - 2.0).max(1.0),
        compact(v)
    );
    let label = compact(v);
    if w >= 8.0 * label.len() as f64 {
        let _ = writeln!(
            svg,
            r#"<text x="{cx:.1}" y="{:.1}" font-size="10" text-anchor="middle">{label}</text>"#,
            top - 3.0
        );
    } else {
        let _ = writeln!(
            svg,
            r#"<text transform="translate({:.1} {:.1}) rotate(-90)" font-size="10">{label}</text>"#,
            cx + 3.5,
            top - 3.0
        );
    }
}

fn workload_key(svg: &mut String, phases: &[Phase], y: f64) {
    let key: Vec<String> = phases
        .iter()
        .map(|p| {
            format!(
                "{} = {}",
                p.name(),
                p.summary().split(':').next().unwrap_or("")
            )
        })
        .collect();
    let _ = writeln!(
        svg,
        r##"<text x="{}" y="{y}" font-size="11" fill="#444" text-anchor="middle">{}</text>"##,
        WIDTH / 2.0,
        escape(&key.join("  ·  "))
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn values_print_with_three_significant_figures() {
        assert_eq!(compact(0.5), "0.5");
        assert_eq!(compact(12.0), "12");
        assert_eq!(compact(1_234.0), "1.23k");
        assert_eq!(compact(45_600.0), "45.6k");
        assert_eq!(compact(2_000_000.0), "2M");
        assert_eq!(compact(987_654_321.0), "988M");
    }

    #[test]
    fn wide_ranges_get_a_log_axis_and_narrow_ones_a_linear_axis_from_zero() {
        let s = Scale::fit([3.0, 2_000_000.0].into_iter());
        assert!(s.log);
        assert_eq!((s.lo, s.hi), (1.0, 10_000_000.0));
        assert_eq!(s.ticks().len(), 8);
        let s = Scale::fit([30.0, 47.0].into_iter());
        assert!(!s.log);
        assert_eq!((s.lo, s.hi), (0.0, 50.0));
        assert!((s.fraction(25.0) - 0.5).abs() < 1e-9);
    }

    #[test]
    fn chart_is_well_formed_and_names_every_engine_and_workload() {
        let report = sample_report();
        let svg = render(&report);
        let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
        let root = doc.root_element();
        assert_eq!(root.tag_name().name(), "svg");
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        let all = texts.join("\n");
        for needle in [
            "dram:btree",
            "dram:hash",
            "load",
            "a",
            "e",
            "n/a",
            "Throughput",
            "p99 latency",
            "operations per second",
            "microseconds",
        ] {
            assert!(all.contains(needle), "{needle} missing from the chart");
        }
        // Two panels x 3 workloads x 2 engines, minus the unsupported bar in each panel.
        let bars = doc
            .descendants()
            .filter(|n| n.has_tag_name("rect") && n.children().any(|c| c.has_tag_name("title")))
            .count();
        assert_eq!(bars, 2 * (3 * 2 - 1));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(escape(r#"a<b>&"c'"#), "a&lt;b&gt;&amp;&quot;c&apos;");
    }
}
