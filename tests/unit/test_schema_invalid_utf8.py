"""A string column holding bytes that are not UTF-8 (a writer that stored raw bytes under a
string type): the shard stops with an error naming the file, the column and, for a top-level
column, the row. It used to stop with a bare ``UnicodeDecodeError: 'utf-8' codec can't decode
byte 0xff in position 0`` naming neither (found trying the README on a fresh clone)."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from specrag_batch.run.planning import read_validated
from specrag_batch.core.schema import InputSchemaError

DOC = {"doc_id": "d", "title": "t", "text": "The yen is the currency of Japan."}


def _strings(*values: bytes) -> pa.Array:
    """A string array over raw bytes, unchecked (what a careless writer can produce)."""
    offsets, end = [0], 0
    for v in values:
        end += len(v)
        offsets.append(end)
    return pa.Array.from_buffers(pa.string(), len(values),
                                 [None, pa.py_buffer(pa.array(offsets, pa.int32()).buffers()[1]),
                                  pa.py_buffer(b"".join(values))])


def test_invalid_utf8_in_a_column_names_file_column_and_row(tmp_path):
    path = tmp_path / "bytes.parquet"
    first = pa.table({"query_id": ["u0", "u1", "u2"], "query": _strings(b"ok?", b"ok?", b"ok?"),
                      "task": ["qa"] * 3, "documents": [[DOC]] * 3})
    second = first.slice(0, 2).set_column(1, "query", _strings(b"fine?", b"bad \xff\xfe?"))
    with pq.ParquetWriter(path, first.schema) as w:  # two row groups: the row counts across them
        w.write_table(first)
        w.write_table(second)
    with pytest.raises(InputSchemaError, match=r"bytes\.parquet: column 'query': row 4: not valid UTF-8"):
        read_validated(str(path), set())


def test_invalid_utf8_inside_documents_names_file_and_column(tmp_path):
    path = tmp_path / "docs.parquet"
    texts = pa.StructArray.from_arrays([_strings(b"fine", b"bad \xff")], ["text"])
    docs = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), texts)
    pq.write_table(pa.table({"query_id": ["d0", "d1"], "query": ["a?", "b?"], "task": ["qa", "qa"],
                             "documents": docs}), path)
    with pytest.raises(InputSchemaError, match=r"docs\.parquet: column 'documents': not valid UTF-8"):
        read_validated(str(path), set())
