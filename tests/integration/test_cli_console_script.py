"""``specrag-batch`` run as its console script, in a process of its own: usage errors name the
flag and exit 2 before any flow starts, ``--help`` piped is plain text, and a run prints
Prefect's INFO records to its API only, not the console."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


CLI = str(Path(sys.executable).with_name("specrag-batch"))


def test_cli_usage_errors_name_the_flag():
    r = subprocess.run([CLI, "backfill", "--input-root", "x", "--output-root", "y",
                        "--start", "2026-11-05", "--end", "2026-11-01"], capture_output=True, text=True)
    assert r.returncode == 2 and "--end 2026-11-01 is before --start 2026-11-05" in r.stderr
    r = subprocess.run([CLI, "run", "-i", "x", "-o", "y", "--stages", "split"], capture_output=True, text=True)
    assert r.returncode == 2 and "--stages" in r.stderr


def test_cli_nightly_usage_errors():
    for args, msg in ((["--timezone", "Bogus/Zone"], "unknown IANA time zone 'Bogus/Zone'"),
                      (["--date", ""], "parameter '--date': expected a date YYYY-MM-DD, got ''")):
        r = subprocess.run([CLI, "nightly", "--input-root", "x", "--output-root", "y", *args],
                           capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr and r.stdout == "", r.stdout + r.stderr


def test_cli_nightly_missing_root_or_partition_is_one_line_before_the_flow(tmp_path):
    """Root and partition are checked before the flow starts: exit 2, one ``error:`` line
    naming what is missing, no Prefect traceback, no flow run."""
    (tmp_path / "in" / "date=2026-01-02").mkdir(parents=True)
    (tmp_path / "in" / "date=2026-01-02" / "notes.txt").write_text("not parquet")
    for root, date, msg in ((tmp_path / "nope", "2026-01-01", "parameter '--input-root': "),
                            (tmp_path / "in", "2026-01-01", "date=2026-01-01' does not exist"),
                            (tmp_path / "in", "2026-01-02", "date=2026-01-02' has no Parquet shards (1 other files)")):
        r = subprocess.run([CLI, "nightly", "--input-root", str(root), "--output-root", str(tmp_path / "out"),
                            "--date", date], capture_output=True, text=True)
        err = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(err) == 1 and err[0].startswith("error:") and msg in err[0], r.stderr
        assert "Traceback" not in r.stderr and "flow run" not in r.stderr.lower() and r.stdout == "", r.stdout
    assert not (tmp_path / "out").exists()


def test_cli_invalid_run_config_is_a_usage_error(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("sampling:\n  num_drafts: 0\n")
    r = subprocess.run([CLI, "run", "-i", "x", "-o", "y", "-c", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2 and "greater than or equal to 1" in r.stderr and "Traceback" not in r.stdout + r.stderr


def test_help_piped_is_plain_and_never_wrapped():
    """`run --help | less`: with standard output not a terminal the help is click's plain help,
    each paragraph and each option's help on one whole line (not rich panels re-wrapped at 80
    columns); the console script, as a user runs it, output to a pipe."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("specrag-batch", path=str(Path(sys.executable).parent)) or "specrag-batch"
    res = subprocess.run([exe, "run", "--help"], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "COLUMNS": "40"})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert not any(ch in res.stdout for ch in "│╭╰"), res.stdout[:400]  # no panels
    exit_codes = [ln for ln in lines if "Exit codes:" in ln]
    assert len(exit_codes) == 1 and "A second signal ends the process at once." in exit_codes[0]
    tau = [ln for ln in lines if ln.lstrip().startswith("--tau-min")]
    assert len(tau) == 1 and tau[0].rstrip().endswith("A per-task mapping is config-file only."), tau
    assert "<bool>" not in res.stdout and "--overwrite  " in res.stdout


def test_a_run_prints_prefects_info_records_only_to_its_api_not_the_console():
    """A successful ``specrag-batch run`` prints no ``INFO:prefect`` lines on stderr
    (docs/operations.md, "Quiet logs"). Prefect's own logging config sets its loggers to INFO
    (for the flow-run logs its API keeps) and they propagate to the console handler ``cli.main``
    installs: that handler filters at ``SPECRAG_LOG_LEVEL``, while the logger still hands INFO
    records to its own handlers."""
    import subprocess
    import sys

    code = (
        "import logging\n"
        "from specrag_batch.cli import commands as cli\n"
        "got = []\n"
        "class Api(logging.Handler):\n"
        "    def emit(self, record): got.append(record.getMessage())\n"
        "def app(**kw):\n"
        "    log = logging.getLogger('prefect.flow_runs')\n"
        "    logging.getLogger('prefect').setLevel('INFO')  # as Prefect's logging config sets it\n"
        "    log.addHandler(Api())\n"
        "    log.info('INFO-LINE'); log.warning('WARN-LINE')\n"
        "    print('API:' + ','.join(got))\n"
        "cli.app = app\n"
        "cli.main()\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "WARN-LINE" in r.stderr and "INFO-LINE" not in r.stderr
    assert "API:INFO-LINE,WARN-LINE" in r.stdout
