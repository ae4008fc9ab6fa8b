"""Each stage's declared ``reads`` and ``writes`` hold on real rows (FAKE engine, tests/fakes.py).

Writes: a stage changes no row field outside its ``writes`` (plus ``error`` and ``flags``, which
every stage may set); for a dotted declaration (``drafts.score``) the records of that list keep
every other attribute except their own ``flags``.
Reads: a stage given only the fields it declares (plus the row's identity ``row_index`` and
``query_id``, which error messages name, and ``error``/``flags``), every other field None,
writes exactly what it writes with all fields present. A stage reading an undeclared field
sees None there and writes something else, or raises.

The last test shows both checks catch a mis-declared stage.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest

from specrag_batch.core.records import QueryRow
from specrag_batch.stages import MultiPerspectiveSampling, Verification
from specrag_batch.run.pipeline import Pipeline, speculative_stages, standard_stages
from specrag_batch.stages.base import OPTIONAL_FIELDS, row_field

from ..fakes import FakeEngine
from ..pipeline_runs import CLUSTERED, config, fresh_rows

pytestmark = pytest.mark.integration

ALWAYS = ("row_index", "query_id", "error", "error_reason", "flags")
"""Fields every stage may read (identity, for error messages; error, to pass a row over)."""
FIELDS = [f.name for f in dataclasses.fields(QueryRow)]


def trace(stages):
    """Run ``stages`` in order over the test shard as one chunk; per stage (stage, rows
    before, rows after), deep copies."""
    rows, out = fresh_rows(), []
    for stage in stages:
        before = copy.deepcopy(rows)
        stage(rows)
        out.append((stage, before, copy.deepcopy(rows)))
    return out


def _dotted(stage) -> dict[str, set[str]]:
    """Row field -> attributes declared by dotted names (``drafts.score`` -> {"score"});
    a field declared whole maps to None."""
    out: dict[str, set[str] | None] = {}
    for name in stage.writes:
        head, _, attr = name.partition(".")
        if not attr or out.get(head, set()) is None:
            out[head] = None
        else:
            out.setdefault(head, set()).add(attr)
    return out


def undeclared_writes(stage, before, after) -> list[str]:
    """Descriptions of changes ``stage`` made outside its ``writes``."""
    declared, bad = _dotted(stage), []
    for b, a in zip(before, after):
        for name in FIELDS:
            old, new = getattr(b, name), getattr(a, name)
            if old == new or name in ("error", "error_reason", "flags"):
                continue
            if name not in declared:
                bad.append(f"row {b.row_index}: {name}")
            elif declared[name] is not None:  # dotted: only the declared attributes (and flags)
                for i, (x, y) in enumerate(zip(old or [], new or [])):
                    for f in dataclasses.fields(x):
                        if f.name not in declared[name] | {"flags"} and getattr(x, f.name) != getattr(y, f.name):
                            bad.append(f"row {b.row_index}: {name}[{i}].{f.name}")
                if len(old or []) != len(new or []):
                    bad.append(f"row {b.row_index}: {name} (length)")
    return bad


def with_only_reads(stage, before) -> list[QueryRow]:
    """``before`` with every field the stage does not declare reading set to None."""
    keep = set(ALWAYS) | {row_field(n) for n in stage.reads}
    return [QueryRow(**{n: copy.deepcopy(getattr(r, n)) if n in keep else None for n in FIELDS})
            for r in before]


def undeclared_reads(stage, before, after) -> list[str]:
    """Fields whose value differs when ``stage`` runs on :func:`with_only_reads` rows (or the
    exception it raises there)."""
    hidden = with_only_reads(stage, before)
    try:
        stage(hidden)
    except Exception as e:  # reading a field that is None
        return [f"{type(e).__name__}: {e}"]
    written = {"error", "flags"} | {row_field(n) for n in stage.writes}
    return [f"row {h.row_index}: {n}" for h, a in zip(hidden, after) for n in sorted(written)
            if getattr(h, n) != getattr(a, n)]


def speculative():
    cfg = config(chunk_rows=256)
    return speculative_stages(cfg, drafter=FakeEngine(), verifier=FakeEngine())


def standard():
    return standard_stages(config(mode="standard"), generator=FakeEngine())


OPTIONS = {"sampling.adaptive": True, "selection.fallback": "standard", "selection.tau_min": 0.0}
"""Adaptive drafting and the fallback pass (every row not on the fast path falls below τ = 0)."""


@pytest.fixture(scope="module", params=["speculative", "standard", "speculative_clustered",
                                        "speculative_adaptive_fallback"])
def traced(request):
    if request.param in ("speculative_clustered", "speculative_adaptive_fallback"):
        cfg = config(**(CLUSTERED if request.param == "speculative_clustered" else OPTIONS))
        return trace(speculative_stages(cfg, drafter=FakeEngine(), verifier=FakeEngine()))
    return trace({"speculative": speculative, "standard": standard}[request.param]())


KNOWN_UNDECLARED: dict[str, set[str]] = {}
"""Writes a stage makes without declaring them (stage name -> dotted names). Empty since
Verification declares logprob_yes/no and tokens_answer/rationale (found by this test). Listed
exactly, so the test fails both on a new undeclared write and once a declaration is completed."""


def _names(descriptions: list[str]) -> set[str]:
    """``row 3: drafts[0].logprob_yes`` -> ``drafts.logprob_yes``."""
    out = set()
    for d in descriptions:
        what = d.split(": ", 1)[1]
        head, _, rest = what.partition("[")
        out.add(head + ("." + rest.split(".", 1)[1] if rest else ""))
    return out


def test_every_stage_writes_only_what_it_declares(traced):
    for stage, before, after in traced:
        assert before != after, f"{stage.name} changed nothing"
        found = _names(undeclared_writes(stage, before, after))
        assert found == KNOWN_UNDECLARED.get(stage.name, set()), stage


def test_every_stage_reads_only_what_it_declares(traced):
    for stage, before, after in traced:
        assert undeclared_reads(stage, before, after) == [], stage


def test_declared_writes_are_set_and_the_pipeline_accepts_the_order(traced):
    """After each stage every row without an error holds what the stage writes, except the
    fields that may be None on a valid row (``OPTIONAL_FIELDS``; the pipeline's own run-time
    check, here on the traced rows) and the list builds."""
    Pipeline([s for s, _, _ in traced], chunk_rows=1)
    for stage, _, after in traced:
        for row in after:
            if row.error is None:
                missing = [n for n in stage.writes if getattr(row, row_field(n)) is None
                           and row_field(n) not in OPTIONAL_FIELDS]
                assert not missing, (stage.name, row.row_index, missing)


def test_the_checks_catch_a_misdeclared_stage():
    """A sampling stage that does not declare reading ``top_documents`` and a verification
    stage that does not declare writing the self-reflection score are caught."""
    stages = speculative()
    steps = {s.name: (s, b, a) for s, b, a in trace(stages)}
    sampling, before, after = steps[MultiPerspectiveSampling.name]
    blind = copy.copy(sampling)
    blind.reads = ("query_id", "query")
    assert undeclared_reads(blind, before, after)

    verification, before, after = steps[Verification.name]
    quiet = copy.copy(verification)
    quiet.writes = ("consensus", "drafts.score_self_consistency")
    assert any(".score_self_reflection" in d for d in undeclared_writes(quiet, before, after))
    quiet.writes = ("drafts.score_self_consistency", "drafts.score_self_reflection")
    assert any(d.endswith(": consensus") for d in undeclared_writes(quiet, before, after))
