//! `open`'s keyword options, as the CLI takes them (`tierkv --help`): `dram`, `pmem_path`,
//! `pmem_size`, `pmem_mode`, `flash_path`, `flash_size`, plus `create_if_missing`,
//! `max_key_len`, `max_value_len` and `engine_options` (a dict of the engine's own
//! options, as after `@` in a spec). Sizes are ints (bytes) or strings such as `"64MiB"`.
//! A bad value raises `tierkv.InvalidArgument`; an unknown keyword raises `TypeError`.

use std::path::PathBuf;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use tierkv::{ByteSize, DurabilityMode, Options};

use crate::errors::to_py;

/// The keywords `open` takes besides `path` and `engine`.
pub const KEYWORDS: &[&str] = &[
    "dram",
    "pmem_path",
    "pmem_size",
    "pmem_mode",
    "flash_path",
    "flash_size",
    "create_if_missing",
    "max_key_len",
    "max_value_len",
    "engine_options",
];

/// A size given as an int of bytes or a string with a unit.
fn size(v: &Bound<'_, PyAny>) -> PyResult<ByteSize> {
    if let Ok(s) = v.cast::<PyString>() {
        return s.extract::<String>()?.parse::<ByteSize>().map_err(to_py);
    }
    let n: u64 = v
        .extract()
        .map_err(|_| PyTypeError::new_err("a size is an int (bytes) or a str such as \"64MiB\""))?;
    Ok(ByteSize(n))
}

fn paths(v: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    if let Ok(p) = v.extract::<PathBuf>() {
        return Ok(vec![p]);
    }
    v.extract::<Vec<PathBuf>>()
}

/// Applies one keyword option.
fn apply(o: &mut Options, key: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
    match key {
        "dram" => o.dram_budget = size(v)?,
        "pmem_path" => o.pmem.dir = Some(v.extract()?),
        "pmem_size" => o.pmem.size = size(v)?,
        "pmem_mode" => {
            o.pmem.mode = v
                .extract::<String>()?
                .parse::<DurabilityMode>()
                .map_err(to_py)?
        }
        "flash_path" => o.flash.dirs = paths(v)?,
        "flash_size" => o.flash.size = size(v)?,
        "create_if_missing" => o.create_if_missing = v.extract()?,
        "max_key_len" => o.limits.max_key_len = v.extract()?,
        "max_value_len" => o.limits.max_value_len = v.extract()?,
        "engine_options" => {
            let d = v.cast::<PyDict>()?;
            for (k, val) in d.iter() {
                let k: String = k.extract()?;
                let val: String = val.str()?.extract()?;
                o.engine_options.insert(k, val);
            }
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "open() got an unexpected keyword argument {other:?} (options: {})",
                KEYWORDS.join(", ")
            )));
        }
    }
    Ok(())
}

/// The options for `open(path, engine, **kwargs)`. Without `engine`, a store's own engine
/// (from its manifest) or the default (`prism`) for a new one.
pub fn build(
    path: &std::path::Path,
    engine: Option<&str>,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<Options> {
    let mut o = Options::default();
    match engine {
        Some(e) => e.clone_into(&mut o.engine),
        None => {
            if let Some(m) = tierkv::Manifest::read_from(path).map_err(to_py)? {
                o.engine = m.engine;
            }
        }
    }
    if let Some(kw) = kwargs {
        for (k, v) in kw.iter() {
            let k: String = k.extract()?;
            apply(&mut o, &k, &v)?;
        }
    }
    Ok(o)
}
