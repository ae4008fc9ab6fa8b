"""The run report reads S3 output as a lazy polars scan (no engine; a real moto S3 server and
real Parquet written here): shards whose keys hold glob and URL characters (``[``, ``?``,
``*``, ``#``, ``%``, spaces) give the same rows and numbers as the same shards read locally,
objects a glob of those keys would match are never read, and only the report's columns are
fetched (bytes counted by an HTTP proxy in front of the server)."""

from __future__ import annotations

import base64
import json
import random
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from specrag_batch.core import storage
from specrag_batch.run.report import load_rows, summary
from specrag_batch.core.schema import OUTPUT_SCHEMA

from .faulty_s3 import FaultProxy

# trusted shards, and for each an object its key would match when read as a glob pattern
SHARDS = {"claims #1 [x].parquet": "claims #1 x.parquet", "q?a*.parquet": "qZaZZ.parquet",
          "sp ace%41.parquet": "sp aceA.parquet"}
ROWS = 100
TEXT = 20_000
"""Characters of each row's ``query`` and ``rationale``, columns the report does not read: a
shard is then a few MB, where polars fetches column ranges (a file under about 2 MB it
fetches whole in one request)."""


def _text(rng: random.Random, n: int = TEXT) -> str:
    return base64.b64encode(rng.randbytes(n * 3 // 4)).decode()  # incompressible beyond base64


def _rows(shard: int, rng: random.Random, n: int = ROWS) -> list[dict]:
    rows = []
    for i in range(n):
        qid = f"s{shard}-q{i}"
        if i % 17 == 0:  # a row error
            rows.append({"query_id": qid, "task": "qa", "query": _text(rng), "error": "field 'query': empty",
                         "error_reason": "empty_query", "drafts": [], "flags": [], "mode": "speculative"})
            continue
        task = ("qa", "claim")[i % 2]
        s_draft, s_sc, s_sr = -rng.uniform(1, 30), -rng.uniform(0, 10), -rng.uniform(0, 2)
        answer = rng.choice(["yes", "no", "Paris"])
        draft = {"answer": answer, "rationale": _text(rng, 40), "score_draft": s_draft,
                 "score_self_consistency": s_sc, "score_self_reflection": s_sr,
                 "tokens_draft": rng.randint(5, 40), "tokens_answer": 2, "tokens_rationale": rng.randint(5, 30),
                 "flags": []}
        correct = rng.random() < 0.6
        rows.append({"query_id": qid, "task": task, "query": _text(rng), "answer": answer, "rationale": _text(rng),
                     "score": s_draft + s_sc + s_sr, "score_draft": s_draft, "score_self_consistency": s_sc,
                     "score_self_reflection": s_sr, "low_confidence": i % 5 == 0, "fast_path": i % 7 == 0,
                     "drafts": [draft], "flags": ["short_rationale"] if i % 3 == 0 else [],
                     "gold": ["Paris"], "correct": correct, "exact_match": correct if task == "qa" else None,
                     "f1": (1.0 if correct else rng.random() / 2) if task == "qa" else None, "mode": "speculative"})
    return rows


def _write_run(out) -> dict[str, int]:
    """A finished run under ``out`` (local): the trusted shards, listed ``ok`` in the manifest
    (the second written before ``error_reason`` existed), and the decoys, listed nowhere.
    Returns the size in bytes of each trusted shard."""
    rng = random.Random(7)
    out.mkdir()
    sizes = {}
    for k, (name, decoy) in enumerate(SHARDS.items()):
        table = pa.Table.from_pylist(_rows(k, rng), schema=OUTPUT_SCHEMA)
        if k == 1:
            table = table.drop_columns(["error_reason"])
        pq.write_table(table, out / name, compression="zstd")
        sizes[name] = (out / name).stat().st_size
        pq.write_table(pa.Table.from_pylist(_rows(9, rng, 5), schema=OUTPUT_SCHEMA), out / decoy)
    manifest = {"shards": [{"status": "ok", "output": name} for name in SHARDS],
                "stage_seconds": {"drafting": 1.0}, "seconds": 2.0, "rows_out": 3 * ROWS, "engines": {}}
    (out / "_manifest.json").write_text(json.dumps(manifest))
    return sizes


def _upload(local, prefix: str) -> None:
    fs, path = storage.filesystem(prefix)
    for f in local.iterdir():
        fs.put_file(str(f), f"{path}/{f.name}")


def test_report_on_s3_reads_listed_keys_lazily_and_matches_local(s3_bucket, tmp_path, monkeypatch):
    """Three shards (about 3 MB each, mostly query and rationale text) under odd keys, read
    through a byte-counting proxy: same rows and summary as locally, no decoy requested, and
    under a quarter of the shards' bytes fetched (the whole objects before the lazy scan)."""
    local = tmp_path / "out"
    sizes = _write_run(local)
    prefix = f"{s3_bucket}/runs/nightly"
    _upload(local, prefix)
    want = load_rows(str(local))
    assert want.rows.height == 3 * ROWS and want.rows["mean_logprob"].is_not_null().any()

    with FaultProxy(storage.storage_options(prefix)["client_kwargs"]["endpoint_url"], rule=lambda *a: False) as px:
        monkeypatch.setenv("SPECRAG_S3_ENDPOINT_URL", px.url)  # the product's S3 setting, through the proxy
        got = load_rows(prefix)
        seen = {(m, unquote(p)): n for (m, p), n in px.body_bytes.items()}

    assert [u.rsplit("/", 1)[-1] for u in got.shards] == sorted(SHARDS)
    assert got.rows.columns == want.rows.columns
    assert got.rows.sort("query_id").equals(want.rows.sort("query_id"))
    s_got, s_want = summary(got), summary(want)
    assert s_got.pop("output") == prefix and s_want.pop("output") == str(local)
    assert s_got == s_want
    assert s_got["rows"] == 3 * ROWS and s_got["errors_by_reason"]["empty_query"] > 0

    key = storage.split_uri(prefix)[1]
    fetched = {name: sum(n for (m, p), n in seen.items() if m == "GET" and p == f"/{key}/{name}")
               for name in [*SHARDS, *SHARDS.values()]}
    for name, decoy in SHARDS.items():
        assert fetched[name] > 0, name
        assert not any(p == f"/{key}/{decoy}" for _, p in seen), f"{decoy} read: {name} was globbed"
    # projection pushdown: the report's columns plus the footers, not query/rationale text
    assert sum(fetched[n] for n in SHARDS) < 0.25 * sum(sizes.values()), (fetched, sizes)

