//! The kill-mode protocol: the round parameters the parent writes for the child, the
//! message lines the child writes to the parent (see the `kill` module doc for the list),
//! and how the parent applies them to the expected state.
//!
//! Thread safety: plain data; the parent applies messages on its own thread.

use tierkv::core::media::flash::CrashMode;

use crate::batch::BatchWrite;
use crate::expected_state::ExpectedState;
use crate::fields::WriteKind;
use crate::verify::Violation;

/// Every protocol line starts with this.
pub(super) const PREFIX: &str = "@tks ";
/// Longest message line (stays under `PIPE_BUF`, so one write is atomic).
pub(super) const MAX_LINE: usize = 3500;

/// What the child needs to know about its round, written by the parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct RoundParams {
    pub(super) round: u64,
    pub(super) seed: u64,
    pub(super) image_seed: u64,
    pub(super) tear_words: bool,
    /// `None`: unsynced flash writes dropped whole; `Some(seed)`: torn.
    pub(super) flash_tear: Option<u64>,
}

impl RoundParams {
    pub(super) fn encode(&self) -> String {
        format!(
            "round={}\nseed={}\nimage_seed={}\ntear_words={}\nflash_tear={}\n",
            self.round,
            self.seed,
            self.image_seed,
            u8::from(self.tear_words),
            self.flash_tear.map_or("none".to_owned(), |s| s.to_string())
        )
    }

    pub(super) fn decode(text: &str) -> Option<RoundParams> {
        let mut p = RoundParams {
            round: 0,
            seed: 0,
            image_seed: 0,
            tear_words: false,
            flash_tear: None,
        };
        let mut seen = 0;
        for line in text.lines() {
            let (k, v) = line.split_once('=')?;
            match k {
                "round" => p.round = v.parse().ok()?,
                "seed" => p.seed = v.parse().ok()?,
                "image_seed" => p.image_seed = v.parse().ok()?,
                "tear_words" => p.tear_words = v == "1",
                "flash_tear" if v == "none" => p.flash_tear = None,
                "flash_tear" => p.flash_tear = Some(v.parse().ok()?),
                _ => return None,
            }
            seen += 1;
        }
        (seen == 5).then_some(p)
    }

    pub(super) fn flash_mode(&self) -> CrashMode {
        match self.flash_tear {
            None => CrashMode::DropUnsynced,
            Some(seed) => CrashMode::TearUnsynced { seed },
        }
    }
}

/// One message from the child.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Msg {
    Ready,
    Announce {
        id: u32,
        version: u32,
        delete: bool,
    },
    Ack {
        id: u32,
        version: u32,
        delete: bool,
    },
    BatchAnnounce(Vec<BatchWrite>),
    BatchAck(Vec<BatchWrite>),
    /// A field write announced: row, version, kind, field mask ([`crate::fields`]).
    FieldAnnounce {
        row: u32,
        version: u32,
        kind: WriteKind,
        mask: u64,
    },
    FieldAck {
        row: u32,
        version: u32,
    },
    FieldRefused {
        row: u32,
        version: u32,
    },
    /// puts, deletes, gets, scans, get_fields, scan_fields, updates of absent rows (the
    /// child's counters).
    Counts([u64; 7]),
    CutStarted,
    CutDone,
    Violation(Violation),
    Failure(String),
    Other(String),
}

/// A text field on one line (tabs separate fields, newlines end messages).
pub(super) fn one_line(s: &str) -> String {
    s.replace(['\n', '\t'], " ")
}

