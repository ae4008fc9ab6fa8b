"""Cost model on paper (issue 13 item 5): the PROJECTED latency per row of Standard RAG and
Speculative RAG in the paper's setting, from token counts measured on this machine.

Nothing here is a measurement of the paper's setting. The token counts per row are measured
(the decision benchmark's product runs, ``benchmarks/decision.py``: each shard's done marker
holds the engine usage ``prompt_tokens``/``generated_tokens``/``calls`` per model); the
latencies are *projections*: those token counts divided by published GPU throughput figures.

Setting projected (Wang et al. 2024, arXiv 2407.08223, §4 latency analysis): a Mistral-7B
drafter with several replicas drafting the m subsets of a row in parallel; a Mixtral-8x7B
verifier; Standard RAG on the same verifier model; one row at a time (no batching across
rows).

Model, per row (tokens per row are means over the cell's rows, so every figure is a mean):

* a sequential stage costs ``prefill_tokens / prefill_rate + generated_tokens / decode_rate``
  (seconds; rates in tokens/s, ``decode_rate`` of one sequence at batch size 1);
* **Standard RAG**: one verifier stage reading all N documents and writing the answer;
* **Speculative RAG**: drafting, then verification.
  Drafting: the row's drafts run in parallel, one per drafter replica; with r replicas and
  ``d`` drafts in a round the row waits ``ceil(d / r)`` waves, each costing one draft's prompt
  and generation (the cell's mean per draft); adaptive drafting's rounds are sequential
  (``draft_rounds`` of the output rows). Verification is prefill only: the verifier scores
  each draft from the log-probabilities of its prompt and generates one token, which the
  prefill pass produces, so ``verifier_prompt_tokens / verifier_prefill_rate``. Rows on the
  consensus fast path used no verifier tokens, and the measured means already include that.

Assumptions that favour neither mode: no queueing, no network, no prefix-cache reuse, prefill
rate independent of prompt length. The slowest draft of a wave decides its time: the main
figure uses the cell's mean draft, and ``total_s_slowest_draft`` scales the drafts' generation
by :func:`slowest_draft_factor` (longest over mean ``tokens_draft`` per row).

    python benchmarks/cost_model.py --runs benchmarks/runs --config configs/bench.yaml
        [--drafter-replicas R] [--verifier-prefill-tps T ...]   # defaults: PUBLISHED

Writes ``<out>.json`` and ``<out>.md`` (default ``benchmarks/cost_projection``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import decision  # noqa: E402
import decision_stats  # noqa: E402

LABEL = "PROJECTION (published GPU throughput x token counts measured here), not a measurement"

PUBLISHED = {
    "drafter_prefill_tps": {
        "value": round(2048 / 0.133, 1),
        "quote": "Low Latency, A100 GPUs (FP16): | LLaMA 7B | 1 | 1 | 2048 | 133 | "
                 "(batch size 1, TP 1, input length 2048, 1st token latency 133 ms)",
        "derived": "2048 input tokens / 0.133 s = 15,398.5 prefill tokens/s",
        "hardware": "1x NVIDIA A100 SXM 80GB, FP16, TensorRT-LLM v0.5.0 (the table's note)",
        "model": "LLaMA 7B, a proxy for Mistral-7B (both 32 layers, hidden size 4096; Mistral "
                 "7.2B vs 6.7B parameters); no Mistral-7B batch-1 prefill figure was found",
        "url": "https://github.com/NVIDIA/TensorRT-LLM/blob/138f96d45f90b9667426f7c47297d8c06bafac73/"
               "docs/source/performance.md#low-latency",
    },
    "drafter_decode_tps": {
        "value": 111.0,
        "quote": "A100 | GPT-J 6B | 1 | 128 | - | 111 | 12.5 | (batch size 1, throughput 111 out tok/s, "
                 "1st token latency 12.5 ms)",
        "derived": "batch size 1, so 111 output tokens/s is one sequence's decode rate",
        "hardware": "1x NVIDIA A100 SXM 80GB, FP16, TP 1, TensorRT-LLM v0.5.0, TensorRT 9.1",
        "model": "GPT-J 6B, a proxy for Mistral-7B (a 7B-class dense model; decode at batch 1 is "
                 "bound by reading the weights, 6B vs 7.2B parameters); no Mistral-7B batch-1 decode "
                 "figure on A100/H100 was found",
        "url": "https://github.com/NVIDIA/TensorRT-LLM/blob/15ed78097ea2c14b3831ca017935a32dec54476e/"
               "docs/source/blogs/H100vsA100.md",
    },
    "verifier_prefill_tps": {
        "value": round(512 / 0.127, 1),
        "quote": "On a single A100 GPU, an int8 quantization of Mixtral on TensorRT-LLM demonstrated a "
                 "127ms time to first token and 81 perceived tokens per second in our tests. [...] ours "
                 "were a 512-token input sequence, 128-token output sequence, and single concurrent request",
        "derived": "512 input tokens / 0.127 s = 4,031.5 prefill tokens/s; a time to first token also holds "
                   "request overhead, and 512 tokens is a short prompt, so this understates the prefill rate "
                   "of long prompts (which makes both modes' verifier stage, Standard RAG's most, look slower)",
        "hardware": "1x NVIDIA A100, Mixtral-8x7B weights in int8, TensorRT-LLM, one concurrent request",
        "model": "Mixtral-8x7B (the paper's verifier; the paper's precision and GPUs may differ)",
        "url": "https://www.baseten.co/blog/faster-mixtral-inference-with-tensorrt-llm-and-quantization/",
    },
    "verifier_decode_tps": {
        "value": 81.0,
        "quote": "81 perceived tokens per second [...] 512-token input sequence, 128-token output sequence, "
                 "and single concurrent request",
        "derived": "one request, so 81 tokens/s is one sequence's decode rate ('perceived': the time to first "
                   "token may be in its denominator, which would make the true decode rate somewhat higher)",
        "hardware": "1x NVIDIA A100, Mixtral-8x7B weights in int8, TensorRT-LLM, one concurrent request",
        "model": "Mixtral-8x7B",
        "url": "https://www.baseten.co/blog/faster-mixtral-inference-with-tensorrt-llm-and-quantization/",
    },
}
"""Published figures used as defaults, each with its quote, hardware and source (override any
on the command line; the output records which were given)."""

REFERENCES = {
    "llama70b_tp4_a100_prefill_tps": {
        "value": round(2048 / 0.377, 1),
        "quote": "Low Latency, A100 GPUs (FP16): | LLaMA 70B | 1 | 4 | 2048 | 377 |",
        "hardware": "4x A100 SXM 80GB (TP 4), FP16, TensorRT-LLM v0.5.0",
        "note": "a 70B dense verifier's prefill (the issue allows 'a Mixtral-8x7B or 70B verifier'); "
                "no matching batch-1 decode figure in the same table",
        "url": PUBLISHED["drafter_prefill_tps"]["url"],
    },
}
"""Other sourced figures a reader may pass explicitly (never used unless given)."""


def stage_seconds(prefill_tokens: float, generated_tokens: float, prefill_tps: float,
                  decode_tps: float | None) -> float:
    """One sequential stage: ``prefill_tokens / prefill_tps + generated_tokens / decode_tps``
    (seconds; tokens, tokens/s). ``decode_tps`` None: a prefill-only stage.

    Raises:
        ValueError: a rate is not positive."""
    if prefill_tps <= 0 or (decode_tps is not None and decode_tps <= 0):
        raise ValueError(f"rates must be positive tokens/s (prefill {prefill_tps}, decode {decode_tps})")
    return prefill_tokens / prefill_tps + (generated_tokens / decode_tps if decode_tps is not None else 0.0)


def drafting_waves(drafts: Sequence[int], rounds: Sequence[int | None], replicas: int | None) -> float:
    """Mean number of sequential drafting waves per row: a row with ``d`` drafts in ``k``
    rounds (adaptive drafting; None = 1) on ``r`` replicas waits ``k * ceil(d / k / r)`` waves
    (``r`` None: one replica per draft, so one wave per round). Rows without drafts (errors)
    wait 0. Returns 0.0 for no rows.

    Raises:
        ValueError: ``drafts`` and ``rounds`` differ in length, or ``replicas`` < 1."""
    if len(drafts) != len(rounds):
        raise ValueError(f"drafts ({len(drafts)}) and rounds ({len(rounds)}) differ in length")
    if replicas is not None and replicas < 1:
        raise ValueError(f"--drafter-replicas {replicas}: at least 1")
    waves = []
    for d, k in zip(drafts, rounds):
        k = k or 1
        if d == 0:
            waves.append(0)
        elif replicas is None:
            waves.append(k)
        else:
            waves.append(k * math.ceil(d / k / replicas))
    return sum(waves) / len(waves) if waves else 0.0


def cell_tokens(cell: dict) -> dict:
    """Measured tokens per row of one loaded cell (``decision.load_cell``): per role
    (``drafter``, ``verifier``) prompt and generated tokens per row and calls, from the done
    markers via ``decision_stats.cell_cost``; drafts per row, per-draft prompt/generated
    tokens and the rows' ``draft_rounds`` from the output rows.

    Raises:
        ValueError: one model served both roles (``drafter+verifier``): its usage cannot be
            split by role; run the cell with distinct drafter and verifier models."""
    cost = decision_stats.cell_cost(cell["shards"], cell["roles"])
    calls: dict[str, int] = {}
    for s in cell["shards"]:
        for name, e in (s.get("engines") or {}).items():
            calls[name] = calls.get(name, 0) + int(e.get("calls", 0))
    by_role: dict[str, dict] = {}
    for name, m in cost["models"].items():
        if m["role"] not in ("drafter", "verifier"):
            raise ValueError(f"model {name!r} served {m['role']!r}: its engine usage cannot be split by "
                             "role; project only runs with distinct drafter and verifier models")
        by_role[m["role"]] = {"model": name, "prompt_tokens_per_row": m["prompt_tokens_per_row"],
                              "generated_tokens_per_row": m["generated_tokens_per_row"],
                              "calls": calls.get(name, 0)}
    rows = cell["rows"]
    drafts = [len(r.get("drafts") or []) for r in rows]
    rounds = [r.get("draft_rounds") for r in rows]
    total_drafts = sum(drafts)
    out = {"rows": cost["rows"], "shards": cost["shards"], "measured_s_per_row": cost["s_per_row"],
           "roles": by_role, "drafts": drafts, "draft_rounds": rounds,
           "drafts_per_row": (total_drafts / len(rows)) if rows else 0.0,
           "fast_path_share": (sum(bool(r.get("fast_path")) for r in rows) / len(rows)) if rows else None}
    if "drafter" in by_role and total_drafts:
        n = cost["rows"]
        out["per_draft"] = {"prompt_tokens": by_role["drafter"]["prompt_tokens_per_row"] * n / total_drafts,
                            "generated_tokens": by_role["drafter"]["generated_tokens_per_row"] * n / total_drafts}
    out["slowest_draft_factor"] = slowest_draft_factor(rows)
    return out


def slowest_draft_factor(rows: Sequence[dict]) -> float | None:
    """How much longer a row's longest draft is than its mean draft, over the rows: the sum
    over rows of the longest draft's ``tokens_draft`` (drafter tokens of rationale and answer)
    divided by the sum of the rows' mean ``tokens_draft`` (>= 1; None without token counts).
    A wave of parallel drafts lasts as long as its longest draft."""
    longest = mean = 0.0
    for r in rows:
        t = [d["tokens_draft"] for d in (r.get("drafts") or []) if d.get("tokens_draft") is not None]
        if t:
            longest += max(t)
            mean += sum(t) / len(t)
    return longest / mean if mean else None


def project_standard(tokens: dict, rates: dict) -> dict:
    """Projected seconds per row of Standard RAG: one verifier stage (prefill of the prompt with
    all N documents, decode of the answer)."""
    v = tokens["roles"]["verifier"]
    pre = stage_seconds(v["prompt_tokens_per_row"], 0, rates["verifier_prefill_tps"], None)
    dec = v["generated_tokens_per_row"] / rates["verifier_decode_tps"]
    return {"verifier_prefill_s": pre, "verifier_decode_s": dec, "total_s": pre + dec}


def project_speculative(tokens: dict, rates: dict, replicas: int | None) -> dict:
    """Projected seconds per row of Speculative RAG: parallel drafting (:func:`drafting_waves`
    waves of one mean draft each) then prefill-only verification of the row's drafts."""
    per = tokens.get("per_draft", {"prompt_tokens": 0.0, "generated_tokens": 0.0})
    waves = drafting_waves(tokens["drafts"], tokens["draft_rounds"], replicas)
    one = stage_seconds(per["prompt_tokens"], per["generated_tokens"], rates["drafter_prefill_tps"],
                        rates["drafter_decode_tps"])
    v = tokens["roles"].get("verifier", {"prompt_tokens_per_row": 0.0})
    verify = stage_seconds(v["prompt_tokens_per_row"], 0, rates["verifier_prefill_tps"], None)
    out = {"drafting_waves_per_row": waves, "one_draft_s": one, "drafting_s": waves * one,
           "verification_s": verify, "total_s": waves * one + verify}
    factor = tokens.get("slowest_draft_factor")
    if factor is not None:  # each wave waits for its longest draft's generation
        slow = waves * stage_seconds(per["prompt_tokens"], per["generated_tokens"] * factor,
                                     rates["drafter_prefill_tps"], rates["drafter_decode_tps"])
        out["total_s_slowest_draft"] = slow + verify
    return out


