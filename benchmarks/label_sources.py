"""Sources of benchmarks/label_distribution.py's figures besides its own cells: Standard RAG's
rows stored by the decision benchmark (a cell archive), and the run's provenance."""

from __future__ import annotations

from pathlib import Path


def stored_standard(archive: Path, dataset: str) -> dict[str, dict]:
    """Standard RAG's output rows of ``dataset`` from a decision-benchmark cell archive
    (``benchmarks/decision/archives/<machine>.tar.xz``, :mod:`cell_archive`; arm ``standard``):
    query_id -> record (``answer``, ``correct``, ``score``). {} when the archive has none."""
    import io
    import tarfile

    import pyarrow.parquet as pq

    out: dict = {}
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if m.name.startswith(f"{dataset}/standard/") and m.name.endswith(".parquet"):
                for r in pq.read_table(io.BytesIO(tar.extractfile(m).read())).to_pylist():
                    out[r["query_id"]] = r
    return out


def with_stored_standard(arms: dict, stored: dict[str, dict]) -> dict:
    """``arms`` with ``standard`` from ``stored`` (:func:`stored_standard`), rows aligned with
    the ``label`` arm's; every arm cut to the rows ``stored`` holds (paired comparisons)."""
    if "standard" in arms or "label" not in arms or not stored:
        return arms
    keep = [i for i, r in enumerate(arms["label"]) if r["query_id"] in stored]
    cut = {arm: [recs[i] for i in keep] for arm, recs in arms.items()}
    cut["standard"] = [stored[arms["label"][i]["query_id"]] for i in keep]
    return cut


def host_info(cfg) -> dict:
    """Date, host, CPU and models of a run (for the figures' provenance)."""
    import os
    import platform
    from datetime import date

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.machine()) if Path("/proc/cpuinfo").exists() else platform.machine()
    return {"date": date.today().isoformat(), "host": platform.node(), "cpu": cpu, "cores": os.cpu_count(),
            "drafter": cfg.drafter.model, "verifier": cfg.verifier.model}