impl Msg {
    /// The message as one protocol line (without the newline): what [`parse_msg`] reads.
    pub(super) fn encode(&self) -> String {
        let write = |tag: &str, id: &u32, version: &u32, delete: &bool| {
            format!("{PREFIX}{tag} {id} {version} {}", u8::from(*delete))
        };
        match self {
            Msg::Ready => format!("{PREFIX}ready"),
            Msg::Announce {
                id,
                version,
                delete,
            } => write("P", id, version, delete),
            Msg::Ack {
                id,
                version,
                delete,
            } => write("A", id, version, delete),
            Msg::BatchAnnounce(ws) => format!("{PREFIX}BP {}", encode_batch(ws)),
            Msg::BatchAck(ws) => format!("{PREFIX}BA {}", encode_batch(ws)),
            Msg::FieldAnnounce {
                row,
                version,
                kind,
                mask,
            } => format!("{PREFIX}FP {row} {version} {} {mask:x}", kind_tag(*kind)),
            Msg::FieldAck { row, version } => format!("{PREFIX}FA {row} {version}"),
            Msg::FieldRefused { row, version } => format!("{PREFIX}FR {row} {version}"),
            Msg::Counts([a, b, c, d, e, f, g]) => {
                format!("{PREFIX}N {a} {b} {c} {d} {e} {f} {g}")
            }
            Msg::CutStarted => format!("{PREFIX}M"),
            Msg::CutDone => format!("{PREFIX}C"),
            Msg::Violation(v) => format!(
                "{PREFIX}V {}\t{}\t{}\t{}",
                one_line(&v.context),
                one_line(&v.key),
                one_line(&v.expected),
                one_line(&v.found)
            ),
            Msg::Failure(f) => format!("{PREFIX}F {}", one_line(f)),
            Msg::Other(line) => line.clone(),
        }
    }
}

fn encode_batch(ws: &[BatchWrite]) -> String {
    let items: Vec<String> = ws
        .iter()
        .map(|w| format!("{}:{}:{}", w.id, w.version, u8::from(w.delete)))
        .collect();
    items.join(" ")
}

fn parse_batch(rest: &str) -> Option<Vec<BatchWrite>> {
    rest.split(' ')
        .map(|item| {
            let mut it = item.split(':');
            let id = it.next()?.parse().ok()?;
            let version = it.next()?.parse().ok()?;
            let delete = match it.next()? {
                "0" => false,
                "1" => true,
                _ => return None,
            };
            it.next().is_none().then_some(BatchWrite {
                id,
                version,
                delete,
            })
        })
        .collect()
}

fn kind_tag(k: WriteKind) -> char {
    match k {
        WriteKind::Put => 'p',
        WriteKind::Update => 'u',
        WriteKind::Delete => 'd',
    }
}

fn parse_field(tag: &str, rest: &str) -> Option<Msg> {
    let mut it = rest.split(' ');
    let row = it.next()?.parse().ok()?;
    let version = it.next()?.parse().ok()?;
    let msg = match tag {
        "FP" => {
            let kind = match it.next()? {
                "p" => WriteKind::Put,
                "u" => WriteKind::Update,
                "d" => WriteKind::Delete,
                _ => return None,
            };
            let mask = u64::from_str_radix(it.next()?, 16).ok()?;
            Msg::FieldAnnounce {
                row,
                version,
                kind,
                mask,
            }
        }
        "FA" => Msg::FieldAck { row, version },
        _ => Msg::FieldRefused { row, version },
    };
    it.next().is_none().then_some(msg)
}

fn parse_write(rest: &str) -> Option<(u32, u32, bool)> {
    let mut it = rest.split(' ');
    let id = it.next()?.parse().ok()?;
    let version = it.next()?.parse().ok()?;
    let delete = match it.next()? {
        "0" => false,
        "1" => true,
        _ => return None,
    };
    it.next().is_none().then_some((id, version, delete))
}

pub(super) fn parse_msg(line: &str) -> Msg {
    let other = || Msg::Other(line.to_owned());
    let Some(body) = line.strip_prefix(PREFIX) else {
        return other();
    };
    let (tag, rest) = body.split_once(' ').unwrap_or((body, ""));
    match tag {
        "ready" => Msg::Ready,
        "M" => Msg::CutStarted,
        "C" => Msg::CutDone,
        "P" | "A" => match parse_write(rest) {
            Some((id, version, delete)) if tag == "P" => Msg::Announce {
                id,
                version,
                delete,
            },
            Some((id, version, delete)) => Msg::Ack {
                id,
                version,
                delete,
            },
            None => other(),
        },
        "BP" | "BA" => match parse_batch(rest) {
            Some(ws) if tag == "BP" => Msg::BatchAnnounce(ws),
            Some(ws) => Msg::BatchAck(ws),
            None => other(),
        },
        "FP" | "FA" | "FR" => parse_field(tag, rest).unwrap_or_else(other),
        "N" => {
            let n: Vec<u64> = rest.split(' ').filter_map(|x| x.parse().ok()).collect();
            match n[..] {
                [a, b, c, d] => Msg::Counts([a, b, c, d, 0, 0, 0]),
                [a, b, c, d, e, f, g] => Msg::Counts([a, b, c, d, e, f, g]),
                _ => other(),
            }
        }
        "V" => {
            let f: Vec<&str> = rest.splitn(4, '\t').collect();
            match f[..] {
                [context, key, expected, found] => Msg::Violation(Violation {
                    context: context.to_owned(),
                    key: key.to_owned(),
                    expected: expected.to_owned(),
                    found: found.to_owned(),
                }),
                _ => other(),
            }
        }
        "F" => Msg::Failure(rest.to_owned()),
        _ => other(),
    }
}

