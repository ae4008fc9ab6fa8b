"""Where a run's files live under its output prefix (docs/data-contract.md, "What the output
prefix holds"): the run record, the done markers, intermediate drafts, the manifest, the report
and the report's Prefect artifact key."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from ..core import storage

RUN_FILE = "_run.json"
SHARDS_DIR = "_shards"
DRAFTS_DIR = "_drafts"  # intermediate draft shards of disaggregated runs (same layout inside)
MANIFEST = "_manifest.json"
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


def marker_uri(output_uri: str, shard_out_uri: str) -> str:
    """Done marker of an output shard: ``<output_uri>/_shards/<shard file name>.json``."""
    return storage.join(output_uri, SHARDS_DIR, shard_out_uri.rsplit("/", 1)[-1] + ".json")
