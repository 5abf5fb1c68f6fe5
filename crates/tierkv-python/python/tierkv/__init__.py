"""tierkv: an embedded, crash-consistent key-value store over DRAM, persistent memory and
flash, with five published engine designs behind one API (Python bindings of the Rust
crate ``tierkv``).

    import tierkv
    with tierkv.open("data", engine="prism", pmem_size="64MiB") as db:
        db.put(b"k", b"v")
        db.write(tierkv.WriteBatch().put(b"a", b"1").delete(b"k"))
        for k, v in db.range(b"a", b"z"):
            print(k, v)

Keys and values are bytes (a ``str`` raises ``TypeError``). Every error of the store is a
subclass of ``tierkv.Error``.
"""

from ._tierkv import (
    ChecksumMismatch,
    Closed,
    Corruption,
    Db,
    Error,
    InvalidArgument,
    IoError,
    Locked,
    NoSpace,
    NoStore,
    Poisoned,
    Range,
    Unsupported,
    UnsupportedFormat,
    WriteBatch,
    __version__,
    engines,
    open,
)

__all__ = [
    "ChecksumMismatch",
    "Closed",
    "Corruption",
    "Db",
    "Error",
    "InvalidArgument",
    "IoError",
    "Locked",
    "NoSpace",
    "NoStore",
    "Poisoned",
    "Range",
    "Unsupported",
    "UnsupportedFormat",
    "WriteBatch",
    "__version__",
    "engines",
    "open",
]
