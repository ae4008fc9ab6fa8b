"""Night over night for the nightly and backfill flows: a date's run profile
(``<output_root>/date=D/_report/profile.json``) compared with the last K finished nights before
it in date order that share its config hash (:mod:`specrag_batch.run.drift.compare`), written to
``_report/drift.json``, at the top of ``_report/report.md``, as a Prefect markdown artifact, a
flow-run tag and a Prefect event; the flow run fails when a measure of ``drift.fail_on`` moved.

Nights are found by their partition directories, never by when they ran, so a backfill that
ran its dates out of order compares each date with the dates before it."""

from __future__ import annotations

import datetime as dt
import json
import logging
import re

from . import compare as drift
from ...core import storage
from ...config import DriftConfig
from ...core.redaction import redact_text
from ..layout import REPORT_DIR, artifact_key
from .profile import PROFILE_FILE, PROFILE_VERSION, ProfileError, check_profile
from .schema import stored_result
from ..partitions import PARTITION_KEY, parse_date, partition_uri

log = logging.getLogger(__name__)

DRIFT_FILE = "drift.json"
TAG = "specrag-drift"
"""Flow-run tag added when a measure moved (also ``specrag-drift:<measure>`` per measure)."""
NO_BASELINE_TAG = "specrag-drift-no-baseline"
EVENT_MOVED = "specrag.drift.detected"
EVENT_NO_BASELINE = "specrag.drift.no-baseline"
SECTION_START, SECTION_END = "<!-- drift -->", "<!-- /drift -->"
_NIGHT = re.compile(rf"^{PARTITION_KEY}=(\d{{4}}-\d{{2}}-\d{{2}})$")
MAX_NAMED = 5
"""Nights named one by one in a note; more are counted."""


class DriftError(RuntimeError):
    """Measures named in ``drift.fail_on`` moved (or a night had no baseline under
    ``drift.require_baseline``); ``str()`` names them, the date and the ``drift.json``."""


def nights(output_root: str) -> list[dt.date]:
    """The dates of the ``date=YYYY-MM-DD`` partitions under ``output_root``, sorted (none
    when it does not exist)."""
    fs, path = storage.filesystem(output_root)
    fs.invalidate_cache(path)
    try:
        entries = fs.ls(path, detail=False)
    except FileNotFoundError:
        return []
    found = []
    for e in entries:
        m = _NIGHT.fullmatch(e.rstrip("/").rsplit("/", 1)[-1])  # "$" alone would let a trailing newline in
        if m:
            try:
                found.append(dt.date.fromisoformat(m.group(1)))
            except ValueError:
                continue
    return sorted(set(found))


def read_profile(prefix: str) -> tuple[dict | None, str | None]:
    """``(profile, None)`` of the run under ``prefix``, or ``(None, why)``: no profile, not
    readable (not JSON, another profile version, a field of the wrong type or out of range:
    :func:`~specrag_batch.run.drift.profile.check_profile`, named with the file), a run with
    failed shards (not finished). Never raises for what the files hold."""
    uri = storage.join(prefix, REPORT_DIR, PROFILE_FILE)
    try:
        p = storage.read_json_object(uri)
    except (ValueError, OSError) as e:
        return None, f"profile unreadable ({str(e)[:200]})"
    if p is None:
        return None, f"no profile ({REPORT_DIR}/{PROFILE_FILE} missing; `specrag-batch report {redact_text(prefix)}` writes it)"
    if p.get("profile_version") != PROFILE_VERSION:
        return None, (f"profile unreadable ({REPORT_DIR}/{PROFILE_FILE}: profile_version "
                      f"{str(p.get('profile_version'))[:20]!r}, this version reads {PROFILE_VERSION})")
    try:
        check_profile(p)
    except ProfileError as e:
        return None, f"profile unreadable ({REPORT_DIR}/{PROFILE_FILE}: {e})"
    try:
        m = storage.read_json_object(storage.join(prefix, "_manifest.json")) or {}
    except (ValueError, OSError):
        m = {}
    if m.get("failed_shards"):
        return None, f"not finished ({m['failed_shards']} shard(s) failed)"
    return p, None


