"""Issue 49 item 3: the mode per task that ``tune``'s rule picks on rows outside the reported
ones, measured on the decision benchmark's 404 reported rows against Standard RAG, from the
archived cells alone (no engine runs).

A per-task run answers each row with its task's mode, and the engines decode greedily or
seeded. So a per-task configuration's outcome on a row, and its seconds on a shard whose rows
share one task, are those of the arm that the task's mode names: ``speculative`` is the
product's defaults (:data:`SPEC`, ``speculative-default-one-round``: log ρ_draft alone, one
drafting round) and ``standard`` is Standard RAG. :func:`per_task_cell` builds that cell from
the two arms' archived cells. One caveat: a mixed shard batches other rows together, and bf16
kernels are not batch-invariant (``benchmarks/README.md``, "Batch invariance"), so a real
mixed run may differ on a few rows.

The rule (:func:`choose_mode`, declared in ``docs/decisions/011-mode-per-task.md`` before the
reported rows were measured): a task gets ``speculative`` when the lower end of the paired 95%
interval of speculative - Standard RAG accuracy, pooled over its datasets on rows outside the 404,
lies above -2 points (``decision_stats.NON_INFERIORITY_MARGIN``), and the seconds ratio over
one-machine shard pairs is below 1. Otherwise, and with no such rows, it gets ``standard``.
Standard RAG never ran on a tuning split. The only rows outside the 404 where both arms ran are
Climate-FEVER file rows 300-599 (:data:`decision.CLAIMS_DECISION` without its 100 reported rows,
host :data:`CLAIMS_MACHINE`). So only ``claim`` has evidence.

Command (seconds; restores archive entries into ``--runs``, a temporary directory by default)::

    python benchmarks/per_task_mode.py --shared ../shared/data --out benchmarks/decision/per-task-mode
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import decision_stats as st  # noqa: E402

SPEC, STD = st.ONE_ROUND_ARM, "standard"
MODE_ARM = {"speculative": SPEC, "standard": STD}
"""Mode -> the decision benchmark's arm whose cells answer that mode's rows."""
TASK_OF = {"climate_fever": "claim", "climate_fever_400": "claim", "arc_challenge": "choice",
           "hotpotqa": "qa", "nq_open": "qa", "popqa": "qa"}
"""Dataset -> its rows' ``task``; checked against the rows (:func:`row_task`)."""
TASKS = ("claim", "choice", "qa")
REPORTED_MACHINE = "843baa784212"
"""Host of every shard of both arms on the 404 reported rows (``decision/defaults-843baa784212``)."""
CLAIMS_MACHINE = "3be8a119d336"
"""Host of both arms on ``climate_fever_400`` (``decision/claims-400-3be8a119d336``)."""
MARGIN = st.NON_INFERIORITY_MARGIN


def row_task(rows: Sequence[dict], where: str) -> str:
    """The one ``task`` of ``rows``.

    Raises:
        ValueError: no rows, or rows of several tasks (naming ``where``)."""
    tasks = sorted({r["task"] for r in rows})
    if len(tasks) != 1:
        raise ValueError(f"{where}: rows of {len(tasks)} tasks ({', '.join(tasks) or 'none'}); one task expected")
    return tasks[0]


def choose_mode(cmp: dict | None, margin: float = MARGIN) -> tuple[str, str]:
    """The declared rule: ``("speculative", why)`` when the paired accuracy difference
    speculative - standard (``cmp``: :func:`compare`'s ``pooled``, fractions) has a 95% interval
    whose lower end lies above ``-margin`` and the seconds ratio speculative / standard (over
    one-machine shard pairs) is below 1; ``("standard", why)`` otherwise, including when there
    are no paired rows or no seconds of one machine."""
    if not cmp or not cmp.get("n"):
        return "standard", "no rows outside the reported ones where both arms ran"
    lo = cmp["ci95"][0]
    sec = cmp.get("seconds") or {}
    ratio = sec.get("ratio", math.nan)
    if sec.get("withheld") or not sec.get("n") or ratio != ratio:
        return "standard", "no seconds of both arms on one machine"
    if lo <= -margin:
        return "standard", f"interval's lower end {100 * lo:+.1f} points is not above {-100 * margin:.0f}"
    if ratio >= 1:
        return "standard", f"not cheaper (seconds ratio {ratio:.2f})"
    return "speculative", (f"interval's lower end {100 * lo:+.1f} points is above {-100 * margin:.0f} "
                           f"and seconds ratio {ratio:.2f} < 1")


