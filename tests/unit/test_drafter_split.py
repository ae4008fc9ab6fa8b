"""Drafter training data never contains a row the benchmark may report on (issue 12)."""

from __future__ import annotations

import pytest

from ..conftest import ROOT

SHARED = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/data")
def test_training_rows_are_disjoint_from_benchmark_rows():
    from specrag_batch.drafter_training.sources import BENCHMARK_RESERVE, benchmark_rows, training_rows

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
    # the benchmark's reported rows today (tune 40 + n 16) and planned (>= 100) fit in the reserve
    assert 40 + 16 < 100 <= BENCHMARK_RESERVE
    # NQ-open distractors come from training questions only, and N = 10
    for r in train["nq_open"][:50]:
        assert len(r["documents"]) == 10 and r["documents"][0]["doc_id"] == f"{r['query_id']}:gold"
        assert not {d["doc_id"].rsplit(":", 1)[0] for d in r["documents"]} & bench_ids


def test_benchmark_only_datasets_are_refused():
    from specrag_batch.drafter_training.sources import training_rows

    for name in ("popqa", "arc_challenge"):
        with pytest.raises(ValueError, match="benchmark-only"):
            training_rows(SHARED, (name,))
