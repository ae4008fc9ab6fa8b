"""The passage store: ``doc_id``, ``title``, ``text`` of every passage in index order, read
lazily. The build concatenates the shards' passages into one Arrow IPC file (uncompressed, so
it can be memory-mapped); a search reads only the rows it returns (a lookup of each row's
record batch by its offset), so no corpus-sized list of Python objects is ever made.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pyarrow as pa

from ..core.records import Document

STORE_BATCH_ROWS = 8192
"""Rows per record batch of the store file: a lookup decodes only the batches it touches."""


def write_store(sources: Iterable[Path], out: Path, schema: pa.Schema) -> int:
    """Concatenate the Arrow IPC files ``sources`` (in order) into one IPC file ``out`` of
    record batches of at most :data:`STORE_BATCH_ROWS` rows; returns the rows written. Memory:
    one record batch at a time (sources are memory-mapped)."""
    rows = 0
    with pa.OSFile(str(out), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for path in sources:
            with pa.memory_map(str(path), "r") as source:
                reader = pa.ipc.open_file(source)
                for i in range(reader.num_record_batches):
                    batch = reader.get_batch(i)
                    for start in range(0, batch.num_rows, STORE_BATCH_ROWS):
                        part = batch.slice(start, STORE_BATCH_ROWS)
                        writer.write_batch(part)
                        rows += part.num_rows
    return rows


def iter_texts(path: Path) -> Iterable[tuple[list, list]]:
    """(titles, texts) of the store file at ``path``, one record batch at a time."""
    with pa.memory_map(str(path), "r") as source:
        reader = pa.ipc.open_file(source)
        for i in range(reader.num_record_batches):
            batch = reader.get_batch(i)
            yield batch.column("title").to_pylist(), batch.column("text").to_pylist()


def doc_id_fingerprint(batches: Iterable[pa.RecordBatch]) -> str:
    """SHA-256 (hex) of the ``doc_id`` column of ``batches`` in order, each id as UTF-8 followed by
    a NUL byte: ties the passage store to the vectors built in that order, so a store reordered or
    taken from another build is found when the index opens. Reads one column (about a second per
    million passages)."""
    h = hashlib.sha256()
    for batch in batches:
        for doc_id in batch.column("doc_id").cast(pa.string()).to_pylist():
            h.update(str(doc_id).encode("utf-8", "surrogatepass") + b"\0")
    return h.hexdigest()


def file_fingerprint(path: Path) -> str:
    """:func:`doc_id_fingerprint` of the store file at ``path``."""
    with pa.memory_map(str(path), "r") as source:
        reader = pa.ipc.open_file(source)
        return doc_id_fingerprint(reader.get_batch(i) for i in range(reader.num_record_batches))


class PassageStore:
    """Passages by row number from an Arrow table (memory-mapped file, or in memory for an
    index of the first layout), returned as :class:`~specrag_batch.core.records.Document`."""

    def __init__(self, batches: Sequence[pa.RecordBatch], keep=None):
        self._batches = list(batches)
        self._starts = np.cumsum([0] + [b.num_rows for b in self._batches], dtype=np.int64)
        self._keep = keep  # the memory map the batches point into

    @classmethod
    def open(cls, path: Path) -> "PassageStore":
        """The store file at ``path``, memory-mapped (zero-copy: pages are read when a row is)."""
        source = pa.memory_map(str(path), "r")
        reader = pa.ipc.open_file(source)
        return cls([reader.get_batch(i) for i in range(reader.num_record_batches)], keep=source)

    @classmethod
    def from_table(cls, table: pa.Table) -> "PassageStore":
        """A store over an in-memory table with ``doc_id``, ``title``, ``text`` columns."""
        table = table.select(["doc_id", "title", "text"])
        return cls(table.to_batches())

    def __len__(self) -> int:
        return int(self._starts[-1])

    def fingerprint(self) -> str:
        """:func:`doc_id_fingerprint` of this store's passages, in index order."""
        return doc_id_fingerprint(self._batches)

    def get(self, rows: Sequence[int]) -> list[Document]:
        """The passages at row numbers ``rows`` (in that order; each in ``[0, len)``), with a
        null title or text read as ``""``.

        Raises:
            IndexError: a row number outside the store."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.size == 0:
            return []
        if rows.min() < 0 or rows.max() >= len(self):
            raise IndexError(f"passage rows {rows.min()}..{rows.max()} outside a store of {len(self)}")
        which = np.searchsorted(self._starts, rows, side="right") - 1
        out: list[Document | None] = [None] * len(rows)
        for b in np.unique(which):
            at = np.flatnonzero(which == b)
            part = self._batches[b].take(pa.array(rows[at] - self._starts[b]))
            for j, i, t, x in zip(at, part.column("doc_id").to_pylist(), part.column("title").to_pylist(),
                                  part.column("text").to_pylist()):
                out[j] = Document(str(i), t or "", x or "")
        return out  # type: ignore[return-value]

    def doc_ids(self, rows: Sequence[int]) -> list[str]:
        """The ``doc_id`` of each row number in ``rows``."""
        return [d.doc_id for d in self.get(rows)]