def split_cell(cell: dict, keep: set[str], where: str) -> dict:
    """The part of ``cell`` (rows and shards; each shard has ``query_ids``) on the query ids
    ``keep``: whole shards only, so their seconds stay whole.

    Raises:
        ValueError: a shard holds rows both in and outside ``keep`` (naming it and ``where``)."""
    shards = []
    for s in cell["shards"]:
        inside = [q in keep for q in s["query_ids"]]
        if any(inside) and not all(inside):
            raise ValueError(f"{where}: shard {s['name']} holds rows both in and outside the split")
        if all(inside):
            shards.append(s)
    rows = [r for r in cell["rows"] if r["query_id"] in keep]
    return {**cell, "rows": rows, "shards": shards,
            "machines": sorted({(s.get("machine") or {}).get("id") for s in shards}, key=lambda m: (m is None, m or ""))}


def per_task_cell(cells: dict[str, dict], modes: dict[str, str], where: str) -> dict:
    """A per-task configuration's cell on one dataset from the arms' cells (``cells``: arm ->
    cell, with :data:`SPEC` and :data:`STD`; each shard with ``query_ids``): each shard, with its
    rows, comes from the cell of the arm that its rows' task's mode names (``modes``: task ->
    ``speculative`` or ``standard``).

    Raises:
        ValueError: a shard mixes tasks (its seconds cannot be split by task), a task has no
            mode, or the arms' shards differ (naming ``where``)."""
    by_id = {arm: {r["query_id"]: r for r in c["rows"]} for arm, c in cells.items()}
    names = {arm: sorted(s["name"] for s in c["shards"]) for arm, c in cells.items()}
    if names[SPEC] != names[STD]:
        raise ValueError(f"{where}: the arms hold different shards ({len(names[SPEC])} vs {len(names[STD])})")
    shards, rows, arms_used = [], [], set()
    for s in sorted(cells[STD]["shards"], key=lambda s: s["name"]):
        task = row_task([by_id[STD][q] for q in s["query_ids"]], f"{where}, shard {s['name']}")
        if task not in modes:
            raise ValueError(f"{where}: task {task!r} has no mode (modes for {', '.join(sorted(modes))})")
        arm = MODE_ARM[modes[task]]
        arms_used.add(arm)
        src = next(t for t in cells[arm]["shards"] if t["name"] == s["name"])
        shards.append(src)
        rows += [by_id[arm][q] for q in src["query_ids"]]
    return {"rows": rows, "shards": shards, "arms": sorted(arms_used),
            "machines": sorted({(s.get("machine") or {}).get("id") for s in shards}, key=lambda m: (m is None, m or ""))}


def compare(pairs: dict[str, tuple[dict, dict]], choices: dict, labels: Sequence[str], *, reps: int = st.REPS) -> dict:
    """a vs b per dataset (``pairs``: dataset -> (cell a, cell b)) with
    ``decision_stats.compare_cells``, and pooled: paired accuracy with rows resampled within
    each dataset, McNemar's exact p and the seconds ratio over every dataset's one-machine shard
    pairs (resampled within each dataset). ``choices``: dataset -> query_id -> option texts.

    Returns ``{"datasets": {dataset: comparison}, "pooled": comparison with "datasets"}``."""
    out, a_all, b_all, strata = {}, [], [], []
    sa, sb, dropped, sec_strata = [], [], 0, []
    for ds, (a, b) in pairs.items():
        ch = choices.get(ds, {})
        out[ds] = st.compare_cells(a, b, ch, labels, reps=reps)
        a_map = {r["query_id"]: st.row_correct(r, ch.get(r["query_id"]), labels) for r in a["rows"]}
        b_map = {r["query_id"]: st.row_correct(r, ch.get(r["query_id"]), labels) for r in b["rows"]}
        ids = [q for q in a_map if q in b_map and a_map[q] is not None and b_map[q] is not None]
        a_all += [bool(a_map[q]) for q in ids]
        b_all += [bool(b_map[q]) for q in ids]
        strata += [ds] * len(ids)
        xs, ys, d = st._seconds_pairs(a, b)
        sa, sb, dropped, sec_strata = sa + xs, sb + ys, dropped + d, sec_strata + [ds] * len(xs)
    pooled = {**st.paired_bootstrap(a_all, b_all, reps=reps, strata=strata or None),
              "accuracy_a": (sum(a_all) / len(a_all)) if a_all else None,
              "accuracy_b": (sum(b_all) / len(b_all)) if b_all else None,
              "mcnemar": st.mcnemar_exact(a_all, b_all), "datasets": list(pairs)}
    if sa or dropped:
        pooled["seconds"] = st.seconds_ratio(sa, sb, dropped, [], [], reps=reps, strata=sec_strata)
    return {"datasets": out, "pooled": pooled}


