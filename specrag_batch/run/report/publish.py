"""Publishing the report: files under ``<output>/_report/`` and Prefect artifacts."""

from __future__ import annotations

import json

from ...core import storage
from .plots import PLOTS, plots
from ..drift.profile import PROFILE_FILE, profile
from ..layout import REPORT_DIR, artifact_key
from ..results import load_rows
from .summary import markdown, summary, table_rows

def write_report(prefix: str, manifest: dict | None = None) -> dict:
    """Write ``<prefix>/_report/report.md``, ``summary.json``, ``profile.json`` (what a
    night-over-night comparison reads, :mod:`.profile`) and the PNG plots (a plot not
    drawn, the risk-coverage one of a run without gold, is removed if an earlier report left
    it); returns the summary plus ``report_uri``. ``manifest`` (the run's, e.g. before it is written) overrides
    the one stored under ``prefix``.

    Raises:
        FileNotFoundError: no trusted output shard under ``prefix``."""
    data = load_rows(prefix)
    if manifest is not None:
        data.manifest = manifest
    s = summary(data)
    rdir = storage.join(data.prefix, REPORT_DIR)
    drawn = plots(data)
    for name, file in PLOTS.items():
        uri = storage.join(rdir, file)
        if name in drawn:
            storage.write_bytes_atomic(uri, drawn[name])
        elif storage.exists(uri):  # an earlier report's plot would no longer match this report
            fs, path = storage.filesystem(uri)
            fs.rm(path)
    md = markdown(s, {name: PLOTS[name] for name in PLOTS if name in drawn or name == "risk_coverage"})
    storage.write_bytes_atomic(storage.join(rdir, "summary.json"), json.dumps(s, indent=2).encode())
    storage.write_bytes_atomic(storage.join(rdir, PROFILE_FILE), json.dumps(profile(data, s)).encode())
    storage.write_bytes_atomic(storage.join(rdir, "report.md"), md.encode())
    return {**s, "report_uri": storage.join(rdir, "report.md"), "markdown": md}


def publish_artifacts(s: dict, key: str | None = None) -> None:
    """The report as Prefect artifacts of the current flow run: a markdown artifact (the report
    without images) under ``key`` and a table artifact (:func:`table_rows`) under
    ``<key>-table``; ``key`` defaults to :func:`artifact_key` of the report's output."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    key = key or artifact_key(s["output"])

    create_markdown_artifact(markdown=s["markdown"].split("\n![")[0], key=key,
                             description=f"specrag-batch run report ({s['report_uri']})")
    create_table_artifact(table=table_rows(s), key=f"{key}-table",
                          description="specrag-batch run report: headline numbers")


def report_run(output_uri: str, manifest: dict) -> dict:
    """Write the run report (:func:`write_report`) and publish it as artifacts of the current
    flow run (:func:`publish_artifacts`); a failure is logged and returned (the flow records it
    in the manifest), never raised: the run's results are written.

    Returns:
        ``{"status": "ok", "uri": report URI}``, ``{"status": "skipped", "error": ...}`` when no
        shard finished, or ``{"status": "failed", "error": "<type>: <message>"}``."""
    from prefect import get_run_logger

    try:
        s = write_report(output_uri, manifest)
        publish_artifacts(s)
        return {"status": "ok", "uri": s["report_uri"]}
    except FileNotFoundError as e:  # no finished shard: nothing to report on
        get_run_logger().info("run report skipped: %s", e)
        return {"status": "skipped", "error": str(e)}
    except Exception as e:  # noqa: BLE001 - the report is an extra, not the run's result
        get_run_logger().error("run report failed: %s: %s", type(e).__name__, e)
        return {"status": "failed", "error": f"{type(e).__name__}: {e}"}
