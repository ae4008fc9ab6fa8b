"""Shorter drafts (issue 13 item 4), no engine: the drafter's rationale instruction
(``drafter.rationale_style``) in the prompt on the real SmolLM2 tokenizer and through the
drafting stage (Standard RAG keeps the default); both drafter prompt options
(``drafter.prompt_layout`` and ``drafter.rationale_style``) in the drafter-training data step
and training's tokenisation (the config hash: tests/unit/test_config_drafter_prompt.py)."""

from __future__ import annotations

import pytest

from specrag_batch.config import RunConfig
from specrag_batch.stages.prompts import DRAFTER_SYSTEM, drafter_prompt_ids
from specrag_batch.core.schema import Document

from ..conftest import sample_rows, small_config
from ..fakes import FakeEngine, real_tokenizer
from ..unit.test_config_drafter_prompt import DRAFTER_PROMPT_OPTIONS

pytestmark = pytest.mark.integration


OLD_SYSTEM = ("You answer questions using the given documents. First write a short rationale (one or "
              "two sentences) based on the documents, then give the answer.")


ONE = "rationale of one sentence"


LABELS = ("SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO")


def test_prompt_carries_the_rationale_instruction():
    tok = real_tokenizer()
    docs = [Document("1", "T", "Text.")]
    default = tok.decode(drafter_prompt_ids(tok, "qa", "Who?", docs, None, LABELS))
    one = tok.decode(drafter_prompt_ids(tok, "qa", "Who?", docs, None, LABELS, rationale_style="one_sentence"))
    assert DRAFTER_SYSTEM == OLD_SYSTEM and OLD_SYSTEM in default  # the default prompt is unchanged
    assert ONE in one and "one or two sentences" not in one
    for layout in ("documents_first", "question_first"):
        text = tok.decode(drafter_prompt_ids(tok, "qa", "Who?", docs, None, LABELS, layout=layout,
                                             rationale_style="one_sentence"))
        assert ONE in text and text.endswith("Rationale:")
    with pytest.raises(ValueError, match="rationale style"):
        drafter_prompt_ids(tok, "qa", "Who?", docs, None, LABELS, rationale_style="free")


class Recorder(FakeEngine):
    def generate(self, prompts, **kw):
        self.sent = getattr(self, "sent", []) + [list(p) for p in prompts]
        return super().generate(prompts, **kw)


def test_drafting_stage_uses_the_style_and_standard_rag_keeps_the_default():
    from specrag_batch.run import pipeline
    from specrag_batch.core.schema import validate_table

    tok = real_tokenizer()
    for mode, want, unwanted in (("speculative", ONE, "one or two sentences"), ("standard", OLD_SYSTEM, ONE)):
        cfg = small_config(**{"sampling.strategy": "random", "drafter.rationale_style": "one_sentence", "mode": mode})
        eng = Recorder()
        pipeline.process_rows(validate_table(sample_rows("popqa", 2), "s.parquet"), cfg, drafter=eng, verifier=eng,
                              info=pipeline.RunInfo(run_id="r", source_file="s.parquet"))
        drafts = [t for t in (tok.decode(p) for p in eng.sent) if "Rationale:" in t[-20:]]
        assert drafts and all(want in t and unwanted not in t for t in drafts), mode


@pytest.mark.parametrize("field,default,other", DRAFTER_PROMPT_OPTIONS)
def test_data_step_builds_the_inference_prompts(field, default, other):
    """The drafter-training data step renders the prompts inference drafts from, with the
    config's option (the fake teacher only writes rationales; real tokenizer, real sampling)."""
    from specrag_batch.drafter_training.data import DataOptions, generate_examples
    from specrag_batch.run.pipeline import StageTimer, draft_rows
    from specrag_batch.core.schema import validate_table

    tok = real_tokenizer()
    texts = {}
    for value in (default, other):
        cfg = small_config(**{"sampling.strategy": "random", f"drafter.{field}": value})
        table = sample_rows("popqa", 3)
        recs = generate_examples(validate_table(table, "t.parquet"), cfg, DataOptions(subsets_per_row=2),
                                 FakeEngine(), tok, "t.parquet")
        rec = Recorder()
        draft_rows(validate_table(table, "t.parquet"), cfg, rec, StageTimer())
        sent = {tok.decode(p) for p in rec.sent}
        prompts = [r["prompt"] for r in recs if r["prompt"] is not None]
        assert prompts and all(p in sent for p in prompts)
        texts[value] = prompts[0]
    if field == "prompt_layout":
        assert texts["question_first"].index("Question:") < texts["question_first"].index("Documents:")
        assert texts["documents_first"].index("Documents:") < texts["documents_first"].index("Question:")
    else:
        assert ONE in texts["one_sentence"] and OLD_SYSTEM in texts["one_or_two_sentences"]


@pytest.mark.parametrize("field,default,other", DRAFTER_PROMPT_OPTIONS)
def test_training_tokenizes_with_the_data_steps_option(field, default, other):
    from specrag_batch.drafter_training.train import TrainOptions, tokenize_example

    tok = real_tokenizer()
    ex = {"task": "qa", "query": "Who?", "choices": None, "completion": " R.\nAnswer: X",
          "documents": [{"doc_id": "1", "title": "T", "text": "Text."}]}
    arg = {"prompt_layout": "layout", "rationale_style": "rationale_style"}[field]
    for value in (default, other):
        ids = tokenize_example(tok, ex, 512, TrainOptions(**{field: value}))["input_ids"]
        want = drafter_prompt_ids(tok, "qa", "Who?", [Document("1", "T", "Text.")], None,
                                  RunConfig().claim_labels, **{arg: value})
        assert ids[:len(want)] == want