def rows_needed(cmp: dict, margin: float = MARGIN) -> int | None:
    """Paired rows at which the 95% interval's lower end would clear ``-margin`` if the
    observed difference d and discordant share q held: n = 1.96² (q - d²) / (d + margin)²
    (normal approximation); None when d <= -margin (no n does)."""
    n, d = cmp["n"], cmp["diff"]
    if not n or d <= -margin:
        return None
    q = (cmp["mcnemar"]["b"] + cmp["mcnemar"]["c"]) / n
    return math.ceil(1.96 ** 2 * (q - d * d) / (d + margin) ** 2)


def issue_bar(reported: dict, margin: float = MARGIN) -> list[str]:
    """Issue 49's bar on the reported rows: every dataset's interval above ``-margin`` and the
    pooled seconds ratio's interval below 1; one line per miss (by how much, and the rows that
    would decide it at the observed rates), or one line that it is met."""
    lines = []
    for ds, c in reported["datasets"].items():
        lo = c["ci95"][0]
        if lo <= -margin:
            need = rows_needed(c, margin)
            lines.append(f"{ds}: the interval's lower end {100 * lo:+.1f} points misses -{100 * margin:.0f} by "
                         f"{100 * (-margin - lo):.1f} points at n = {c['n']} (difference {100 * c['diff']:+.1f}); "
                         + (f"about {need} paired rows would clear it at the observed rates"
                            if need else "no sample size clears it at the observed difference"))
    sec = reported["pooled"].get("seconds") or {}
    if not sec.get("n") or not sec["ci95"][1] < 1:
        lines.append(f"pooled seconds ratio {sec.get('ratio', math.nan):.2f} {sec.get('ci95')}: not shown below 1")
    return lines or ["met: every dataset's interval lies above -2 points and the pooled seconds ratio's interval below 1"]


def _ci(c: dict) -> str:
    return f"{100 * c['diff']:+.1f} [{100 * c['ci95'][0]:+.1f}, {100 * c['ci95'][1]:+.1f}]"


def _p(c: dict) -> str:
    m = c["mcnemar"]
    return f"p = {m['p']:.2g} ({m['b']}/{m['c']})"


def _sec(c: dict) -> str:
    s = c.get("seconds") or {}
    if s.get("withheld") or not s.get("n"):
        return "n/a"
    return f"{s['ratio']:.2f} [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}] ({s['n']} shards)"


