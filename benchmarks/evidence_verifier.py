"""Evidence-aware verification measured on stored drafts (issue 39 item 1; the rule is declared in
benchmarks/studies/evidence-verifier.md, "Evidence-aware verification").

What it does. The drafts of finished speculative cells (the paper's configuration: every valid
draft of a row not on the consensus fast path was scored by the rationale-only verifier over
[Q, α, β, R], paper §3.3) are scored again by the same verifier over [Q, δ_j, α_j, β_j, R]
(``verifier.evidence_aware``, the paper's Table 2 variant that adds the draft's documents,
Score(α|Q,β,δ)), with the product's own :class:`~specrag_batch.stages.verification.Verification`
stage, so the prompts, the document cut at ``verifier.max_model_len``, the deduplication and
the spans read are the product's. Each row is then selected again by the product's
:class:`~specrag_batch.stages.selection.Selection` (argmax of log ρ = log ρ_draft + log ρ_SC +
log ρ_SR, nats). No drafter runs: the drafts are the stored ones.

The documents of draft j. The archive keeps drafts without ``doc_ids``
(``cell_archive.archive_schema``), so each row's subsets are computed again from its input
row by the product's retrieval and multi-perspective sampling stages (paper §3.2; seeded per
row, so the same subsets as when the cell ran), and draft j gets subset j (``sampling.adaptive:
false`` in the cell's config: one draft per subset in subset order). As a check that needs
no model, each draft's rationale is compared with every subset of its row by word overlap
(``subset_check``): the share of drafts whose own subset overlaps most is printed beside the
share a random assignment would give.

Which rows. Only a row whose valid drafts differ in correctness can change a selection's
outcome, so only those rows (``mixed``; consensus fast-path rows excepted: they keep their
answer) are scored; every other row keeps its stored outcome, which every selection shares.
Accuracy, paired differences and McNemar's p are therefore exact over all graded rows.

A cell that ran without a verifier pass (the product's defaults: log ρ_draft alone, e.g. the
1.5B drafter's ``speculative-default-large-drafter`` cells) holds no rationale-only scores: the
verifier then scores those rows' drafts over [Q, α_j, β_j, R] here as well (the paper's terms,
``verifier.evidence_aware`` off), before the evidence-aware pass.

Output: selection accuracy of E (evidence-aware, paper's terms), P (the rationale-only verifier,
stored or scored here, paper's terms) and D (log ρ_draft alone, the product's default), E - P and E - D
with paired bootstrap 95% intervals (stratified by cell when pooled) and McNemar's exact p;
within-row AUROC of each term (right vs wrong drafts of one row, ties 1/2) under both
verifier inputs; evidence-aware verifier prompt tokens per draft. Markdown on stdout and in
``<out>/evidence_verifier.md``, figures in ``<out>/evidence_verifier.json``. Killed? Run the same
command again: the rows already scored (``<out>/scored.jsonl``, :data:`SCORED`) are read back,
not scored again.

    python benchmarks/decision.py --config configs/bench.yaml --analyse-only --arms tuning-verifier \\
        --datasets climate_fever,hotpotqa,nq_open --runs /tmp/runs-ea --out /tmp/ea-analyse
    python benchmarks/evidence_verifier.py --config configs/bench.yaml --runs /tmp/runs-ea \\
        --out benchmarks/decision/evidence-verifier-tuning-200
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import decision_stats as ds  # noqa: E402

CELLS = ("climate_fever/tuning-verifier", "hotpotqa/tuning-verifier", "nq_open/tuning-verifier")
"""The verifier-tuning cells the declared rule is applied on (200 rows)."""

SELECTIONS = ("paper", "evidence_aware", "draft")
"""P (stored rationale-only verifier), E (evidence-aware), D (log ρ_draft alone)."""

MEASURES = ("draft", "paper:self_consistency", "paper:self_reflection", "paper:log_rho",
            "evidence:self_consistency", "evidence:self_reflection", "evidence:log_rho")
"""Per-draft measures whose within-row AUROC is reported (nats; higher = looks better)."""

_WORD = re.compile(r"[a-z0-9]+")


def input_dir(runs: Path, cell: str) -> Path:
    """The input shards of ``cell`` (``<dataset>/<arm>``): ``input-<arm>`` for a tuning arm,
    ``input`` for a reported arm (as decision.py writes them)."""
    dataset, arm = cell.split("/", 1)
    return runs / dataset / (f"input-{arm}" if arm.startswith("tuning") else "input")


def load_rows(runs: Path, cell: str) -> tuple[list[dict], list]:
    """(output records, validated input :class:`~specrag_batch.core.records.QueryRow` objects) of
    a cell's finished shards, matched part by part.

    Raises:
        SystemExit: the cell or one of its input shards is missing."""
    import pyarrow.parquet as pq

    from specrag_batch.run.planning import read_validated

    outs = sorted((runs / cell).glob("part-*.parquet"))
    if not outs:
        raise SystemExit(f"{runs / cell}: no part-*.parquet (restore the cell with decision.py --analyse-only)")
    records, rows = [], []
    for out in outs:
        src = input_dir(runs, cell) / out.name
        if not src.exists():
            raise SystemExit(f"{src}: the input shard of {out} is missing")
        records += pq.read_table(out).to_pylist()
        rows += read_validated(str(src), {})
    return records, rows


def subsets_of(rows: list, cfg) -> None:
    """Set each row's ``top_documents`` and ``subsets`` with the product's retrieval and
    multi-perspective sampling stages (paper §3.2)."""
    from specrag_batch.run.pipeline import multi_perspective_subsets, retrieve

    multi_perspective_subsets(rows, retrieve(rows, cfg), cfg)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def subset_check(row, drafts: Sequence) -> tuple[int, int, float]:
    """(drafts whose own subset j overlaps its rationale most, strictly, among the row's
    distinct subsets; drafts counted (rows with at least two distinct subsets); expected hits
    of a random assignment): a model-free check that draft j was written from subset j."""
    texts = [_words(" ".join(f"{row.top_documents[i].title} {row.top_documents[i].text}" for i in s))
             for s in row.subsets]
    distinct = len(set(row.subsets))
    hits = counted = 0
    expected = 0.0
    if distinct < 2:
        return 0, 0, 0.0
    for j, d in enumerate(drafts[:len(row.subsets)]):
        w = _words(d.rationale)
        overlap = [len(w & t) / (len(t) or 1) for t in texts]
        others = [o for i, o in enumerate(overlap) if row.subsets[i] != row.subsets[j]]
        counted += 1
        expected += 1 / distinct
        hits += overlap[j] > max(others)
    return hits, counted, expected


def drafter_check(rows: list, records: dict, cfg, engine, limit: int) -> dict:
    """A model check that draft j was written from subset j: for the drafts of the first
    ``limit`` rows, the drafter's summed log-prob (nats) of the draft's text (`` β\nAnswer: α``
    after the prompt's prefilled ``Rationale:``) under the prompt of every distinct subset of
    its row (the product's :class:`~specrag_batch.stages.drafting.Drafting` prompts). A text
    sampled from subset j is far likelier under subset j than under another.

    Returns ``{"drafts", "own_best" (own subset strictly likeliest), "median_gap" (own minus
    best other, nats), "median_abs_vs_stored" (own vs the stored log ρ_draft, nats),
    "median_abs_other_vs_stored" (the closest other subset vs the stored log ρ_draft)}``."""
    import statistics

    from specrag_batch.stages.prompts import encode_plain
    from specrag_batch.core.records import Draft
    from specrag_batch.stages.drafting import Drafting

    stage = Drafting(cfg, drafter=engine)
    jobs, meta = [], []
    for row in rows[:limit]:
        prompts = [p for _, p, _ in stage.prompts(row)]
        for j, rec in enumerate(records[row.query_id]["drafts"][:len(prompts)]):
            d = Draft.from_record(rec)
            if not d.valid or d.score_draft is None:
                continue
            cont = encode_plain(engine.tokenizer, f" {d.rationale}\nAnswer: {d.written_answer or d.answer}")
            for s, p in enumerate(prompts):
                jobs.append(p + cont)
                meta.append((row.query_id, j, s, len(p), d.score_draft, row.subsets[s] == row.subsets[j]))
    outs = engine.prompt_logprobs(jobs, desc="drafter check") if jobs else []
    by_draft: dict = {}
    for (q, j, s, start, stored, same), lps in zip(meta, outs):
        lp = sum(x for x in lps[start:] if x is not None)
        by_draft.setdefault((q, j), {"stored": stored, "own": None, "other": []})
        entry = by_draft[(q, j)]
        if s == j:
            entry["own"] = lp
        elif not same:
            entry["other"].append(lp)
    checked = [e for e in by_draft.values() if e["own"] is not None and e["other"]]
    return {"drafts": len(checked), "own_best": sum(e["own"] > max(e["other"]) for e in checked),
            "median_gap": statistics.median([e["own"] - max(e["other"]) for e in checked]) if checked else None,
            "median_abs_vs_stored": statistics.median([abs(e["own"] - e["stored"]) for e in checked]) if checked else None,
            "median_abs_other_vs_stored": statistics.median([min(abs(o - e["stored"]) for o in e["other"])
                                                             for e in checked]) if checked else None}


def evidence_config(cfg):
    """``cfg`` with the paper's terms on and ``verifier.evidence_aware`` on (the E arm)."""
    return cfg.model_copy(update={
        "verifier": cfg.verifier.model_copy(update={"evidence_aware": True}),
        "selection": cfg.selection.model_copy(update={"use_draft_score": True, "use_self_consistency": True,
                                                      "use_self_reflection": True})})


def paper_config(cfg):
    """``cfg`` with the paper's terms on and ``verifier.evidence_aware`` off (the P arm, for cells
    whose drafts hold no stored verifier scores)."""
    return cfg.model_copy(update={
        "verifier": cfg.verifier.model_copy(update={"evidence_aware": False}),
        "selection": cfg.selection.model_copy(update={"use_draft_score": True, "use_self_consistency": True,
                                                      "use_self_reflection": True})})


def has_verifier_scores(records) -> bool:
    """Whether any valid draft of ``records`` holds a stored log ρ_SC (the cell ran a verifier pass)."""
    return any(d.get("score_self_consistency") is not None for r in records for d in r.get("drafts") or []
               if ds.is_valid_draft(d.get("flags") or []))


SCORE_FIELDS = ("score_self_consistency", "score_self_reflection", "score", "logprob_yes", "logprob_no",
                "tokens_answer", "tokens_rationale")
"""Fields :func:`fill_scores` copies from the scored drafts into the stored ones."""


def fill_scores(by_id: dict, got: dict) -> None:
    """Write the verifier scores of ``got`` (:func:`score_rows`: query_id -> (drafts, index)) into
    the stored records' drafts (``by_id``: query_id -> output record), as if the cell had run
    the verifier pass; the rows' stored answers are kept."""
    for q, (drafts, _) in got.items():
        by_id[q]["drafts"] = [{**rec, **{k: getattr(d, k) for k in SCORE_FIELDS}}
                              for rec, d in zip(by_id[q]["drafts"], drafts)]


def mixed_units(units: list[dict], records: list[dict], labels: Sequence[str]) -> list[int]:
    """Positions of the units (rows selected again) whose valid drafts differ in correctness."""
    by_id = {r["query_id"]: r for r in records}
    out = []
    for n, u in enumerate(units):
        if not u["reselected"]:
            continue
        r = by_id[u["query_id"]]
        right = ds.draft_correct(r, None, labels)
        valid = {ok for d, ok in zip(r["drafts"], right) if ds.is_valid_draft(d.get("flags") or [])}
        if len(valid) == 2:
            out.append(n)
    return out


def score_rows(rows: list, records: dict, cfg, engine) -> dict:
    """Run the product's Verification and Selection stages over ``rows`` with their stored
    drafts (``records``: query_id -> output record; ``doc_ids`` from subset j). Returns
    query_id -> (drafts, selected index or None)."""
    from specrag_batch.core.records import Draft
    from specrag_batch.stages.selection import Selection
    from specrag_batch.stages.verification import Verification

    for row in rows:
        drafts = [Draft.from_record(d) for d in records[row.query_id]["drafts"]]
        for j, d in enumerate(drafts):
            d.doc_ids = [row.top_documents[i].doc_id for i in row.subsets[j]]
            d.score_self_consistency = d.score_self_reflection = d.score = None
            d.logprob_yes = d.logprob_no = None
        row.drafts = drafts
    Verification(cfg, verifier=engine)(rows)
    Selection(cfg)(rows)
    return {row.query_id: (row.drafts, None if row.selection is None else row.selection.index) for row in rows}


SCORED = "scored.jsonl"
"""Resume file in ``--out``: one line per scored row (``config_hash``, ``cell``, ``query_id``, the
drafts' records with their evidence-aware scores, the selected index), appended after each
verifier call, so a killed run scores only the rows it had not."""


def load_scored(path: Path, config_hash: str) -> dict:
    """(cell, query_id) -> (drafts, selected index or None) of the lines of ``path`` written
    under ``config_hash`` (other configs' lines and a torn last line are ignored); {} without
    the file."""
    from specrag_batch.core.records import Draft

    out: dict = {}
    if not path.is_file():
        return out
    for line in path.read_text().splitlines():
        try:
            x = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a kill
        if x.get("config_hash") == config_hash:
            out[(x["cell"], x["query_id"])] = ([Draft.from_record(d) for d in x["drafts"]], x["index"])
    return out


def save_scored(path: Path, config_hash: str, cell: str, got: dict) -> None:
    """Append the rows of ``got`` (:func:`score_rows`) to ``path`` (:data:`SCORED`)."""
    with path.open("a") as f:
        for q, (drafts, idx) in got.items():
            f.write(json.dumps({"config_hash": config_hash, "cell": cell, "query_id": q,
                                "drafts": [d.to_record() for d in drafts], "index": idx}) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="the cells' config (its verifier is loaded)")
    ap.add_argument("--out", required=True, type=Path, help="directory for evidence_verifier.{md,json}")
    ap.add_argument("--runs", required=True, type=Path, help="runs directory holding the restored cells")
    ap.add_argument("--cells", default=",".join(CELLS), help="comma-separated <dataset>/<arm> cells")
    ap.add_argument("--reps", type=int, default=ds.REPS, help="bootstrap resamples")
    ap.add_argument("--check-drafter", type=int, default=0, metavar="ROWS",
                    help="before scoring, check draft j against subset j with the drafter on this many rows")
    ap.add_argument("--batch-rows", type=int, default=8, help="rows per verifier call (progress granularity)")
    args = ap.parse_args(argv)

    from tqdm import tqdm

    from specrag_batch.config import load_config
    from specrag_batch.engines.engine import close_engines, get_engine

    cfg = load_config(args.config)
    if cfg.verifier is None:
        raise SystemExit(f"{args.config}: no verifier configured")
    if cfg.sampling.adaptive:
        raise SystemExit(f"{args.config}: sampling.adaptive is on; draft j is subset j only in one round")
    ecfg = evidence_config(cfg)
    labels = cfg.claim_labels
    cells = [c for c in args.cells.split(",") if c]
    units, check, scored_rows, prepared = {}, [0, 0, 0.0], {}, {}
    from specrag_batch.core.records import Draft
    for cell in cells:
        records, rows = load_rows(args.runs, cell)
        by_id = {r["query_id"]: r for r in records}
        units[cell] = ds.selection_diagnosis_rows(records, {}, labels, seed=cfg.seed)
        want = {units[cell][n]["query_id"] for n in mixed_units(units[cell], records, labels)}
        rows = [row for row in rows if row.query_id in want]
        subsets_of(rows, cfg)
        for row in rows:
            drafts = [Draft.from_record(d) for d in by_id[row.query_id]["drafts"]]
            if len(drafts) > len(row.subsets):
                raise SystemExit(f"{cell} row {row.query_id}: {len(drafts)} drafts for {len(row.subsets)} subsets")
            for n, x in enumerate(subset_check(row, drafts)):
                check[n] += x
        prepared[cell] = (rows, by_id)
        print(f"[evidence] {cell}: {len(units[cell])} graded rows, {len(rows)} with valid drafts differing "
              f"in correctness to score", file=sys.stderr)
    dcheck = None
    if args.check_drafter:
        dcheck = drafter_check([r for rows, _ in prepared.values() for r in rows],
                               {q: r for _, by_id in prepared.values() for q, r in by_id.items()},
                               cfg, get_engine(cfg.drafter, cfg.seed), args.check_drafter)
        print(f"[evidence] drafter check: {dcheck}", file=sys.stderr)
        close_engines()
    args.out.mkdir(parents=True, exist_ok=True)
    engine = None
    if unscored := [c for c in cells if not has_verifier_scores(prepared[c][1].values())]:
        # cells that ran without a verifier pass (the product's defaults): P is scored here, on the same rows
        pcfg = paper_config(cfg)
        done = load_scored(args.out / SCORED, pcfg.config_hash())
        for cell in unscored:
            rows, by_id = prepared[cell]
            todo = [row for row in rows if (cell, row.query_id) not in done]
            if todo and engine is None:
                engine = get_engine(cfg.verifier, cfg.seed)
            got = {q: v for (c, q), v in done.items() if c == cell and q in by_id}
            with tqdm(total=len(rows), initial=len(rows) - len(todo), desc=f"{cell} rows (P)") as bar:
                for s in range(0, len(todo), args.batch_rows):
                    part = score_rows(todo[s:s + args.batch_rows], by_id, pcfg, engine)
                    save_scored(args.out / SCORED, pcfg.config_hash(), cell, part)
                    got.update(part)
                    bar.update(len(part))
            fill_scores(by_id, got)
            units[cell] = ds.selection_diagnosis_rows(list(by_id.values()), {}, labels, seed=cfg.seed)
        print(f"[evidence] the rationale-only verifier (P) scored here, no stored scores: {', '.join(unscored)}",
              file=sys.stderr)
    done = load_scored(args.out / SCORED, ecfg.config_hash())
    for cell, (rows, by_id) in prepared.items():
        scored_rows.update({(cell, q): (drafts, idx, ds.draft_correct(by_id[q], None, labels))
                            for (c, q), (drafts, idx) in done.items() if c == cell and q in by_id})
        todo = [row for row in rows if (cell, row.query_id) not in done]
        if todo and engine is None:
            engine = get_engine(cfg.verifier, cfg.seed)
        with tqdm(total=len(rows), initial=len(rows) - len(todo), desc=f"{cell} rows") as bar:
            for s in range(0, len(todo), args.batch_rows):
                chunk = todo[s:s + args.batch_rows]
                got = score_rows(chunk, by_id, ecfg, engine)
                save_scored(args.out / SCORED, ecfg.config_hash(), cell, got)
                scored_rows.update({(cell, q): (*v, ds.draft_correct(by_id[q], None, labels)) for q, v in got.items()})
                bar.update(len(chunk))
    res = figures(units, scored_rows, labels, args.reps)
    res["subset_check"] = {"hits": check[0], "drafts": check[1], "expected_random": check[2]}
    res["drafter_check"] = dcheck
    stats = getattr(engine, "stats", None)
    res["verifier"] = {"calls": getattr(stats, "calls", None), "prompt_tokens": getattr(stats, "prompt_tokens", None),
                       "seconds": getattr(stats, "seconds", None),
                       "drafts_scored": res["pooled"]["auroc"]["n_drafts"]}
    md = table(res, cells)
    print(md)
    (args.out / "evidence_verifier.md").write_text(md)
    (args.out / "evidence_verifier.json").write_text(json.dumps(
        {"config": args.config, "verifier": cfg.verifier.model, "cells": cells, "figures": res}, indent=1,
        default=float))
    return 0


def figures(units: dict[str, list[dict]], scored: dict, labels: Sequence[str], reps: int) -> dict:
    """Per cell and pooled: selection accuracy of :data:`SELECTIONS` (E - P and E - D paired,
    McNemar) and within-row AUROC of :data:`MEASURES` over the scored rows' drafts.
    ``scored``: (cell, query_id) -> (drafts with evidence-aware scores, the index E selects or
    None, per-draft correctness); rows not in it keep their stored outcome under E."""
    out_units = {}
    for cell, us in units.items():
        rows = []
        for u in us:
            v = dict(u)
            drafts_idx = scored.get((cell, u["query_id"]))
            v["evidence_aware"], v["picked"] = u["paper"], {**u["picked"], "evidence_aware": u["picked"]["paper"]}
            v["drafts"] = []
            if drafts_idx is not None:
                drafts, idx, right = drafts_idx
                stored = {i: m for m, ok, a, i in u["drafts"]}
                v["picked"]["evidence_aware"] = idx
                v["evidence_aware"] = right[idx] if idx is not None else v["paper"]
                for i, d in enumerate(drafts):
                    if i in stored and d.score_self_consistency is not None and d.score_self_reflection is not None:
                        m = stored[i]
                        meas = dict(zip(ds.DIAGNOSIS_MEASURES, m))
                        v["drafts"].append(((meas["draft"], meas["self_consistency"], meas["self_reflection"],
                                             meas["log_rho"], d.score_self_consistency, d.score_self_reflection,
                                             d.score), right[i], d.answer, i))
            v["different"] = len({v["picked"][s] for s in SELECTIONS}) > 1
            rows.append(v)
        out_units[cell] = rows
    groups = dict(out_units)
    groups["pooled"] = [u for us in out_units.values() for u in us]
    strata = [c for c, us in out_units.items() for _ in us]
    res = {}
    for name, us in groups.items():
        st = strata if name == "pooled" else None
        res[name] = {"selection": {"vs_paper": ds.variant_figures(us, ("paper", "evidence_aware"), reps=reps, strata=st),
                                   "vs_draft": ds.variant_figures(us, ("draft", "evidence_aware"), reps=reps, strata=st)},
                     "auroc": ds.selection_diagnosis_auroc(us, reps=reps, strata=st, measures=MEASURES)}
    return res


def table(res: dict, cells: Sequence[str]) -> str:
    """Markdown: selection accuracy and differences, within-row AUROC, the subset check."""
    cols = [*cells, "pooled"]
    c = res["subset_check"]
    lines = ["Selection accuracy (%) over all graded rows; differences in points [paired bootstrap 95%], "
             "McNemar p (b/c)", "", "| | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    lines.append("| rows (scored: drafts differ in correctness) | " + " | ".join(
        f"{res[k]['selection']['vs_paper']['n']} ({res[k]['auroc']['n_rows']})" for k in cols) + " |")
    for name, key, sel in (("P: rationale-only verifier", "vs_paper", "paper"),
                           ("D: log ρ_draft alone", "vs_draft", "draft"),
                           ("E: evidence-aware verifier", "vs_paper", "evidence_aware")):
        lines.append(f"| {name} | " + " | ".join(ds._pct(res[k]["selection"][key]["accuracy"][sel]) for k in cols) + " |")
    for name, key in (("E - P", "vs_paper"), ("E - D", "vs_draft")):
        lines.append(f"| {name} | " + " | ".join(
            ds._diff(res[k]["selection"][key]["vs_baseline"]["evidence_aware"]) for k in cols) + " |")
    lines += ["", "Within-row AUROC, right vs wrong drafts of one row (ties 1/2) [95% bootstrap over rows]", "",
              "| measure | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for m in MEASURES:
        lines.append(f"| {m} | " + " | ".join(ds._auroc(res[k]["auroc"][m]["within_row"]) for k in cols) + " |")
    lines += ["", f"Subset check: {c['hits']} of {c['drafts']} scored drafts overlap their own subset's "
              f"documents most (a random assignment: {c['expected_random']:.0f})."]
    d = res.get("drafter_check")
    if d and d["drafts"]:
        lines.append(f"Drafter check: {d['own_best']} of {d['drafts']} drafts are likeliest under their own subset "
                     f"(median margin {d['median_gap']:.2f} nats over the best other subset); the stored log ρ_draft "
                     f"lies a median {d['median_abs_vs_stored']:.2f} nats from the log-prob under the draft's own "
                     f"subset and {d['median_abs_other_vs_stored']:.2f} from the closest other subset's.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
