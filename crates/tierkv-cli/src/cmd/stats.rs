//! `tierkv stats` as text: every counter with its unit and one line of meaning, and the
//! note that counters belong to this process (issue 23 finding 9). `--json` stays the bare
//! [`Stats`] shape that tools read.

use tierkv::{Db, Stats};

/// Unit and meaning of the counters every engine reports (the `Stats` fields), then of
/// engine counters and gauges whose names say less than they should: one per line, name,
/// unit (one word), meaning.
const KNOWN: &str = "\
user_bytes_written         bytes    key + value bytes of puts acknowledged
user_bytes_read            bytes    value bytes returned by gets and scans
pmem_bytes_written         bytes    bytes written to the pmem pool
pmem_bytes_read            bytes    bytes read from the pmem pool
pmem_persists              calls    persist calls on the pmem pool (msync / flush+fence)
flash_bytes_written        bytes    bytes written to flash files
flash_bytes_read           bytes    bytes read from flash files
flash_syncs                calls    fdatasync calls on flash files
reads_from_dram            reads    gets answered from DRAM (index, cache, buffer)
reads_from_pmem            reads    gets answered from pmem
reads_from_flash           reads    gets answered from flash
dram_bytes                 bytes    DRAM the engine holds now
recovery_micros            µs       time this open spent recovering the store
keys                       keys     keys in the store now
live_values                values   values in the store now
live_bytes                 bytes    bytes of the values in the store now
flash_free_chunks          chunks   free flash value-storage chunks now
flash_utilization          fraction share of flash chunk space in use now
svc_hit_ratio              fraction gets served by the scan-aware DRAM cache (SVC)
svc_entries                values   values in the SVC now
read_batch_mean            reads    mean flash reads per combined batch
dram_hit_ratio             fraction reads served from DRAM pages
read_cache_hit_ratio       fraction reads served by the DRAM read cache
free_pages                 pages    free pages now
pmem_blocks                blocks   pmem blocks in use now
chunks_free                chunks   free flash chunks now
chunks_used                chunks   flash chunks in use now
chunks_total               chunks   flash chunks in all
dirty_pointer_helps        events   reads that finished a writer's index update (HSIT)
gc_runs                    events   flash garbage-collection passes
gc_chunks_freed            chunks   flash chunks freed by garbage collection
gc_values_moved            values   live values copied by garbage collection
gc_bytes_moved             bytes    live value bytes copied by garbage collection
index_race_losses          events   index inserts retried after a concurrent insert won
put_retries                events   puts retried after a race with another writer
pwb_reclaims               events   persistent write buffers drained to flash
pwb_reclaim_values         values   values moved from write buffers to flash
pwb_reclaim_bytes          bytes    value bytes moved from write buffers to flash
pwb_reclaim_dropped_bytes  bytes    bytes of overwritten values dropped at reclaim
pwb_writer_waits           events   puts that waited for a full write buffer
read_batches               events   combined flash read batches (thread combining)
read_batch_requests        reads    gets served through combined batches
svc_hits                   reads    gets served by the SVC
svc_misses                 reads    gets the SVC did not hold
svc_evictions              values   values evicted from the SVC
batches_committed          batches  write batches committed (crash-atomic) by this process
batches_replayed           batches  committed write batches a crash cut, finished at this open
";

/// The unit and meaning [`KNOWN`] gives `name`.
fn known(name: &str) -> Option<(&'static str, &'static str)> {
    KNOWN.lines().find_map(|l| {
        let (n, rest) = l.split_once(' ')?;
        let (unit, meaning) = rest.trim_start().split_once(' ')?;
        (n == name).then_some((unit, meaning.trim_start()))
    })
}

/// Guesses the unit of an engine counter from its name.
fn unit_of(name: &str, gauge: bool) -> &'static str {
    if name.ends_with("_bytes") || name.contains("_bytes_") {
        "bytes"
    } else if name.ends_with("_micros") {
        "µs"
    } else if name.ends_with("_ratio") || name.ends_with("utilization") {
        "fraction"
    } else if gauge {
        "value"
    } else {
        "events"
    }
}

/// One explained row: name, value, unit, meaning.
fn row(name: &str, value: f64, gauge: bool) -> (String, String, &'static str, String) {
    let (unit, meaning) = match known(name) {
        Some((u, m)) => (u, m.to_owned()),
        None if gauge => (
            unit_of(name, true),
            "engine gauge (its state now)".to_owned(),
        ),
        None => (
            unit_of(name, false),
            "engine counter, this process (see the engine's README)".to_owned(),
        ),
    };
    let v = if value.fract() == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.4}")
    };
    (name.to_owned(), v, unit, meaning)
}

/// Prints the explained table of `st` for `db`.
pub fn print_text(db: &Db, st: &Stats) {
    println!("engine {} in {}", db.spec(), db.dir().display());
    if let Some(p) = &db.manifest().pmem {
        let mode = db.media().pmem.as_ref().map(|pool| pool.mode());
        let mode = mode
            .map(|m| format!(", opened in mode {m}"))
            .unwrap_or_default();
        println!("pmem pool    {} ({} bytes{mode})", p.path.display(), p.size);
    }
    for f in &db.manifest().flash {
        println!("flash        {} ({} bytes)", f.path.display(), f.size);
    }
    println!(
        "Counters are per process: they count what this `tierkv stats` process did since it \
         opened the store (opening and recovering it), start at 0 in every process and are \
         not saved; writes by other processes are not in them. Gauges (\"now\") describe the \
         store itself."
    );
    let mut rows = Vec::new();
    let core = st.flatten();
    let n_engine_gauges = st.gauges.len();
    let first_gauge = core.len() - n_engine_gauges;
    for (i, (k, v)) in core.into_iter().enumerate() {
        rows.push(row(&k, v, i >= first_gauge || k == "dram_bytes"));
    }
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let vw = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    for (name, value, unit, meaning) in rows {
        println!("{name:<w$}  {value:>vw$}  {unit:<8}  {meaning}");
    }
}
