//! The human-readable report: per workload, one table of throughput and latencies (one row
//! per target and operation kind, with the throughput ratio against the first target) and
//! one of the targets' counters over the measured part (bytes per tier, write
//! amplification, where reads were served, DRAM held).
//!
//! Numbers are right-aligned, text left-aligned; latencies in microseconds, sizes in MiB.
//!
//! Thread safety: pure functions of a [`BenchReport`].

use std::fmt::Write as _;

use tierkv::Stats;

use super::BenchReport;
use crate::runner::{PhaseResult, PhaseStatus};
use crate::workload::{OpKind, Phase};

/// A column's alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A plain-text table with aligned columns.
#[derive(Clone, Debug, Default)]
pub struct TextTable {
    header: Vec<(String, Align)>,
    rows: Vec<Vec<String>>,
}

impl TextTable {
    /// A table with these column titles.
    pub fn new(header: &[(&str, Align)]) -> Self {
        TextTable {
            header: header.iter().map(|(h, a)| ((*h).to_owned(), *a)).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells are blank, extra cells are kept unaligned at the end).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as lines of text, columns two spaces apart, no trailing spaces.
    pub fn render(&self) -> String {
        let n = self.header.len();
        let mut widths: Vec<usize> = self.header.iter().map(|(h, _)| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        let titles: Vec<String> = self.header.iter().map(|(h, _)| h.clone()).collect();
        for cells in std::iter::once(&titles).chain(&self.rows) {
            let mut line = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let (width, align) = match (widths.get(i), self.header.get(i)) {
                    (Some(w), Some((_, a))) if i < n => (*w, *a),
                    _ => (0, Align::Left),
                };
                if i > 0 {
                    line.push_str("  ");
                }
                let pad = width.saturating_sub(cell.chars().count());
                match align {
                    Align::Left => {
                        line.push_str(cell);
                        line.extend(std::iter::repeat_n(' ', pad));
                    }
                    Align::Right => {
                        line.extend(std::iter::repeat_n(' ', pad));
                        line.push_str(cell);
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `1234567` as `1,234,567`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency in microseconds with three significant figures or so.
pub fn micros(us: f64) -> String {
    if us < 10.0 {
        format!("{us:.2}")
    } else if us < 100.0 {
        format!("{us:.1}")
    } else {
        thousands(us.round() as u64)
    }
}

/// Bytes as MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / f64::from(1u32 << 20))
}

/// The whole report: one block per workload.
pub fn render(report: &BenchReport) -> String {
    let rounds = report.rounds();
    let mut out = String::new();
    for round in 1..=rounds {
        if rounds > 1 {
            let _ = writeln!(out, "=== round {round} of {rounds} ===");
        }
        for phase in report.phases_in_run_order() {
            let results: Vec<&PhaseResult> = report
                .targets
                .iter()
                .filter_map(|t| report.result_in(round, &t.label, phase.name()))
                .collect();
            out.push_str(&render_phase(&phase, &results));
            out.push('\n');
        }
    }
    if rounds > 1 {
        out.push_str(&super::rounds::render(report));
        out.push('\n');
    }
    out
}

/// One workload's block: its title, the latency table and the counter table.
pub fn render_phase(phase: &Phase, results: &[&PhaseResult]) -> String {
    let mut out = String::new();
    let dist = results
        .iter()
        .find_map(|r| r.distribution)
        .map(|d| format!(", {d}"))
        .unwrap_or_default();
    let _ = writeln!(out, "== {}: {}{dist} ==", phase.name(), phase.summary());
    out.push_str(&latency_table(results).render());
    out.push_str(&counter_table(results).render());
    for r in results {
        if let Phase::Run(w) = r.phase
            && w.batch_size > 0
            && !matches!(r.status, PhaseStatus::Unsupported(_))
        {
            let _ = writeln!(
                out,
                "-- {}: {} keys/s ({} puts per batch)",
                r.engine,
                thousands(r.keys_per_sec().round() as u64),
                w.batch_size
            );
        }
        match &r.status {
            PhaseStatus::Ok => {}
            PhaseStatus::Unsupported(why) => {
                let _ = writeln!(out, "-- {}: unsupported ({why})", r.engine);
            }
            PhaseStatus::Failed(m) => {
                let _ = writeln!(
                    out,
                    "!! {}: {} operations FAILED; first: {m}",
                    r.engine,
                    r.errors()
                );
            }
        }
    }
    out
}

fn latency_table(results: &[&PhaseResult]) -> TextTable {
    use Align::{Left, Right};
    let first = results.first().map(|r| (r.engine.clone(), r.ops_per_sec()));
    let vs = first
        .as_ref()
        .map_or_else(|| "ratio".to_owned(), |(e, _)| format!("vs {e}"));
    let mut t = TextTable::new(&[
        ("engine", Left),
        ("ops/s", Right),
        (&vs, Right),
        ("time s", Right),
        ("op", Left),
        ("count", Right),
        ("mean us", Right),
        ("p50 us", Right),
        ("p99 us", Right),
        ("p99.9 us", Right),
        ("errors", Right),
        ("not found", Right),
    ]);
    for r in results {
        if let PhaseStatus::Unsupported(_) = &r.status {
            t.row(vec![r.engine.clone(), "unsupported".into()]);
            continue;
        }
        let ratio = match &first {
            Some((_, base)) if *base > 0.0 => format!("{:.2}x", r.ops_per_sec() / base),
            _ => "-".to_owned(),
        };
        let mut lead = vec![
            r.engine.clone(),
            thousands(r.ops_per_sec().round() as u64),
            ratio,
            format!("{:.2}", r.duration.as_secs_f64()),
        ];
        for kind in OpKind::ALL {
            let Some(h) = r.ops.latency(kind) else {
                continue;
            };
            let (errors, misses) = (r.ops.errors(kind), r.ops.not_found(kind));
            if h.count() == 0 && errors == 0 {
                continue;
            }
            let s = h.summary();
            let mut row = std::mem::replace(&mut lead, vec![String::new(); 4]);
            row.extend([
                kind.name().to_owned(),
                thousands(s.count),
                micros(s.mean_us),
                micros(s.p50_us),
                micros(s.p99_us),
                micros(s.p999_us),
                thousands(errors),
                thousands(misses),
            ]);
            t.row(row);
        }
        if lead.first().is_some_and(|e| !e.is_empty()) {
            t.row(lead);
        }
    }
    t
}

fn counter_table(results: &[&PhaseResult]) -> TextTable {
    use Align::{Left, Right};
    let mut t = TextTable::new(&[
        ("counters", Left),
        ("user MiB w", Right),
        ("pmem MiB w", Right),
        ("flash MiB w", Right),
        ("flash WA", Right),
        ("flash MiB r", Right),
        ("reads dram/pmem/flash", Right),
        ("DRAM MiB", Right),
    ]);
    for r in results {
        t.row(counter_row(&r.engine, &r.counters));
    }
    // `--settle-load`: the load again, up to the end of the work it left behind.
    for r in results {
        if let Some(s) = &r.settled {
            let label = format!(
                "{} +{:.1} s{}",
                r.engine,
                s.waited.as_secs_f64(),
                if s.quiet {
                    " settled"
                } else {
                    " (still writing)"
                }
            );
            t.row(counter_row(&label, &s.counters));
        }
    }
    t
}

fn counter_row(engine: &str, c: &Stats) -> Vec<String> {
    vec![
        engine.to_owned(),
        mib(c.user_bytes_written),
        mib(c.pmem_bytes_written),
        mib(c.flash_bytes_written),
        c.write_amplification(true)
            .map_or_else(|| "-".to_owned(), |wa| format!("{wa:.2}")),
        mib(c.flash_bytes_read),
        format!(
            "{}/{}/{}",
            thousands(c.reads_from_dram),
            thousands(c.reads_from_pmem),
            thousands(c.reads_from_flash)
        ),
        mib(c.dram_bytes),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::tests::sample_report;

    #[test]
    fn numbers_are_grouped_and_latencies_keep_three_figures() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(micros(1.234), "1.23");
        assert_eq!(micros(12.34), "12.3");
        assert_eq!(micros(1234.4), "1,234");
        assert_eq!(mib(3 << 20), "3.0");
    }

    #[test]
    fn columns_align_and_lines_have_no_trailing_spaces() {
        let mut t = TextTable::new(&[("name", Align::Left), ("n", Align::Right)]);
        t.row(vec!["a".into(), "1".into()]);
        t.row(vec!["longer".into(), "1,000".into()]);
        assert_eq!(t.render(), "name        n\na           1\nlonger  1,000\n");
    }

    #[test]
    fn report_has_a_block_per_workload_with_ratios_against_the_first_engine() {
        let report = sample_report();
        let text = render(&report);
        println!("{text}");
        assert!(
            text.contains("== load: bulk insert: 100% insert of the records =="),
            "{text}"
        );
        assert!(text.contains("== a: update heavy: 50% read, 50% update, zipfian =="));
        assert!(text.contains("vs dram:btree"));
        // The first engine is the base; the second ran at half its throughput.
        assert!(text.contains("1.00x"));
        assert!(text.contains("0.50x"));
        assert!(
            text.contains("-- dram:hash: unsupported (scan: hash index)"),
            "the hash engine cannot scan: {text}"
        );
        assert!(text.contains("FAILED"), "failures are shown: {text}");
        assert!(text.lines().all(|l| !l.ends_with(' ')));
    }
}
