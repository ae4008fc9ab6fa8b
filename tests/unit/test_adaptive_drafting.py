"""Adaptive drafting (``sampling.adaptive``, stage ``AdaptiveDrafting``) on the FAKE engine
(tests/fakes.py; real SmolLM2 tokenizer, real rows): rows whose first-round drafts meet the
consensus rule stop there and take the fast path; the others get the same m drafts as a
non-adaptive run; round 1 is one batched call over the chunk, round 2 one over the open rows;
the counts of rows per number of rounds reach the summary and the manifest's merge."""

from __future__ import annotations

import json

import pytest

from specrag_batch.config import hashed_view
from specrag_batch.evaluation import summarize
from specrag_batch.records import Draft
from specrag_batch.manifest import merge_summaries
from specrag_batch.stages.selection import consensus

from ..conftest import sample_rows
from ..fakes import FakeEngine, default_reply
from .test_pipeline_bookkeeping import config, disaggregated, fused

FIRST = 2
AGREE = {r["query"] for r in sample_rows("popqa", 3).to_pylist()[:2]}
"""Rows whose drafts all name the same answer (they must stop after round 1)."""


def reply(text: str, h: int) -> str:
    if any(q in text for q in AGREE):
        return " All documents name the same city.\nAnswer: Paris"
    return default_reply(text, h)


def adaptive(**over):
    return config(**{"sampling.adaptive": True, "sampling.first_round": FIRST, **over})


@pytest.fixture(scope="module")
def runs():
    """(non-adaptive records, adaptive records, adaptive drafter, adaptive verifier)."""
    reference = fused(config(), FakeEngine(reply=reply), FakeEngine())
    drafter, verifier = FakeEngine(reply=reply), FakeEngine()
    return reference, fused(adaptive(), drafter, verifier), drafter, verifier


def _drafts(rec):
    return [(d["doc_ids"], d["answer"], d["rationale"], d["score_draft"]) for d in rec["drafts"]]


def test_rows_agreeing_in_round_one_stop_and_take_the_fast_path(runs):
    reference, records, _, _ = runs
    m = config().sampling.num_drafts
    c = config().consensus_threshold
    stopped = 0
    for ref, rec in zip(reference, records):
        assert rec["query_id"] == ref["query_id"]
        if ref["error"] is not None:
            assert rec == ref  # rows with an error pass through, no rounds
            continue
        agree = consensus([Draft.from_record(d) for d in ref["drafts"][:FIRST]], c) is not None
        if agree:
            stopped += 1
            assert rec["draft_rounds"] == 1 and len(rec["drafts"]) == FIRST
            assert _drafts(rec) == _drafts(ref)[:FIRST]  # the first subsets, the same drafts
            assert rec["fast_path"] is True and rec["low_confidence"] is False
            assert rec["score_self_consistency"] is None and rec["score_self_reflection"] is None
            assert rec["score"] == rec["score_draft"]  # the fast path's log ρ: the draft score
        else:
            assert rec["draft_rounds"] == 2 and len(rec["drafts"]) == m
            assert {**rec, "draft_rounds": None} == ref  # same drafts, scores and answer
    assert stopped >= 2  # the AGREE rows, at least
    assert any(r["draft_rounds"] == 2 for r in records)


def test_round_one_over_the_chunk_then_round_two_over_the_open_rows(runs):
    """Two generate calls per chunk: FIRST prompts per valid row, then m - FIRST per open row;
    the verifier scores only the valid drafts of rows that did not stop."""
    _, records, drafter, verifier = runs
    answered = [r for r in records if r["error"] is None]
    open_rows = [r for r in answered if r["draft_rounds"] == 2]
    m = config().sampling.num_drafts
    assert [c.prompts for c in drafter.calls_to("generate")] == [FIRST * len(answered),
                                                                  (m - FIRST) * len(open_rows)]
    scored = sum(1 for r in open_rows if not r["fast_path"] for d in r["drafts"]
                 if d["score_self_consistency"] is not None)
    assert sum(c.prompts for c in verifier.calls_to("prompt_and_next_logprobs")) == scored
    assert all(r["score_self_consistency"] is None for r in answered if r["draft_rounds"] == 1)


