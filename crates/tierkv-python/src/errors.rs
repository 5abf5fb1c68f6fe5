//! The exception classes of the `tierkv` module: one per variant of [`tierkv::Error`],
//! each a subclass of `tierkv.Error` (`ChecksumMismatch` also of `Corruption`, as
//! [`tierkv::Error::is_corruption`] groups them), and the mapping from the Rust error.
//!
//! Not errors of the store, and so Python's own classes: a `str` (or any non-bytes-like
//! object) where bytes are expected raises `TypeError`, an unknown keyword of `open`
//! raises `TypeError`.

use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use pyo3::{PyErr, create_exception};

create_exception!(
    tierkv,
    Error,
    PyException,
    "Base class of every tierkv error."
);
create_exception!(
    tierkv,
    IoError,
    Error,
    "An operating-system call failed (errno in .errno)."
);
create_exception!(
    tierkv,
    Corruption,
    Error,
    "Bytes read back from a tier are not what tierkv wrote."
);
create_exception!(
    tierkv,
    ChecksumMismatch,
    Corruption,
    "A checksum did not match."
);
create_exception!(
    tierkv,
    UnsupportedFormat,
    Error,
    "The data was written by a newer or unknown format version."
);
create_exception!(
    tierkv,
    InvalidArgument,
    Error,
    "A key or value over the limits, an empty key, a bad option."
);
create_exception!(tierkv, NoSpace, Error, "A tier is full.");
create_exception!(
    tierkv,
    Unsupported,
    Error,
    "The engine cannot do this (a range over a hash index, a batch on an engine without atomic batches)."
);
create_exception!(
    tierkv,
    NoStore,
    Error,
    "The directory holds no store and the call does not create one."
);
create_exception!(
    tierkv,
    Locked,
    Error,
    "The data directory is in use by another open store."
);
create_exception!(tierkv, Closed, Error, "The store was closed.");
create_exception!(
    tierkv,
    Poisoned,
    Error,
    "An earlier failure left the store refusing writes; reopen it."
);

/// The Python exception for `e`; the message is the error's one-line report.
pub fn to_py(e: tierkv::Error) -> PyErr {
    use tierkv::Error as E;
    let msg = e.to_string();
    match e {
        E::Io { source, .. } => {
            let err = IoError::new_err(msg);
            if let Some(code) = source.raw_os_error() {
                Python::attach(|py| {
                    let _ = err.value(py).setattr("errno", code);
                });
            }
            err
        }
        E::Corruption { .. } => Corruption::new_err(msg),
        E::ChecksumMismatch { .. } => ChecksumMismatch::new_err(msg),
        E::UnsupportedFormat { .. } => UnsupportedFormat::new_err(msg),
        E::InvalidArgument(_) => InvalidArgument::new_err(msg),
        E::NoSpace { .. } => NoSpace::new_err(msg),
        E::Unsupported(_) => Unsupported::new_err(msg),
        E::NoStore(_) => NoStore::new_err(msg),
        E::Locked(_) => Locked::new_err(msg),
        E::Closed => Closed::new_err(msg),
        E::Poisoned(_) => Poisoned::new_err(msg),
        _ => Error::new_err(msg),
    }
}

/// Adds every class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("IoError", py.get_type::<IoError>())?;
    m.add("Corruption", py.get_type::<Corruption>())?;
    m.add("ChecksumMismatch", py.get_type::<ChecksumMismatch>())?;
    m.add("UnsupportedFormat", py.get_type::<UnsupportedFormat>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("NoSpace", py.get_type::<NoSpace>())?;
    m.add("Unsupported", py.get_type::<Unsupported>())?;
    m.add("NoStore", py.get_type::<NoStore>())?;
    m.add("Locked", py.get_type::<Locked>())?;
    m.add("Closed", py.get_type::<Closed>())?;
    m.add("Poisoned", py.get_type::<Poisoned>())?;
    Ok(())
}
