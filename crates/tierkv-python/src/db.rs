//! `tierkv.Db`, `tierkv.WriteBatch` and `tierkv.Range`: the facade's [`tierkv::Db`] seen
//! from Python.
//!
//! Every call into the engine runs with the GIL released (`Python::detach`), so other
//! Python threads run while a put waits for its persist or a page is fetched. Keys and
//! values are bytes-like (`bytes`, `bytearray`); a `str` raises `TypeError` (no implicit
//! encoding). Values come back as `bytes`; an absent key as `None`.
//!
//! Thread safety: a `Db` may be shared between Python threads (the engine is `Sync`);
//! `close` waits for nothing: calls that already hold the store finish or fail with
//! `tierkv.Closed`, later calls raise `tierkv.Closed`.

use std::ops::Bound as KeyBound;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use tierkv::{Db, RangeOptions};

use crate::errors::to_py;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn opt_bytes<'py>(py: Python<'py>, v: Option<Vec<u8>>) -> Option<Bound<'py, PyBytes>> {
    v.map(|v| PyBytes::new(py, &v))
}

/// An open store (`tierkv.open(...)`); a context manager that closes it on exit.
#[pyclass(module = "tierkv", name = "Db", frozen)]
pub struct PyDb {
    /// `None` once closed.
    db: Mutex<Option<Arc<Db>>>,
}

impl PyDb {
    pub fn new(db: Db) -> PyDb {
        PyDb {
            db: Mutex::new(Some(Arc::new(db))),
        }
    }

    /// The store, or `tierkv.Closed`.
    fn db(&self) -> PyResult<Arc<Db>> {
        lock(&self.db)
            .clone()
            .ok_or_else(|| to_py(tierkv::Error::Closed))
    }
}

fn bound(k: Option<PyBackedBytes>, inclusive: bool) -> KeyBound<Vec<u8>> {
    match k {
        None => KeyBound::Unbounded,
        Some(k) if inclusive => KeyBound::Included(k.to_vec()),
        Some(k) => KeyBound::Excluded(k.to_vec()),
    }
}

#[pymethods]
impl PyDb {
    /// The value under `key`, or None.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: PyBackedBytes,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let db = self.db()?;
        let v = py.detach(|| db.get(&key)).map_err(to_py)?;
        Ok(opt_bytes(py, v))
    }

    /// Stores `value` under `key`; returns once durable.
    fn put(&self, py: Python<'_>, key: PyBackedBytes, value: PyBackedBytes) -> PyResult<()> {
        let db = self.db()?;
        py.detach(|| db.put(&key, &value)).map_err(to_py)
    }

    /// Removes `key` (no error when absent); returns once durable.
    fn delete(&self, py: Python<'_>, key: PyBackedBytes) -> PyResult<()> {
        let db = self.db()?;
        py.detach(|| db.delete(&key)).map_err(to_py)
    }

    /// Applies `batch` crash-atomically (all or nothing after a crash); returns once
    /// durable. `tierkv.Unsupported` on engines without atomic batches.
    fn write(&self, py: Python<'_>, batch: PyRef<'_, PyWriteBatch>) -> PyResult<()> {
        let db = self.db()?;
        let b = &batch.batch;
        py.detach(|| db.write(b)).map_err(to_py)
    }

    /// The values under `keys`, in order (None for absent keys).
    fn multi_get<'py>(
        &self,
        py: Python<'py>,
        keys: Vec<PyBackedBytes>,
    ) -> PyResult<Bound<'py, PyList>> {
        let db = self.db()?;
        let vals = py.detach(|| db.multi_get(&keys)).map_err(to_py)?;
        PyList::new(py, vals.into_iter().map(|v| opt_bytes(py, v)))
    }

    /// A lazy iterator of `(key, value)` over `start <= key < end` (None: unbounded;
    /// `end_inclusive=True` for `key <= end`), fetched one page (one engine scan) at a time;
    /// `reverse=True` walks it from the top (see `tierkv::range`).
    #[pyo3(signature = (start=None, end=None, *, reverse=false, end_inclusive=false, page_entries=tierkv::range::DEFAULT_PAGE_ENTRIES, page_bytes=tierkv::range::DEFAULT_PAGE_BYTES))]
    fn range(
        &self,
        start: Option<PyBackedBytes>,
        end: Option<PyBackedBytes>,
        reverse: bool,
        end_inclusive: bool,
        page_entries: usize,
        page_bytes: usize,
    ) -> PyResult<PyRange> {
        let db = self.db()?;
        let opts = RangeOptions::default()
            .reverse(reverse)
            .page_entries(page_entries)
            .page_bytes(page_bytes);
        let bounds = (bound(start, true), bound(end, end_inclusive));
        Ok(PyRange {
            it: Mutex::new(db.range_with(bounds, opts)),
        })
    }

    /// Deletes every key in `start <= key < end`; returns how many (in crash-atomic
    /// batches of up to 10,000 keys on engines with batches, else one by one).
    #[pyo3(signature = (start=None, end=None, *, end_inclusive=false))]
    fn delete_range(
        &self,
        py: Python<'_>,
        start: Option<PyBackedBytes>,
        end: Option<PyBackedBytes>,
        end_inclusive: bool,
    ) -> PyResult<u64> {
        let db = self.db()?;
        let bounds = (bound(start, true), bound(end, end_inclusive));
        py.detach(|| db.delete_range(bounds)).map_err(to_py)
    }

    /// Makes buffered background work durable now.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.db()?;
        py.detach(|| db.flush()).map_err(to_py)
    }

    /// The store's counters as a dict: ints, and floats for the engine's gauges.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let db = self.db()?;
        let s = py.detach(|| db.stats());
        let d = PyDict::new(py);
        for (name, v) in s.flatten() {
            if s.gauges.contains_key(&name) {
                d.set_item(name, v)?;
            } else {
                d.set_item(name, v as u64)?;
            }
        }
        Ok(d)
    }

    /// Verifies the store (manifest, media headers, engine invariants): one line per check;
    /// raises on the first failure.
    fn check(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let db = self.db()?;
        py.detach(|| db.check()).map_err(to_py)
    }

    /// Closes the store: joins the engine's threads, makes everything durable, releases the
    /// directory. Later calls raise `tierkv.Closed`; closing twice is harmless.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = lock(&self.db).take();
        match taken {
            Some(db) => py.detach(|| db.close()).map_err(to_py),
            None => Ok(()),
        }
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        lock(&self.db).is_none()
    }

    /// The engine spec the store was opened with.
    #[getter]
    fn engine(&self) -> PyResult<String> {
        Ok(self.db()?.spec().to_string())
    }

    /// The data directory.
    #[getter]
    fn path(&self) -> PyResult<std::path::PathBuf> {
        Ok(self.db()?.dir().to_owned())
    }

    /// True when `write` is crash-atomic on this engine (else it raises Unsupported).
    #[getter]
    fn atomic_batches(&self) -> PyResult<bool> {
        Ok(self.db()?.atomic_batches())
    }

    /// True when the engine scans in key order (else `range` raises Unsupported).
    #[getter]
    fn ordered(&self) -> PyResult<bool> {
        Ok(self.db()?.ordered())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        match lock(&self.db).as_ref() {
            Some(db) => format!("<tierkv.Db {} at {:?}>", db.spec(), db.dir()),
            None => "<tierkv.Db (closed)>".to_owned(),
        }
    }
}

