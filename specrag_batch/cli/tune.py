"""``specrag-batch tune``: which mode pays per task on the user's own labelled rows. Each candidate
(the config's Speculative RAG and Standard RAG, a larger drafter where ``--drafter`` names one)
runs through the ordinary resumable run over the sample split into shards per task; then
:mod:`specrag_batch.run.tuning` compares, decides by the rule it printed first, and writes the
config, the report page and its picture. Registered on the app by :mod:`specrag_batch.cli.commands`."""

from __future__ import annotations

import io
import json
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from .options import CONFIG_HELP, config_location, exit_codes, fail
from .console import console

FILES = {"config": "tuned.yaml", "report": "tune.md", "plot": "tune.png", "figures": "tune.json"}
"""What ``tune`` writes under ``--out`` (besides ``sample/`` and ``runs/<candidate>/``)."""


def _write_sample(out: str, shards: dict) -> str:
    """Write the sample's shards under ``<out>/sample/``, keeping a file already there with the
    same bytes (a re-run resumes: the runs' input fingerprints stay the same); returns the prefix.

    Raises:
        ValueError: ``<out>/sample/`` holds another sample's shard (another sample in the
            same ``--out``: its runs would be refused or mixed)."""
    import pyarrow.parquet as pq

    from ..core import storage

    prefix = storage.join(out, "sample")
    existing = {f.rsplit("/", 1)[-1] for f in storage.list_files(prefix) if f.endswith(".parquet")} \
        if storage.exists(prefix) else set()
    if existing - set(shards):
        raise ValueError(f"--out {out}: sample/ holds shards of another sample ({sorted(existing - set(shards))[0]}); "
                         "give another --out")
    for name, table in shards.items():
        buf = io.BytesIO()
        pq.write_table(table, buf)
        uri = storage.join(prefix, name)
        if name in existing and storage.read_bytes(uri) == buf.getvalue():
            continue
        if name in existing:
            raise ValueError(f"--out {out}: sample/{name} holds other rows (another sample); give another --out")
        storage.write_bytes_atomic(uri, buf.getvalue())
    return prefix