def project(cells: dict, rates: dict, replicas: int | None) -> dict:
    """Tokens per row and projected seconds per row for every (dataset, arm) of ``cells``
    (dataset -> arm -> ``decision.load_cell`` result), and per dataset the projected ratio of
    each speculative arm to ``standard``.

    Returns ``{"label", "rates", "drafter_replicas", "datasets": {dataset: {arm: {"mode",
    "tokens_per_row", "projected_s_per_row", ...}, "ratios": {arm: spec / std}}}, "notes"}``;
    a cell that cannot be projected (one model in both roles) is left out with a note."""
    out: dict = {"label": LABEL, "rates": rates, "drafter_replicas": replicas or "one per draft",
                 "datasets": {}, "notes": []}
    for ds, arms in cells.items():
        entry: dict = {"arms": {}, "ratios": {}}
        for arm, cell in arms.items():
            mode = "standard" if set(cell["roles"].values()) == {"verifier"} else "speculative"
            try:
                tok = cell_tokens(cell)
            except ValueError as e:
                out["notes"].append(f"{ds}/{arm}: not projected: {e}")
                continue
            proj = project_standard(tok, rates) if mode == "standard" else project_speculative(tok, rates, replicas)
            entry["arms"][arm] = {
                "mode": mode, "complete": cell.get("complete", True), "rows": tok["rows"],
                "tokens_per_row": {f"{role}_{k}": v[f"{k}_tokens_per_row"]
                                   for role, v in tok["roles"].items() for k in ("prompt", "generated")},
                "models": {role: v["model"] for role, v in tok["roles"].items()},
                "drafts_per_row": tok["drafts_per_row"], "per_draft_tokens": tok.get("per_draft"),
                "fast_path_share": tok["fast_path_share"], "slowest_draft_factor": tok.get("slowest_draft_factor"),
                "measured_s_per_row_here": tok["measured_s_per_row"],
                "projected_s_per_row": proj}
        std = entry["arms"].get("standard")
        for arm, a in entry["arms"].items():
            if std and a["mode"] == "speculative" and std["projected_s_per_row"]["total_s"] > 0:
                entry["ratios"][arm] = a["projected_s_per_row"]["total_s"] / std["projected_s_per_row"]["total_s"]
        out["datasets"][ds] = entry
    return out


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def markdown(res: dict) -> str:
    """The projection as Markdown tables, every latency labelled projected."""
    r = res["rates"]
    lines = [f"**{res['label']}.**", "",
             f"Rates (tokens/s): drafter prefill {r['drafter_prefill_tps']:g}, decode {r['drafter_decode_tps']:g}; "
             f"verifier prefill {r['verifier_prefill_tps']:g}, decode {r['verifier_decode_tps']:g}. "
             f"Drafter replicas: {res['drafter_replicas']}.", "",
             "| dataset | arm | mode | rows | drafter prompt / gen tokens per row | verifier prompt / gen tokens per row "
             "| drafts/row | projected drafting s | projected verifier s | projected s/row | projected s/row, slowest draft "
             "| projected ratio spec/std |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ds, e in res["datasets"].items():
        for arm, a in e["arms"].items():
            t, p = a["tokens_per_row"], a["projected_s_per_row"]
            dr = (f"{t['drafter_prompt']:.0f} / {t['drafter_generated']:.0f}" if "drafter_prompt" in t else "-")
            vr = (f"{t['verifier_prompt']:.0f} / {t['verifier_generated']:.0f}" if "verifier_prompt" in t else "-")
            if a["mode"] == "standard":  # one verifier stage: prefill + decode of the answer
                draft_s, ver_s, drafts = "-", f"{p['total_s']:.3f}", "-"
            else:  # verifier: prefill only
                draft_s, ver_s, drafts = f"{p['drafting_s']:.3f}", f"{p['verification_s']:.3f}", f"{a['drafts_per_row']:.1f}"
            ratio = e["ratios"].get(arm)
            lines.append(f"| {ds} | {arm} | {a['mode']} | {a['rows']} | {dr} | {vr} | {drafts} | "
                         f"{draft_s} | {ver_s} | {p['total_s']:.3f} | {_s(p.get('total_s_slowest_draft'))} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    for n in res["notes"]:
        lines.append(f"\nNote: {n}")
    return "\n".join(lines) + "\n"


def load_cells(runs: Path, config: Path, datasets: list[str] | None, arms: list[str],
               tuned_drafter: str | dict[str, str] | None = None) -> dict:
    """dataset -> arm -> ``decision.load_cell`` for every finished cell under ``runs``, with
    the run config ``decision.arm_config`` gives the arm (the one its markers were written
    with; a marker of another config is not read).

    Raises:
        FileNotFoundError: ``runs`` is not a directory."""
    from specrag_batch.config import load_config

    base = load_config(config)
    if not runs.is_dir():
        raise FileNotFoundError(f"--runs {runs}: no such directory (the decision benchmark's runs: run `make "
                                "bench`, or restore archived cells with `decision.py --analyse-only --machine <id> "
                                "--runs <dir>`)")
    names = datasets or sorted(p.name for p in runs.iterdir() if p.is_dir() and (p / "input").is_dir())
    cells: dict = {}
    for ds in names:
        for arm in arms:
            if not (runs / ds / arm).is_dir():
                continue
            cfg = decision.arm_config(base, arm, tuned_drafter)
            got = decision.load_cell(decision.Cell(ds, arm, cfg, runs / ds / "input", runs / ds / arm))
            if got is not None:
                cells.setdefault(ds, {})[arm] = got
    return cells


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=Path, default=ROOT / "benchmarks" / "runs", help="decision.py's --runs")
    ap.add_argument("--config", type=Path, default=ROOT / "configs" / "bench.yaml", help="decision.py's --config")
    ap.add_argument("--datasets", default=None, help="comma-separated (default: every dataset under --runs)")
    ap.add_argument("--arms", default="standard,speculative",
                    help="arms to project (speculative-smol, speculative-tuned, speculative-tuned-<label> too)")
    ap.add_argument("--tuned-drafter", default=None,
                    help="as given to decision.py (one model dir, or comma-separated label=dir pairs)")
    for role in ("drafter", "verifier"):
        for kind in ("prefill", "decode"):
            key = f"{role}_{kind}_tps"
            pub = PUBLISHED.get(key)
            ap.add_argument(f"--{role}-{kind}-tps", type=float, required=pub is None,
                            default=pub["value"] if pub else None,
                            help=(f"{role} {kind} tokens/s" + (f" (default: published, {pub['model'].split(',')[0]}, "
                                                               f"{pub['hardware']}: {pub['url']})" if pub else "")))
    ap.add_argument("--drafter-replicas", type=int, default=None,
                    help="drafter replicas drafting in parallel (default: one per draft, the paper's parallel drafting)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "cost_projection",
                    help="writes <out>.json and <out>.md")
    a = ap.parse_args(argv)
    rates = {k: getattr(a, k) for k in ("drafter_prefill_tps", "drafter_decode_tps",
                                        "verifier_prefill_tps", "verifier_decode_tps")}
    datasets = [d.strip() for d in a.datasets.split(",") if d.strip()] if a.datasets else None
    tuned = decision.parse_tuned_drafters(a.tuned_drafter)
    try:
        cells = load_cells(a.runs, a.config, datasets, decision.expand_arms(a.arms, list(tuned)), tuned)
    except FileNotFoundError as e:
        ap.error(str(e))
    if not cells:
        print(f"[cost_model] no finished cell under {a.runs}", file=sys.stderr)
        return 1
    res = project(cells, rates, a.drafter_replicas)
    res["sources"] = {k: (PUBLISHED[k] if k in PUBLISHED and rates[k] == PUBLISHED[k]["value"]
                          else "given on the command line") for k in rates}
    res["references"] = REFERENCES
    res["paper_setting"] = ("Wang et al. 2024 §4: Mistral-7B drafter, parallel drafting on several replicas; "
                            "Mixtral-8x7B verifier; Standard RAG on the same verifier; one row at a time")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.with_suffix(".json").write_text(json.dumps(res, indent=1))
    a.out.with_suffix(".md").write_text("# Cost projection (benchmarks/cost_model.py)\n\n" + markdown(res))
    print(markdown(res))
    print(f"[cost_model] wrote {a.out.with_suffix('.json')} and {a.out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
