//! The scan-aware write-back of PRISM §4.4 (Figure 3 ⑤⑥) end to end: values a scan read
//! from scattered chunks are admitted to the SVC on one scan chain; when one of them is
//! evicted, the eviction callback receives the whole chain sorted by key and writes it into
//! one chunk; the next scan of that range then needs a single merged flash read.

mod value_storage_support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tierkv_prism::combining::CombiningMode;
use tierkv_prism::svc::{ENTRY_OVERHEAD, EvictionBatch, ScanAwareValueCache};
use tierkv_prism::value_storage::ValueLocation;
use value_storage_support::{backends, data_dir, device, storage, value};

const CHUNK: u32 = 64 * 1024;
const KEYS: u64 = 20;

/// A stand-in for the key index + HSIT: key -> (slot, location).
type Index = Arc<Mutex<BTreeMap<Vec<u8>, (u64, ValueLocation)>>>;

#[test]
fn evicted_scan_chain_is_rewritten_into_one_chunk_and_rescanned_with_one_read() {
    let dir = data_dir();
    let dev = device(dir.path(), backends()[0], 32 << 20);
    let vs = Arc::new(storage(&dev, KEYS + 4, CHUNK, CombiningMode::Combining));
    // key -> (slot, location); each value goes to a different chunk, interleaved with others.
    let index: Index = Arc::default();
    for slot in 0..KEYS {
        let filler = value(1000 + slot, 0, 30_000);
        let v = value(slot, 1, 900);
        let locs = vs
            .write_chunk(&[(1000 + slot, &filler[..]), (slot, &v[..])])
            .unwrap();
        index
            .lock()
            .unwrap()
            .insert(format!("key{slot:03}").into_bytes(), (slot, locs[1]));
    }
    let scan_locs: Vec<ValueLocation> = index.lock().unwrap().values().map(|e| e.1).collect();
    vs.read_many(&scan_locs).unwrap();
    assert_eq!(
        vs.stats().multi_read_ios,
        KEYS,
        "scattered values: one read each"
    );

    let (vs2, index2) = (vs.clone(), index.clone());
    let writeback = move |b: EvictionBatch| {
        if b.chain.is_empty() {
            return;
        }
        let values: Vec<(u64, &[u8])> =
            b.chain.iter().map(|m| (m.slot(), &m.value()[..])).collect();
        let locs = vs2.write_chunk(&values).expect("write the chain back");
        let mut idx = index2.lock().expect("index");
        for (m, new) in b.chain.iter().zip(locs) {
            let entry = idx
                .get_mut(m.key().expect("scans give keys"))
                .expect("indexed");
            vs2.invalidate(entry.1)
                .expect("invalidate the scattered copy");
            entry.1 = new;
        }
    };
    let per_entry = 900 + 6 + ENTRY_OVERHEAD;
    let svc = ScanAwareValueCache::new(KEYS * per_entry, Arc::new(writeback)).unwrap();
    let chain = svc.new_scan_chain();
    for (k, (slot, loc)) in index.lock().unwrap().iter().rev() {
        let (_, v) = vs.read(*loc).unwrap();
        svc.admit(*slot, Some(k), Arc::from(v), Some(chain));
    }
    svc.admit(999, Some(b"other"), Arc::from(vec![0u8; 900]), None);
    svc.quiesce();
    assert_eq!(svc.stats().chain_writebacks, 1);

    let idx = index.lock().unwrap().clone();
    let chunks: std::collections::BTreeSet<u32> = idx.values().map(|e| e.1.chunk).collect();
    assert_eq!(chunks.len(), 1, "the chain lives in one chunk now");
    let offsets: Vec<u32> = idx.values().map(|e| e.1.offset).collect();
    assert!(
        offsets.windows(2).all(|w| w[0] < w[1]),
        "sorted by key on flash"
    );
    let before = vs.stats().multi_read_ios;
    let got = vs
        .read_many(&idx.values().map(|e| e.1).collect::<Vec<_>>())
        .unwrap();
    assert_eq!(
        vs.stats().multi_read_ios - before,
        1,
        "one merged read for the whole range"
    );
    for ((slot, _), (b, v)) in idx.values().zip(got) {
        assert_eq!((b, v), (*slot, value(*slot, 1, 900)));
    }
    svc.close();
}
