"""Throughput figures a platform team plans with (issue 13 item 6): rows per hour and tokens per
row per mode on this machine (Standard RAG; Speculative RAG with the product's defaults: log
ρ_draft alone, one drafting round, no verifier pass; Speculative RAG in the paper's
configuration, configs/bench.yaml as it stands), and how they grow with the number
of rows (1x, 4x, 16x of ``--base-rows``, default 4) and with N, the documents per row (10, 20,
40).

Data: NQ-open's benchmark rows (``decision.REPORT_START``: rows 20.. of the reserve, which
drafter training never reads), built by ``specrag_batch.core.datasets.nq_open_passages`` as the decision
benchmark builds them: each question's gold passage plus gold passages of other reserved
questions as distractors, 9 for N = 10, 19 for N = 20, 39 for N = 40 (the first 9 are the
same passages at every N). No dataset here has 40 passages of its own (PopQA 25,
ARC-Challenge 20, HotpotQA 10, Climate-FEVER 5), so NQ-open supplies every N. Rows variants
use N = 10; N variants use ``--docs-rows`` rows (default 4x base = 16). ``retrieval.top_n``
is set to N so that every document is kept.

A *variant* is (mode, rows, N): a normal product run (``decision.run_cell``: the product's
``run_batch``, fused stages, from empty vLLM prefix caches) of configs/bench.yaml with that
mode and N, over its own input shards (``--shard-rows``, default 10, as the decision
benchmark) into its own directory ``<runs>/<mode>/rows<R>-n<N>/``. Resumable: a finished
variant is skipped without loading an engine, a killed one recomputes only its unmarked
shards. Variants run smallest first (rows, then N).

Figures per variant, from the shards' done markers (``decision.load_cell``,
``decision_stats.cell_cost``): rows, compute seconds (sum of shard seconds, over resumes;
engine loading excluded), rows per hour = 3600 x rows / compute seconds, seconds per row,
and tokens per row per model and role (prompt, generated); plus the wall seconds of the
``run_batch`` call when the variant ran start to end in one invocation (Prefect and
scheduling overhead included) and the 1-minute load average before it (this machine is
shared: a load above its 2 cores slows every figure in proportion).

    python benchmarks/throughput.py --config configs/bench.yaml            # make bench-throughput
    python benchmarks/throughput.py --analyse-only                          # rewrite the tables

Writes ``<out>.json`` (every figure with its n) and ``<out>.md``; default
``benchmarks/throughput``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import cell_archive  # noqa: E402
import decision  # noqa: E402
import decision_stats  # noqa: E402
from specrag_batch.config import RunConfig, load_config  # noqa: E402

DATASET = "nq_open"
MODES = ("standard", decision.ONE_ROUND_ARM, "speculative")
"""The modes measured, as decision-benchmark arms of the config (``decision.arm_config``):
``standard`` (Standard RAG on the verifier model), ``speculative-default-one-round`` (the
product's defaults since 2026-12-04: log ρ_draft alone, every draft in one round, no verifier
pass) and ``speculative`` (the config as written: for configs/bench.yaml the paper's log ρ =
log ρ_draft + log ρ_SC + log ρ_SR, with the verifier pass)."""
MODE_LABELS = {"standard": "Standard RAG", decision.ONE_ROUND_ARM: "Speculative RAG, product defaults",
               "speculative": "Speculative RAG, paper's configuration"}


@dataclass(frozen=True)
class Variant:
    """One throughput measurement: ``mode`` (one of :data:`MODES`) over the first ``rows``
    NQ-open benchmark rows with ``docs`` documents each."""

    mode: str
    rows: int
    docs: int

    @property
    def name(self) -> str:
        return f"rows{self.rows}-n{self.docs}"


def plan_variants(base_rows: int = 4, row_factors: tuple[int, ...] = (1, 4, 16),
                  docs: tuple[int, ...] = (10, 20, 40), docs_rows: int | None = None,
                  modes: tuple[str, ...] = MODES) -> list[Variant]:
    """Variants in run order (fewest rows, then fewest documents; modes alternate): rows
    ``base_rows x f`` for each factor at N = 10, and N in ``docs`` at ``docs_rows`` rows
    (default ``4 x base_rows``). A (mode, rows, N) needed by both series runs once.

    Raises:
        ValueError: unknown mode, or a count below 1."""
    for m in modes:
        if m not in MODES:
            raise ValueError(f"mode {m!r}: choose from {', '.join(MODES)}")
    docs_rows = docs_rows if docs_rows is not None else 4 * base_rows
    if min((base_rows, docs_rows, *row_factors, *docs)) < 1:
        raise ValueError("--base-rows, --row-factors, --docs and --docs-rows must be >= 1")
    keys = {(base_rows * f, 10) for f in row_factors} | {(docs_rows, n) for n in docs}
    return [Variant(m, r, n) for r, n in sorted(keys) for m in modes]


def variant_config(base: RunConfig, v: Variant) -> RunConfig:
    """``base`` in the variant's mode (``decision.arm_config``) keeping N documents
    (``retrieval.top_n`` = N)."""
    cfg = decision.arm_config(base, v.mode)
    return load_config(None, {"retrieval.top_n": v.docs}, base=cfg.model_dump(mode="json"))


def variant_rows(shared: Path, rows: int, docs: int) -> list[dict]:
    """The first ``rows`` NQ-open benchmark rows (from ``decision.REPORT_START``) with ``docs``
    documents each (gold + ``docs - 1`` distractors).

    Raises:
        ValueError: the rows would leave the benchmark reserve, or a row has not ``docs``
            documents."""
    from specrag_batch.core.datasets import BENCHMARK_RESERVE
    from specrag_batch.core.datasets import nq_open_passages as nq_open

    start = decision.REPORT_START[DATASET]
    if start + rows > BENCHMARK_RESERVE:
        raise ValueError(f"{rows} rows from row {start} would leave the first {BENCHMARK_RESERVE} "
                         "rows reserved for the benchmark")
    out = nq_open(shared, skip=0, stop=BENCHMARK_RESERVE, distractors=docs - 1)[start:start + rows]
    for r in out:
        if len(r["documents"]) != docs:
            raise ValueError(f"row {r['query_id']}: {len(r['documents'])} documents, not N = {docs}")
    return out


def cell_for(runs: Path, v: Variant, cfg: RunConfig) -> decision.Cell:
    """The variant as a decision-benchmark cell: input ``<runs>/input/<name>``, output
    ``<runs>/<mode>/<name>``."""
    return decision.Cell(DATASET, f"{v.mode}/{v.name}", cfg, runs / "input" / v.name, runs / v.mode / v.name)


def variants_on_disk(runs: Path, modes: tuple[str, ...] = MODES) -> list[Variant]:
    """Variants with a done marker under ``runs`` (``<runs>/<mode>/rows<R>-n<N>/_shards/*.json``),
    whatever this invocation planned, so that a subset run (``--modes``, ``--docs``) does not
    drop the figures of variants finished before from ``<out>.json``/``.md``."""
    found = []
    for mode in modes:
        for d in sorted((runs / mode).glob("rows*-n*")):
            m = re.fullmatch(r"rows(\d+)-n(\d+)", d.name)
            if m and any((d / "_shards").glob("*.json")):
                found.append(Variant(mode, int(m.group(1)), int(m.group(2))))
    return found


def figures(v: Variant, loaded: dict | None, wall: dict | None = None) -> dict:
    """Figures of one variant from ``decision.load_cell``'s result (None: nothing finished):
    rows, compute seconds, rows per hour, seconds per row, tokens per row per model (role,
    prompt, generated), and the wall record of the invocation that ran it whole (if any)."""
    out = {"mode": v.mode, "rows_planned": v.rows, "docs": v.docs, "complete": False, "rows": 0}
    if loaded is None:
        return out
    c = decision_stats.cell_cost(loaded["shards"], loaded["roles"])
    out.update({
        "complete": loaded["complete"], "rows": c["rows"], "shards": c["shards"],
        "compute_s": round(c["seconds"], 3), "s_per_row": c["s_per_row"],
        "rows_per_hour": 3600 * c["rows"] / c["seconds"] if c["seconds"] > 0 else None,
        "stage_s": c["stage_s"], "tokens_per_row": c["tokens_per_row"],
        "models": {m: {"role": x["role"], "prompt_tokens_per_row": x["prompt_tokens_per_row"],
                       "generated_tokens_per_row": x["generated_tokens_per_row"]} for m, x in c["models"].items()}})
    if wall:
        out["wall"] = wall
        out["wall_rows_per_hour"] = 3600 * c["rows"] / wall["seconds"] if wall.get("seconds") else None
    return out


def _fmt(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def markdown(results: list[dict], meta: dict) -> str:
    """Two tables (growth with rows at N = 10; growth with N) plus tokens per row by role."""
    head = [f"# Throughput on this machine ({meta['machine']['cpus']} CPUs, {meta['machine']['platform']}, "
            f"machine {meta['machine'].get('id', 'unknown')}), "
            f"generated by benchmarks/throughput.py", "",
            f"Config {meta['config_path']}; dataset NQ-open (benchmark rows, gold + distractor passages); "
            f"shards of {meta['shard_rows']} rows; compute seconds = sum of shard seconds (engine loading "
            "excluded); wall = the run_batch call when a variant ran whole in one invocation. Load = "
            "1-minute load average before the variant. Incomplete variants: "
            + (", ".join(f"{r['mode']}/rows{r['rows_planned']}-n{r['docs']}" for r in results if not r["complete"])
               or "none") + ".", "",
            "Modes: " + "; ".join(f"`{m}` = {label}" for m, label in MODE_LABELS.items()) + ".", ""]
    tab = ["| mode | rows | N | rows/hour (compute) | rows/hour (wall) | s/row | drafter prompt / gen tokens per row "
           "| verifier prompt / gen tokens per row | load |", "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(results, key=lambda r: (r["docs"], r["rows_planned"], r["mode"])):
        roles = {x["role"]: x for x in (r.get("models") or {}).values()}

        def tok(role):
            x = roles.get(role) or roles.get("drafter+verifier")
            return "-" if x is None else f"{x['prompt_tokens_per_row']:.0f} / {x['generated_tokens_per_row']:.0f}"
        load = (r.get("wall") or {}).get("load_1min")
        tab.append(f"| {r['mode']} | {r['rows']} of {r['rows_planned']} | {r['docs']} | "
                   f"{_fmt(r.get('rows_per_hour'), '.0f')} | {_fmt(r.get('wall_rows_per_hour'), '.0f')} | "
                   f"{_fmt(r.get('s_per_row'), '.2f')} | {tok('drafter')} | {tok('verifier')} | {_fmt(load, '.1f')} |")
    return "\n".join(head + tab) + "\n"


def _wall_path(runs: Path, v: Variant) -> Path:
    return runs / "_wall" / f"{v.mode}-{v.name}.json"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml")
    ap.add_argument("--runs", type=Path, default=ROOT / "benchmarks" / "runs" / "throughput",
                    help="variant outputs (not committed); one directory per config")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "throughput", help="<out>.json, <out>.md")
    ap.add_argument("--base-rows", type=int, default=4)
    ap.add_argument("--row-factors", default="1,4,16")
    ap.add_argument("--docs", default="10,20,40", help="N values")
    ap.add_argument("--docs-rows", type=int, default=None, help="rows of the N variants (default 4 x base)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--shard-rows", type=int, default=10)
    ap.add_argument("--analyse-only", action="store_true", help="tabulate finished shards, run nothing")
    a = ap.parse_args(argv)

    os.environ.setdefault("SPECRAG_PROGRESS", "0")
    os.environ.setdefault("PREFECT_HOME", str(a.runs / "_prefect"))
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    ints = lambda s: tuple(int(x) for x in s.split(",") if x.strip())  # noqa: E731
    variants = plan_variants(a.base_rows, ints(a.row_factors), ints(a.docs), a.docs_rows,
                             tuple(m.strip() for m in a.modes.split(",") if m.strip()))
    base = load_config(a.config)
    cells = []
    for v in variants:
        cell = cell_for(a.runs, v, variant_config(base, v))
        if not a.analyse_only:
            decision.write_shards(variant_rows(a.shared, v.rows, v.docs), cell.input_dir, a.shard_rows)
        cells.append((v, cell))
    print(f"[throughput] {len(cells)} variants: {', '.join(c.name for _, c in cells)}", flush=True)
    statuses = []
    t0 = time.perf_counter()
    if not a.analyse_only:
        for v, cell in cells:
            load = os.getloadavg()[0]
            try:
                st = decision.run_cell(cell)
            except Exception as e:  # noqa: BLE001 - one failed variant must not stop the others
                st = {"cell": cell.name, "status": f"failed: {type(e).__name__}: {e}"}
            statuses.append(st)
            print(f"[throughput] {st}", flush=True)
            if st["status"] == "ok" and st.get("shards_done_before") == 0:
                path = _wall_path(a.runs, v)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps({"seconds": st["seconds"], "load_1min": round(load, 2),
                                            "config_hash": cell.config.config_hash()}))
    results = []
    planned = {v for v, _ in cells}
    extra = [(v, cell_for(a.runs, v, variant_config(base, v))) for v in variants_on_disk(a.runs) if v not in planned]
    for v, cell in cells + extra:
        wall_file = _wall_path(a.runs, v)
        wall = json.loads(wall_file.read_text()) if wall_file.exists() else None
        if wall and wall.get("config_hash") != cell.config.config_hash():
            wall = None  # recorded for another config
        done = cell.input_dir.is_dir() and cell.output_dir.is_dir()
        loaded = decision.load_cell(cell) if done else None
        if v not in planned and not loaded:
            continue  # left by another config: nothing of this config to report
        results.append(figures(v, loaded, wall))
    meta = {"config_path": str(a.config), "config": base.model_dump(mode="json"), "dataset": DATASET,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                        "id": cell_archive.this_machine()["id"]},
            "versions": decision._versions(), "shard_rows": a.shard_rows, "base_rows": a.base_rows,
            "this_invocation": {"variants": statuses, "seconds": round(time.perf_counter() - t0, 1)}}
    if not any(r["rows"] for r in results):
        # nothing finished here (e.g. --analyse-only on a fresh clone): keep the tables there are
        print(f"[throughput] no finished variant under {a.runs} for {a.config}: {a.out.with_suffix('.json')} and "
              ".md left as they are (run `make bench-throughput`, or pass --runs where the variants ran)",
              file=sys.stderr)
        return 2 if a.analyse_only else 1
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps({**meta, "variants": results}, indent=1))
    a.out.with_suffix(".md").write_text(markdown(results, meta))
    print(f"[throughput] wrote {a.out.with_suffix('.json')} and {a.out.with_suffix('.md')}", flush=True)
    return 1 if any(s["status"].startswith("failed") for s in statuses) else 0


if __name__ == "__main__":
    sys.exit(main())
