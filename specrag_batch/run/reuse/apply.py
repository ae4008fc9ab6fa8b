"""A shard's rows split into reused and computed rows, and which earlier outputs a run trusts.

:func:`process_with_reuse` keys every row (:func:`~specrag_batch.run.reuse.key.row_key`): rows with
documents in the input before any engine work, rows searched in the index after retrieval
(retrieval runs first for them; the pipeline's retrieval then only keeps what it found). Keys
answered in a trusted earlier output (:func:`~specrag_batch.run.reuse.index.lookup`) are copied
from it (:func:`reused_record`); the other rows are computed, in input order, by the shard's
own ``compute``. Disaggregated runs (drafting and verification in separate tasks) write key
indexes but compute every row.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .. import resume
from ...core import storage
from ...config import RunConfig
from ...stages.evaluation import GOLD_FLAGS, score_row
from ..pipeline import Pipeline, StageTimer
from ...core.records import QueryRow
from ...core.redaction import redact_text
from ...stages.retrieval import Retrieval
from . import index
from .index import fetch_rows, lookup, warn_once
from .key import ScoringIdentity, row_key

log = logging.getLogger(__name__)

REUSED = "reused"
"""The ``answer_source`` of a row copied from an earlier output."""


@dataclass
class ReuseOutcome:
    """What :func:`process_with_reuse` gives the shard: ``records`` (one per row, input order),
    ``keys`` (each row's key, None for a row without one), ``rows_reused``, ``seconds_saved``
    (estimate: the earlier shards' engine seconds per computed row, summed over the reused
    rows), ``seconds_per_row`` (this shard's stage seconds per computed row, for its own key
    index) and ``reused_from`` (earlier output shard -> rows copied from it)."""

    records: list[dict]
    keys: list[bytes | None]
    rows_reused: int = 0
    seconds_saved: float = 0.0
    seconds_per_row: float = 0.0
    reused_from: dict[str, int] = field(default_factory=dict)


def trusted_sources(config: RunConfig, output_uri: str, logger=None) -> list[str]:
    """The earlier outputs of ``config.reuse.sources`` this run may reuse rows from (normalised
    URIs, in the given order): each must hold a run key (``_run.json``) of this config hash. A
    source that is missing, unreadable, this run's own output or of another config is left out
    with one warning line on ``logger`` (default: this module's); never raises."""
    logger = logger or log
    own, out = config.config_hash(), storage.normalize_uri(output_uri)
    trusted: list[str] = []
    for given in config.reuse.sources:
        try:
            src = storage.normalize_uri(given)
            if src == out or src in trusted:
                continue
            key = storage.read_json_object(storage.join(src, resume.RUN_FILE))
        except (OSError, ValueError) as e:
            logger.warning("reuse: %s cannot be read (%s: %s); its rows are computed",
                           redact_text(given), type(e).__name__, redact_text(str(e)))
            continue
        if key is None:
            logger.warning("reuse: %s holds no run (no %s); its rows are computed", redact_text(given),
                           resume.RUN_FILE)
        elif key.get("config_hash") != own:
            logger.warning("reuse: %s was answered under config %s, not this run's %s; its rows are "
                           "computed", redact_text(given), key.get("config_hash"), own)
        else:
            trusted.append(src)
    return trusted


def reused_record(earlier: dict, row: QueryRow, config: RunConfig, run_id: str, source_file: str,
                  earlier_file: str) -> dict:
    """The output record of ``row`` copied from an earlier output's record ``earlier`` (same
    key): answer, rationale, scores, drafts, flags as written there; ``query_id``, ``gold``,
    ``run_id``, ``source_file`` this run's; ``answer_source`` ``reused``, ``reused_from`` the
    earlier output shard, ``reused_answer_source`` the pass that answered it there. Graded
    against this row's ``gold`` (evaluation's ``score_row``; a changed gold replaces the gold
    flags) when it differs from the earlier row's."""
    rec = dict(earlier)
    rec.update(query_id=row.query_id, gold=row.gold, run_id=run_id, source_file=source_file,
               answer_source=REUSED, reused_from=earlier_file,
               reused_answer_source=earlier.get("reused_answer_source") or earlier.get("answer_source"))
    if earlier.get("gold") != row.gold:
        grade = lambda answer: score_row(row.task, answer, row.gold, choices=row.choices,  # noqa: E731
                                         labels=config.claim_labels)
        m = grade(rec["answer"])
        flags = [f for f in rec.get("flags") or [] if f not in GOLD_FLAGS]
        rec.update(correct=m.correct, exact_match=m.exact_match, f1=m.f1,
                   flags=flags + [f for f in m.flags if f not in flags])
        if rec.get("first_answer") is not None:
            rec["first_correct"] = grade(rec["first_answer"]).correct
    return rec


def _key(row: QueryRow, given: bool, scoring: ScoringIdentity) -> bytes | None:
    if row.error is not None:
        return None
    if given:
        return row_key(row.query_id, row.query, row.task, row.choices, row.documents or [], "input", scoring)
    if row.top_documents:
        return row_key(row.query_id, row.query, row.task, row.choices, row.top_documents, "retrieved", scoring)
    return None


def process_with_reuse(rows: Sequence[QueryRow], config: RunConfig, *, run_id: str, source_file: str,
                       timer: StageTimer, compute: Callable[[list[QueryRow]], list[dict]]) -> ReuseOutcome:
    """Records of ``rows`` (input order): reused from ``config.reuse.sources`` (the run's
    trusted sources, :func:`trusted_sources`) where their key was answered there, else
    ``compute(rows_to_compute)`` (one record per row given, in order; the shard's pipeline).

    Rows without documents in the input are retrieved first (stage ``retrieval``, timed in
    ``timer``) when there are sources to look in. Never raises for an earlier output: a damaged
    one is one warning line and its rows are computed.

    Raises:
        what ``compute`` raises."""
    scoring = ScoringIdentity.of(config)
    given = [row.documents is not None for row in rows]
    keys = [_key(row, g, scoring) if g else None for row, g in zip(rows, given)]
    earlier: dict[bytes, dict] = {}
    hits = {}
    if config.reuse.sources:
        search = [row for row, g in zip(rows, given) if not g and row.error is None]
        if search:  # the pipeline's retrieval then keeps the documents found here
            Pipeline([Retrieval(config)], chunk_rows=config.chunk_rows).run(search, timer)
            keys = [k if g else _key(row, g, scoring) for row, g, k in zip(rows, given, keys)]
        try:
            hits = lookup(config.reuse.sources, {k for k in keys if k is not None}, config.config_hash())
            earlier = fetch_rows(hits)
        except Exception as e:  # noqa: BLE001 - an earlier output never fails tonight's rows
            warn_once(",".join(config.reuse.sources), f"lookup failed ({type(e).__name__}: {e})")
            hits, earlier = {}, {}
    todo = [row for row, k in zip(rows, keys) if k not in earlier]
    computed = iter(compute(todo))
    out = ReuseOutcome(records=[], keys=keys)
    for i, (row, k) in enumerate(zip(rows, keys)):
        if k in earlier:
            hit = hits[k]
            out.records.append(reused_record(earlier[k], row, config, run_id, source_file, hit.output_file))
            out.rows_reused += 1
            out.seconds_saved += hit.seconds_per_row
            out.reused_from[hit.output_file] = out.reused_from.get(hit.output_file, 0) + 1
        else:
            out.records.append(next(computed))
            if k is None:
                out.keys[i] = _key(row, given[i], scoring)  # searched by the pipeline's retrieval
    busy = sum(1 for row in todo if row.error is None)
    out.seconds_per_row = (sum(timer.seconds.values()) / busy if busy
                           else out.seconds_saved / out.rows_reused if out.rows_reused else 0.0)
    out.seconds_saved = round(out.seconds_saved, 3)
    return out


def config_for_shards(config: RunConfig, output_uri: str, stages: str, logger=None) -> RunConfig:
    """The config the shard tasks get: ``reuse.sources`` narrowed to :func:`trusted_sources`
    (once per run, one warning line per source left out); none under disaggregated ``stages``
    (drafting and verification in separate tasks compute every row; one warning line). The
    config hash is unchanged (``reuse`` is not hashed)."""
    if not config.reuse.sources:
        return config
    index.forget_warnings()  # this run names a damaged part once again
    if stages != "fused":
        (logger or log).warning("reuse: execution.stages %r computes every row; reuse needs fused stages", stages)
        trusted: list[str] = []
    else:
        trusted = trusted_sources(config, output_uri, logger)
    return config.model_copy(update={"reuse": config.reuse.model_copy(update={"sources": trusted})})


def reuse_summary(config: RunConfig, shards: list[dict]) -> dict:
    """The manifest's ``reuse``: ``sources`` (as configured), ``rows`` reused in the output and
    ``seconds_saved`` (estimate, :class:`ReuseOutcome`) over the finished shards' results."""
    ok = [s for s in shards if s.get("status") == "ok"]
    return {"sources": list(config.reuse.sources), "rows": sum(s.get("rows_reused") or 0 for s in ok),
            "seconds_saved": round(sum(s.get("reuse_seconds_saved") or 0.0 for s in ok), 3)}
