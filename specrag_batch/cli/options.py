"""Command-line options generated from :class:`~specrag_batch.config.RunConfig` and the one
mapping from exceptions to exit codes.

The common settings (:data:`COMMON`: config field -> the flag names of docs/cli.md) become
options typed as the config field (int, float, str, a fixed set of words) with the field's
``description`` as help. A flag that is given overrides the config file (``load_config``
overrides); the rest of the config is set in the YAML.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, Optional

import typer
from pydantic import BaseModel

from ..config import RunConfig

COMMON: dict[str, tuple[str, ...]] = {
    "mode": ("--mode",),
    "drafter.model": ("--drafter",),
    "verifier.model": ("--verifier",),
    "retrieval.top_n": ("--top-n",),
    "sampling.num_drafts": ("--drafts", "-m"),
    "sampling.num_clusters": ("--clusters", "-k"),
    "selection.tau_min": ("--tau-min",),
    "retrieval.index": ("--index",),
    "seed": ("--seed",),
}
"""The common settings offered as flags: dotted config field -> flag names (as docs/cli.md
lists them; every other field is set in the YAML config)."""

_SCALARS = (bool, int, float, str)


def hide_flag_types() -> None:
    """Show no value type after options that take no value (``--overwrite``, ``--json``,
    ``--help``) in the rich ``--help`` (idempotent).

    typer 0.29's rich help prints every option's type, ``<bool>`` for flags too, although
    flags take no value; its plain help (``TyperOption.get_help_record``) already skips flags
    and counters. This makes the rich help do the same; every other option keeps its type.
    Does nothing if a typer version has no ``TyperOption.display_type_rich``."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "hides_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag or self.count else shown(self, ctx)

    display_type_rich.hides_flags = True
    TyperOption.display_type_rich = display_type_rich


