"""Drafter training data never contains a row the benchmark may report on (issue 12)."""

from __future__ import annotations

import pytest

from ..conftest import ROOT

SHARED = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_training_rows_are_disjoint_from_benchmark_rows():
    from specrag_batch.core.datasets import BENCHMARK_RESERVE, benchmark_rows, training_rows

    bench = benchmark_rows(SHARED)
    assert set(bench) == {"climate_fever", "popqa", "arc_challenge", "hotpotqa", "nq_open"}
    bench_ids = {r["query_id"] for rs in bench.values() for r in rs}
    bench_questions = {r["query"].strip().lower() for rs in bench.values() for r in rs}
    train = training_rows(SHARED)
    assert set(train) == {"climate_fever", "hotpotqa", "nq_open", "musique"}
    ids = [r["query_id"] for rs in train.values() for r in rs]
    assert len(ids) == len(set(ids)) > 2000
    assert not set(ids) & bench_ids
    assert not {r["query"].strip().lower() for rs in train.values() for r in rs} & bench_questions
    # the benchmark's tuning split (20) and reported rows (>= 100 where the data has them) fit in the reserve
    assert 20 + 100 <= BENCHMARK_RESERVE
    # NQ-open distractors come from training questions only, N = 10, the gold passage not always first
    positions = set()
    for r in train["nq_open"][:50]:
        positions.add([d["doc_id"] for d in r["documents"]].index(f"{r['query_id']}:gold"))
        assert len(r["documents"]) == 10 and f"{r['query_id']}:gold" in [d["doc_id"] for d in r["documents"]]
        assert not {d["doc_id"].rsplit(":", 1)[0] for d in r["documents"]} & bench_ids
    assert len(positions) > 5


def test_benchmark_only_datasets_are_refused():
    from specrag_batch.core.datasets import training_rows

    for name in ("popqa", "arc_challenge"):
        with pytest.raises(ValueError, match="benchmark-only"):
            training_rows(SHARED, (name,))
