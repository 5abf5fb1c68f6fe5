//! Every registered persistent engine under racing writers (issue 17, item 5): with three
//! writers per key, a short fixed-seed pmem-image run of every variant of each pmem engine
//! (`hetermm:btree|hash|lockfree`, ...), and a power-loss kill of its default variant.
//! Engines join by being registered. (flash-faults with racing writers: by hand, see the
//! README.)

mod common;

use tierkv::Tier;

#[test]
fn every_registered_engine_passes_racing_writers() {
    for d in tierkv::ENGINES.iter().filter(|d| !d.volatile) {
        let mut runs: Vec<(String, &str, Vec<&str>)> = vec![(
            d.name.to_owned(),
            "kill",
            [
                &["--pmem-mode", "tracked"],
                common::crash_batch_flags(d.name, "kill-tracked"),
            ]
            .concat(),
        )];
        if d.uses(Tier::Pmem) {
            let variants: Vec<String> = if d.variants.len() > 1 {
                d.variants
                    .iter()
                    .map(|v| format!("{}:{v}", d.name))
                    .collect()
            } else {
                vec![d.name.to_owned()]
            };
            runs.extend(variants.into_iter().map(|e| (e, "pmem-image", vec![])));
        } else if d.uses(Tier::Flash) {
            runs.push((d.name.to_owned(), "flash-faults", vec![]));
        }
        for (engine, mode, mut extra) in runs {
            println!("== {engine} in {mode} mode, racing writers");
            extra.extend(common::crash_batch_flags(&engine, mode));
            extra.extend(["--writers-per-key", "3"]);
            let run = common::ci_run(&engine, mode, 1710, 2, &extra);
            common::assert_passed(&run, 2);
        }
    }
}
