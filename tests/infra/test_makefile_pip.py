"""The Makefile's pip filter (``PIP_FILTER``), with a stand-in pip: a fresh-clone trial's
``make demo`` printed hundreds of ``WARNING: Location 'file:///opt/pypi-more/simple/torch/' is
ignored: it is neither a file nor a directory.`` (the host's pip configuration names local
``file://`` indexes that lack most packages). Exactly those lines go; a missing index, a bad
``--find-links`` path, every other line, pip's stdout and its exit status stay."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from .dockerfile import make_dry_run
from .files import ROOT


def _warning(location: str) -> str:
    return f"WARNING: Location '{location}' is ignored: it is neither a file nor a directory."


def test_every_pip_install_of_the_make_targets_goes_through_the_filter():
    cmds = make_dry_run(["setup", "models-test", "models-demo", "models-verifier"], {})
    installs = [c for c in cmds if re.search(r"\bpip\b.*\binstall\b", c)]
    assert len(installs) >= 6, cmds
    assert all(c.startswith('.venv/bin/python -c "$PIP_FILTER" .venv/bin/pip install ') for c in installs), installs


def test_only_a_configured_local_index_lacking_a_package_is_silenced(tmp_path):
    make = shutil.which("make")
    if not make:
        pytest.fail("`make` is not installed (CI runs `make test`, so it must be)")
    index, gone = tmp_path / "simple", tmp_path / "gone"
    index.mkdir()
    noise = _warning(f"file://{index}/torch/")
    kept = [_warning(f"file://{gone}/torch/"),  # a configured index that is not there
            _warning(f"file://{tmp_path}/wheelz/"),  # not an index of the configuration (--find-links)
            "WARNING: Skipping torchvision as it is not installed.",
            "ERROR: No matching distribution found for torch==9"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    os.symlink(sys.executable, bin_dir / "python")
    fake_pip = bin_dir / "pip"
    lines = [noise] + [x for line in kept for x in (line, noise)]
    config = f"global.extra-index-url='file://{index} file://{gone}/'"
    fake_pip.write_text(f"#!{sys.executable}\nimport sys\n"
                        f"if sys.argv[1] == 'config':\n    print({config!r})\n    sys.exit(0)\n"
                        f"sys.stderr.write({''.join(x + chr(10) for x in lines)!r})\n"
                        "print('Successfully installed torch')\nsys.exit(3)\n")
    fake_pip.chmod(0o755)
    probe = tmp_path / "probe.mk"
    probe.write_text("probe:\n\t$(PIP) install -q torch\n")
    r = subprocess.run([make, "-s", "--no-print-directory", "-f", "Makefile", "-f", str(probe), "probe",
                        f"BIN={bin_dir}"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert r.stdout == "Successfully installed torch\n", r.stdout
    errors = [line for line in r.stderr.splitlines() if not line.startswith("make:")]
    assert errors == kept, r.stderr
    assert r.returncode != 0 and "Error 3" in r.stderr, r.stderr  # pip's exit status reaches make
