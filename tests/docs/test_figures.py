"""The figures of docs/results.md: every picture the page shows is a committed file of
docs/figures/, every committed figure is shown, and drawing them again from the committed
benchmark results (``make figures``: benchmarks/figures.py) gives the same files with the same
image sizes (not the same bytes: matplotlib's rendering may differ between versions)."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.docs

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / "docs" / "figures"
RESULTS = ROOT / "docs" / "results.md"
IMAGE = re.compile(r"!\[[^\]]*\]\(figures/([^)\s]+)\)")


def _png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels from a PNG's IHDR chunk; fails on a file that is not a PNG."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR", f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


def test_results_page_shows_every_committed_figure_and_no_missing_one():
    shown = set(IMAGE.findall(RESULTS.read_text(encoding="utf-8")))
    committed = {p.name for p in FIGURES.glob("*.png")}
    assert len(committed) >= 3, f"docs/figures holds {sorted(committed)}"
    assert shown - committed == set(), f"docs/results.md shows missing figures: {sorted(shown - committed)}"
    assert committed - shown == set(), f"figures not shown in docs/results.md: {sorted(committed - shown)}"


def test_drawing_the_figures_again_gives_the_committed_files(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "figures.py"), "--out", str(tmp_path)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    drawn = {p.name: _png_size(p) for p in tmp_path.glob("*.png")}
    committed = {p.name: _png_size(p) for p in FIGURES.glob("*.png")}
    assert drawn == committed, "run `make figures` and commit docs/figures"
    assert sorted(Path(line).name for line in r.stdout.split()) == sorted(drawn)