def test_chunked_and_disaggregated_adaptive_runs_give_the_same_records(runs, tmp_path):
    """Rounds run per chunk; the drafter side's draft_rounds survive the draft Parquet."""
    _, records, _, _ = runs
    assert fused(adaptive(chunk_rows=3), FakeEngine(reply=reply), FakeEngine()) == records
    assert disaggregated(adaptive(chunk_rows=3), tmp_path, FakeEngine(reply=reply), FakeEngine()) == records


def test_rows_per_number_of_rounds_are_counted(runs):
    reference, records, _, _ = runs
    ones = sum(r["draft_rounds"] == 1 for r in records)
    twos = sum(r["draft_rounds"] == 2 for r in records)
    assert summarize(records)["draft_rounds"] == {"1": ones, "2": twos}
    assert summarize(reference)["draft_rounds"] == {}
    merged = merge_summaries([summarize(records), summarize(records[:4]), summarize(reference)])
    assert merged["draft_rounds"] == {"1": ones + sum(r["draft_rounds"] == 1 for r in records[:4]),
                                      "2": twos + sum(r["draft_rounds"] == 2 for r in records[:4])}


def test_a_first_round_of_all_subsets_is_one_round():
    """first_round >= m: every subset in round 1, no second call (never an empty one)."""
    drafter = FakeEngine(reply=reply)
    m = config().sampling.num_drafts
    records = fused(adaptive(**{"sampling.first_round": m}), drafter, FakeEngine())
    assert {r["draft_rounds"] for r in records if r["error"] is None} == {1}
    assert len(drafter.calls_to("generate")) == 1


def test_a_first_round_of_all_subsets_is_named_as_an_idle_setting():
    """Trial finding (2026-12-03): ``first_round >= num_drafts`` silently made adaptive drafting
    one round; the config now names it (the flow logs it as a warning at the run's start)."""
    m = config().sampling.num_drafts
    assert adaptive().idle_settings() == []
    assert adaptive(**{"sampling.first_round": m - 1}).idle_settings() == []
    idle = adaptive(**{"sampling.first_round": m}).idle_settings()
    assert len(idle) == 1 and idle[0].startswith(f"sampling.first_round ({m}) >= sampling.num_drafts ({m})")
    off = adaptive(**{"sampling.first_round": m, "sampling.adaptive": False}).idle_settings()
    assert len(off) == 1 and "is off (it is set false)" in off[0]  # named for being off, not for its size
    from specrag_batch.config import RunConfig

    on = {"adaptive": True}
    assert RunConfig(sampling={**on, "num_drafts": 2}).idle_settings() == []  # the default first round: not named
    assert RunConfig(sampling={**on, "num_drafts": 2, "first_round": 2}).idle_settings() != []



def test_adaptive_needs_the_consensus_rule():
    with pytest.raises(ValueError, match="sampling.adaptive stops a row on the consensus rule"):
        adaptive(**{"selection.consensus_enabled": False})


