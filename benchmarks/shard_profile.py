"""Where the per-shard overhead of a run goes (issue 51 item 5): py-spy samples of the same 800
rows run as 400 shards of 2 rows and as 8 shards of 100 (the layouts of ``shard_overhead.py``),
attributed by stack to Prefect's API server (its SQLite writes, task-run recorder, events),
Prefect's client, and the shard's own work (reading, writing, markers, the rows' pipeline).

    python benchmarks/shard_overhead.py --repeats 0 --work W          # (or any two layout dirs)
    py-spy record -r 50 --format raw --subprocesses -o p400.txt -- \\
        python -m tests.fake_engine_cli run -i W/in-400x2 -o W/o400 -c W/config.yaml
    py-spy record ... -o p8.txt -- ... -i W/in-8x100 ...
    python benchmarks/shard_profile.py p400.txt p8.txt

Prints, per category, the samples of each run and the thread-milliseconds per extra shard
((samples(400 x 2) - samples(8 x 100)) / rate / 392). Samples of threads waiting (a condition,
a queue, a selector, a sleep) are counted apart. On shared cores a runnable thread waiting for a
core is sampled as active, so the figures are shares, not CPU seconds.
"""

from __future__ import annotations

import argparse
import collections

WAITS = ("Condition.wait", "Queue.get", "EpollSelector.select", "select (selectors", "Event.wait",
         "_wait_for_tstate_lock")


def category(frames: list[str]) -> str:
    """The category of one sampled stack (frames outermost first; frame 0 is the process)."""
    s = ";".join(frames)
    if len(frames) > 1 and "uvicorn" in frames[1]:  # Prefect's API server, a child process
        if "task_run_recorder" in s:
            return "Prefect server: task-run recorder (SQLite)"
        if "sqlalchemy" in s or "aiosqlite" in s:
            return "Prefect server: other SQLite writes and reads"
        if "_find_and_load" in s:
            return "Prefect server: imports"
        return "Prefect server: API, events"
    if "_find_and_load" in s:
        return "client: imports"
    if "process_shard_task (specrag_batch/run/orchestration.py" in s:
        if "_write_output" in s:
            return "shard: writing its output"
        if "process_rows (specrag_batch/run/pipeline.py" in s:
            return "shard: the rows' pipeline"
        if "process_with_reuse" in s:
            return "shard: reuse and compute, other"
        if "_read" in s or "read_table" in s:
            return "shard: reading its input"
        return "shard: other (done marker, manifest entry, guard)"
    if "run_task_sync" in s or "task_engine" in s:
        return "Prefect client: task engine outside the shard function"
    if "prefect" in s:
        return "Prefect client: other (events, API client, flow)"
    return "client: other"


def load(path: str) -> collections.Counter:
    """Samples per category of a py-spy ``--format raw`` file."""
    out: collections.Counter = collections.Counter()
    for line in open(path, encoding="utf-8"):
        stack, _, n = line.rstrip().rpartition(" ")
        frames = stack.split(";")
        waiting = any(w in frames[-1] for w in WAITS) or frames[-1].startswith("sleep")
        out["(waiting)" if waiting else category(frames)] += int(n)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("many", help="py-spy raw samples of the 400 x 2 run")
    ap.add_argument("few", help="py-spy raw samples of the 8 x 100 run")
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--extra-shards", type=int, default=392)
    args = ap.parse_args(argv)
    a, b = load(args.many), load(args.few)
    per = 1000 / args.rate / args.extra_shards
    active = sum(v for k, v in a.items() if k != "(waiting)") - sum(v for k, v in b.items() if k != "(waiting)")
    print(f"active thread-ms per extra shard: {active * per:.0f}")
    for c in sorted(set(a) | set(b), key=lambda c: -(a[c] - b[c])):
        print(f"{c:58s} {a[c]:7d} {b[c]:7d}  {(a[c] - b[c]) * per:7.1f} ms per shard")


if __name__ == "__main__":
    main()