def _named(dates: list[str]) -> str:
    return ", ".join(dates[:MAX_NAMED]) + (f" and {len(dates) - MAX_NAMED} more" if len(dates) > MAX_NAMED else "")


def night_drift(output_root: str, date, cfg: DriftConfig) -> dict:
    """Compare the night ``date`` under ``output_root`` with the last ``cfg.baseline_nights``
    earlier nights (by date) whose profile is readable, finished and of the same config hash.

    Returns a JSON-able dict: ``date``, ``output_root`` (redacted), ``config_hash``, ``status``
    (``compared``, ``no_baseline``, ``no_profile`` or ``error``: the comparison raised), ``reason``
    (why nothing was compared, in a few words, else None), ``error`` (``<type>: <message>`` of
    a comparison that raised, else None), ``baseline`` (dates, newest first),
    ``excluded`` (``{"date", "reason"}`` of nights looked at and left out), ``notes`` (one line
    per reason a night was left out or no comparison was made), ``measures``
    (:func:`specrag_batch.run.drift.compare.compare`), ``moved`` and ``fails`` (measure names), and
    ``fail_reason`` (a message when the run should fail, else None).

    Raises:
        ValueError: a bad ``date``."""
    d = parse_date(date, "date")
    prefix = partition_uri(output_root, d)
    out = _empty(output_root, d)
    tonight, why = read_profile(prefix)
    if tonight is None:
        no_file = why.startswith("no profile")
        out["reason"] = ("this night has no profile" if no_file else "this night's profile is unreadable"
                         if why.startswith("profile") else "this night is not finished")
        out["notes"].append(f"no comparison: this night has {why}" if no_file else
                            f"no comparison: this night ({out['date']}): {why}")
        return _finish(out, cfg)
    out["config_hash"] = tonight.get("config_hash")
    earlier = [n for n in nights(output_root) if n < d]
    baselines, other_hash = [], []
    for n in reversed(earlier):
        if len(baselines) == cfg.baseline_nights:
            break
        p, why = read_profile(partition_uri(output_root, n))
        if p is not None and p.get("config_hash") != out["config_hash"]:
            other_hash.append(n.isoformat())
            why = f"another config hash (`{p.get('config_hash')}`)"
        if why:
            out["excluded"].append({"date": n.isoformat(), "reason": why})
            if not why.startswith("another config hash"):
                out["notes"].append(f"{n.isoformat()} left out: {why}")
            continue
        baselines.append((n.isoformat(), p))
    if other_hash:
        out["notes"].append(f"{drift.counted(len(other_hash), 'earlier night')} left out: "
                            f"another config hash than this night's `{out['config_hash']}` ({_named(other_hash)})")
    out["baseline"] = [n for n, _ in baselines]
    if not earlier:
        out["notes"].append(f"first night: no earlier night under {out['output_root']}, nothing to compare")
    elif not baselines:
        n = len(out["excluded"])
        out["notes"].append("no baseline: the one earlier night looked at cannot be compared (reason above)" if n == 1
                            else f"no baseline: none of the {n} earlier nights looked at can be compared (reasons above)")
    if not baselines:
        out["status"] = "no_baseline"
        out["reason"] = "first night" if not earlier else f"no baseline among {drift.counted(len(out['excluded']), 'earlier night')}"
        return _finish(out, cfg)
    try:
        out["measures"] = drift.compare(tonight, [p for _, p in baselines], cfg)
    except Exception as e:  # noqa: BLE001 - the answers are written: a comparison that fails is one line
        return _finish(_failed(out, e), cfg)
    out["status"] = "compared"
    return _finish(out, cfg)


def _empty(output_root: str, d: dt.date) -> dict:
    """The result of night ``d`` before anything was read (:func:`night_drift`'s keys)."""
    return {"date": d.isoformat(), "output_root": redact_text(output_root), "config_hash": None,
            "status": "no_profile", "reason": None, "error": None, "baseline": [], "excluded": [], "notes": [],
            "measures": [], "moved": [], "fails": [], "fail_reason": None}