def tables(res: dict) -> str:
    """tables.md of :func:`main`'s results."""
    out = ["# The mode per task, chosen outside the reported rows (issue 49 item 3)", "",
           f"Generated by `benchmarks/per_task_mode.py` from the archived cells. `speculative` = arm `{SPEC}` "
           f"(the product's defaults), `standard` = Standard RAG; `configs/bench.yaml` models. "
           f"Bootstrap resamples: {res['reps']}. Rule: {res['rule']}", "",
           "## The rule on rows outside the reported ones", "",
           "| task | rows (n) | host | speculative % | standard % | speculative - standard [95%], McNemar p | "
           "s/row ratio [95%] | mode | why |", "|---|---|---|---|---|---|---|---|---|"]
    for task in TASKS:
        t = res["tuning"][task]
        c = t.get("pooled")
        if c and c["n"]:
            out.append(f"| {task} | {t['rows']} ({c['n']}) | {t['machine']} | {100 * c['accuracy_a']:.1f} | "
                       f"{100 * c['accuracy_b']:.1f} | {_ci(c)}, {_p(c)} | {_sec(c)} | **{t['mode']}** | {t['why']} |")
        else:
            out.append(f"| {task} | {t['rows']} | | | | | | **{t['mode']}** | {t['why']} |")
    out += ["", f"Modes: `{json.dumps(res['modes'])}`.", "",
            f"## On the 404 reported rows (host {REPORTED_MACHINE})", "",
            "| dataset, n | mode | standard % | per-task % | defaults everywhere % | per-task - standard [95%], "
            "McNemar p | s/row ratio per-task / standard [95%] | s/row per-task / standard |",
            "|---|---|---|---|---|---|---|---|"]
    rep = res["reported"]
    for ds, c in rep["datasets"].items():
        f = res["arms"][ds]
        out.append(f"| {ds}, {c['n']} | {f['mode']} | {100 * c['accuracy_b']:.1f} | {100 * c['accuracy_a']:.1f} | "
                   f"{100 * f['defaults_accuracy']:.1f} | {_ci(c)}, {_p(c)} | {_sec(c)} | "
                   f"{f['s_per_row']:.2f} / {f['standard_s_per_row']:.2f} |")
    c = rep["pooled"]
    out.append(f"| pooled, {c['n']} | | {100 * c['accuracy_b']:.1f} | {100 * c['accuracy_a']:.1f} | "
               f"{100 * res['defaults_pooled_accuracy']:.1f} | {_ci(c)}, {_p(c)} | {_sec(c)} | |")
    out += ["", "Issue 49's bar (every dataset above -2 points, pooled seconds ratio's interval below 1):", ""]
    out += [f"- {line}" for line in res["issue_bar"]]
    return "\n".join(out) + "\n"


# --- reading the archive -----------------------------------------------------------------

def load_arm(dataset: str, arm: str, rows: list[dict], base, runs: Path, archive: Path, machine: str) -> dict:
    """One archived cell of the decision benchmark, restored into ``runs`` (its input shards
    written there as ``decision.py`` writes them, 10 rows each) from ``machine``'s entries only:
    ``{"rows", "shards" (done-marker results with ``name``, ``machine`` and ``query_ids``),
    "machines", "roles", "complete"}``.

    Raises:
        ValueError: a shard of the cell is not in the archive for that machine."""
    import pyarrow.parquet as pq

    import cell_archive
    import decision

    inp = runs / dataset / "input"
    decision.write_shards(rows, inp, 10)
    cell = decision.Cell(dataset, arm, decision.arm_config(base, arm), inp, runs / dataset / arm)
    cell_archive.restore_cell(cell, archive, machine)
    out_rows, shards = [], []
    for _, out, done in decision.cell_shards(cell):
        if done is None:
            raise ValueError(f"{dataset}/{arm}: shard {out.rsplit('/', 1)[-1]} is not archived for machine {machine}")
        got = pq.read_table(out).to_pylist()
        out_rows += got
        shards.append({**done["result"], "name": out.rsplit("/", 1)[-1], "machine": cell_archive.shard_machine(done),
                       "query_ids": [r["query_id"] for r in got]})
    return {"rows": out_rows, "shards": shards, "roles": decision.roles(cell.config), "complete": True,
            "machines": sorted({s["machine"].get("id") for s in shards}, key=lambda m: (m is None, m or ""))}


