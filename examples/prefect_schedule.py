"""The nightly flow as a Prefect deployment on a local schedule: this process serves it (no work
pool, no worker) and Prefect starts a run at 02:30 every night in the given time zone, over
yesterday's ``date=YYYY-MM-DD`` partition of ``--input-root``. The same flow and parameters as
``prefect.yaml``'s deployments, which run on work pools instead (docs/deploying.md).

Run from the repository root, with a Prefect server or Prefect Cloud in ``PREFECT_API_URL``
(``prefect server start`` in another shell for a local one)::

    python examples/prefect_schedule.py --input-root s3://bucket/queries --output-root s3://bucket/answers

It serves until stopped (Ctrl-C). ``prefect deployment run 'specrag-nightly/nightly-local'``
starts a run now.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from prefect.flows import load_flow_from_entrypoint
from prefect.schedules import Cron

ROOT = Path(__file__).resolve().parents[1]
ENTRYPOINT = "flows/nightly.py:nightly_flow"  # prefect.yaml's entrypoint of the nightly flow


def build_deployment(input_root: str, output_root: str, *, config_path: str = "configs/demo.yaml",
                     cron: str = "30 2 * * *", timezone: str = "UTC", name: str = "nightly-local"):
    """The nightly flow's deployment (a ``prefect.deployments.runner.RunnerDeployment``), not yet
    served: ``cron`` in ``timezone``; each run answers the partition of the night before.

    Raises:
        ValueError: ``cron`` is not a cron expression (Prefect's check)."""
    flow = load_flow_from_entrypoint(str(ROOT / ENTRYPOINT))
    return flow.to_deployment(
        name=name,
        schedules=[Cron(cron, timezone=timezone)],
        parameters={"input_root": input_root, "output_root": output_root, "lag_days": 1,
                    "timezone": timezone, "config_path": config_path},
        tags=["specrag", "nightly", "local"],
        description="Nightly Speculative RAG over yesterday's date partition, served by this process.",
        concurrency_limit=1,  # a night still running when the next starts: the next waits
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input-root", required=True, help="prefix holding date=YYYY-MM-DD/ partitions of query shards")
    ap.add_argument("--output-root", required=True, help="prefix the answers of each night go under")
    ap.add_argument("--config", default="configs/demo.yaml", help="run config (YAML path)")
    ap.add_argument("--cron", default="30 2 * * *")
    ap.add_argument("--timezone", default="UTC", help="IANA time zone of the schedule and of 'yesterday'")
    a = ap.parse_args(argv)
    from prefect import serve

    serve(build_deployment(a.input_root, a.output_root, config_path=a.config, cron=a.cron, timezone=a.timezone))


if __name__ == "__main__":
    main()
