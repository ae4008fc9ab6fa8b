"""Cost of the two label-scoring methods of :mod:`specrag_batch.stages.label_scoring` on the same
drafts (issue 50 item 1), one command:

    SPECRAG_PROGRESS=0 nice -n 19 .venv/bin/python benchmarks/label_scoring_cost.py \\
        [--config configs/demo.yaml] [--rows 5] [--out benchmarks/label_scoring_cost]

Per dataset (Climate-FEVER claims, ARC-Challenge options; the tuning rows of
``decision.tuning_rows``), the product drafts the rows once (``selection.label_distribution``
on), then the same drafts are scored again by each method in turn, each in one engine call
(``prefix``: each label's distinguishing tokens, one request per draft when the first tokens
differ; ``whole_label``: every token of every label). Figures: engine wall seconds per row and
requests per draft of each method, the drafting call's seconds per row beside them, and how
often the two methods give the row the same mixture argmax (``labels.mixture``). Output:
``<out>.json`` and ``<out>.md``.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import decision  # noqa: E402
from specrag_batch.core import labels  # noqa: E402
from specrag_batch.config import load_config  # noqa: E402


class Recording:
    """An engine keeping the first drafting call's prompts and timing ``generate``."""

    def __init__(self, engine):
        self.engine, self.prompts, self.seconds = engine, None, {}

    def generate(self, prompts, **kw):
        if self.prompts is None:
            self.prompts = [list(p) for p in prompts]
        t0 = time.perf_counter()
        try:
            return self.engine.generate(prompts, **kw)
        finally:
            self.seconds["generate"] = self.seconds.get("generate", 0.0) + time.perf_counter() - t0

    def __getattr__(self, name):
        return getattr(self.engine, name)


def measure(cfg, name: str, rows: list[dict], engine=None) -> dict:
    """Draft ``rows`` once, then score their drafts with each method (module docstring), on
    ``engine`` (default: the config's drafter)."""
    import pyarrow as pa

    from specrag_batch.core.datasets import INPUT_SCHEMA
    from specrag_batch.engines.lazy import LazyEngine
    from specrag_batch.run.pipeline import RunInfo, process_rows
    from specrag_batch.core.records import Draft
    from specrag_batch.core.schema import validate_table
    from specrag_batch.stages.label_scoring import METHODS, score_labels

    import label_distribution as ld

    cfg = ld.arm_config(cfg, "label", len(rows))
    engine = Recording(engine or LazyEngine(cfg.drafter, cfg.seed))
    records = process_rows(validate_table(pa.Table.from_pylist(rows, schema=INPUT_SCHEMA), name), cfg,
                           drafter=engine, verifier=engine, info=RunInfo(run_id="cost", source_file=name))
    records = ld.with_choices(records, rows)
    drafts, owner = [], []
    for r in records:
        for d in r.get("drafts") or []:
            drafts.append(Draft.from_record(d))
            owner.append(r)
    if len(drafts) != len(engine.prompts or []):
        raise RuntimeError(f"{name}: {len(drafts)} drafts but {len(engine.prompts or [])} drafting prompts")
    out: dict = {"rows": len(records), "drafts": len(drafts),
                 "drafting_seconds_per_row": engine.seconds.get("generate", 0.0) / len(records), "methods": {}}
    answers = {}
    for method in METHODS:
        mine = [copy.deepcopy(d) for d in drafts]
        for d in mine:
            d.label_logprobs = None
        t0 = time.perf_counter()
        sent = score_labels(engine.engine, engine.prompts, mine,
                            lambda i: labels.label_names(owner[i]["task"], owner[i].get("choices"), cfg.claim_labels),
                            max_model_len=cfg.drafter.max_model_len, method=method)
        sec = time.perf_counter() - t0
        by_row: dict = {}
        for d, r in zip(mine, owner):
            by_row.setdefault(r["query_id"], []).append(d.label_logprobs)
        answers[method] = {q: (labels.argmax(labels.mixture(v)) or (None,))[0] for q, v in by_row.items()}
        out["methods"][method] = {"seconds_per_row": sec / len(records), "requests_per_draft": sent / len(drafts)}
    same = [answers["prefix"][q] == answers["whole_label"][q] for q in answers["prefix"]]
    out["same_argmax"] = f"{sum(same)}/{len(same)}"
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(ROOT / "configs" / "demo.yaml"))
    ap.add_argument("--rows", type=int, default=5)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "label_scoring_cost"))
    a = ap.parse_args(argv)
    cfg = load_config(a.config)
    import label_distribution as ld

    res = {**ld.host_info(cfg), "config": Path(a.config).name, "datasets": {}}
    for name in ("climate_fever", "arc_challenge"):
        res["datasets"][name] = measure(cfg, name, decision.tuning_rows(name, Path(a.shared))[:a.rows])
    lines = [f"Label scoring cost ({res['date']}, drafter {res['drafter']}, host {res['host']}: "
             f"{res['cpu']}, {res['cores']} cores shared)", "",
             "| data | rows | drafts | drafting s/row | method | s/row | requests/draft | same argmax |",
             "|---|---|---|---|---|---|---|---|"]
    for name, d in res["datasets"].items():
        for m, v in d["methods"].items():
            lines.append(f"| {name} | {d['rows']} | {d['drafts']} | {d['drafting_seconds_per_row']:.1f} | {m} | "
                         f"{v['seconds_per_row']:.2f} | {v['requests_per_draft']:.1f} | {d['same_argmax']} |")
    Path(a.out + ".json").write_text(json.dumps(res, indent=2))
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