def _scalar_type(annotation: Any) -> Any | None:
    """The CLI type of a field annotation, or None when it is not a scalar: ``X | None`` ->
    ``X``; a union holding ``float`` (``tau_min``: one value or a dict per task) -> float; a
    union holding a ``Literal`` (``mode``: a word or a dict per task, given as ``task=mode``
    pairs that the config parses) -> str."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        if float in args:
            return float
        if len(args) > 1 and any(typing.get_origin(a) is Literal for a in args):
            return str
        return _scalar_type(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is Literal:
        return annotation  # typer checks the value against the words
    return annotation if annotation in _SCALARS else None


def config_field(dotted: str, model: type[BaseModel] = RunConfig):
    """The pydantic FieldInfo of a dotted config field (``"sampling.num_drafts"``)."""
    head, _, rest = dotted.partition(".")
    info = model.model_fields[head]
    return config_field(rest, info.annotation) if rest else info


def config_parameters() -> list[inspect.Parameter]:
    """One keyword parameter ``cfg__<section>__<field>`` per :data:`COMMON` field, typed as
    the field, its help the field's ``json_schema_extra["flag_help"]`` where the flag takes
    less than the field (``--tau-min``: one number, not the per-task mapping), else its
    description; default None (not given: the config file's value).

    Raises:
        TypeError: a listed field is not a scalar (a programming error)."""
    params = []
    for dotted, names in COMMON.items():
        info = config_field(dotted)
        typ = _scalar_type(info.annotation)
        if typ is None:
            raise TypeError(f"config field {dotted!r} ({info.annotation}) cannot be a flag")
        flag_help = (info.json_schema_extra or {}).get("flag_help")  # the field's own words for its flag
        help_text = flag_help or info.description or f"config field {dotted}"
        if not flag_help and typ is float and any(typing.get_origin(a) is dict for a in typing.get_args(info.annotation)):
            help_text = help_text.rstrip(". ") + ". The flag takes one number, for every task; a mapping is config-file only."
        option = typer.Option(None, *names, help=help_text, show_default=False)
        params.append(inspect.Parameter("cfg__" + dotted.replace(".", "__"),
                                        inspect.Parameter.KEYWORD_ONLY, default=option,
                                        annotation=Optional[typ]))
    return params


def _extended(command: Callable, added: list[inspect.Parameter], gives: tuple[str, ...],
              collect: Callable[[dict], dict]) -> Callable:
    """``command`` as a typer command with the keyword options ``added``; their values go to
    ``collect``, whose result fills the command's parameters named in ``gives``."""
    sig, hints = inspect.signature(command), typing.get_type_hints(command)  # resolve string annotations
    own = [p.replace(annotation=hints.get(p.name, p.annotation), kind=inspect.Parameter.KEYWORD_ONLY)
           for p in sig.parameters.values() if p.name not in gives]

    def wrapper(**kwargs):
        given = collect({p.name: kwargs.pop(p.name) for p in added})
        return command(**kwargs, **given)
    wrapper.__name__, wrapper.__doc__ = command.__name__, command.__doc__
    wrapper.__signature__ = sig.replace(parameters=own + added)
    return wrapper


def with_config_options(command: Callable) -> Callable:
    """Add the generated config options (:data:`COMMON`) to a typer command; it receives them
    as one dict ``config_overrides`` (dotted field -> value given on the command line)."""
    def collect(values: dict) -> dict:
        over = {name[5:].replace("__", "."): v for name, v in values.items()}
        return {"config_overrides": {k: v for k, v in over.items() if v is not None}}
    return _extended(command, config_parameters(), ("config_overrides",), collect)


def with_run_options(command: Callable) -> Callable:
    """Add ``--config/-c``, ``--mode``, ``--overwrite``, ``--task-runner``, ``--ray-address`` and
    ``--stages`` to a typer command (the scheduled flows); it receives ``config_path`` (str or
    None), ``mode`` (the ``--mode`` value or None: the config's), ``overwrite`` and
    ``execution`` (an :class:`ExecutionConfig`).

    Raises:
        typer.BadParameter: a bad execution flag (exit 2, naming the flag)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    added = [inspect.Parameter("config", kw, default=CONFIG_OPT, annotation=Optional[str]),
             inspect.Parameter("mode", kw, default=typer.Option(None, "--mode", help=config_field("mode").json_schema_extra[
                 "flag_help"] + "; overrides the config's mode", show_default=False), annotation=Optional[str]),
             inspect.Parameter("overwrite", kw, default=OVERWRITE_OPT, annotation=bool),
             inspect.Parameter("task_runner", kw, default=TASK_RUNNER, annotation=str),
             inspect.Parameter("ray_address", kw, default=RAY_ADDRESS, annotation=Optional[str]),
             inspect.Parameter("stages", kw, default=STAGES_OPT, annotation=str)]

    def collect(v: dict) -> dict:
        return {"config_path": v["config"] or None, "overwrite": v["overwrite"], "mode": v["mode"],
                "execution": execution_from_flags(v["task_runner"], v["ray_address"], v["stages"])}
    return _extended(command, added, ("config_path", "mode", "overwrite", "execution"), collect)


TASK_RUNNER = typer.Option("threads", "--task-runner", help="threads (this process) or ray (a "
                           "Ray cluster through prefect-ray; needs the 'ray' extra).")
RAY_ADDRESS = typer.Option(None, "--ray-address", help="Ray cluster: 'auto', 'ray://host:10001'; "
                           "default: start Ray locally.")
STAGES_OPT = typer.Option("fused", "--stages", help="fused, or disaggregated (drafting tasks write "
                          "intermediate draft Parquet; verification tasks read it).")
OVERWRITE_OPT = typer.Option(False, "--overwrite", help="Replace results of another config.")
INPUT_ROOT = typer.Option(..., "--input-root", help="Prefix holding date=YYYY-MM-DD/ partitions.")
OUTPUT_ROOT = typer.Option(..., "--output-root", help="Prefix for the output partitions.")
def config_location(value: str | None) -> str | None:
    """``--config``'s check: a storage URI (``file://``, ``s3://``, any ``<scheme>://``) passes
    as given (read by :func:`~specrag_batch.config.load_config`; a missing object is exit 2
    there); a local path must be an existing file (click's ``Path(exists=True)`` refused every
    URI, saying the file did not exist).

    Raises:
        typer.BadParameter: a local path that does not exist or is a directory (exit 2)."""
    if value is None or "://" in value:
        return value
    if not Path(value).exists():
        raise typer.BadParameter(f"file {value!r} does not exist.")
    if Path(value).is_dir():
        raise typer.BadParameter(f"{value!r} is a directory, not a config file.")
    return value


CONFIG_HELP = "YAML run config (see configs/): a local file or a storage URI (file://, s3://)"
CONFIG_OPT = typer.Option(None, "--config", "-c", callback=config_location, metavar="<file or URI>",
                          help=CONFIG_HELP + ".")


def execution_from_flags(task_runner: str, ray_address: str | None, stages: str):
    """ExecutionConfig from CLI flags.

    Raises:
        typer.BadParameter: a bad value (a usage error, exit 2, naming the flag)."""
    from pydantic import ValidationError

    from ..config.execution import ExecutionConfig

    try:
        return ExecutionConfig(task_runner=task_runner, ray_address=ray_address, stages=stages)
    except ValidationError as e:
        err = e.errors()[0]
        flag = {"task_runner": "--task-runner", "stages": "--stages"}.get(str(err["loc"][0]), "--ray-address")
        raise typer.BadParameter(err["msg"], param_hint=flag) from None


def fail(e: Exception, code: int) -> None:
    """Print ``error: <e>`` on stderr (one line per line of the message; control characters
    inside a value of the command's parameters that the message repeats are escaped, :func:`console.one_line`)
    and exit ``code``.

    Raises:
        typer.Exit: always, with ``code``."""
    from rich.text import Text

    from .console import err_console, one_line

    import click

    message, ctx = str(e), click.get_current_context(silent=True)
    for value in (ctx.params.values() if ctx is not None else ()):  # a path given with a newline in it
        if isinstance(value, str):  # stays on its error line
            message = one_line(message, only=value)
    err_console.print(Text("error:", style="red"), Text(message), soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def offline_errors(fail_with: Callable[[Exception, int], None] = fail, where: str | None = None) -> Iterator[None]:
    """:func:`exit_codes` (printing and exiting with ``fail_with``, by default :func:`fail`)
    for the commands that run no engine (report, calibrate, index build):
    an OSError too (an output directory that is a file or read-only, ``--out`` in a missing
    directory, an embedding model that is not there) exits 2 with its message, which names the
    path, instead of a traceback; so do a URI scheme whose fsspec file system is not installed
    (ImportError, ``gs://`` without gcsfs) and an S3 client that cannot start (botocore: no
    credentials, an endpoint that does not answer): their messages (``Unable to locate
    credentials``, ``Please install gcsfs``) do not say which location was being read, so
    ``where`` (the command's path argument, credentials redacted) is put in front of them, as
    in front of an OSError naming no path (s3fs's ``Forbidden`` for refused credentials)."""
    from botocore.exceptions import BotoCoreError

    from ..core.redaction import redact_text

    with exit_codes(fail_with):
        try:
            yield
        except (BotoCoreError, ImportError) as e:
            fail_with(OSError(f"{redact_text(where)}: {e}") if where else e, 2)
        except OSError as e:  # s3fs's PermissionError("Forbidden") for refused credentials names no location
            shown = where.rstrip("/").encode("unicode_escape").decode() if where else ""  # a newline shown as \\n, on one line
            named = where is None or getattr(e, "filename", None) or where.rstrip("/") in str(e) or shown in str(e)
            fail_with(e if named else OSError(f"{redact_text(shown)}: {e} ({type(e).__name__})"), 2)


USAGE_ERRORS = (ValueError, FileNotFoundError)
"""Exit 2: bad config, flag or input layout, a run conflict, a model that cannot be used."""


@contextmanager
def exit_codes(fail: Callable[[Exception, int], None]) -> Iterator[None]:
    """The one mapping from exceptions to exit codes (docs/operations.md, "Exit codes"): 2 = conflict, bad
    config/flag/model/input (:class:`resume.RunConflictError`,
    :class:`models.ModelNotInstalledError`, ValueError incl. pydantic's ValidationError and
    InputSchemaError, FileNotFoundError); 1 = a run finished with failed shards (RuntimeError of the scheduled
    flows). ``fail(error, code)`` prints and exits."""
    from ..engines.models import ModelNotInstalledError
    from ..run.resume import RunConflictError

    try:
        yield
    except typer.Exit:  # a RuntimeError in click: the command's own exit code
        raise
    except (RunConflictError, ModelNotInstalledError, *USAGE_ERRORS) as e:
        fail(e, 2)
    except RuntimeError as e:
        fail(e, 1)