/// Puts and deletes to apply as one crash-atomic write (`Db.write`); the later operation
/// on a key wins. `put` and `delete` return the batch, so calls chain.
#[pyclass(module = "tierkv", name = "WriteBatch")]
#[derive(Default)]
pub struct PyWriteBatch {
    batch: tierkv::WriteBatch,
}

#[pymethods]
impl PyWriteBatch {
    #[new]
    fn new() -> Self {
        PyWriteBatch::default()
    }

    /// Adds a put of `value` under `key`.
    fn put(
        mut slf: PyRefMut<'_, Self>,
        key: PyBackedBytes,
        value: PyBackedBytes,
    ) -> PyRefMut<'_, Self> {
        slf.batch.put(key.to_vec(), value.to_vec());
        slf
    }

    /// Adds a delete of `key`.
    fn delete(mut slf: PyRefMut<'_, Self>, key: PyBackedBytes) -> PyRefMut<'_, Self> {
        slf.batch.delete(key.to_vec());
        slf
    }

    /// Removes every operation.
    fn clear(&mut self) {
        self.batch.clear();
    }

    /// Bytes of keys and values held (at most 16 MiB per batch).
    #[getter]
    fn nbytes(&self) -> usize {
        self.batch.bytes()
    }

    fn __len__(&self) -> usize {
        self.batch.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "<tierkv.WriteBatch of {} operations, {} bytes>",
            self.batch.len(),
            self.batch.bytes()
        )
    }
}

/// The iterator `Db.range` returns: yields `(key, value)` tuples of bytes, one engine page
/// at a time; an engine error is raised from `next()` and ends it.
#[pyclass(module = "tierkv", name = "Range", frozen)]
pub struct PyRange {
    it: Mutex<tierkv::Range>,
}

#[pymethods]
impl PyRange {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let item = py.detach(|| lock(&self.it).next());
        match item {
            None => Ok(None),
            Some(Ok((k, v))) => Ok(Some((PyBytes::new(py, &k), PyBytes::new(py, &v)))),
            Some(Err(e)) => Err(to_py(e)),
        }
    }

    /// Engine scans made so far.
    #[getter]
    fn pages_fetched(&self) -> u64 {
        lock(&self.it).pages_fetched()
    }

    /// Entries the engine returned so far.
    #[getter]
    fn entries_fetched(&self) -> u64 {
        lock(&self.it).entries_fetched()
    }

    /// Entries fetched and not yet yielded (at most one page).
    #[getter]
    fn buffered(&self) -> usize {
        lock(&self.it).buffered()
    }
}
