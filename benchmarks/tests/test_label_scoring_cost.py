"""benchmarks/label_scoring_cost.py on the fake engine: the same drafts scored by both methods,
the prefix method one request per draft on the claim labels, the whole-label method more."""

import label_scoring_cost as lsc

from .conftest import small_config
from .test_label_distribution import _rows


def test_both_methods_score_the_same_drafts():
    from specrag_batch.run.testing import FakeEngine

    cfg = small_config(**{"selection.use_self_consistency": False, "selection.use_self_reflection": False})
    rows = [r for r in _rows(3) if r["task"] == "claim"]
    res = lsc.measure(cfg, "claims", rows, engine=FakeEngine())
    assert res["rows"] == 3 and res["drafts"] == 3 * cfg.sampling.num_drafts
    assert res["methods"]["prefix"]["requests_per_draft"] == 1.0
    assert res["methods"]["whole_label"]["requests_per_draft"] > 1.0
    assert res["same_argmax"].endswith("/3")