def _failed(out: dict, e: BaseException) -> dict:
    """``out`` of a comparison that raised ``e``: status ``error``, ``error`` and one note."""
    error = redact_text(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")[:300]
    out.update(status="error", reason="the comparison failed", error=error, measures=[])
    out["notes"].append(f"no comparison: the comparison failed ({error})")
    return out


def _finish(out: dict, cfg: DriftConfig) -> dict:
    """``out`` with ``moved``, ``fails`` and ``fail_reason`` set."""
    out["moved"] = [r["measure"] for r in out["measures"] if r["moved"]]
    out["fails"] = [r["measure"] for r in out["measures"] if r["fails"]]
    if out["fails"]:
        shown = "; ".join(drift.describe(r).strip("| ").replace(" | ", ", ")
                          for r in out["measures"] if r["fails"])
        out["fail_reason"] = (f"drift on {out['date']}: {len(out['fails'])} measure(s) of drift.fail_on moved: "
                              f"{shown}")
    elif cfg.require_baseline and out["status"] != "compared":
        out["fail_reason"] = f"drift on {out['date']}: no comparison (drift.require_baseline): " + "; ".join(out["notes"])
    return out


def with_section(report_md: str, section: str) -> str:
    """``report_md`` with ``section`` right after its title line, between
    :data:`SECTION_START` / :data:`SECTION_END` (an earlier section is replaced)."""
    if SECTION_START in report_md and SECTION_END in report_md:
        head, rest = report_md.split(SECTION_START, 1)
        report_md = head.rstrip("\n") + "\n" + rest.split(SECTION_END, 1)[1].lstrip("\n")
    title, _, body = report_md.partition("\n")
    return f"{title}\n\n{SECTION_START}\n{section}{SECTION_END}\n\n{body.lstrip(chr(10))}"


def write_drift(output_root: str, result: dict) -> str:
    """Write ``result`` to the night's ``_report/drift.json`` and its section to the top of
    ``_report/report.md`` (when the report exists); returns the ``drift.json`` URI."""
    rdir = storage.join(partition_uri(output_root, parse_date(result["date"], "date")), REPORT_DIR)
    uri = storage.join(rdir, DRIFT_FILE)
    storage.write_bytes_atomic(uri, json.dumps(result, indent=2).encode())
    _put_section(rdir, drift.markdown(result))
    return uri


def _put_section(rdir: str, section: str) -> bool:
    """``section`` at the top of ``<rdir>/report.md``; False (nothing written) without a report."""
    md_uri = storage.join(rdir, "report.md")
    try:
        md = storage.read_bytes(md_uri).decode()
    except FileNotFoundError:
        return False
    storage.write_bytes_atomic(md_uri, with_section(md, section).encode())
    return True


def restore_section(prefix: str) -> str | None:
    """Put the drift section back at the top of ``<prefix>/_report/report.md`` from the night's
    stored comparison ``<prefix>/_report/drift.json`` (read as written, nothing recomputed),
    e.g. after ``specrag-batch report`` rewrote the report without it. Returns the
    ``drift.json`` URI, or None when there is no ``drift.json`` (or no ``report.md``): the
    report is then left as it is.

    Raises:
        ValueError: ``drift.json`` is not JSON or not a comparison result (a field missing or
            of the wrong type, :func:`~.schema.stored_result`), naming the file and the field; the report
            is left as it is.
        OSError: the report cannot be read or written."""
    rdir = storage.join(prefix, REPORT_DIR)
    uri = storage.join(rdir, DRIFT_FILE)
    result = storage.read_json_object(uri)
    if result is None:
        return None
    stored_result(result, uri)
    try:
        section = drift.markdown(result)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{redact_text(uri)}: not a drift comparison ({type(e).__name__}: {str(e)[:200]})") from None
    return uri if _put_section(rdir, section) else None


def drift_artifact_key(output_root: str) -> str:
    """The Prefect artifact key of the comparisons of ``output_root``'s nights: one history
    per output root (:func:`specrag_batch.run.report.publish.artifact_key`, prefix ``specrag-drift``)."""
    return "specrag-drift-" + artifact_key(redact_text(storage.normalize_uri(output_root)))[len("specrag-run-report-"):]


def announce(output_root: str, result: dict, uri: str) -> None:
    """Inside a flow run: the comparison as a markdown artifact (:func:`drift_artifact_key`),
    the tags :data:`TAG` and ``specrag-drift:<measure>`` when a measure moved (or
    :data:`NO_BASELINE_TAG`), and a Prefect event (:data:`EVENT_MOVED` or
    :data:`EVENT_NO_BASELINE`) whose payload names the date and the measures. A failure to
    publish is logged, never raised."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client
    from prefect.events import emit_event
    from prefect.runtime import flow_run

    md = f"# Night {result['date']} of `{result['output_root']}`\n\n" + drift.markdown(result)
    tags = ([TAG, *(f"{TAG}:{m}" for m in result["moved"])] if result["moved"]
            else [NO_BASELINE_TAG] if result["status"] != "compared" else [])
    try:
        create_markdown_artifact(markdown=md, key=drift_artifact_key(output_root),
                                 description=f"specrag-batch night-over-night comparison ({redact_text(uri or 'drift.json not written')})")
        run_id = flow_run.get_id()
        if tags and run_id:
            with get_client(sync_client=True) as client:
                current = client.read_flow_run(run_id).tags or []
                client.update_flow_run(run_id, tags=sorted(set(current) | set(tags)))
        if result["moved"] or result["status"] != "compared":
            related = [{"prefect.resource.id": f"prefect.flow-run.{run_id}", "prefect.resource.role": "flow-run"}] \
                if run_id else []
            emit_event(EVENT_MOVED if result["moved"] else EVENT_NO_BASELINE,
                       resource={"prefect.resource.id": f"specrag.output.{result['output_root']}",
                                 "prefect.resource.name": result["output_root"]},
                       related=related,
                       payload={k: result[k] for k in ("date", "status", "moved", "fails", "baseline", "notes")})
    except Exception as e:  # noqa: BLE001 - telling Prefect is an extra; drift.json is written
        log.warning("drift comparison of %s not published to Prefect: %s: %s", result["date"], type(e).__name__, e)


def stored_drift_config(prefix: str) -> DriftConfig:
    """The drift section the night under ``prefix`` ran with, from its ``_manifest.json`` (the
    defaults without one).

    Raises:
        ConfigError: the stored section does not validate, one line per error naming the
            ``_manifest.json`` and the field (``drift.fail_onn: unknown key``).
        ValueError: the manifest is not JSON, or its ``config`` / ``config.drift`` is not a mapping."""
    from pydantic import ValidationError

    from ...config import RunConfig, explain_config_error

    uri = storage.join(prefix, "_manifest.json")
    stored = storage.read_json_object(uri) or {}
    config = stored.get("config") or {}
    section = config.get("drift") if isinstance(config, dict) else None
    if not isinstance(config, dict) or not isinstance(section or {}, dict):
        raise ValueError(f"{redact_text(uri)}: config.drift: expected a mapping")
    try:
        return RunConfig.model_validate({"drift": section or {}}).drift
    except ValidationError as e:
        raise explain_config_error(e, redact_text(uri)) from None


def watch_night(output_root: str, date, cfg: DriftConfig, logger=None) -> dict:
    """Compare, write and announce one night (:func:`night_drift`, :func:`write_drift`,
    :func:`announce`); returns the result plus ``uri`` (its ``drift.json``). Never raises for
    what it finds: the caller fails the run on ``fail_reason``.

    A comparison that raises (a storage error listing the nights, ...) is a result of status
    ``error`` (one note); a ``drift.json`` that cannot be written is logged (``uri`` None).

    Raises:
        ValueError: a bad ``date``."""
    d = parse_date(date, "date")
    try:
        result = night_drift(output_root, d, cfg)
    except Exception as e:  # noqa: BLE001 - the answers are written: the drift step never crashes the run
        result = _finish(_failed(_empty(output_root, d), e), cfg)
    try:
        uri = write_drift(output_root, result)
    except Exception as e:  # noqa: BLE001
        (logger or log).warning("drift %s: drift.json not written: %s: %s", result["date"], type(e).__name__, e)
        uri = None
    announce(output_root, result, uri)
    (logger or log).info("drift %s: %s", result["date"], "; ".join(result["notes"]) or
                         (f"moved: {', '.join(result['moved'])}" if result["moved"] else "nothing moved"))
    return {**result, "uri": uri}


_UNREADABLE: dict = {}


def _why_stale(night: str, stored: dict, compared: dict[str, str | None], k: int | None) -> str | None:
    """Why the stored comparison ``stored`` of ``night`` is stale once the dates ``compared``
    (date -> config hash) were run again, or None: its baseline held one of them, or one of them
    of its config hash now falls in its window of ``k`` nights (``k`` None: unknown, any earlier)."""
    base = [b for b in stored.get("baseline") or [] if isinstance(b, str)] if isinstance(stored.get("baseline"), list) else []
    held = sorted(set(base) & set(compared))
    if held:
        return f"its baseline holds {_named(held)}, which this backfill ran again"
    new = sorted(d for d, h in compared.items() if d < night and h is not None and h == stored.get("config_hash")
                 and (k is None or len(base) < k or d > min(base)))
    return f"{_named(new)} now in its baseline" if new else None


def later_nights(output_root: str, compared: dict[str, str | None], redo: bool = True, logger=None) -> list[dict]:
    """The nights of ``output_root`` whose stored comparison a backfill made stale by comparing
    the dates ``compared`` (``YYYY-MM-DD`` -> config hash of its profile), redone or marked.

    Looked at: the nights after the earliest of ``compared``, not among them, that have a
    ``drift.json`` (a night never compared has nothing to go stale). Stale: its baseline held one
    of ``compared`` (its profile was written again), or one of ``compared`` of its config hash
    now falls in its baseline window (the last ``drift.baseline_nights`` nights before it, with
    the drift section it ran with: :func:`stored_drift_config`), or its ``drift.json`` is not JSON.

    With ``redo`` each stale night is compared again (:func:`watch_night`, its own drift section;
    only profiles are read); without (the backfill's ``drift.enabled`` off), or when its stored
    drift section is invalid, it is only marked. Returns one dict per stale night in date order:
    ``date``, ``why``, ``redone`` (bool), ``command`` (``specrag-batch drift ROOT --date D``,
    which redoes it by hand), and when redone ``status``, ``moved``, ``fails``, ``fail_reason``,
    ``baseline``, ``uri`` (:func:`watch_night`), else ``error`` (why not redone, or None).
    A night whose ``fail_on`` measure now moves does not raise: its run is over.

    Raises:
        OSError: the nights of ``output_root`` cannot be listed."""
    out = []
    if not compared:
        return out
    for n in nights(output_root):
        night = n.isoformat()
        if night <= min(compared) or night in compared:
            continue
        prefix = partition_uri(output_root, n)
        try:
            stored = storage.read_json_object(storage.join(prefix, REPORT_DIR, DRIFT_FILE))
        except ValueError:
            stored = _UNREADABLE
        if stored is None:
            continue
        try:
            cfg, error = stored_drift_config(prefix), None
        except (ValueError, OSError) as e:
            cfg, error = None, f"its stored drift section: {str(e).splitlines()[0][:200]}"
        why = (f"its {REPORT_DIR}/{DRIFT_FILE} is not JSON" if stored is _UNREADABLE
               else _why_stale(night, stored, compared, cfg.baseline_nights if cfg else None))
        if why is None:
            continue
        entry = {"date": night, "why": why, "redone": False, "error": error,
                 "command": f"specrag-batch drift {redact_text(output_root)} --date {night}"}
        if redo and cfg is not None:
            w = watch_night(output_root, n, cfg, logger)
            entry.update(redone=True, **{k: w[k] for k in ("status", "moved", "fails", "fail_reason", "baseline", "uri")})
        out.append(entry)
    return out
