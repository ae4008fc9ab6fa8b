"""benchmarks/label_distribution.py's analysis (issue 50 item 4) on records written here: the
chosen label arm is compared with the defaults and Standard RAG on the same rows, per-label
recall before and after the prior correction, the pooled figures count Climate-FEVER's rows
once when the n = 400 set holds them."""

import pytest

import label_distribution as ld


def _recs(answers, gold, p=None):
    return [{"answer": a, "gold": [g], "correct": a == g, "label_probability": None if p is None else p[i],
             "score": -float(i), "drafts": [], "fast_path": False} for i, (a, g) in enumerate(zip(answers, gold))]


def test_paired_comparison_auroc_and_recall():
    gold = ["S", "R", "R", "S"]
    cells = {"climate_fever": {
        "default": _recs(["S", "S", "S", "S"], gold), "standard": _recs(["S", "S", "R", "R"], gold),
        "label": _recs(["S", "S", "R", "S"], gold, [0.9, 0.4, 0.8, 0.7]),
        "label-batch": _recs(["S", "R", "R", "S"], gold, [0.9, 0.6, 0.8, 0.7])}}
    res = ld.analyse(cells, prior_on=True)
    fig = res["datasets"]["climate_fever"]
    assert res["chosen_arm"] == "label-batch" and fig["accuracy"]["label-batch"]["value"] == 1.0
    assert fig["label-batch_vs_default"]["diff"] == pytest.approx(0.5)
    assert fig["label-batch_vs_default"]["mcnemar"]["b"] == 2 and fig["label-batch_vs_default"]["mcnemar"]["c"] == 0
    assert fig["label-batch_vs_standard"]["diff"] == pytest.approx(0.5)
    assert fig["auroc"]["label_probability"] is None  # every row right: no AUROC
    assert fig["recall"]["before"]["R"] == {"recall": 0.5, "n": 2} and fig["recall"]["after"]["R"]["recall"] == 1.0
    assert "label-batch_vs_default: +50.0 points" in ld.tables(res)
    choice = [{**r, "task": "choice"} for r in _recs(["S"], ["S"])]
    assert "recall" not in ld.analyse({"arc": {"label": choice, "label-batch": choice}}, False)["datasets"]["arc"]


def test_pooled_counts_the_claims_of_the_400_set_once():
    gold = ["S", "R"]
    arm = {"default": _recs(["S", "S"], gold)}
    cells = {"climate_fever": arm, "climate_fever_400": arm, "arc_challenge": arm}
    assert ld.analyse(cells, prior_on=False)["datasets"]["pooled"]["n"] == 4


def _rows(n):
    docs = [{"doc_id": f"d{j}", "title": f"T{j}", "text": f"Passage {j} about the sea level and the climate."}
            for j in range(6)]
    claims = [{"query_id": f"c{i}", "query": f"Sea level rose {i} mm.", "task": "claim", "documents": docs,
               "choices": None, "gold": [["SUPPORTS", "REFUTES"][i % 2]]} for i in range(n)]
    choices = [{"query_id": f"q{i}", "query": f"Which city {i}?", "task": "choice", "documents": docs,
                "choices": ["Paris", "Lyon", "Nice"], "gold": ["Lyon"]} for i in range(n)]
    return claims + choices


def _run(cfg, rows, engine):
    import pyarrow as pa

    from specrag_batch.core.datasets import INPUT_SCHEMA
    from specrag_batch.run.pipeline import RunInfo, process_rows
    from specrag_batch.core.schema import validate_table

    table = validate_table(pa.Table.from_pylist(rows, schema=INPUT_SCHEMA), "t")
    return ld.with_choices(process_rows(table, cfg, drafter=engine, verifier=engine,
                                        info=RunInfo(run_id="t", source_file="t")), rows)


def test_derived_arms_equal_the_product_runs_of_those_arms():
    from .conftest import small_config
    from specrag_batch.run.testing import FakeEngine

    base = small_config(**{"selection.use_self_consistency": False, "selection.use_self_reflection": False})
    rows = _rows(4)
    label = _run(ld.arm_config(base, "label", len(rows)), rows, FakeEngine())
    pairs = [("default", ld.derive_default(base, label)), ("label-batch", ld.derive_label_batch(base, label))]
    std_label = _run(ld.arm_config(base, "standard-label", len(rows)), rows, FakeEngine())
    pairs.append(("standard", ld.derive_standard(base, std_label)))
    for arm, derived in pairs:
        ran = _run(ld.arm_config(base, arm, len(rows)), rows, FakeEngine())
        key = lambda r: (r["query_id"], r["answer"], r["correct"])  # noqa: E731
        assert [key(r) for r in derived] == [key(r) for r in ran], arm
        if arm == "label-batch":
            assert [r["label_probability"] for r in derived] == pytest.approx([r["label_probability"] for r in ran])
        else:
            assert [r["score"] for r in derived] == pytest.approx([r["score"] for r in ran])
    assert any(a["answer"] != b["answer"] for a, b in zip(pairs[0][1], label))  # the label arm answers differently somewhere


def test_derive_default_refuses_a_verifier_term():
    from .conftest import small_config

    with pytest.raises(ValueError, match="derived only"):
        ld.derive_default(small_config(**{"selection.use_self_consistency": True}), [])


def test_stored_standard_rows_are_paired_by_query_id(tmp_path):
    import io
    import tarfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([{"query_id": "b", "answer": "R", "correct": True},
                                         {"query_id": "z", "answer": "S", "correct": False}]), buf)
    archive = tmp_path / "m.tar.xz"
    with tarfile.open(archive, "w:xz") as tar:
        info = tarfile.TarInfo("claims/standard/abc/part-0000.parquet")
        info.size = len(buf.getvalue())
        tar.addfile(info, io.BytesIO(buf.getvalue()))
    stored = ld.stored_standard(archive, "claims")
    assert set(stored) == {"b", "z"} and ld.stored_standard(archive, "other") == {}
    arms = {"label": [{"query_id": q} for q in "abc"], "default": [{"query_id": q, "x": 1} for q in "abc"]}
    got = ld.with_stored_standard(arms, stored)
    assert [r["query_id"] for r in got["label"]] == ["b"] == [r["query_id"] for r in got["default"]]
    assert got["standard"] == [stored["b"]]
