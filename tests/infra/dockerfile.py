"""Reading the Dockerfile, .dockerignore and make calls the way Docker and make do, offline.

- Dockerfile: instructions with line continuations, comments and stages (``FROM ... AS name``);
  no heredocs (the project's Dockerfile uses none).
- .dockerignore: Docker's pattern rules (Go ``filepath.Match`` syntax plus ``**``, ``!``
  exceptions, last match wins, a parent directory's match excludes its contents).
- make: the ``make`` calls in a shell script and their dry-run (``make -n -B``) commands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

from .files import DOCKERFILE, DOCKERIGNORE, ROOT

# ---------------------------------------------------------------------------------------------
# Dockerfile


@dataclass
class Instr:
    """One Dockerfile instruction.

    ``cmd`` upper-case (``RUN``, ``COPY``, ...); ``args`` the rest, continuation lines joined
    with spaces; ``line`` the 1-based line it starts on; ``stage`` the name of the ``FROM ... AS``
    stage it belongs to (``stage<i>`` if unnamed); ``comments`` the ``#`` lines directly above it
    (a blank line resets them), e.g. ``# hadolint ignore=...`` pragmas.
    """

    cmd: str
    args: str
    line: int
    stage: str
    comments: list[str] = field(default_factory=list)


def parse_dockerfile(text: str) -> list[Instr]:
    """Split Dockerfile ``text`` into instructions, in file order.

    Comment lines inside a continuation are dropped, as Docker does. Heredocs are not supported.
    """
    out: list[Instr] = []
    lines = text.splitlines()
    stage = ""
    comments: list[str] = []
    i = 0
    while i < len(lines):
        s = lines[i].strip()
        if not s:
            comments = []
            i += 1
            continue
        if s.startswith("#"):
            comments.append(s)
            i += 1
            continue
        start, parts = i, []
        while True:
            cur = lines[i].strip()
            if not cur.startswith("#"):  # comment lines inside a continuation are dropped
                cont = cur.endswith("\\")
                parts.append(cur[:-1].strip() if cont else cur)
                if not cont:
                    break
            i += 1
            if i == len(lines):
                break
        i += 1
        cmd, _, args = " ".join(p for p in parts if p).partition(" ")
        cmd = cmd.upper()
        if cmd == "FROM":
            m = re.search(r"\s+as\s+(\S+)\s*$", args, re.IGNORECASE)
            stage = m.group(1) if m else f"stage{sum(x.cmd == 'FROM' for x in out)}"
        out.append(Instr(cmd, args.strip(), start + 1, stage, comments))
        comments = []
    return out


@lru_cache
def instructions() -> tuple[Instr, ...]:
    """The repository's Dockerfile, parsed once per process."""
    return tuple(parse_dockerfile(DOCKERFILE.read_text()))


def stage(name: str) -> list[Instr]:
    """The instructions of stage ``name`` (its FROM first); asserts that the stage exists."""
    got = [x for x in instructions() if x.stage == name]
    assert got, f"Dockerfile has no stage {name!r}"
    return got


def from_image(name: str) -> str:
    """The base image reference of stage ``name`` (its FROM without flags such as --platform)."""
    args = stage(name)[0].args.split()
    return next(a for a in args if not a.startswith("--"))


def run_command(ins: Instr) -> str:
    """A RUN's shell command without its BuildKit flags (--mount=..., --network=...)."""
    args = ins.args
    while args.startswith("--"):
        args = args.split(None, 1)[1] if " " in args else ""
    return args


def copy_parts(ins: Instr) -> tuple[dict[str, str], list[str], str]:
    """(flags, sources, destination) of a COPY/ADD in shell form.

    ``flags`` maps ``--from=uv`` to ``{"from": "uv"}``; sources are as written (relative to the
    build context unless ``from`` is set).
    """
    tokens = shlex.split(ins.args)
    flags = {}
    while tokens and tokens[0].startswith("--"):
        k, _, v = tokens.pop(0)[2:].partition("=")
        flags[k] = v
    return flags, tokens[:-1], tokens[-1]


