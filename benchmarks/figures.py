"""The figures of docs/results.md, drawn from the committed benchmark results (no engine, no
archive: seconds). ``make figures`` runs it; each figure's title names the file it was drawn
from, the rows and the host they were measured on.

* ``decision_accuracy_vs_seconds.png``: accuracy (95% interval) against seconds per row, per
  dataset and arm (``decision/large-drafter-843baa784212/results.json``);
* ``confidence_risk_coverage.png``: the calibrated confidence's risk-coverage curve per arm,
  pooled and per task (``confidence.json``);
* ``index_scale.png``: recall@10 against queries per second per FAISS index type at 100k and
  1M passages (``index_scale.json``);
* ``sampling_scale.png``: multi-perspective sampling's milliseconds per row before and after
  batched K-Means as N grows (``sampling_scale.json``);
* ``throughput.png``: rows per hour as rows and N grow, per mode (``throughput.json``).

Usage::

    python benchmarks/figures.py [--out docs/figures]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DECISION = HERE / "decision" / "large-drafter-843baa784212" / "results.json"
DPI = 100
ARM_LABELS = {"standard": "Standard RAG (1.5B)",
              "speculative": "paper's configuration (0.5B drafter, 1.5B verifier)",
              "speculative-default": "defaults, adaptive drafting",
              "speculative-default-one-round": "defaults (one round, log ρ_draft)",
              "speculative-default-large-drafter": "defaults, 1.5B drafter"}
MARKERS = {"standard": "s", "speculative": "^", "speculative-default": "o",
           "speculative-default-one-round": "D", "speculative-default-large-drafter": "P"}
COLORS = {"standard": "tab:blue", "speculative": "tab:orange", "speculative-default": "tab:green",
          "speculative-default-one-round": "tab:red", "speculative-default-large-drafter": "tab:purple"}
DATASET_LABELS = {"climate_fever": "Climate-FEVER", "hotpotqa": "HotpotQA", "nq_open": "NQ-open",
                  "popqa": "PopQA", "arc_challenge": "ARC-Challenge"}


def _load(path: Path) -> dict:
    """One committed result file. Raises ``SystemExit`` naming the file when it is missing or not
    JSON (the figures are drawn only from committed results)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"figures: cannot read {path.relative_to(ROOT)}: {e}") from None


def _save(fig, out: Path, name: str) -> Path:
    path = out / name
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)
    return path


def decision_accuracy_vs_seconds(out: Path) -> Path:
    """Accuracy against seconds per row: one panel per dataset, one marker per arm (interval:
    the accuracy's 95% interval as the decision benchmark computes it)."""
    r = _load(DECISION)
    host = r["machine"]["id"]
    fig, axes = plt.subplots(2, 3, figsize=(13, 8))
    for ax, (ds, d) in zip(axes.flat, r["datasets"].items()):
        for arm, a in d["arms"].items():
            if arm not in ARM_LABELS or not a.get("cost"):
                continue
            acc, (lo, hi), spr = a["accuracy"] * 100, a["ci95"], a["cost"]["s_per_row"]
            ax.errorbar([spr], [acc], yerr=[[acc - lo * 100], [hi * 100 - acc]], fmt=MARKERS[arm],
                        color=COLORS[arm], capsize=3, ms=7, label=ARM_LABELS[arm])
        ax.set_title(f"{DATASET_LABELS.get(ds, ds)} ({d['arms']['standard']['n']} graded rows)")
        ax.set_xlabel("seconds per row (2 CPU cores)")
        ax.set_ylabel("accuracy (%)")
        ax.set_xlim(left=0)
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    axes.flat[-1].axis("off")
    axes.flat[-1].legend(handles, labels, loc="center", title="arm", fontsize=9)
    fig.suptitle("Decision benchmark: accuracy against seconds per row, per dataset and arm\n"
                 f"{sum(d['arms']['standard']['n'] for d in r['datasets'].values())} graded reported rows, host {host} "
                 f"(benchmarks/{DECISION.relative_to(HERE).as_posix()})", fontsize=11)
    fig.tight_layout()
    return _save(fig, out, "decision_accuracy_vs_seconds.png")


def confidence_risk_coverage(out: Path) -> Path:
    """Risk (share of kept rows answered wrong) against coverage (share of rows kept, most
    confident first) of the cross-validated calibrated confidence, per arm; dotted: the arm's
    error rate, what a confidence that knows nothing gives."""
    r = _load(HERE / "confidence.json")
    groups = ["pooled", "task qa", "task claim", "task choice"]
    fig, axes = plt.subplots(1, len(groups), figsize=(15, 4.6), sharey=True)
    for ax, g in zip(axes, groups):
        for i, (arm, a) in enumerate(r["arms"].items()):
            pts = a.get("risk_coverage", {}).get(g)
            if not pts:
                continue
            xs, ys = [p["coverage"] * 100 for p in pts], [p["risk"] * 100 for p in pts]
            ax.plot(xs, ys, marker=MARKERS.get(arm, "o"), ms=4, color=COLORS.get(arm), label=ARM_LABELS.get(arm, arm))
            ax.axhline(ys[-1], ls=":", color=COLORS.get(arm), lw=1)
        ax.set_title(f"{g} ({pts[-1]['rows'] if pts else 0} rows)")
        ax.set_xlabel("coverage: rows kept, most confident first (%)")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("risk: kept rows answered wrong (%)")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Calibrated confidence (cross-validated): risk against coverage, per arm (dotted: no information)\n"
                 f"decision benchmark's reported rows, host {r['machine']} (benchmarks/confidence.json, {r['date']})",
                 fontsize=11)
    fig.tight_layout()
    return _save(fig, out, "confidence_risk_coverage.png")


