"""Publishing the report: files under ``<output>/_report/`` and Prefect artifacts."""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata

from .. import storage
from .plots import PLOTS, plots
from .profile import PROFILE_FILE, profile
from .rows import load_rows
from .summary import markdown, summary, table_rows

REPORT_DIR = "_report"
ARTIFACT_KEY_PREFIX = "specrag-run-report"
ARTIFACT_KEY_SLUG_CHARS = 40
"""Longest readable part of an artifact key (the output's tail); the hash makes it unique."""
_NOT_KEY_CHARS = re.compile(r"[^a-z0-9]+")


def artifact_key(output_uri: str) -> str:
    """The Prefect artifact key of the report of output ``output_uri`` (the redacted,
    normalised prefix, as :func:`summary.summary` writes it under ``output``):
    ``specrag-run-report-<tail>-<hash>``, where ``<tail>`` is the end of the URI (at most
    :data:`ARTIFACT_KEY_SLUG_CHARS` characters) in lowercase ASCII letters and digits with
    every other run of characters one dash (accents dropped, other scripts left out), and
    ``<hash>`` the first 10 hex digits of the URI's SHA-256, so that outputs whose readable
    parts agree (``s3://b/Out`` and ``s3://b/out``, two names in another script) keep
    separate histories. The same output always gets the same key: each run into it adds a
    version to one history in the Prefect UI, and runs into other outputs (nightly
    partitions, backfills, ad-hoc runs) have histories of their own. Only lowercase letters,
    digits and dashes, as Prefect requires of a key (``prefect.types.names.ArtifactKey``)."""
    ascii_text = unicodedata.normalize("NFKD", output_uri).encode("ascii", "ignore").decode()
    slug = _NOT_KEY_CHARS.sub("-", ascii_text.lower()).strip("-")
    if len(slug) > ARTIFACT_KEY_SLUG_CHARS:  # the tail names the output best (date=..., run)
        slug = slug[-ARTIFACT_KEY_SLUG_CHARS:].lstrip("-")
    digest = hashlib.sha256(output_uri.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return "-".join(p for p in (ARTIFACT_KEY_PREFIX, slug, digest) if p)


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