def main(argv: list[str] | None = None) -> int:
    import decision

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml")
    ap.add_argument("--archive", type=Path, default=decision.ARCHIVE_DIR)
    ap.add_argument("--runs", type=Path, default=None, help="where archived shards are restored (default: a temp dir)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "decision" / "per-task-mode")
    ap.add_argument("--reps", type=int, default=st.REPS)
    a = ap.parse_args(argv)
    if not a.shared.is_dir():
        ap.error(f"--shared {a.shared}: no such directory (the evaluation data)")
    from specrag_batch.config import load_config

    base = load_config(a.config)
    labels = base.claim_labels
    with tempfile.TemporaryDirectory(prefix="per-task-mode-") as tmp:
        runs = a.runs or Path(tmp)
        reported = {ds: decision.reported_rows(ds, a.shared, 100) for ds in decision.DATASETS}
        choices = {ds: {r["query_id"]: r["choices"] for r in rows} for ds, rows in reported.items()}
        # rows outside the 404 where both arms ran: climate_fever_400 without its reported rows
        cd = decision.CLAIMS_DECISION
        claims = decision.reported_rows(cd, a.shared, 400)
        reported_ids = {r["query_id"] for rows in reported.values() for r in rows}
        keep = {r["query_id"] for r in claims} - reported_ids
        spans = [f"{s}-{e - 1}" for s, e in decision.CLAIMS_DECISION_SPANS if s >= decision.BENCHMARK_RESERVE]
        tuning_cells = {cd: {arm: split_cell(load_arm(cd, arm, claims, base, runs, a.archive, CLAIMS_MACHINE), keep, cd)
                             for arm in (SPEC, STD)}}
        choices[cd] = {r["query_id"]: r["choices"] for r in claims}
        tuning = {}
        for task in TASKS:
            pairs = {ds: (c[SPEC], c[STD]) for ds, c in tuning_cells.items() if TASK_OF[ds] == task}
            cmp = compare(pairs, choices, labels, reps=a.reps)["pooled"] if pairs else None
            mode, why = choose_mode(cmp)
            rows_txt = (f"Climate-FEVER file rows {', '.join(spans)}" if pairs else "none")
            tuning[task] = {"pooled": cmp, "mode": mode, "why": why, "rows": rows_txt,
                            "machine": CLAIMS_MACHINE if pairs else None}
        modes = {task: tuning[task]["mode"] for task in TASKS}
        cells = {ds: {arm: load_arm(ds, arm, rows, base, runs, a.archive, REPORTED_MACHINE) for arm in (SPEC, STD)}
                 for ds, rows in reported.items()}
        combined = {ds: per_task_cell(c, modes, ds) for ds, c in cells.items()}
        for ds, c in cells.items():
            if row_task(c[STD]["rows"], ds) != TASK_OF[ds]:
                raise ValueError(f"{ds}: rows of task {row_task(c[STD]['rows'], ds)}, expected {TASK_OF[ds]}")
        rep = compare({ds: (combined[ds], c[STD]) for ds, c in cells.items()}, choices, labels, reps=a.reps)
        defaults = compare({ds: (c[SPEC], c[STD]) for ds, c in cells.items()}, choices, labels, reps=a.reps)
    arms = {ds: {"task": TASK_OF[ds], "mode": modes[TASK_OF[ds]], "arms": combined[ds]["arms"],
                 "defaults_accuracy": defaults["datasets"][ds]["accuracy_a"],
                 "s_per_row": sum(s["seconds"] for s in combined[ds]["shards"]) / len(combined[ds]["rows"]),
                 "standard_s_per_row": sum(s["seconds"] for s in cells[ds][STD]["shards"]) / len(cells[ds][STD]["rows"]),
                 "query_ids": [r["query_id"] for r in combined[ds]["rows"]]} for ds in cells}
    res = {"rule": (f"a task gets speculative when the paired 95% interval of speculative - standard accuracy on its "
                    f"rows outside the 404 reported ones lies above -{100 * MARGIN:.0f} points and the seconds ratio "
                    f"is below 1; otherwise, and with no such rows, standard (docs/decisions/011-mode-per-task.md)."),
           "reps": a.reps, "config": str(a.config), "hosts": {"tuning": CLAIMS_MACHINE, "reported": REPORTED_MACHINE},
           "tuning": tuning, "tuning_query_ids": sorted(keep), "modes": modes, "arms": arms, "reported": rep,
           "defaults_vs_standard": defaults, "defaults_pooled_accuracy": defaults["pooled"]["accuracy_a"],
           "issue_bar": issue_bar(rep)}
    res = decision._finite(res)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(res, indent=1))
    text = tables(res)
    (a.out / "tables.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
