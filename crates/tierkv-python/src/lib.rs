//! Python bindings of tierkv (issue 24 item 3): the extension module `tierkv._tierkv`,
//! re-exported by the pure-Python package `tierkv` (`python/tierkv/__init__.py`, with its
//! type stubs `__init__.pyi`).
//!
//! ```python
//! import tierkv
//! with tierkv.open("data", engine="prism", pmem_size="64MiB") as db:
//!     db.put(b"k", b"v")
//!     db.write(tierkv.WriteBatch().put(b"a", b"1").delete(b"k"))
//!     for k, v in db.range(b"a", b"z"):
//!         print(k, v)
//! ```
//!
//! Modules: `errors` (exception classes), `options` (`open`'s keywords), `db`
//! (`Db`, `WriteBatch`, `Range`). Built with maturin (`pyproject.toml`); tested with pytest
//! (`tests/`). Linked against the stable ABI (abi3, Python 3.9 and later).

mod db;
mod errors;
mod options;

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::errors::to_py;

/// Opens the store in `path` (creating it when it holds none, unless
/// `create_if_missing=False`). `engine` is a spec such as `"prism"` or `"dram:btree"`;
/// without it, the store's own engine, or `prism` for a new store.
#[pyfunction]
#[pyo3(signature = (path, engine=None, **options))]
fn open(
    py: Python<'_>,
    path: PathBuf,
    engine: Option<String>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<db::PyDb> {
    let o = options::build(&path, engine.as_deref(), options)?;
    let db = py.detach(|| tierkv::Db::open(&path, o)).map_err(to_py)?;
    Ok(db::PyDb::new(db))
}

/// The engines of this build, default first: dicts with `name`, `variants`, `summary`,
/// `tiers` (of the default variant), `variant_tiers` (variant → tiers, for variants on
/// other tiers, such as `mio:flash`), `volatile`, `atomic_batches` and
/// `unordered_variants`.
#[pyfunction]
fn engines(py: Python<'_>) -> PyResult<Bound<'_, PyList>> {
    let list = PyList::empty(py);
    for d in tierkv::ENGINES {
        let e = PyDict::new(py);
        e.set_item("name", d.name)?;
        e.set_item("variants", d.variants.to_vec())?;
        e.set_item("summary", d.summary)?;
        let tiers: Vec<String> = d.tiers.iter().map(ToString::to_string).collect();
        e.set_item("tiers", tiers)?;
        let variant_tiers = PyDict::new(py);
        for (variant, t) in d.variant_tiers {
            let t: Vec<String> = t.iter().map(ToString::to_string).collect();
            variant_tiers.set_item(*variant, t)?;
        }
        e.set_item("variant_tiers", variant_tiers)?;
        e.set_item("volatile", d.volatile)?;
        e.set_item(
            "atomic_batches",
            tierkv::ATOMIC_BATCH_ENGINES.contains(&d.name),
        )?;
        let unordered: Vec<&str> = d
            .variants
            .iter()
            .copied()
            .filter(|v| !tierkv::is_ordered(d.name, v))
            .collect();
        e.set_item("unordered_variants", unordered)?;
        list.append(e)?;
    }
    Ok(list)
}

/// The extension module.
#[pymodule]
fn _tierkv(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(engines, m)?)?;
    m.add_class::<db::PyDb>()?;
    m.add_class::<db::PyWriteBatch>()?;
    m.add_class::<db::PyRange>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)
}
