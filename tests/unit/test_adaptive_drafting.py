"""Adaptive drafting's config rules (``sampling.adaptive``, ``sampling.first_round``): on by
default only where it saves verifier passes, hash-neutral when off, it needs the consensus
rule, and a first round that makes it one round, or set while it is off, is named. The stage
on the fake engine: tests/integration/test_adaptive_drafting.py."""

from __future__ import annotations

import json

import pytest

from specrag_batch.config import hashed_view

from ..conftest import sample_rows
from ..pipeline_runs import config


FIRST = 2


AGREE = {r["query"] for r in sample_rows("popqa", 3).to_pylist()[:2]}
"""Rows whose drafts all name the same answer (they must stop after round 1)."""


def adaptive(**over):
    return config(**{"sampling.adaptive": True, "sampling.first_round": FIRST, **over})


def test_a_first_round_of_all_subsets_is_named_as_an_idle_setting():
    """``first_round >= num_drafts`` (adaptive drafting that is one round) is named by the config
    (the flow logs it as a warning at the run's start)."""
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
    """``sampling: {first_round: 3}`` under the default selection (adaptive drafting off, left
    out) is not ignored without a word. The config the flow receives
    (``config.loading.flow_config``: the fields set, as a deployment's parameters) names it; a
    full config dump (every field set, the default first round) does not, and neither does a
    config where adaptive drafting is on; the hash is the config's own."""
    from specrag_batch.config import RunConfig, load_config
    from specrag_batch.config.loading import flow_config

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


def test_a_selection_without_any_score_term_is_warned():
    """use_draft_score false with both verifier terms off (their defaults) would score every
    draft 0: the run logs that no score ranks the drafts."""
    from specrag_batch.config import RunConfig

    idle = RunConfig(selection={"use_draft_score": False}).idle_settings()
    assert any("all false: every draft's log ρ is 0" in w for w in idle), idle
    assert not any("log ρ is 0" in w for w in RunConfig().idle_settings())
    assert not any("log ρ is 0" in w for w in RunConfig(mode="standard", selection={"use_draft_score": False})
                   .idle_settings())