def _read_sample(sample: str):
    """The sample: one Parquet file, or every ``.parquet`` file under a directory or prefix (in
    name order, e.g. ``samples/demo``), as one table.

    Raises:
        ValueError: one line naming the sample: missing, unreadable, no ``.parquet`` file, or
            files whose columns differ."""
    import pyarrow as pa

    from ..core import storage

    try:
        if storage.exists(sample) and not sample.endswith(".parquet"):
            files = sorted(f for f in storage.list_files(sample) if f.endswith(".parquet"))
            if not files:
                raise ValueError(f"{sample}: no .parquet file; give the labelled sample (a Parquet file or a directory of them)")
            return pa.concat_tables([storage.read_parquet(f) for f in files], promote_options="permissive")
        return storage.read_parquet(sample)
    except (OSError, pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise ValueError(f"{sample}: cannot be read as the labelled sample: {e}") from None


def _candidates(cfg, drafter: str | None) -> dict:
    """name -> RunConfig: ``speculative`` (the config's, mode speculative), ``speculative-<drafter>``
    with ``--drafter``, and ``standard`` (mode standard)."""
    base = cfg.model_dump(mode="json")
    out = {"speculative": {**base, "mode": "speculative"}}
    if drafter:
        out[f"speculative-{drafter.rstrip('/').rsplit('/', 1)[-1]}"] = {
            **base, "mode": "speculative", "drafter": {**base["drafter"], "model": drafter}}
    out["standard"] = {**base, "mode": "standard", "selection": {**base["selection"], "fallback": "none"}}
    return out


def _run_candidate(name: str, sample: str, out: str, data: dict) -> dict:
    """The ordinary resumable run of one candidate into ``<out>/runs/<name>``: its rows and shards.

    Raises:
        RuntimeError: a shard of the candidate failed (one line: the candidate, the first error)."""
    from ..core import storage
    from ..run.orchestration import run_batch

    m = run_batch(sample, storage.join(out, "runs", name), config=data)
    failed = [s for s in m["shards"] if s.get("status") != "ok"]
    if failed:
        raise RuntimeError(f"candidate {name} failed: {len(failed)} shard(s), first {failed[0].get('input')}: "
                           f"{failed[0].get('error')}; nothing decided (see {m.get('manifest_uri', out)})")
    rows = [r for s in m["shards"]
            for r in storage.read_parquet(s["output"]).select(["query_id", "task", "correct", "error"]).to_pylist()]
    return {"rows": rows, "shards": m["shards"]}


def tune(
    sample: str = typer.Argument(..., help="Labelled sample: a Parquet file (or a directory of them) of your "
                                 "own rows (input schema plus gold), local or a storage URI."),
    out: str = typer.Option(..., "--out", "-o", help="Directory or prefix for the runs (runs/<candidate>/), "
                            "tuned.yaml, tune.md, tune.png, tune.json; re-running resumes."),
    config: Optional[str] = typer.Option(None, "--config", "-c", callback=config_location,
                                         metavar="<file or URI>", help=CONFIG_HELP + "; the candidates are its "
                                         "Speculative RAG and Standard RAG."),
    drafter: Optional[str] = typer.Option(None, "--drafter", help="A larger drafter (packaged name, local "
                                          "path or hub id): a third candidate, Speculative RAG with it."),
    margin: float = typer.Option(2.0, "--margin", min=0.0, max=100.0, help="Accuracy points Speculative RAG "
                                 "may lose against Standard RAG (the lower end of its 95% interval)."),
    min_rows: int = typer.Option(10, "--min-rows", min=2, help="Least rows with gold per task."),
    json_out: bool = typer.Option(False, "--json", help="Print the figures and the choice as JSON."),
) -> None:
    """Choose the mode per task on your own labelled rows: run the candidates, compare each with
    Standard RAG per task (accuracy with a paired bootstrap 95% interval, McNemar's exact p,
    seconds per row and their ratio), decide by the rule printed first, write a config for nightly.

    Exit codes: 0 = decided and written; 1 = a candidate's run failed; 2 = refused before any
    run (no gold, one task only, a task under --min-rows, a bad config, flag or model)."""
    from ..core import storage
    from ..run import tuning
    from ..config import RunConfig, read_run_config
    from ..engines.models import ModelNameError, check_config_models

    with exit_codes(fail):
        cfg = read_run_config(config)
        cands = _candidates(cfg, drafter)
        for name, data in cands.items():  # every model of every candidate, before anything runs
            try:
                check_config_models(RunConfig.model_validate(data))
            except ModelNameError as e:
                raise ModelNameError(f"--drafter: {e}" if name.startswith("speculative-") else str(e)) from None
        table = _read_sample(sample)
        counts = tuning.check_sample(table, sample, cfg.task, min_rows)
        rule = tuning.rule_text(margin, drafter)
        console.print(Text(rule), soft_wrap=True)
        console.print(Text("rows with gold: " + ", ".join(f"{t} {n}" for t, n in counts.items())), soft_wrap=True)
        prefix = _write_sample(out, tuning.split_sample(table, cfg.task))
        results = {name: _run_candidate(name, prefix, out, data) for name, data in cands.items()}
        figures = tuning.compare(results, list(counts))
        spec = [c for c in cands if c != tuning.BASELINE]
        decision = tuning.decide(figures, margin, spec)
        base = _config_mapping(config)
        default = cfg.mode if isinstance(cfg.mode, str) else "speculative"
        written = tuning.tuned_config(base, decision, drafter, default)
        _write_outputs(out, sample, rule, figures, decision, written)
    _print(figures, decision, out, json_out)


def _config_mapping(config: str | None) -> dict | None:
    """The keys of the user's config file (YAML mapping), None without one."""
    import yaml

    from ..core import storage

    return yaml.safe_load(storage.read_bytes(config)) if config else None


def _write_outputs(out: str, sample: str, rule: str, figures: dict, decision: dict, written: dict) -> None:
    """tuned.yaml (checked to load as a run config), tune.md, tune.png, tune.json under ``out``."""
    import yaml

    from ..core import storage
    from ..run import tuning
    from ..config import RunConfig

    RunConfig.model_validate(written)  # what nightly will read: refuse to write one it cannot
    head = "".join(f"# {line}\n" for line in [f"written by specrag-batch tune on {sample}", rule])
    storage.write_bytes_atomic(storage.join(out, FILES["config"]),
                               (head + yaml.safe_dump(written, sort_keys=False)).encode())
    storage.write_bytes_atomic(storage.join(out, FILES["plot"]), tuning.plot(figures))
    md = tuning.markdown(sample, rule, figures, decision, FILES["config"], FILES["plot"])
    storage.write_bytes_atomic(storage.join(out, FILES["report"]), md.encode())
    storage.write_bytes_atomic(storage.join(out, FILES["figures"]), json.dumps(
        {"rule": rule, "figures": figures, "decision": decision}, indent=2, default=str).encode())


def _print(figures: dict, decision: dict, out: str, json_out: bool) -> None:
    from ..core import storage
    from ..run import tuning

    if json_out:
        print(json.dumps({"figures": figures, "decision": decision}, indent=2, default=str))
        return
    t = Table(title="candidates per task (vs Standard RAG: paired over the same rows)")
    for col in tuning.HEADER:
        t.add_column(col)
    for row in tuning.table_rows(figures):
        t.add_row(*row)
    console.print(t)
    for task, mode in decision["modes"].items():
        console.print(Text(f"{task}: {mode} ({decision['chosen'][task]})"), soft_wrap=True)
    for line in tuning.too_small_lines(decision, figures):
        console.print(Text(line), soft_wrap=True)
    for key in ("config", "report"):
        console.print(Text(f"{key}: {storage.join(out, FILES[key])}"), soft_wrap=True)
