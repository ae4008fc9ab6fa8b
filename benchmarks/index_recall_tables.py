"""``benchmarks/index_recall.md`` from ``index_recall.json`` and ``index_recall_synthetic.json``
(``python benchmarks/index_recall.py --tables``)."""

from __future__ import annotations

import json
from pathlib import Path


def _row(x: dict, name: str, label: str) -> str:
    op, at = x["operating_point"], x["at_operating_point"][name]
    check = op.get("check") or {}
    value = f"{op['parameter']} {op['value']}" if op["parameter"] else "exact"
    return (f"| `{x['index_type']}` | {label} | {value} | {op['recall']} (bound {op['recall_lower_bound']}) | "
            f"{check.get('recall', '-')} | **{at['recall_at_10']}** (bound {at['recall_lower_bound']}; "
            f"{at.get('queries', '')} {name}) | "
            f"{at['queries_per_second']:,.0f} |")


def _label(op: dict) -> str:
    """What the point was tuned on, and by which rule (an operating point without ``folds`` is decision 013's)."""
    if "folds" in op:
        return f"{op['queries']} held-out passages: {op['source']} ({op['folds']} folds each, joint bounds)"
    return f"{op['queries']} question-like held-out passages (decision 013's rule: one tuning half)"


def retune_line(retune_json: Path) -> list[str]:
    """The point the rule in force picks on the cached 1M index (``index_retune.py --synthetic``)."""
    if not retune_json.exists():
        return []
    r = json.loads(retune_json.read_text())
    b = r.get("build")
    if not b:
        return []
    return ["", f"The rule in force (decision 014) on the same index, re-tuned without a rebuild "
            f"(`index_retune.py`, {r['date']}, host `{r['host']}`): the build's held-out queries pick nprobe "
            f"{b['nprobe']} (picks {b['picks']}); the {r['new_queries']:,} new points get **{b['new_recall_faiss']}** "
            f"(FAISS search). Over {r['draws']} draws of held-out samples: nprobe "
            f"{r['rules'][RULE_NAME]['value_median']} (median), new points "
            f"{r['rules'][RULE_NAME]['new_recall_median']} (median; "
            f"{r['rules'][RULE_NAME]['share_of_draws_reaching_target']:.0%} of draws reach 0.95)."]


RULE_NAME = "max(question-like, unchanged), 2 folds, joint 95% (Bonferroni /4)"


def tables(real_json: Path, synthetic_json: Path) -> str:
    """``benchmarks/index_recall.md`` from the two result files."""
    lines = ["# Recall of the build's operating point (`benchmarks/index_recall.py`)", "",
             "Generated from `index_recall.json` and `index_recall_synthetic.json` by "
             "`python benchmarks/index_recall.py --tables`. recall@10 against exact search (`Flat` over the same "
             "vectors; a passage as similar as the exact 10th counts as found); bound = one-sided 95% lower "
             "confidence bound of the mean; queries/s of one process on shared cores (upper bounds on time).", ""]
    head = ["| index | tuned on | operating point | recall at it (bound) | recall out of fold (013: check half) | "
            "recall of the evaluated queries (never tuned on) | queries/s |", "|---|---|---|---|---|---|---|"]
    if real_json.exists():
        r = json.loads(real_json.read_text())
        lines += [f"## Real passages: {r['passages']:,} passages, {r['questions']:,} questions", "",
                  f"{r['date']}, host `{r['host']}`, {r['cpu']}. Data: {r['data']}. Per dataset "
                  f"(passages, questions): " + ", ".join(f"{k} {v[0]:,}/{v[1]:,}" for k, v in r["per_dataset"].items())
                  + ".", "", *head]
        for x in r["indexes"]:
            name = next(iter(x["at_operating_point"]))
            lines.append(_row(x, name, x.get("tuned_on", _label(x["operating_point"]))))
        lines += ["", "The rule before (decision 012: held-out passages searched unchanged, their mean recall "
                  "reaching the target) on the same indexes:", "",
                  "| index | its operating point | held-out passages' recall | questions' recall |", "|---|---|---|---|"]
        for x in r["indexes"]:
            old = x.get("at_old_rule") or {}
            if old:
                key = "nprobe" if x["operating_point"]["parameter"] == "nprobe" else "ef_search"
                lines.append(f"| `{x['index_type']}` | {key} {old['value']} | {old['passages_recall']} | "
                             f"{old['questions']['recall_at_10']} |")
    if synthetic_json.exists():
        r = json.loads(synthetic_json.read_text())
        cal = r["calibration"]
        lines += ["", f"## Synthetic: {r['passages']:,} vectors matched to the real passages", "",
                  f"{r['date']}, host `{r['host']}`, {r['cpu']}; {r['cpu_seconds']:,} CPU s in the benchmark "
                  f"process. Data: {r['data']}: a = {cal['a']}, m = {cal['m']}. Difficulty at equal N "
                  f"({cal['n']:,}; held-out passages, median over 1,000):", "",
                  "| vectors | relative contrast | local intrinsic dimension | d10 / d1 |", "|---|---|---|---|"]
        for label, d in (("real passages", cal["real"]["passages"]), ("real questions", cal["real"]["questions"]),
                         ("synthetic passages", cal["synthetic"]["passages"]),
                         *((f"synthetic at {r['passages']:,}: {k}", v) for k, v in (r.get("difficulty_at_n") or {}).items())):
            lines.append(f"| {label} | {d['relative_contrast']} | {d['lid']} | {d['d10_over_d1']} |")
        lines += ["", *head]
        for x in r["indexes"]:
            name = next(iter(x["at_operating_point"]))
            lines.append(_row(x, name, _label(x["operating_point"])))
            old = x.get("at_old_rule") or {}
            if old:
                key = "nprobe" if x["operating_point"]["parameter"] == "nprobe" else "ef_search"
                lines += ["", f"Rule of decision 012 on the same index: {key} {old['value']} (held-out passages "
                          f"{old['passages_recall']}), new points {old[name]['recall_at_10']}."]
        lines += retune_line(synthetic_json.with_name("index_retune_synthetic.json"))
    return "\n".join(lines) + "\n"
