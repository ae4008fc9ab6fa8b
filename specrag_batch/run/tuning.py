"""What ``specrag-batch tune`` measures and decides (the command: :mod:`specrag_batch.cli.tune`):
the labelled sample's checks and its split into shards per task, the per-task comparison of each
candidate with Standard RAG (paired accuracy difference with a bootstrap 95% interval, McNemar's
exact p, seconds per row and their ratio with an interval; :mod:`specrag_batch.core.stats`), the
decision rule (stated before anything runs: :func:`rule_text`), the config it writes and its
report page (Markdown table and one PNG)."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence

import pyarrow as pa

from ..core import stats

BASELINE = "standard"
"""The candidate every other is compared with: Standard RAG (paper §4) of the same config."""
MARGIN_POINTS = 2.0
"""Default non-inferiority margin (accuracy points): speculative may be at most this much worse."""
MIN_ROWS = 10
"""Default least rows with gold per task: fewer cannot give an interval worth printing."""
TASKS = ("claim", "choice", "qa")


def rule_text(margin: float, drafter: str | None = None) -> str:
    """The decision rule in one paragraph (printed before the candidates run and with the result).

    Args:
        margin: the non-inferiority margin, accuracy points.
        drafter: the ``--drafter`` model of a second Speculative RAG candidate, if any."""
    text = (f"Rule: per task, Speculative RAG is chosen when the paired 95% interval of its accuracy minus "
            f"Standard RAG's stays above -{margin:g} points and the 95% interval of its seconds per row over "
            "Standard RAG's stays below 1 (cheaper); otherwise Standard RAG.")
    if drafter:
        text += (f" Of the two Speculative RAG candidates (the config's drafter and {drafter}) the config takes the "
                 "one the rule chooses for more tasks (a tie: the config's drafter); a task whose rule chose only the "
                 "other one gets Standard RAG.")
    return text


def check_sample(table: pa.Table, name: str, task: str | None, min_rows: int) -> dict[str, int]:
    """Rows with gold per task of a labelled sample; the sample is refused unless it can decide.

    Args:
        table: the sample (input schema, with ``gold``).
        name: the sample's path or URI, named in the error.
        task: the config's fixed ``task`` (the column may then be absent), or None.
        min_rows: least rows with gold per task.

    Raises:
        ValueError: one line: no ``gold`` column or no row with gold; no ``task`` column (and
            no fixed task); only one task (a per-task mode needs two); a task under
            ``min_rows`` rows with gold."""
    if "gold" not in table.column_names:
        raise ValueError(f"{name}: no 'gold' column: tune compares each candidate's answers with gold; "
                         "give a labelled sample (the input schema plus gold)")
    if "task" not in table.column_names and task is None:
        raise ValueError(f"{name}: no 'task' column: tune chooses a mode per task")
    tasks = table.column("task").to_pylist() if "task" in table.column_names else [task] * table.num_rows
    gold = table.column("gold").to_pylist()
    counts: dict[str, int] = {}
    for t, g in zip(tasks, gold):
        if t in TASKS and g:
            counts[t] = counts.get(t, 0) + 1
    if not counts:
        raise ValueError(f"{name}: no row has a gold answer of a task ({', '.join(TASKS)})")
    if len(counts) == 1:
        only = next(iter(counts))
        raise ValueError(f"{name}: one task only ({only}, {counts[only]} rows): tune chooses a mode per task; "
                         f"for one task compare `run --mode speculative` with `run --mode standard` on the sample")
    small = {t: n for t, n in counts.items() if n < min_rows}
    if small:
        raise ValueError(f"{name}: " + ", ".join(f"task {t} has {n} rows with gold" for t, n in sorted(small.items()))
                         + f", under the minimum of {min_rows} (--min-rows); add labelled rows")
    return dict(sorted(counts.items()))


def split_sample(table: pa.Table, task: str | None) -> dict[str, pa.Table]:
    """The sample as shards, each of one task (``<task>-<i>.parquet`` -> rows in sample order):
    each task in min(8, n // 5) near-equal shards (one when n < 10), so a shard has at least 5 rows. A shard's seconds (the manifest's) are the
    units the seconds ratio resamples; rows whose task is none of :data:`TASKS` go to
    ``other-0.parquet`` (the run answers or flags them as any run does; they are not compared)."""
    tasks = table.column("task").to_pylist() if "task" in table.column_names else [task] * table.num_rows
    out: dict[str, pa.Table] = {}
    for t in [*TASKS, None]:
        idx = [i for i, x in enumerate(tasks) if (x == t if t else x not in TASKS)]
        if not idx:
            continue
        parts = max(1, min(8, len(idx) // 5)) if t else 1
        bounds = [round(len(idx) * k / parts) for k in range(parts + 1)]  # near-equal, in sample order
        for k in range(parts):
            out[f"{t or 'other'}-{k}.parquet"] = table.take(pa.array(idx[bounds[k]:bounds[k + 1]]))
    return out


def correct_by_id(rows: Sequence[Mapping]) -> dict[str, bool]:
    """query_id -> ``correct`` of a run's graded rows (no error, ``correct`` not null)."""
    return {r["query_id"]: bool(r["correct"]) for r in rows if r.get("error") is None and r.get("correct") is not None}


def _shard_task(shard: Mapping) -> str:
    return str(shard.get("input", "")).rsplit("/", 1)[-1].split("-", 1)[0]


def compare(candidates: Mapping[str, dict], tasks: Sequence[str], *, reps: int = stats.REPS) -> dict:
    """Per task and candidate: its figures, and against :data:`BASELINE` the paired comparison.

    Args:
        candidates: name -> ``{"rows": output rows, "shards": the manifest's shard entries}``
            (:data:`BASELINE` among them).
        tasks: the tasks to compare.

    Returns ``{task: {candidate: {"n", "accuracy", "seconds_per_row", "vs_standard": None for
    the baseline, else {"n", "diff", "ci95", "mcnemar_p", "ratio", "ratio_ci95", "units"}}}}``;
    fractions for accuracy, seconds for cost; ``n``: rows both graded."""
    base = candidates[BASELINE]
    out: dict = {}
    for task in tasks:
        ids = {r["query_id"] for r in base["rows"] if r.get("task") == task}
        b = {q: c for q, c in correct_by_id(base["rows"]).items() if q in ids}
        b_shards = {s["input"]: s for s in base["shards"] if s.get("status") == "ok" and _shard_task(s) == task}
        out[task] = {}
        for name, cand in candidates.items():
            a = {q: c for q, c in correct_by_id(cand["rows"]).items() if q in ids}
            shards = {s["input"]: s for s in cand["shards"] if s.get("status") == "ok" and _shard_task(s) == task}
            rows = sum(s.get("rows_out") or 0 for s in shards.values())
            fig = {"n": len(a), "accuracy": sum(a.values()) / len(a) if a else None,
                   "seconds_per_row": sum(s.get("seconds") or 0.0 for s in shards.values()) / rows if rows else None,
                   "vs_standard": None}
            if name != BASELINE:
                both = [q for q in a if q in b]
                x, y = [a[q] for q in both], [b[q] for q in both]
                units = [k for k in shards if k in b_shards]
                ratio = stats.ratio_bootstrap([shards[k].get("seconds") or 0.0 for k in units],
                                              [b_shards[k].get("seconds") or 0.0 for k in units], reps=reps)
                boot = stats.paired_bootstrap(x, y, reps=reps)
                fig["vs_standard"] = {"n": boot["n"], "diff": boot["diff"], "ci95": boot["ci95"],
                                      "mcnemar_p": stats.mcnemar_exact(x, y)["p"], "ratio": ratio["ratio"],
                                      "ratio_ci95": ratio["ci95"], "units": ratio["n"],
                                      "rows_per_unit": rows / len(shards) if shards else None}
            out[task][name] = fig
    return out


def passes(v: Mapping | None, margin: float) -> bool:
    """Whether a comparison (``vs_standard`` of :func:`compare`) meets the rule: the accuracy
    interval's lower end above -``margin`` points and the seconds ratio's upper end below 1."""
    if not v or not v["n"]:
        return False
    lo, hi = v["ci95"][0], v["ratio_ci95"][1]
    return math.isfinite(lo) and math.isfinite(hi) and lo > -margin / 100 and hi < 1


def rows_needed(v: Mapping, margin: float) -> int | None:
    """Rows with gold a task would need for the rule to decide for speculative, when the point
    estimates already meet it (accuracy difference above -margin, ratio below 1) but an interval
    does not; None when a point estimate fails (more rows would not change the choice) or when
    both intervals already meet it. Intervals shrink as 1/sqrt(n) (:func:`stats.rows_to_clear`)."""
    if not v or not v["n"] or not (v["diff"] > -margin / 100 and 0 < v["ratio"] < 1) or passes(v, margin):
        return None
    need = [v["n"]]
    if not v["ci95"][0] > -margin / 100:
        need.append(stats.rows_to_clear(v["n"], v["diff"], v["ci95"][0], -margin / 100) or 0)
    if not v["ratio_ci95"][1] < 1 and v["units"] and v["rows_per_unit"]:
        units = stats.rows_to_clear(v["units"], math.log(v["ratio"]), math.log(v["ratio_ci95"][1]), 0.0)
        need.append(math.ceil((units or 0) * v["rows_per_unit"]))
    return max(need)


def decide(figures: Mapping[str, Mapping[str, dict]], margin: float, speculative: Sequence[str]) -> dict:
    """The rule (:func:`rule_text`) applied: ``{"candidate": the Speculative RAG candidate
    written, "modes": {task: "speculative" | "standard"}, "chosen": {task: candidate name},
    "too_small": {task: rows with gold needed}}``.

    Args:
        figures: :func:`compare`'s result.
        margin: accuracy points.
        speculative: the Speculative RAG candidates, the config's own first."""
    wins = {c: [t for t in figures if passes(figures[t][c]["vs_standard"], margin)] for c in speculative}
    best = max(speculative, key=lambda c: len(wins[c]))  # max keeps the first of a tie: the config's drafter
    modes = {t: "speculative" if t in wins[best] else "standard" for t in figures}
    chosen = {t: best if modes[t] == "speculative" else BASELINE for t in figures}
    too_small = {t: n for t in figures if modes[t] == "standard"
                 and (n := rows_needed(figures[t][best]["vs_standard"], margin)) is not None}
    return {"candidate": best, "modes": modes, "chosen": chosen, "too_small": too_small}


def too_small_lines(decision: Mapping, figures: Mapping) -> list[str]:
    """One line per task the sample is too small to decide, with the rows it would need."""
    c = decision["candidate"]
    return [f"{t}: the sample is too small to decide (n = {figures[t][c]['vs_standard']['n']}): about {n} rows "
            f"with gold of task {t} would be needed for the intervals to clear the rule" for t, n in
            decision["too_small"].items()]


def _pct(x) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.1f}"


