"""Shard names as real buckets hold them: a path that came from a listing is never parsed
again as a URL chain (``::``), fragment (``#``), query (``?``), escape (``%``) or glob
(``*``, ``[``). Listing, output naming, reading, fingerprinting, writing and marking each see
the shard's own bytes, beside a decoy file ``ns`` that a re-parsed ``ns::...`` would read.
Local disk here; the same checks on the moto S3 server in tests/flows/test_shard_names_s3.py."""

import pyarrow as pa
import pytest

from specrag_batch.run import resume
from specrag_batch.core import storage
from specrag_batch.run.planning import (check_layout, plan_ids, plan_shards, read_all_ids, read_validated, shard_output_uri)

ODD_NAMES = ["ns::part-0.parquet", "ns::part-1.parquet", "a#frag.parquet", "q?x=1&y.parquet",
             "100%25 %.parquet", "star*.parquet", "br[0-9].parquet", "with space.parquet",
             "ünï cødé 日本.parquet", "sub dir/p::[1]#?*.parquet"]
DECOY = "ns"


def shard_table(name: str, n: int = 2) -> pa.Table:
    """Rows whose ids name their shard, so a row read from the wrong file is caught."""
    return pa.table({"query_id": [f"{name}#{i}" for i in range(n)], "query": ["q?"] * n, "task": ["qa"] * n})


def write_odd_inputs(prefix: str, n: int = 2) -> None:
    """The odd-named shards, and the decoy ``ns`` (valid Parquet with its own row)."""
    for name in ODD_NAMES:
        storage.write_parquet_atomic(storage.join(prefix, name), shard_table(name, n))
    storage.write_parquet_atomic(storage.join(prefix, DECOY), shard_table("DECOY", 1))


def expected_output_name(name: str) -> str:
    return name.replace("/", "__")


def check_round_trip(inp: str, out: str) -> None:
    """List, name, read, fingerprint, write, mark and resume each odd-named shard."""
    shards, skipped = plan_shards(inp)
    assert shards == sorted(storage.join(inp, n) for n in ODD_NAMES)
    assert skipped == [{"input": storage.join(inp, DECOY), "reason": "not a .parquet file"}]
    check_layout(inp, out, shards)
    ids = read_all_ids(shards)  # each odd name opened as listed: its footer and query_id column
    assert ids == {s: [f"{s[len(inp) + 1:]}#{i}" for i in range(2)] for s in shards}
    assert all(p.error is None and not p.seen_before for p in plan_ids(shards, ids, {}))
    outputs = set()
    for s in shards:
        name = s[len(inp) + 1:]
        rows = read_validated(s, set(), None)
        assert [r.query_id for r in rows] == [f"{name}#0", f"{name}#1"]
        out_uri = shard_output_uri(inp, s, out)
        assert out_uri == storage.join(out, expected_output_name(name))
        fp = resume.input_fingerprint(s)
        assert fp["size"] == len(storage.read_bytes(s))
        storage.write_parquet_atomic(out_uri, pa.table({"query_id": [r.query_id for r in rows],
                                                        "source_file": [s] * len(rows)}))
        resume.mark_done(out, out_uri, "cfg", fp, "run", {"status": "ok"})
        assert resume.completed_shard(out, out_uri, "cfg", fp) is not None
        outputs.add(out_uri)
    listed = [f for f in storage.list_files(out) if f.endswith(".parquet")]
    assert set(listed) == outputs
    got = sorted(i for f in listed for i in storage.read_parquet(f).column("query_id").to_pylist())
    assert got == sorted(f"{n}#{i}" for n in ODD_NAMES for i in range(2))  # each row once, no decoy
    resume.clear_previous(out)  # --overwrite removes exactly what the markers name
    left = storage.list_files(out) if storage.exists(out) else []  # S3 has no empty folders
    assert [f for f in left if f.endswith(".parquet")] == []


def test_local_odd_names_round_trip(tmp_path):
    inp, out = str(tmp_path / "in"), str(tmp_path / "out")
    write_odd_inputs(inp)
    check_round_trip(inp, out)


@pytest.mark.parametrize("uri, expected", [
    ("/d/ns::part-0.parquet", ("file", "/d/ns::part-0.parquet")),
    ("file:///d/a#b?c.parquet", ("file", "/d/a#b?c.parquet")),
    ("s3://bkt/in/ns::p*[0].parquet", ("s3", "bkt/in/ns::p*[0].parquet")),
    ("s3://bkt/a%20b#c?d.parquet", ("s3", "bkt/a%20b#c?d.parquet")),
])
def test_split_uri_only_takes_the_scheme(uri, expected):
    assert storage.split_uri(uri) == expected
