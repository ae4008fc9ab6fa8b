"""``selection.label_distribution`` on the real vLLM engine (SmolLM2-135M, 2 claim rows): each
draft's label log-probs are the engine's own log-probs of each label's distinguishing tokens
(``method="prefix"``: SmolLM2's claim labels part at their first token) after
``prompt + " <rationale>\\nAnswer:"`` (recomputed here by a separate prompt_logprobs call), and
the row's answer is the mixture's argmax. The fake-engine pipeline:
tests/integration/test_label_distribution.py."""

from __future__ import annotations

import pytest

from specrag_batch.core import labels
from specrag_batch.run import pipeline
from specrag_batch.engines.engine import get_engine
from specrag_batch.stages.prompts import encode_plain
from specrag_batch.core.schema import validate_table
from specrag_batch.stages.label_scoring import distinguishing_lengths, label_prefix

from ..conftest import sample_rows, small_config

pytestmark = pytest.mark.slow


class Recording:
    """The real engine, keeping every drafter prompt it is sent."""

    def __init__(self, engine):
        self.engine, self.tokenizer, self.prompts = engine, engine.tokenizer, []

    def generate(self, prompts, **kw):
        self.prompts += [list(p) for p in prompts]
        return self.engine.generate(prompts, **kw)

    def __getattr__(self, name):
        return getattr(self.engine, name)


def test_label_logprobs_are_the_engines_logprobs_of_each_labels_distinguishing_tokens():
    cfg = small_config(**{"selection.label_distribution": True, "sampling.strategy": "random",
                          "selection.use_self_consistency": False, "selection.use_self_reflection": False})
    engine = get_engine(cfg.drafter, cfg.seed)
    rec = Recording(engine)
    rows = validate_table(sample_rows("climate_fever", 2), "claims")
    records = pipeline.process_rows(rows, cfg, drafter=rec, verifier=rec, info=pipeline.RunInfo("r", "claims"))
    assert [r["task"] for r in records] == ["claim", "claim"] and all(r["error"] is None for r in records)
    draft, prompt = records[0]["drafts"][0], rec.prompts[0]
    got = {e["label"]: e["logprob"] for e in draft["label_logprobs"]}
    assert list(got) == cfg.claim_labels
    prefix = label_prefix(engine.tokenizer, prompt, draft["rationale"])
    conts = {label: encode_plain(engine.tokenizer, " " + label) for label in cfg.claim_labels}
    keep = distinguishing_lengths(conts)
    for label in cfg.claim_labels:
        cont = conts[label][:keep[label]]
        lps = engine.prompt_logprobs([prefix + cont])[0]
        assert got[label] == pytest.approx(sum(lps[len(prefix):]), abs=0.05), label  # another kernel path
    for r in records:
        per_draft = [{e["label"]: e["logprob"] for e in d["label_logprobs"]} for d in r["drafts"]]
        label, p = labels.argmax(labels.mixture(per_draft))
        assert r["answer"] == label and r["label_probability"] == pytest.approx(p)