def _num(x, digits: int = 3) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.{digits}g}"


def table_rows(figures: Mapping) -> list[list[str]]:
    """The table's cells, one row per task and candidate: task, candidate, n, accuracy %,
    difference vs Standard RAG in points [95% interval], McNemar p, seconds per row, ratio [95% interval]."""
    out = []
    for task, cands in figures.items():
        for name, f in cands.items():
            v = f["vs_standard"]
            out.append([task, name, str(f["n"]), _pct(f["accuracy"]),
                        "–" if v is None else f"{100 * v['diff']:+.1f} [{100 * v['ci95'][0]:+.1f}, {100 * v['ci95'][1]:+.1f}]",
                        "–" if v is None else _num(v["mcnemar_p"], 2), _num(f["seconds_per_row"]),
                        "–" if v is None else f"{_num(v['ratio'], 2)} [{_num(v['ratio_ci95'][0], 2)}, {_num(v['ratio_ci95'][1], 2)}]"])
    return out


HEADER = ["task", "candidate", "n", "accuracy %", "vs standard, points [95% CI]", "McNemar p",
          "s / row", "s ratio [95% CI]"]


def markdown(sample: str, rule: str, figures: Mapping, decision: Mapping, config_file: str, plot_file: str) -> str:
    """The report page: the rule, the table (:func:`table_rows`), the choice per task, the
    too-small lines, the config written and the picture."""
    lines = [f"# Choosing a mode per task: {sample}", "", rule, "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(figures)]
    lines += ["", "## Chosen", ""]
    lines += [f"- {t}: {m} ({decision['chosen'][t]})" for t, m in decision["modes"].items()]
    lines += [f"- {line}" for line in too_small_lines(decision, figures)]
    lines += ["", f"Config written: `{config_file}` (per-task `mode`; use it as `--config` of nightly).", "",
              f"![accuracy against seconds per row]({plot_file})", ""]
    return "\n".join(lines)


def plot(figures: Mapping) -> bytes:
    """PNG: accuracy (%) against seconds per row, one point per task and candidate (colour:
    task, marker: candidate)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    markers = "osD^v"
    names = list(dict.fromkeys(c for cands in figures.values() for c in cands))
    for i, (task, cands) in enumerate(figures.items()):
        for name, f in cands.items():
            if f["accuracy"] is None or f["seconds_per_row"] is None:
                continue
            ax.scatter(f["seconds_per_row"], 100 * f["accuracy"], color=f"C{i}",
                       marker=markers[names.index(name) % len(markers)], label=f"{task}, {name}")
    ax.set_xlabel("seconds per row")
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy against cost, per task and candidate")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def tuned_config(base: Mapping | None, decision: Mapping, drafter: str | None, default_mode: str) -> dict:
    """The config to write: the user's config file's keys, ``mode`` per task (tasks the sample
    lacks: ``default``, the config's mode) and, when the ``--drafter`` candidate was chosen, its
    ``drafter.model``."""
    data = dict(base or {})
    data["mode"] = {**decision["modes"], "default": default_mode}
    if drafter and decision["candidate"] != "speculative" and "speculative" in decision["modes"].values():
        data["drafter"] = {**(data.get("drafter") or {}), "model": drafter}
    return data

