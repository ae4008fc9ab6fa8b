"""The documentation: docs/ builds as an mkdocs site in strict mode (a broken link or anchor
between pages fails), and README.md stays a short page for users whose two commands are the
set-up + demo and the test command (`.ci/run` calls `make test`)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MAX_README_LINES = 200
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built with ``mkdocs build --strict`` from the repository root."""
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        print(r.stdout)
        print(r.stderr, file=sys.stderr)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stderr[-5000:]}"
    return out


def test_docs_build_strictly(site):
    assert (site / "index.html").is_file()
    assert (site / "decisions" / "index.html").is_file()


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_readme_commands_are_make_demo_and_make_test():
    text = README.read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", quick, flags=re.S)
    commands = [line.strip() for b in blocks for line in b.splitlines()
                if line.strip() and not line.strip().startswith("#")]
    assert commands == ["make demo", "make test"], commands
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, flags=re.M), "CI should run README's test command"


def test_readme_holds_no_dated_findings():
    """Dates and intervals belong to docs/results.md and docs/decisions/, not README."""
    text = README.read_text(encoding="utf-8")
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text)
    assert not re.findall(r"\[[+-]?\d+(\.\d+)?, [+-]?\d+(\.\d+)?\]", text)


def test_readme_links_resolve(site):
    """Every relative link of README names a file of the repository; a link into docs/ with an
    anchor names a heading of the built page; the sample data's attribution is linked."""
    text = README.read_text(encoding="utf-8")
    links = [l for l in LINK.findall(text) if not re.match(r"[a-z]+://", l)]
    assert "samples/README.md" in links
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).exists(), f"README links to a missing file: {link}"
        if anchor and path.startswith("docs/") and path.endswith(".md"):
            page = Path(path).relative_to("docs").with_suffix("")
            html = site / (page.parent if page.name == "index" else page) / "index.html"
            assert f'id="{anchor}"' in html.read_text(encoding="utf-8"), f"no anchor: {link}"
            assert anchor in _github_anchors(ROOT / path), f"the anchor differs on GitHub: {link}"


def _github_anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page (lower case, characters other
    than letters, digits, ``_``, ``-`` and spaces dropped, each space a ``-``: ``n = 400`` gives
    ``n--400`` there and ``n-400`` in mkdocs), so a README link works in both places."""
    heads = re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}


def _subcommands(*group: str) -> list[str]:
    """The command names under ``Commands:`` of ``specrag-batch [group] --help`` (plain text: the
    output is not a terminal)."""
    exe = Path(sys.executable).with_name("specrag-batch")
    r = subprocess.run([str(exe), *group, "--help"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr[-2000:]
    listed = r.stdout.split("Commands:", 1)[1] if "Commands:" in r.stdout else ""
    return [line.split()[0] for line in listed.splitlines() if line.startswith("  ") and line.strip()]


def test_readme_cli_table_lists_every_command():
    """Every `specrag-batch` command (each subcommand of a group) has a row in README's table."""
    commands, groups = set(), set()
    for name in _subcommands():
        sub = _subcommands(name)
        if sub:
            groups.add(name)
        commands |= {f"{name} {s}" for s in sub} or {name}
    text = README.read_text(encoding="utf-8")
    table = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    rows = [r.split() for r in re.findall(r"^\| `specrag-batch ([^`]+)`", table, flags=re.M)]
    named = {" ".join(w[:2]) if w[0] in groups else w[0] for w in rows}
    assert commands == named, (f"missing from README: {sorted(commands - named)}; "
                               f"not commands: {sorted(named - commands)}")


def test_every_docs_page_the_code_and_architecture_name_exists():
    """Config descriptions, docstrings and ARCHITECTURE.md point to docs pages and decision
    records by path (``docs/decisions/008-....md``); each one exists."""
    named = set()
    for path in [ROOT / "ARCHITECTURE.md", *sorted((ROOT / "specrag_batch").rglob("*.py"))]:
        named |= set(re.findall(r"docs/[a-z0-9/_.-]+\.md", path.read_text(encoding="utf-8")))
    assert named, "no docs page is named: the pattern is out of date"
    assert sorted(p for p in named if not (ROOT / p).is_file()) == []


def test_code_points_users_to_docs_not_to_readme_sections():
    """README is a short page; the operations, configuration and exit-code text users are sent to
    from messages and docstrings lives in docs/."""
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "specrag_batch").rglob("*.py"))
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r'README[ ,]*(\(|"|Operations)', line)]
    assert hits == []
