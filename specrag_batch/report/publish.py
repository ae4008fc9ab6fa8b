"""Publishing the report: files under ``<output>/_report/`` and Prefect artifacts."""

from __future__ import annotations

import json

from .. import storage
from .plots import PLOTS, plots
from .rows import load_rows
from .summary import markdown, summary, table_rows

REPORT_DIR = "_report"


def write_report(prefix: str, manifest: dict | None = None) -> dict:
    """Write ``<prefix>/_report/report.md``, ``summary.json`` and the PNG plots; returns the
    summary plus ``report_uri``. ``manifest`` (the run's, e.g. before it is written) overrides
    the one stored under ``prefix``.

    Raises:
        FileNotFoundError: no trusted output shard under ``prefix``."""
    data = load_rows(prefix)
    if manifest is not None:
        data.manifest = manifest
    s = summary(data)
    rdir = storage.join(data.prefix, REPORT_DIR)
    for name, png in plots(data).items():
        storage.write_bytes_atomic(storage.join(rdir, PLOTS[name]), png)
    md = markdown(s, PLOTS)
    storage.write_bytes_atomic(storage.join(rdir, "summary.json"), json.dumps(s, indent=2).encode())
    storage.write_bytes_atomic(storage.join(rdir, "report.md"), md.encode())
    return {**s, "report_uri": storage.join(rdir, "report.md"), "markdown": md}


def publish_artifacts(s: dict, key: str = "specrag-run-report") -> None:
    """The report as Prefect artifacts of the current flow run: a markdown artifact (the report
    without images) and a table artifact (:func:`table_rows`)."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    create_markdown_artifact(markdown=s["markdown"].split("\n![")[0], key=key,
                             description=f"specrag-batch run report ({s['report_uri']})")
    create_table_artifact(table=table_rows(s), key=f"{key}-table",
                          description="specrag-batch run report: headline numbers")
