//! What the crash-image tests share: the model of acknowledged writes (with the write in
//! flight per key), a write that keeps the model true around the store call, the check of
//! a recovered store against a model, and which occurrences of a persist point get an
//! image (every point, many times each: the first 8, then one in `sample`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use tierkv_core::KvStore;
use tierkv_core::media::pmem::CrashImageOptions;

/// Per key: the last acknowledged value (None = absent) and the write in flight, if any.
pub type Model = BTreeMap<Vec<u8>, (Option<Vec<u8>>, Option<Option<Vec<u8>>>)>;

/// One put (`Some`) or delete (`None`) on `store`, `model` updated before and after it
/// under its lock (an image taken with the model locked sees no write acknowledged in
/// between); returns the store's answer.
pub fn write(
    model: &Mutex<Model>,
    store: &dyn KvStore,
    k: &[u8],
    v: Option<Vec<u8>>,
) -> tierkv_core::Result<()> {
    model
        .lock()
        .unwrap()
        .entry(k.to_vec())
        .or_insert((None, None))
        .1 = Some(v.clone());
    let r = match &v {
        Some(v) => store.put(k, v),
        None => store.delete(k),
    };
    let mut m = model.lock().unwrap();
    let e = m.entry(k.to_vec()).or_insert((None, None));
    match &r {
        Ok(()) => *e = (v, None),
        Err(_) => e.1 = None,
    }
    r
}

/// Asserts that every key of `model` reads, in the recovered `store`, as its last
/// acknowledged value or as the write that was in flight on it.
pub fn assert_recovered(ctx: &str, store: &dyn KvStore, model: &Model) {
    for (k, (acked, inflight)) in model {
        let got = store.get(k).unwrap();
        let ok = got == *acked || inflight.as_ref().is_some_and(|f| got == *f);
        assert!(
            ok,
            "{ctx}: key {} holds {:?}, acknowledged {:?}",
            String::from_utf8_lossy(k),
            got.as_ref().map(|v| v.len()),
            acked.as_ref().map(|v| v.len())
        );
    }
}

/// Counts the occurrences of each point and the images verified at each.
pub struct Sampler {
    seen: Mutex<BTreeMap<String, u64>>,
    verified: Mutex<BTreeMap<String, u64>>,
    /// After the first 8 images of a point, one in `sample`.
    sample: u64,
}

impl Sampler {
    /// A sampler taking one image in `sample` after the first 8 of each point.
    pub fn new(sample: u64) -> Sampler {
        Sampler {
            seen: Mutex::default(),
            verified: Mutex::default(),
            sample,
        }
    }

    /// Counts an occurrence of `label`; `Some((n, options))` when it gets an image (the
    /// n-th occurrence; line-level and word-torn images alternate).
    pub fn next(&self, label: &str) -> Option<(u64, CrashImageOptions)> {
        let n = {
            let mut s = self.seen.lock().unwrap();
            let e = s.entry(label.to_owned()).or_default();
            *e += 1;
            *e
        };
        if n > 8 && n % self.sample != 0 {
            return None;
        }
        let opts = if n % 2 == 0 {
            CrashImageOptions::lines()
        } else {
            CrashImageOptions::torn_words()
        };
        Some((n, opts))
    }

    /// Records a verified image of `label`.
    pub fn verified(&self, label: &str) {
        *self
            .verified
            .lock()
            .unwrap()
            .entry(label.to_owned())
            .or_default() += 1;
    }

    /// Images verified per point.
    pub fn verified_counts(&self) -> BTreeMap<String, u64> {
        self.verified.lock().unwrap().clone()
    }

    /// Prints the points seen and the images verified.
    pub fn report(&self) {
        println!("persist points seen: {:?}", self.seen.lock().unwrap());
        println!("crash images verified: {:?}", self.verified.lock().unwrap());
    }
}
