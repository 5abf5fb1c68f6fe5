//! A compaction picks its victims and frees them in chunks, letting the partition's lock go
//! between them (`compaction.rs`: `PICK_CHUNK` = 256 index entries, `INSTALL_CHUNK` = 512
//! victims): at counts on and around the chunk sizes, one forced compaction demotes every
//! object once, in key order, and every key reads back its value from flash.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use tierkv_core::KvStore;
use tierkv_prismdb::compaction::{Trigger, compact};

use common::Rig;

/// One partition, tables large enough for every victim, no read-triggered work.
const SPEC: &str = "prismdb@partitions=1,chunk_size=16KiB,table_size=4MiB,\
high_watermark=0.95,low_watermark=0.9,read_compactions=off,promotions=off";

fn key(i: u32) -> Vec<u8> {
    format!("key{i:06}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    format!("value of {i} ").repeat(4).into_bytes()
}

#[test]
fn victims_picked_and_freed_in_chunks_are_each_demoted_once() {
    for n in [255u32, 256, 257, 511, 512, 513, 1025] {
        let rig = Rig::new(SPEC, 16);
        let store = rig.create();
        store.stop_background();
        for i in 0..n {
            store.put(&key(i), &value(i)).unwrap();
        }
        let sh = store.shared();
        let part = sh.parts.first().unwrap();
        let out = compact(sh, part, Trigger::Write, true).unwrap().unwrap();
        assert_eq!(out.demoted, u64::from(n), "n = {n}");
        {
            let st = part.state.read();
            assert!(st.index.is_empty(), "n = {n}: every object demoted");
            assert!(st.compacting.is_none());
            let entries: u64 = st.tables.tables.iter().map(|t| t.footer.entries).sum();
            assert_eq!(entries, u64::from(n), "n = {n}: each key once on flash");
        }
        for i in 0..n {
            assert_eq!(
                store.get(&key(i)).unwrap(),
                Some(value(i)),
                "n = {n}, key {i}"
            );
        }
    }
}
