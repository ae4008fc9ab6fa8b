"""Render benchmark results (JSON from ``bench.py``) as Markdown tables and PNG plots.

    python benchmarks/report.py benchmarks/results.json   # writes benchmarks/tables.md + *.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def pct(x):
    return "n/a" if x is None else f"{100 * x:.1f}"


def ci(c):
    return "" if not c or c[0] != c[0] else f" [{100 * c[0]:.0f}, {100 * c[1]:.0f}]"


def tokens(r):
    return sum(e["prompt_tokens"] + e["generated_tokens"] for e in r["engines"].values())


def tables(res: dict) -> str:
    out = []
    main = res["experiments"].get("main", {})
    out.append("| dataset | metric | n | Speculative RAG acc. [95% CI] | Standard RAG acc. [95% CI] | "
               "s/query spec | s/query std | latency ratio spec/std | engine s spec / std | overhead s spec / std |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for name, e in main.items():
        s, b = e["speculative"], e["standard"]
        metric = "match" if e["task"] == "qa" else "accuracy"
        out.append(f"| {name} | {metric} | {s['n']} | {pct(s['accuracy'])}{ci(s['ci95'])} | "
                   f"{pct(b['accuracy'])}{ci(b['ci95'])} | {s['wall_s_per_query']:.1f} | "
                   f"{b['wall_s_per_query']:.1f} | {e['latency_ratio_spec_over_std']:.2f} | "
                   f"{s['engine_s']:.0f} / {b['engine_s']:.0f} | {s['overhead_s']:.1f} / {b['overhead_s']:.1f} |")
    out.append("")
    out.append("Tokens processed (prompt + generated) per model:")
    out.append("")
    out.append("| dataset | mode | drafter tokens | verifier tokens | fast-path rows | low-confidence rate | acc. above τ_min | acc. below τ_min |")
    out.append("|---|---|---|---|---|---|---|---|")
    for name, e in main.items():
        for mode in ("speculative", "standard"):
            r = e[mode]
            eng = r["engines"]
            dt = eng.get("drafter", {})
            vt = eng.get("verifier", {})
            low = f"{pct(r.get('low_confidence_rate'))}" if mode == "speculative" else ""
            out.append(f"| {name} | {mode} | {dt.get('prompt_tokens', 0) + dt.get('generated_tokens', 0):.0f} | "
                       f"{vt.get('prompt_tokens', 0) + vt.get('generated_tokens', 0):.0f} | "
                       f"{r.get('fast_path', 0)} | {low} | {pct(r.get('accuracy_above_tau')) if mode == 'speculative' else ''} | "
                       f"{pct(r.get('accuracy_below_tau')) if mode == 'speculative' else ''} |")
    for name, e in main.items():
        if "engine_alone_s" in e:
            out.append("")
            out.append(f"Engine alone ({name}, bare vLLM on the exact prompts the pipeline sent): "
                       f"speculative {e['engine_alone_s']['speculative']:.1f} s vs pipeline "
                       f"{e['speculative']['wall_s']:.1f} s (ratio {e['pipeline_over_engine_alone']['speculative']:.2f}); "
                       f"standard {e['engine_alone_s']['standard']:.1f} s vs pipeline {e['standard']['wall_s']:.1f} s "
                       f"(ratio {e['pipeline_over_engine_alone']['standard']:.2f}).")
    abl = res["experiments"].get("ablations")
    if abl:
        out += ["", f"Ablations ({abl['dataset']}, n={abl['n']}, accuracy %):", "",
                "| variant | accuracy |", "|---|---|"]
        out += [f"| {k} | {pct(v)} |" for k, v in abl["accuracy"].items()]
    sw = res["experiments"].get("sweeps")
    if sw:
        out += ["", f"Sweeps ({sw['dataset']}, n={sw['n']}):", "", "| setting | accuracy % | s/query |", "|---|---|---|"]
        out += [f"| m = {m} | {pct(v['accuracy'])} | {v['wall_s_per_query']:.1f} |" for m, v in sw["m"].items()]
        out += [f"| k = {k} | {pct(v['accuracy'])} | {v['wall_s_per_query']:.1f} |" for k, v in sw["k"].items()]
    cost = res["experiments"].get("cost_vs_n")
    if cost:
        out += ["", f"Cost vs N ({cost['dataset']}, {cost['rows']} rows):", "",
                "| N | spec s/query | std s/query | spec verifier tokens | std verifier tokens |", "|---|---|---|---|---|"]
        for n, e in cost["N"].items():
            sv = e["speculative"]["engines"].get("verifier", {})
            bv = e["standard"]["engines"].get("verifier", {})
            out.append(f"| {n} | {e['speculative']['wall_s_per_query']:.1f} | {e['standard']['wall_s_per_query']:.1f} | "
                       f"{sv.get('prompt_tokens', 0):.0f} | {bv.get('prompt_tokens', 0):.0f} |")
    rows = res["experiments"].get("cost_vs_rows")
    if rows:
        out += ["", f"Cost vs rows ({rows['dataset']}):", "", "| rows | spec wall s | std wall s |", "|---|---|---|"]
        out += [f"| {n} | {e['speculative']['wall_s']:.1f} | {e['standard']['wall_s']:.1f} |" for n, e in rows["rows"].items()]
    return "\n".join(out) + "\n"


def plots(res: dict, outdir: Path) -> None:
    main = res["experiments"].get("main", {})
    if main:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, e in main.items():
            xs = [e["speculative"]["wall_s_per_query"], e["standard"]["wall_s_per_query"]]
            ys = [100 * (e["speculative"]["accuracy"] or 0), 100 * (e["standard"]["accuracy"] or 0)]
            ax.plot(xs, ys, "-", color="grey", alpha=0.5)
            ax.scatter(xs[0], ys[0], marker="o", label=f"{name} speculative")
            ax.scatter(xs[1], ys[1], marker="s", label=f"{name} standard")
        ax.set_xlabel("wall time per query (s)")
        ax.set_ylabel("accuracy / match (%)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(outdir / "accuracy_vs_time.png", dpi=120)
    abl = res["experiments"].get("ablations")
    if abl:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        names = list(abl["accuracy"])
        ax.barh(names, [100 * (abl["accuracy"][n] or 0) for n in names])
        ax.set_xlabel(f"accuracy (%), {abl['dataset']}, n={abl['n']}")
        fig.tight_layout()
        fig.savefig(outdir / "ablations.png", dpi=120)
    cost = res["experiments"].get("cost_vs_n")
    if cost:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ns = [int(n) for n in cost["N"]]
        for mode in ("speculative", "standard"):
            ax.plot(ns, [cost["N"][str(n) if str(n) in cost["N"] else n][mode]["wall_s_per_query"] for n in ns],
                    "o-", label=mode)
        ax.set_xlabel("N (retrieved passages)")
        ax.set_ylabel("wall time per query (s)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(outdir / "cost_vs_n.png", dpi=120)


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results.json")
    res = json.loads(path.read_text())
    (path.parent / "tables.md").write_text(tables(res))
    plots(res, path.parent)
    print(tables(res))


if __name__ == "__main__":
    main()
