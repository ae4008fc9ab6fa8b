"""The ``drift`` command: one night of a nightly output root compared with the nights before it,
by hand, as the nightly and backfill flows do (:mod:`specrag_batch.run.drift.watch`).
``cli.py`` registers it."""

from __future__ import annotations

from typing import Optional

import typer

from .options import CONFIG_HELP, config_location, exit_codes
from .options import fail as _fail
from .console import console


def _hint(output_root: str, found: list) -> str:
    """What a root without the asked partition holds: its partitions' range, none, or that it
    is itself a partition."""
    import re

    from ..run.partitions import PARTITION_KEY

    if re.fullmatch(rf"{PARTITION_KEY}=\d{{4}}-\d{{2}}-\d{{2}}", output_root.rstrip("/").rsplit("/", 1)[-1]):
        return " (OUTPUT_ROOT is itself a date= partition; give the directory that holds the partitions)"
    if not found:
        return " (it holds no date=YYYY-MM-DD partitions)"
    return f" (it holds {len(found)} partition(s), {found[0].isoformat()} to {found[-1].isoformat()})"


def drift(
    output_root: str = typer.Argument(..., help="Output root holding date=YYYY-MM-DD/ partitions "
                                      "(local path or s3://)."),
    date: str = typer.Option(..., "--date", help="The night to compare, YYYY-MM-DD."),
    config: Optional[str] = typer.Option(None, "--config", "-c", callback=config_location,
                                         metavar="<file or URI>", help=CONFIG_HELP + ": its drift "
                                         "section (default: the drift section the night ran with)."),
    write: bool = typer.Option(True, "--write/--no-write", help="Write _report/drift.json and the "
                               "report's section (default), or only print."),
) -> None:
    """Compare one night with the last K nights before it (drift section of the config).

    Prints the section ("Changes since the last K nights", "... the last night", or "No comparison: <reason>").
    Exit codes: 0 = compared (or nothing to compare: first night, no baseline); 1 = a measure of drift.fail_on moved (or no
    baseline under drift.require_baseline), as the nightly flow run would fail; 2 = a bad
    date, config or root, or no partition date=D under the root (nothing is written then)."""
    from ..run.drift import compare as drift_measures
    from ..core import stopping, storage
    from ..config import read_run_config
    from ..core.redaction import redact_text
    from ..run.drift.watch import night_drift, nights, stored_drift_config, write_drift
    from ..run.partitions import parse_date, partition_uri

    stopping.computes_no_shards()

    with exit_codes(_fail):
        day = parse_date(date, "--date")
        if not storage.exists(output_root):
            raise FileNotFoundError(f"parameter 'OUTPUT_ROOT': {output_root!r} does not exist")
        if day not in (found := nights(output_root)):  # nothing written: no partition made up
            raise FileNotFoundError(f"no partition date={day.isoformat()} under {redact_text(output_root)}"
                                    f"{_hint(output_root, found)}")
        cfg = read_run_config(config).drift if config is not None else stored_drift_config(partition_uri(output_root, day))
        result = night_drift(output_root, day, cfg)
        console.print(drift_measures.markdown(result), markup=False, highlight=False, end="")
        if write:
            console.print(f"written: {write_drift(output_root, result)}", markup=False, highlight=False)
    if result["fail_reason"]:
        _fail(RuntimeError(result["fail_reason"]), 1)
