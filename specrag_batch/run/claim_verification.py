"""Bulk claim verification over a dataset: every row is a claim, answered with one label of
the configured label set (``claim_labels``), with its rationale and scores.

The config's ``task`` is fixed to ``claim``: the input needs no ``task`` column, and a row
naming another task gets a row error (it is not dropped). ``claim_labels`` comes from the
config (or the ``claim_labels`` parameter). Besides the run manifest the flow returns the
label distribution of the answers, read back from the written output.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pyarrow.parquet as pq
from prefect import flow, get_run_logger

from ..core import storage
from .orchestration import run_flow
from ..config.execution import ExecutionConfig
from .partitions import resolve_config

NOT_A_LABEL = "(not a label)"
NO_ANSWER = "(no answer)"


def label_counts(manifest: dict, labels: list[str]) -> dict[str, int]:
    """Answers per label over the run's output shards; answers outside ``labels`` (flagged
    ``answer_not_a_label`` in the rows) count as ``(not a label)``, rows without an answer
    (errors, no valid draft) as ``(no answer)``."""
    counts: Counter = Counter({lab: 0 for lab in labels})
    for s in manifest["shards"]:
        if s["status"] != "ok" or not s["output"]:
            continue
        fs, path = storage.filesystem(s["output"])
        with fs.open(path, "rb") as f:
            for a in pq.read_table(f, columns=["answer"]).column("answer").to_pylist():
                counts[NO_ANSWER if a is None else a if a in labels else NOT_A_LABEL] += 1
    return dict(counts)


@flow(name="specrag-claim-verification", log_prints=True)
def claim_verification_flow(input_uri: str, output_uri: str, config_path: str | None = None,
                            config: dict[str, Any] | None = None,
                            claim_labels: list[str] | None = None,
                            config_overrides: dict[str, Any] | None = None,
                            execution: ExecutionConfig | None = None,
                            overwrite: bool = False) -> dict:
    """Verify every claim under ``input_uri`` (Parquet shards) into ``output_uri``.

    Returns the run manifest with ``label_counts``. The flow run fails when a shard failed.

    Raises:
        pydantic.ValidationError: fewer than two distinct ``claim_labels``.
        RuntimeError: a shard failed (the manifest is written first)."""
    over = {**(config_overrides or {}), "task": "claim"}
    if claim_labels is not None:
        over["claim_labels"] = claim_labels
    cfg = resolve_config(config, config_path, over)
    ex = ExecutionConfig.coerce(execution)
    manifest = run_flow(input_uri, output_uri, cfg.model_dump(mode="json"), None, overwrite, ex)
    manifest["label_counts"] = label_counts(manifest, cfg.claim_labels)
    get_run_logger().info("labels: %s (labels allowed: %s)", manifest["label_counts"], cfg.claim_labels)
    if manifest["failed_shards"]:
        raise RuntimeError(f"{manifest['failed_shards']} shard(s) failed; see {manifest['manifest_uri']}")
    return manifest

