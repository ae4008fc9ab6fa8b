"""The row key of issue 52 (:mod:`specrag_batch.run.reuse.key`): every part of a row's identity
changes it, nothing else does, and the config part follows the config hash (``reuse`` and
``drift`` are not hashed)."""

from __future__ import annotations

import dataclasses

import pytest

from specrag_batch.config import RunConfig
from specrag_batch.core.records import Document
from specrag_batch.run.reuse.key import ScoringIdentity, prompt_digest, query_id_decides, row_key

DOCS = [Document("d1", "Sea", "The North Sea rose."), Document("d2", "Sea", "The Baltic did not.")]
SCORING = ScoringIdentity(config_hash="c" * 16, drafter='{"model": "a"}', verifier='{"model": "b"}',
                          adapter="null", prompts="p" * 64, seed=0, output_schema="s" * 64)
ROW = dict(query_id="q1", query="Which sea rose?", task="choice", choices=["North", "Baltic"],
           documents=DOCS, documents_from="input")


def key(**over):
    scoring = over.pop("scoring", SCORING)
    return row_key(**{**ROW, **over}, scoring=scoring)


ROW_CHANGES = {
    "query_id": dict(query_id="q2"),
    "query": dict(query="Which sea fell?"),
    "task": dict(task="qa"),
    "choices": dict(choices=["Baltic", "North"]),
    "choices absent": dict(choices=None),
    "document text": dict(documents=[DOCS[0], Document("d2", "Sea", "The Baltic rose too.")]),
    "document id": dict(documents=[DOCS[0], Document("d3", "Sea", DOCS[1].text)]),
    "document title": dict(documents=[DOCS[0], Document("d2", "Baltic", DOCS[1].text)]),
    "document order": dict(documents=DOCS[::-1]),
    "documents retrieved": dict(documents_from="retrieved"),
}

SCORING_CHANGES = {"config_hash": "d" * 16, "drafter": '{"model": "a", "weights_sha256": "x"}',
                   "verifier": '{"model": "c"}', "adapter": '{"path": "/lora"}', "prompts": "q" * 64,
                   "seed": 1, "output_schema": "t" * 64, "version": 2, "by_query_id": False}


@pytest.mark.parametrize("part", ROW_CHANGES)
def test_each_part_of_the_row_changes_the_key(part):
    assert key(**ROW_CHANGES[part]) != key()


@pytest.mark.parametrize("field", SCORING_CHANGES)
def test_each_part_of_the_scoring_identity_changes_the_key(field):
    assert dataclasses.fields(ScoringIdentity)  # every field is listed in SCORING_CHANGES:
    assert {f.name for f in dataclasses.fields(ScoringIdentity)} == set(SCORING_CHANGES)
    assert key(scoring=dataclasses.replace(SCORING, **{field: SCORING_CHANGES[field]})) != key()


def test_the_key_is_32_bytes_and_stable():
    assert key() == key() and len(key()) == 32


def test_the_query_id_is_left_out_where_it_decides_nothing():
    unseeded = dataclasses.replace(SCORING, by_query_id=False)
    assert key(query_id="q2", scoring=unseeded) == key(scoring=unseeded)


def test_the_query_id_decides_in_speculative_mode_and_under_random_selection():
    assert query_id_decides(RunConfig())
    assert not query_id_decides(RunConfig(mode="standard"))
    assert query_id_decides(RunConfig.model_validate({"mode": "standard", "selection": {"random_selection": True}}))


def test_documents_from_must_be_named():
    with pytest.raises(ValueError, match="documents_from"):
        key(documents_from="index")


def test_the_config_part_is_the_config_hash_reuse_and_drift_left_out():
    a = RunConfig()
    b = RunConfig.model_validate({"reuse": {"nights": 0, "sources": ["s3://b/x"]}, "drift": {"p_value": 0.05}})
    assert a.config_hash() == b.config_hash()
    assert RunConfig(seed=1).config_hash() != a.config_hash()


def test_the_prompt_digest_covers_the_prompt_code():
    assert len(prompt_digest()) == 64


def test_a_local_model_is_identified_by_its_weights_even_when_replaced_in_place(tmp_path):
    from specrag_batch.run.reuse.key import _model_identity

    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"one")
    before = _model_identity(str(tmp_path), None)
    assert before == _model_identity(str(tmp_path), None) and "weights_sha256" in before
    weights.write_bytes(b"two!")  # other weights in the same directory
    assert _model_identity(str(tmp_path), None) != before