/// The parent's view of one round.
#[derive(Default)]
pub(super) struct RoundLog {
    pub(super) ready: bool,
    pub(super) cut_started: bool,
    pub(super) cut_done: bool,
    pub(super) acks: (u64, u64),
    /// Acknowledged batches and their keys.
    pub(super) batch_acks: (u64, u64),
    /// Acknowledged field writes: put_row, delete_row, update_fields, fields updated.
    pub(super) field_acks: [u64; 4],
    pub(super) counts: [u64; 7],
    pub(super) violations: Vec<Violation>,
    pub(super) failures: Vec<String>,
}

impl RoundLog {
    /// Applies one message to the expected state.
    pub(super) fn apply(&mut self, state: &ExpectedState, msg: Msg) {
        let in_range = |id: u32| id < state.space().count();
        match msg {
            Msg::Ready => self.ready = true,
            Msg::Announce {
                id,
                version,
                delete,
            } if in_range(id) => {
                state.announce_known(id, version, delete);
            }
            // IMPORTANT: after the cut started, an acknowledgement may come from a write
            // persisted after the image's instant: it stays in flight.
            Msg::Ack {
                id,
                version,
                delete,
            } if in_range(id) && !self.cut_started => {
                state.commit_known(id, version, delete);
                if delete {
                    self.acks.1 += 1;
                } else {
                    self.acks.0 += 1;
                }
            }
            Msg::Ack { .. } => {}
            Msg::BatchAnnounce(ws) if ws.iter().all(|w| in_range(w.id)) => {
                for w in &ws {
                    state.announce_known(w.id, w.version, w.delete);
                }
                state.batches().record(ws);
            }
            // IMPORTANT: as for single writes, a batch acknowledged after the cut started
            // stays in flight.
            Msg::BatchAck(ws) if ws.iter().all(|w| in_range(w.id)) && !self.cut_started => {
                for w in &ws {
                    state.commit_known(w.id, w.version, w.delete);
                }
                self.batch_acks.0 += 1;
                self.batch_acks.1 += ws.len() as u64;
            }
            Msg::BatchAck(_) if self.cut_started => {}
            Msg::BatchAnnounce(_) | Msg::BatchAck(_) => self
                .failures
                .push("the child announced a batch with a key outside the key space".to_owned()),
            Msg::FieldAnnounce {
                row,
                version,
                kind,
                mask,
            } => match state.fields().filter(|f| row < f.config().rows) {
                Some(f) => f.announce_known(row, version, kind, mask),
                None => self.failures.push(format!(
                    "the child announced a field write to row {row}, outside the rows"
                )),
            },
            // IMPORTANT: as for single writes, acknowledged after the cut started: in flight.
            Msg::FieldAck { row, version } if !self.cut_started => {
                if let Some(f) = state.fields().filter(|f| row < f.config().rows) {
                    f.commit(row, version);
                    let w = f.row(row).log.get(&version).copied();
                    match w {
                        Some(w) if w.kind == WriteKind::Put => self.field_acks[0] += 1,
                        Some(w) if w.kind == WriteKind::Delete => self.field_acks[1] += 1,
                        Some(w) => {
                            self.field_acks[2] += 1;
                            self.field_acks[3] += u64::from(w.mask.count_ones());
                        }
                        None => {}
                    }
                }
            }
            Msg::FieldAck { .. } => {}
            Msg::FieldRefused { row, version } => {
                if let Some(f) = state.fields().filter(|f| row < f.config().rows) {
                    f.refuse(row, version);
                }
            }
            Msg::Counts(c) => self.counts = c,
            Msg::CutStarted => self.cut_started = true,
            Msg::CutDone => self.cut_done = true,
            Msg::Violation(mut v) => {
                v.context = format!("child: {}", v.context);
                self.violations.push(v);
            }
            Msg::Failure(f) => self.failures.push(f),
            Msg::Announce { id, .. } => self.failures.push(format!(
                "the child announced a write to key number {id}, outside the key space"
            )),
            Msg::Other(line) => eprintln!("child: {line}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expected_state::KeySpace;
    use proptest::prelude::*;

    #[test]
    fn messages_parse_and_garbage_is_passed_through() {
        assert_eq!(parse_msg("@tks ready"), Msg::Ready);
        assert_eq!(
            parse_msg("@tks P 3 17 1"),
            Msg::Announce {
                id: 3,
                version: 17,
                delete: true
            }
        );
        assert_eq!(
            parse_msg("@tks A 3 17 0"),
            Msg::Ack {
                id: 3,
                version: 17,
                delete: false
            }
        );
        assert_eq!(
            parse_msg("@tks N 1 2 3 4"),
            Msg::Counts([1, 2, 3, 4, 0, 0, 0])
        );
        assert_eq!(
            parse_msg("@tks N 1 2 3 4 5 6 7"),
            Msg::Counts([1, 2, 3, 4, 5, 6, 7])
        );
        let v = parse_msg("@tks V round 1, get\tk00000001\tv#2 (acknowledged)\tabsent");
        let Msg::Violation(v) = v else {
            panic!("{v:?}")
        };
        assert_eq!(v.key, "k00000001");
        assert_eq!(v.found, "absent");
        for junk in [
            "hello",
            "@tks P 3",
            "@tks P 3 x 0",
            "@tks A 1 2 3",
            "@tks N 1 2",
            "@tks Q",
        ] {
            assert_eq!(parse_msg(junk), Msg::Other(junk.to_owned()), "{junk}");
        }
    }

    #[test]
    fn field_writes_are_replayed_and_acks_after_the_cut_stay_in_flight() {
        use crate::fields::FieldConfig;
        let st = ExpectedState::new(KeySpace::new(4))
            .with_fields(Some(FieldConfig { fields: 4, rows: 2 }));
        let mut log = RoundLog::default();
        log.apply(&st, parse_msg("@tks FP 1 1 p f"));
        log.apply(&st, parse_msg("@tks FA 1 1"));
        log.apply(&st, parse_msg("@tks FP 1 2 u 6"));
        log.apply(&st, parse_msg("@tks M"));
        log.apply(&st, parse_msg("@tks FA 1 2"));
        let fs = st.fields().unwrap();
        let row = fs.row(1);
        assert_eq!(row.committed, vec![1, 1, 1, 1]);
        assert!(!row.absent);
        assert!(row.log.get(&2).is_some_and(|w| !w.acked && w.mask == 6));
        drop(row);
        assert_eq!(log.field_acks, [1, 0, 0, 0]);
        log.apply(&st, parse_msg("@tks FP 9 3 d 0"));
        assert_eq!(log.failures.len(), 1, "{:?}", log.failures);
        assert!(matches!(parse_msg("@tks FP 1 2 x 6"), Msg::Other(_)));
    }

    #[test]
    fn acks_after_the_cut_started_stay_in_flight() {
        let state = ExpectedState::new(KeySpace::new(4));
        let mut log = RoundLog::default();
        for m in [
            "@tks P 1 1 0",
            "@tks A 1 1 0",
            "@tks P 1 2 0",
            "@tks M",
            "@tks A 1 2 0",
            "@tks P 1 3 1",
        ] {
            log.apply(&state, parse_msg(m));
        }
        let s = state.load(1);
        assert_eq!((s.committed, s.max_issued), (1, 3));
        assert!(s.pending.is_some_and(|p| p.delete));
        assert_eq!(log.acks, (1, 0));
    }

    #[test]
    fn out_of_range_keys_from_the_child_are_failures() {
        let state = ExpectedState::new(KeySpace::new(4));
        let mut log = RoundLog::default();
        log.apply(&state, parse_msg("@tks P 99 1 0"));
        assert_eq!(log.failures.len(), 1);
    }

    #[test]
    fn round_params_round_trip() {
        for p in [
            RoundParams {
                round: 3,
                seed: u64::MAX,
                image_seed: 7,
                tear_words: true,
                flash_tear: Some(9),
            },
            RoundParams {
                round: 1,
                seed: 0,
                image_seed: 0,
                tear_words: false,
                flash_tear: None,
            },
        ] {
            assert_eq!(RoundParams::decode(&p.encode()), Some(p));
        }
        assert_eq!(RoundParams::decode("round=1\n"), None);
        assert_eq!(RoundParams::decode("bogus"), None);
    }

    fn text() -> impl Strategy<Value = String> {
        "[a-zA-Z0-9 ,.:#()=-]{0,40}"
    }

    fn arb_batch() -> impl Strategy<Value = Vec<BatchWrite>> {
        proptest::collection::vec(
            (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(id, version, delete)| {
                BatchWrite {
                    id,
                    version,
                    delete,
                }
            }),
            1..=crate::batch::MAX_STRESS_BATCH,
        )
    }

    #[test]
    fn the_longest_batch_line_fits_one_pipe_write() {
        let ws = vec![
            BatchWrite {
                id: u32::MAX,
                version: u32::MAX,
                delete: true,
            };
            crate::batch::MAX_STRESS_BATCH
        ];
        assert!(Msg::BatchAnnounce(ws).encode().len() <= MAX_LINE);
    }

    #[test]
    fn a_batch_is_announced_and_acknowledged_key_by_key_and_logged() {
        let st = ExpectedState::new(KeySpace::new(8));
        let mut log = RoundLog::default();
        let ws = vec![
            BatchWrite {
                id: 1,
                version: 1,
                delete: false,
            },
            BatchWrite {
                id: 5,
                version: 1,
                delete: true,
            },
        ];
        log.apply(&st, parse_msg(&Msg::BatchAnnounce(ws.clone()).encode()));
        assert_eq!(st.batches().all(), vec![ws.clone()]);
        assert!(st.load(1).pending.is_some() && st.load(5).pending.is_some());
        log.apply(&st, parse_msg(&Msg::BatchAck(ws).encode()));
        assert_eq!(
            (st.load(1).committed, st.load(5).committed_delete),
            (1, true)
        );
        assert_eq!(log.batch_acks, (1, 2));
        log.apply(&st, parse_msg("@tks BP 99:1:0"));
        assert_eq!(log.failures.len(), 1, "{:?}", log.failures);
        assert!(matches!(parse_msg("@tks BP 1:2"), Msg::Other(_)));
    }

    fn arb_msg() -> impl Strategy<Value = Msg> {
        prop_oneof![
            Just(Msg::Ready),
            Just(Msg::CutStarted),
            Just(Msg::CutDone),
            (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(id, version, delete)| {
                Msg::Announce {
                    id,
                    version,
                    delete,
                }
            }),
            (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(id, version, delete)| {
                Msg::Ack {
                    id,
                    version,
                    delete,
                }
            }),
            any::<[u64; 7]>().prop_map(Msg::Counts),
            (any::<u32>(), any::<u32>(), 0..3u8, any::<u64>()).prop_map(
                |(row, version, k, mask)| Msg::FieldAnnounce {
                    row,
                    version,
                    kind: [WriteKind::Put, WriteKind::Update, WriteKind::Delete][usize::from(k)],
                    mask,
                }
            ),
            (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(row, version, ack)| if ack {
                Msg::FieldAck { row, version }
            } else {
                Msg::FieldRefused { row, version }
            }),
            (arb_batch(), any::<bool>()).prop_map(|(ws, ack)| if ack {
                Msg::BatchAck(ws)
            } else {
                Msg::BatchAnnounce(ws)
            }),
            (text(), text(), text(), text()).prop_map(|(context, key, expected, found)| {
                Msg::Violation(Violation {
                    context,
                    key,
                    expected,
                    found,
                })
            }),
            text().prop_map(Msg::Failure),
        ]
    }

    proptest! {
        #[test]
        fn messages_round_trip_through_their_lines(m in arb_msg()) {
            prop_assert_eq!(parse_msg(&m.encode()), m);
        }

        #[test]
        fn round_params_round_trip_for_any_values(
            round in any::<u64>(),
            seed in any::<u64>(),
            image_seed in any::<u64>(),
            tear_words in any::<bool>(),
            flash_tear in proptest::option::of(any::<u64>()),
        ) {
            let p = RoundParams { round, seed, image_seed, tear_words, flash_tear };
            prop_assert_eq!(RoundParams::decode(&p.encode()), Some(p));
        }

        #[test]
        fn any_line_parses_to_some_message(line in "\\PC{0,80}") {
            // Never a panic; a line that is not a protocol message is passed through whole.
            if let Msg::Other(l) = parse_msg(&line) {
                prop_assert_eq!(l, line);
            }
        }
    }
}