def stage_env(name: str) -> dict[str, str]:
    """The ``ENV key=value`` settings of stage ``name`` (later ones win), not expanded."""
    env: dict[str, str] = {}
    for ins in stage(name):
        if ins.cmd == "ENV":
            for tok in shlex.split(ins.args):
                k, sep, v = tok.partition("=")
                if sep:
                    env[k] = v
    return env


def stage_user(name: str) -> str:
    """The last USER of stage ``name``; asserts there is one (else it would run as root)."""
    users = [x.args for x in stage(name) if x.cmd == "USER"]
    assert users, f"stage {name!r} sets no USER (it would run as root)"
    return users[-1]


def app_uid() -> int:
    """The numeric uid both targets (cpu, gpu) run as; asserts that they agree."""
    uids = {int(stage_user(s).split(":")[0]) for s in ("cpu", "gpu")}
    assert len(uids) == 1, f"cpu and gpu targets run as different users: {uids}"
    return uids.pop()


def volumes(name: str) -> set[str]:
    """The paths stage ``name`` declares with VOLUME (JSON or shell form)."""
    out: set[str] = set()
    for ins in stage(name):
        if ins.cmd == "VOLUME":
            a = ins.args.strip()
            out |= set(json.loads(a)) if a.startswith("[") else set(a.split())
    return out


# ---------------------------------------------------------------------------------------------
# .dockerignore


def _dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    """(is an ``!`` exception, compiled pattern) per .dockerignore line, in file order."""
    pats = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        neg = line.startswith("!")
        line = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        rx, i = "", 0
        while i < len(line):  # Go filepath.Match syntax plus `**`, as Docker's patternmatcher
            if line.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif line.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif line[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif line[i] == "?":
                rx, i = rx + "[^/]", i + 1
            elif line[i] == "[":
                j = line.index("]", i)
                rx, i = rx + line[i:j + 1], j + 1
            else:
                rx, i = rx + re.escape(line[i]), i + 1
        pats.append((neg, re.compile(rx + r"\Z")))
    return pats


def dockerignored(path: str) -> bool:
    """Whether the build context drops ``path`` (relative to the repository root)."""
    parts = Path(path).parts
    candidates = ["/".join(parts[:k]) for k in range(1, len(parts) + 1)]
    excluded = False
    for neg, rx in _dockerignore_patterns():
        if any(rx.match(c) for c in candidates):
            excluded = not neg
    return excluded


# ---------------------------------------------------------------------------------------------
# make calls


def make_invocations(script: str) -> list[list[str]]:
    """The argument lists of every ``make``/``gmake`` call in a shell ``script``.

    Splits on ``&&``, ``||`` and ``;``; ``#`` comments are dropped.
    """
    found = []
    for line in script.splitlines():
        line = line.split("#", 1)[0]
        for part in re.split(r"&&|\|\||;", line):
            tokens = shlex.split(part)
            if tokens and Path(tokens[0]).name in ("make", "gmake"):
                found.append(tokens[1:])
    return found


def split_make_args(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """(targets, ``VAR=value`` overrides) of a make call; options (``-j2``...) are dropped."""
    targets, overrides = [], {}
    for a in args:
        if a.startswith("-"):
            continue
        k, sep, v = a.partition("=")
        if sep:
            overrides[k] = v
        else:
            targets.append(a)
    return targets, overrides


def make_dry_run(targets: list[str], overrides: dict[str, str]) -> list[str]:
    """The commands ``make -n -B <targets> <overrides>`` prints at the repository root.

    Fails the test if ``make`` is missing; asserts that make exits 0.
    """
    make = shutil.which("make")
    if not make:
        pytest.fail("`make` is not installed (CI runs `make test`, so it must be)")
    r = subprocess.run([make, "--no-print-directory", "-n", "-B", *targets,
                        *(f"{k}={v}" for k, v in overrides.items())],
                       cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]