def test_on_by_default_only_where_it_saves_verifier_passes_and_hash_neutral_off():
    """The product's default (each measured by the decision benchmark): left out, adaptive
    drafting is on only where the verifier scores drafts and the consensus fast path is on (it
    saves their verifier passes); under the default selection (log ρ_draft alone, no verifier
    pass) it is off (one round: 0.87x the seconds on 200 tuning rows); with the fast path off it
    is off, no error. Off, a config hashes as before the field existed, so the archived benchmark
    cells and runs started before the flip keep their hash (configs/bench.yaml and the test
    config pin it off)."""
    from specrag_batch.config import ADDED_FIELDS, RunConfig, load_config

    from ..conftest import ROOT

    assert RunConfig().adaptive_drafting is False
    assert "adaptive" not in RunConfig().sampling.model_fields_set
    for name in ("demo.yaml", "claims.yaml"):
        assert load_config(ROOT / "configs" / name).adaptive_drafting is False, name
    for terms in ({"use_self_reflection": True}, {"use_self_consistency": True}):
        assert RunConfig(selection=terms).adaptive_drafting is True, terms
        assert RunConfig(selection={**terms, "consensus_enabled": False}).adaptive_drafting is False
    assert load_config(ROOT / "configs" / "production-gpu.yaml").adaptive_drafting is True
    assert RunConfig(sampling={"adaptive": True}).adaptive_drafting is True  # set: as asked
    no_fast_path = RunConfig(selection={"consensus_enabled": False, "use_self_reflection": True})
    assert no_fast_path.adaptive_drafting is False
    assert "adaptive" not in no_fast_path.sampling.model_fields_set
    assert no_fast_path.config_hash() == RunConfig(
        selection={"consensus_enabled": False, "use_self_reflection": True}, sampling={"adaptive": False}).config_hash()
    assert RunConfig().config_hash() == RunConfig(sampling={"adaptive": False}).config_hash()
    assert ("sampling", "adaptive", False) in ADDED_FIELDS
    off, on = RunConfig(sampling={"adaptive": False}), RunConfig(sampling={"adaptive": True})
    assert "adaptive" not in json.dumps(hashed_view(off.model_dump(mode="json")))
    assert off.config_hash() != on.config_hash()
    for name in ("bench.yaml", "test-smollm2.yaml"):
        assert load_config(ROOT / "configs" / name).adaptive_drafting is False, name
    # a stored run's config (its _run.json dump) loads back to the same hash
    assert RunConfig(**no_fast_path.model_dump(mode="json")).config_hash() == no_fast_path.config_hash()


def test_a_first_round_set_while_adaptive_drafting_is_off_is_named_in_the_flow(tmp_path):
    """Trial finding (2026-12-04): ``sampling: {first_round: 3}`` under the default selection
    (adaptive drafting off, left out) was ignored without a word. The config the flow receives
    (``orchestration.flow_config``: the fields set, as a deployment's parameters) names it; a
    full config dump (every field set, the default first round) does not, and neither does a
    config where adaptive drafting is on; the hash is the config's own."""
    from specrag_batch.config import RunConfig, load_config
    from specrag_batch.orchestration import flow_config

    from ..conftest import ROOT

    path = tmp_path / "fr.yaml"
    path.write_text((ROOT / "configs" / "demo.yaml").read_text().replace("  num_drafts: 5\n",
                                                                          "  num_drafts: 5\n  first_round: 3\n"))
    for given in (path, load_config(path)):
        cfg = RunConfig.model_validate(flow_config(given))
        [idle] = cfg.idle_settings()
        assert idle.startswith("sampling.first_round (3) is set, but adaptive drafting (sampling.adaptive) is off "
                               "(left out, it is on only where the verifier scores drafts")
        assert cfg.config_hash() == load_config(path).config_hash()
    for name in ("demo.yaml", "bench.yaml", "production-gpu.yaml", "test-smollm2.yaml"):
        cfg = load_config(ROOT / "configs" / name)
        assert RunConfig.model_validate(flow_config(cfg)).config_hash() == cfg.config_hash(), name
    assert RunConfig.model_validate(RunConfig().model_dump(mode="json")).idle_settings() == []  # a full dump
    on = RunConfig(sampling={"first_round": 3}, selection={"use_self_reflection": True})
    assert on.adaptive_drafting and RunConfig.model_validate(flow_config(on)).idle_settings() == []
    assert flow_config({"mode": "standard"}) == {"mode": "standard"} and flow_config(None) is None