def index_scale(out: Path) -> Path:
    """Recall@10 (against the exact ``Flat`` search) against queries per second, one curve per
    index type over its search parameter (nprobe / efSearch), one panel per corpus size."""
    r = _load(HERE / "index_scale.json")
    sizes = r["scale"]
    fig, axes = plt.subplots(1, len(sizes), figsize=(6.5 * len(sizes), 4.8), sharey=True)
    for ax, (size, s) in zip(axes if len(sizes) > 1 else [axes], sizes.items()):
        for ix in s["indexes"]:
            runs = ix["search_runs"]
            qps = [x["qps"] for x in runs]
            rec = [x.get("recall_at_10", 1.0) for x in runs]  # Flat is the reference: recall 1
            ax.plot(qps, rec, marker="o", ms=4,
                    label=f"{ix['index_type']} (build {ix['build_s']:.0f} s, {ix['peak_rss_gb']:.1f} GB peak)")
            for x, y, run in zip(qps, rec, runs):
                if run.get("param") is not None:
                    ax.annotate(str(run["param"]), (x, y), textcoords="offset points", xytext=(3, -9), fontsize=7)
        ax.set_xscale("log")
        ax.set_title(f"{int(size):,} passages (synthetic clustered vectors)")
        ax.set_xlabel("queries per second, one thread (log)")
        ax.set_ylim(0.5, 1.02)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8, loc="lower left")
    (axes[0] if len(sizes) > 1 else axes).set_ylabel("recall@10 against exact search")
    fig.suptitle("Corpus index at scale: recall@10 against queries per second (labels: nprobe / efSearch)\n"
                 f"2-core host, {r['scale_host']['date']} (benchmarks/index_scale.json)", fontsize=11)
    fig.tight_layout()
    return _save(fig, out, "index_scale.png")


def sampling_scale(out: Path) -> Path:
    """Milliseconds per row of multi-perspective sampling (embeddings given, encoder excluded)
    before (scikit-learn row by row) and after (batched K-Means), per N and chunk size."""
    r = _load(HERE / "sampling_scale.json")
    t = r["timings"]
    ns = sorted({x["N"] for x in t})
    chunks = sorted({x["chunk"] for x in t})
    fig, ax = plt.subplots(figsize=(8, 4.8))
    before = {x["N"]: x["before_ms"] for x in t}
    ax.plot(ns, [before[n] for n in ns], marker="s", label="before: scikit-learn, row by row")
    for c in chunks:
        after = {x["N"]: x["after_ms"] for x in t if x["chunk"] == c}
        ax.plot(ns, [after[n] for n in ns], marker="o", label=f"after: batched K-Means, chunk {c} rows")
    ax.set_yscale("log")
    ax.set_xticks(ns)
    ax.set_xlabel("N: passages per row")
    ax.set_ylabel("sampling ms per row (log; encoder excluded)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=9)
    ax.set_title("Multi-perspective sampling at scale: ms per row as N grows\n"
                 f"{t[0]['rows']} rows per N ({t[0]['before_rows']} before), {r['host']['cpu']} {r['host']['cores']} cores, {r['date']} "
                 "(benchmarks/sampling_scale.json)", fontsize=10)
    fig.tight_layout()
    return _save(fig, out, "sampling_scale.png")


def throughput(out: Path) -> Path:
    """Rows per hour (engine compute seconds) per mode: as N grows at 16 rows, and as rows grow
    at N = 10 (NQ-open with distractors)."""
    r = _load(HERE / "throughput.json")
    v = [x for x in r["variants"] if x.get("complete")]
    modes = list(dict.fromkeys(x["mode"] for x in v))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for m in modes:
        by_n = sorted((x["docs"], x["rows_per_hour"]) for x in v if x["mode"] == m and x["rows"] == 16)
        by_rows = sorted((x["rows"], x["rows_per_hour"]) for x in v if x["mode"] == m and x["docs"] == 10)
        label = ARM_LABELS.get(m, m)
        a1.plot(*zip(*by_n), marker=MARKERS.get(m, "o"), color=COLORS.get(m), label=label)
        a2.plot(*zip(*by_rows), marker=MARKERS.get(m, "o"), color=COLORS.get(m), label=label)
    a1.set_xticks(sorted({x["docs"] for x in v if x["rows"] == 16}))
    a2.set_xticks(sorted({x["rows"] for x in v if x["docs"] == 10}))
    a1.set_xlabel("N: passages per row (16 rows)")
    a2.set_xlabel("rows in the run (N = 10)")
    a2.set_xscale("log", base=2)
    a2.set_xticks(sorted({x["rows"] for x in v if x["docs"] == 10}))
    a2.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    a2.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    a1.set_ylabel("rows per hour (engine compute)")
    for ax in (a1, a2):
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    a1.legend(fontsize=9)
    fig.suptitle(f"Throughput as N and rows grow: {r['dataset']} ({r['config_path']}), "
                 f"host {r['machine']['id']} (benchmarks/throughput.json)", fontsize=11)
    fig.tight_layout()
    return _save(fig, out, "throughput.png")


FIGURES = (decision_accuracy_vs_seconds, confidence_risk_coverage, index_scale, sampling_scale, throughput)


def draw(out: Path) -> list[Path]:
    """Every figure into ``out`` (created); returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    return [f(out) for f in FIGURES]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "figures", help="directory of the PNG files")
    a = ap.parse_args(argv)
    for p in draw(a.out):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
