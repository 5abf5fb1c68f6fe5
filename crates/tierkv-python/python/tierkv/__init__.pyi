"""Type stubs of the tierkv module (the extension module tierkv._tierkv)."""

import os
import pathlib
from types import TracebackType
from typing import Iterator, Mapping, Optional, Sequence, Tuple, TypedDict, Union

__version__: str

Buffer = Union[bytes, bytearray, memoryview]
Size = Union[int, str]
PathLike = Union[str, "os.PathLike[str]"]

class EngineInfo(TypedDict):
    name: str
    variants: list[str]
    summary: str
    tiers: list[str]
    variant_tiers: dict[str, list[str]]
    volatile: bool
    atomic_batches: bool
    unordered_variants: list[str]

class Error(Exception):
    """Base class of every tierkv error."""

class IoError(Error):
    """An operating-system call failed."""

    errno: int

class Corruption(Error):
    """Bytes read back from a tier are not what tierkv wrote."""

class ChecksumMismatch(Corruption):
    """A checksum did not match."""

class UnsupportedFormat(Error):
    """The data was written by a newer or unknown format version."""

class InvalidArgument(Error):
    """A key or value over the limits, an empty key, a bad option."""

class NoSpace(Error):
    """A tier is full."""

class Unsupported(Error):
    """The engine cannot do this."""

class NoStore(Error):
    """The directory holds no store and the call does not create one."""

class Locked(Error):
    """The data directory is in use by another open store."""

class Closed(Error):
    """The store was closed."""

class Poisoned(Error):
    """An earlier failure left the store refusing writes; reopen it."""

class WriteBatch:
    """Puts and deletes applied as one crash-atomic write by Db.write."""

    def __init__(self) -> None: ...
    def put(self, key: Buffer, value: Buffer) -> "WriteBatch": ...
    def delete(self, key: Buffer) -> "WriteBatch": ...
    def clear(self) -> None: ...
    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...

class Range(Iterator[Tuple[bytes, bytes]]):
    """A lazy iterator of (key, value), fetched one page at a time."""

    def __iter__(self) -> "Range": ...
    def __next__(self) -> Tuple[bytes, bytes]: ...
    @property
    def pages_fetched(self) -> int: ...
    @property
    def entries_fetched(self) -> int: ...
    @property
    def buffered(self) -> int: ...

class Db:
    """An open store; a context manager that closes it on exit."""

    def get(self, key: Buffer) -> Optional[bytes]: ...
    def put(self, key: Buffer, value: Buffer) -> None: ...
    def delete(self, key: Buffer) -> None: ...
    def write(self, batch: WriteBatch) -> None: ...
    def multi_get(self, keys: Sequence[Buffer]) -> list[Optional[bytes]]: ...
    def range(
        self,
        start: Optional[Buffer] = None,
        end: Optional[Buffer] = None,
        *,
        reverse: bool = False,
        end_inclusive: bool = False,
        page_entries: int = 256,
        page_bytes: int = 1048576,
    ) -> Range: ...
    def delete_range(
        self,
        start: Optional[Buffer] = None,
        end: Optional[Buffer] = None,
        *,
        end_inclusive: bool = False,
    ) -> int: ...
    def flush(self) -> None: ...
    def stats(self) -> dict[str, Union[int, float]]: ...
    def check(self) -> list[str]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def engine(self) -> str: ...
    @property
    def path(self) -> pathlib.Path: ...
    @property
    def atomic_batches(self) -> bool: ...
    @property
    def ordered(self) -> bool: ...
    def __enter__(self) -> "Db": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

def open(
    path: PathLike,
    engine: Optional[str] = None,
    *,
    dram: Size = ...,
    pmem_path: PathLike = ...,
    pmem_size: Size = ...,
    pmem_mode: str = ...,
    flash_path: Union[PathLike, Sequence[PathLike]] = ...,
    flash_size: Size = ...,
    create_if_missing: bool = ...,
    max_key_len: int = ...,
    max_value_len: int = ...,
    engine_options: Mapping[str, object] = ...,
) -> Db: ...
def engines() -> list[EngineInfo]: ...
