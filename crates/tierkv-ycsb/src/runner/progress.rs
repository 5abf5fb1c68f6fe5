//! Progress bars (indicatif) for the phases of a run, drawn on stderr only when stdout is a
//! terminal: a run piped into a file or a CI log prints its report and nothing else.
//!
//! Thread safety: `ProgressBar` is `Send + Sync`; only the phase's calling thread draws.

use std::io::IsTerminal as _;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::phase::Quota;

/// Makes one bar per phase, or hidden ones.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    visible: bool,
}

impl Progress {
    /// Bars drawn only if `visible`.
    pub fn new(visible: bool) -> Self {
        Progress { visible }
    }

    /// Bars drawn when stdout is a terminal.
    pub fn for_stdout() -> Self {
        Progress::new(std::io::stdout().is_terminal())
    }

    /// A bar for `phase` of `engine`: counting operations (the load's `records`, or the
    /// quota's operations) or, for a timed phase, milliseconds.
    pub fn bar(&self, engine: &str, phase: &str, quota: Quota, records: u64) -> ProgressBar {
        let target = if self.visible {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let (len, unit) = match (quota.ops, quota.time) {
            (Some(ops), _) => (ops, "ops"),
            (None, Some(t)) => (u64::try_from(t.as_millis()).unwrap_or(u64::MAX), "ms"),
            (None, None) => (records, "records"),
        };
        let template = format!(
            "{{prefix:>24}} [{{bar:40.cyan/blue}}] {{human_pos}}/{{human_len}} {unit} ({{elapsed}}, eta {{eta}})"
        );
        let style = ProgressStyle::with_template(&template)
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let bar = ProgressBar::with_draw_target(Some(len), target).with_style(style);
        bar.set_prefix(format!("{engine} {phase}"));
        bar
    }
}
