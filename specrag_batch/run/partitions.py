"""Helpers shared by the scheduled flows: dated partitions, date ranges, config resolution."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..core import storage
from ..config import RunConfig, load_config

PARTITION_KEY = "date"


def partition_uri(root: str, date: dt.date) -> str:
    """``<root>/date=YYYY-MM-DD`` (Hive-style partition, read by pyarrow/polars/Spark/Athena)."""
    return storage.join(root, f"{PARTITION_KEY}={date.isoformat()}")


def parse_date(value: str | dt.date, field: str) -> dt.date:
    """``YYYY-MM-DD`` -> date.

    Raises:
        ValueError: not an ISO date (names the parameter)."""
    if isinstance(value, dt.date):
        return value
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(value)):
            raise ValueError
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"parameter {field!r}: expected a date YYYY-MM-DD, got {value!r}") from None


def check_timezone(name: str, field: str = "timezone") -> ZoneInfo:
    """The IANA time zone ``name``.

    Raises:
        ValueError: unknown zone (names the parameter)."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"parameter {field!r}: unknown IANA time zone {name!r} "
                         "(e.g. 'UTC', 'Europe/Amsterdam')") from None


def dates_between(start: str | dt.date, end: str | dt.date,
                  names: tuple[str, str] = ("start_date", "end_date")) -> list[dt.date]:
    """Every date from ``start`` to ``end`` inclusive (``names``: the parameters, for messages).

    Raises:
        ValueError: a bad date, or ``end`` before ``start``."""
    a, b = parse_date(start, names[0]), parse_date(end, names[1])
    if b < a:
        raise ValueError(f"{names[1]} {b} is before {names[0]} {a}")
    return [a + dt.timedelta(days=i) for i in range((b - a).days + 1)]


def scheduled_date(timezone: str, lag_days: int, now: dt.datetime | None = None) -> dt.date:
    """The partition a scheduled run processes: the run's scheduled start (Prefect runtime; now
    when run by hand) in ``timezone``, minus ``lag_days`` (1 = yesterday's partition).

    Raises:
        ValueError: unknown timezone name."""
    tz = check_timezone(timezone)
    if now is None:
        from prefect.runtime import flow_run

        now = flow_run.scheduled_start_time or dt.datetime.now(dt.UTC)
    return (now.astimezone(tz) - dt.timedelta(days=lag_days)).date()


def require_directory(uri: str, field: str) -> None:
    """Raises FileNotFoundError unless ``uri`` is an existing directory/prefix (names the
    parameter): a mistyped root must not look like a range of missing partitions."""
    fs, path = storage.filesystem(uri)
    if not fs.isdir(path):
        what = "is a file, not a directory" if fs.exists(path) else "does not exist"
        raise FileNotFoundError(f"parameter {field!r}: {uri!r} {what}")


def resolve_config(config: dict | None, config_path: str | None,
                   overrides: dict[str, Any] | None = None) -> RunConfig:
    """A deployment's run config: a YAML file (path in the image or a storage URI) or an inline
    dict (or defaults), then dotted-key overrides (``{"sampling.num_drafts": 5}``).

    Raises:
        ValueError: both ``config`` and ``config_path`` given.
        pydantic.ValidationError: an invalid field (named in the message)."""
    return load_config(config_path, overrides, base=config)
