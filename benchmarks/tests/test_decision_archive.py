"""The decision benchmark's cell archive (benchmarks/cell_archive.py, wired in
benchmarks/decision.py): finished shards archived in a git-kept archive directory (one
deterministic ``<machine id>.tar.xz`` per machine, entries staged while a cell computes) and
restored into an empty runs directory (a new session's machine) through the product's resume
API, so that the product skips them and the analysis is the same; nothing restored for another
config or other input rows; entries and other machines' archives never rewritten; and no time
ratio between cells that ran on different machines (decision_stats). Cells are real product
runs (FakeEngine verifier, real tokenizer, the flow's own planning and shard path:
``product_runs.product_run``) or run trees written with the product's writers
(``product_runs``). No vLLM."""

from __future__ import annotations

import fnmatch
import io
import json
import shutil

import numpy as np
import pyarrow.parquet as pq
import pytest

import cell_archive
import decision
import decision_stats as ds

from .conftest import ROOT, small_config
from .product_runs import input_rows, product_run, write_cell, write_inputs

MACHINE_A = {"id": "aaaaaaaaaaaa", "cpu_model": "CPU A", "cpus": 2, "platform": "Linux-A", "machine_id": "a",
             "boot_id": "boot-a"}
MACHINE_B = {**MACHINE_A, "id": "bbbbbbbbbbbb", "cpu_model": "CPU B", "boot_id": "boot-b"}


def on_machine(monkeypatch, machine: dict) -> None:
    """Make this process believe it runs on ``machine`` (shards finished now are its)."""
    monkeypatch.setattr(cell_archive, "this_machine", lambda: dict(machine))


def members(archive, pattern: str) -> list[str]:
    """The archive directory's entry files (packed or staged) whose member path matches the
    shell ``pattern`` (``*`` crosses ``/``), by name."""
    return sorted(n for n in cell_archive.entries(archive) if fnmatch.fnmatchcase(n, pattern))


def member(archive, pattern: str) -> str:
    """The first entry file matching ``pattern`` (:func:`members`)."""
    return members(archive, pattern)[0]


def rewrite_members(archive, changed: dict[str, bytes]) -> None:
    """Replace entry files in the archives that hold them (a tampered or edited archive)."""
    for f in cell_archive.archive_files(archive):
        old = cell_archive.read_archive(f)
        if mine := {k: v for k, v in changed.items() if k in old}:
            cell_archive.write_archive(f, {**old, **mine})


def archive_names(archive) -> list[str]:
    return [f.name for f in cell_archive.archive_files(archive)]


def cell(runs, arm, config, dataset="popqa", inp="input") -> decision.Cell:
    return decision.Cell(dataset, arm, config, runs / dataset / inp, runs / dataset / arm)


def rich_fields(seed: int, fallback: bool = False):
    """Output fields of realistic speculative rows: 5 verified drafts each with draft and
    verifier scores, log P(Yes)/P(No), token counts, doc ids; row scores those of the argmax
    draft; a fast-path row, an error row, low-confidence rows (with the fallback columns when
    ``fallback``)."""
    rng = np.random.default_rng(seed)

    def fields(i, r):
        answers = ["a", "b", "a", "c", "b"]
        drafts = []
        for j, a in enumerate(answers):
            sd, sc = float(-rng.uniform(1, 20)), float(-rng.uniform(1, 30))
            ly, ln = float(np.log(rng.uniform(0.05, 0.95))), float(np.log(rng.uniform(0.05, 0.95)))
            drafts.append({"doc_ids": [f"{r['query_id']}:{j}"], "answer": a, "written_answer": a,
                           "rationale": f"because passage {j} of {r['query_id']} says {a}", "flags": [],
                           "score": sd + sc + ly, "score_draft": sd, "score_self_consistency": sc,
                           "score_self_reflection": ly, "logprob_yes": ly, "logprob_no": ln,
                           "tokens_draft": int(rng.integers(20, 90)), "tokens_answer": int(rng.integers(1, 6)),
                           "tokens_rationale": int(rng.integers(10, 60))})
        best = max(drafts, key=lambda d: d["score"])
        out = {"answer": best["answer"], "rationale": best["rationale"], "score": best["score"],
               "score_draft": best["score_draft"], "score_self_consistency": best["score_self_consistency"],
               "score_self_reflection": best["score_self_reflection"], "drafts": drafts,
               "correct": best["answer"] == "a", "fast_path": False, "low_confidence": best["score"] < -25,
               "flags": [], "exact_match": best["answer"] == "a", "f1": 0.5}
        if i == 3:
            out.update(fast_path=True, low_confidence=False)
        if i == 5:
            out.update(answer=None, error="row 5: field 'documents': no documents", error_reason="no_documents",
                       correct=None, drafts=None, score=None)
        if fallback and out["low_confidence"] and i != 5:
            out.update(answer_source="fallback_standard", first_answer=best["answer"],
                       first_correct=best["answer"] == "a", answer="a", correct=True)
        return out
    return fields


def plan(runs, base, tau_min=None) -> list[decision.Cell]:
    return decision.plan_cells(["popqa"], decision.expand_arms("main,fallback"), base, runs, tuned_drafter=None,
                               ablation_datasets=[], ablation_input={}, tau_min=tau_min)[0]


def rich_runs(runs, base) -> list[decision.Cell]:
    """A runs tree of popqa with finished standard, speculative, tuning and fallback_standard
    cells (20 reported rows, 12 tuning rows, shards of 5), as the benchmark plans them:
    ``fallback_standard`` with the τ_min its tuning cell gives (``decision.calibrate_all``)."""
    write_inputs(runs / "popqa" / "input", input_rows(20, prefix="r"), 5)
    write_inputs(runs / "popqa" / "input-tuning", input_rows(12, prefix="t"), 5)
    use = {"m": (900, 120, 3)}
    seconds = {"standard": 8.0, "speculative": 12.0, "tuning": 11.0, "fallback_standard": 14.0}
    first = plan(runs, base)
    assert [c.arm for c in first] == ["standard", "speculative", "tuning"]
    for seed, c in enumerate(first):
        write_cell(c.input_dir, c.output_dir, c.config, [use] * (4 if c.arm != "tuning" else 3),
                   seconds=seconds[c.arm], rounds=1 + seed % 2, fields=rich_fields(seed))
    cells = plan(runs, base, {d: x["tau_min"] for d, x in decision.calibrate_all(first).items()})
    fb = cells[-1]
    assert fb.arm == "fallback_standard"
    write_cell(fb.input_dir, fb.output_dir, fb.config, [use] * 4, seconds=seconds[fb.arm], rounds=2,
               fields=rich_fields(3, fallback=True))
    return cells


def analyse(cells, base, out):
    res = decision.analyse(cells, {"popqa": input_rows(20, prefix="r")}, base, out,
                           {"config_path": "c.yaml", "rows_per_dataset": {"popqa": 20}}, 200,
                           decision.calibrate_all(cells), {"popqa": input_rows(12, prefix="t")})
    return res, (out / "results.json").read_text(), (out / "tables.md").read_text()


def fresh(runs_from, runs_to, base) -> list[decision.Cell]:
    """The same cells planned over a new, empty runs directory (a new session's machine): the
    input shards written again (new files, new mtimes), no output."""
    write_inputs(runs_to / "popqa" / "input", input_rows(20, prefix="r"), 5)
    write_inputs(runs_to / "popqa" / "input-tuning", input_rows(12, prefix="t"), 5)
    return plan(runs_to, base, {d: x["tau_min"] for d, x in decision.calibrate_all(plan(runs_from, base)).items()})


@pytest.fixture
def base():
    from specrag_batch.config import load_config

    return load_config(ROOT / "configs" / "test-smollm2.yaml")


# --- a real product run, archived and restored -----------------------------------------

def test_a_product_run_restored_from_the_archive_is_done_for_the_product(tmp_path):
    from specrag_batch.run import resume
    from specrag_batch.core import storage
    from specrag_batch.run.planning import plan_shards, shard_output_uri

    from .fakes import FakeEngine

    CFG = small_config(mode="standard")

    def run(inp, out, verifier):
        return product_run(inp, out, CFG, verifier)

    engine = FakeEngine()
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    c_old = cell(old, "standard", CFG)
    write_inputs(c_old.input_dir, input_rows(7, prefix="q", docs=3), 3)
    assert set(run(c_old.input_dir, c_old.output_dir, engine).values()) == {("ok", None)}
    assert cell_archive.archive_cell(c_old, archive) == {"added": 3, "present": 0, "failed": []}

    c_new = cell(new, "standard", CFG)
    write_inputs(c_new.input_dir, input_rows(7, prefix="q", docs=3), 3)
    got = cell_archive.restore_cell(c_new, archive)
    assert got == {"restored": 3, "not_restored": [], "refused": None}
    inp, out = str(c_new.input_dir), str(c_new.output_dir)
    for s in plan_shards(inp)[0]:  # the product's resume accepts every restored marker
        o = shard_output_uri(inp, s, out)
        m = resume.completed_shard(out, o, CFG.config_hash(), resume.input_fingerprint(s))
        assert m is not None and m["result"]["status"] == "ok" and m["result"]["input"] == s
        old_o = shard_output_uri(str(c_old.input_dir), s.replace(str(new), str(old)), str(c_old.output_dir))
        kept = list(cell_archive.KEPT_COLUMNS)
        restored, original = storage.read_parquet(o), storage.read_parquet(old_o)
        assert restored.schema.names == original.schema.names  # the whole output schema
        assert restored.select(kept).to_pylist() == [
            {**r, "drafts": r["drafts"] and [{**d, "doc_ids": None} for d in r["drafts"]]}
            for r in original.select(kept).to_pylist()]
        assert any(r["drafts"] for r in original.to_pylist())
    before = len(engine.calls)
    assert run(c_new.input_dir, c_new.output_dir, engine) == {f"part-000{i}.parquet": ("done", None) for i in range(3)}
    assert len(engine.calls) == before  # nothing computed again

    assert archive_names(archive) == [f"{cell_archive.this_machine()['id']}.tar.xz"]  # this machine's
    assert cell_archive._staged(archive) == {}  # all packed
    entry = json.loads(cell_archive.entries(archive)[member(archive, "popqa/standard/*/part-0000.*.json")])
    assert entry["config_hash"] == CFG.config_hash() and entry["result"]["status"] == "ok"
    assert entry["input_sha256"] == cell_archive.table_sha256(pq.read_table(c_new.input_dir / "part-0000.parquet"))
    assert set(entry["machine"]) >= {"id", "cpu_model", "cpus", "platform", "machine_id", "boot_id", "date"}
    assert entry["machine"]["cpus"] and entry["machine"]["id"] and entry["machine"]["date"]


# --- the analysis is the same over restored cells --------------------------------------

def test_restored_cells_give_the_same_analysis(base, tmp_path):
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    cells = rich_runs(old, base)
    want = analyse(cells, base, tmp_path / "out-old")
    for c in cells:
        assert cell_archive.archive_cell(c, archive)["added"] == len(list(c.input_dir.glob("*.parquet")))
    new_cells = fresh(old, new, base)
    for c in new_cells:
        assert cell_archive.restore_cell(c, archive)["restored"] == len(list(c.input_dir.glob("*.parquet")))
        assert all(d is not None for _, _, d in decision.cell_shards(c))
    got = analyse(new_cells, base, tmp_path / "out-new")
    assert got[1] == want[1] and got[2] == want[2]  # results.json and tables.md byte for byte
    # the figures under test are there: post-hoc re-selection, fallback, calibration
    res = want[0]
    assert res["calibration"]["popqa"]["tau_min"] and res["datasets"]["popqa"]["fallback"]["fallback_standard"]["n_flagged"]
    assert res["self_reflection"]["tuning"]["datasets"]["popqa"]["n"] > 0
    assert res["datasets"]["popqa"]["comparisons"]["speculative - standard"]["seconds"]["n"] == 4
    # and the tuning cell's τ_min, read from restored rows, is the same
    assert decision.calibrate_all(new_cells) == decision.calibrate_all(cells)
    # adaptive drafting's rounds (benchmarks/cost_model.py) survive too
    rounds = [[r["draft_rounds"] for r in decision.load_cell(c)["rows"]] for c in (*cells, *new_cells)]
    assert rounds[:4] == rounds[4:] and {x for r in rounds for x in r} == {1, 2}


# --- what is not restored --------------------------------------------------------------

def test_a_changed_input_shard_or_config_is_not_restored(base, tmp_path):
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    for c in rich_runs(old, base):
        cell_archive.archive_cell(c, archive)
    rows = input_rows(20, prefix="r")
    rows[7] = {**rows[7], "query": "another question?"}  # shard part-0001 changed, the others not
    write_inputs(new / "popqa" / "input", rows, 5)
    spec = cell(new, "speculative", decision.arm_config(base, "speculative"))
    got = cell_archive.restore_cell(spec, archive)
    assert got["restored"] == 3 and got["not_restored"] == [("part-0001.parquet", "archived for other input rows")]
    assert [d is not None for _, _, d in decision.cell_shards(spec)] == [True, False, True, True]

    m3 = cell(new, "speculative", decision.arm_config(base, "m3"))  # another config into the arm's directory
    shutil.rmtree(m3.output_dir)
    got = cell_archive.restore_cell(m3, archive)
    assert got["restored"] == 0 and len(got["not_restored"]) == 4
    assert all(why.startswith("archived under other config hash " + spec.config.config_hash())
               for _, why in got["not_restored"])
    assert not m3.output_dir.exists()
    line = cell_archive.restore_line(m3, got, archive)
    assert line.count("\n") == 0 and "0 shard(s) restored" in line and "part-0003.parquet" in line
    assert "not restored (recomputed): " in line
    analysed = cell_archive.restore_line(m3, got, archive, recompute=False)  # --analyse-only computes nothing
    assert "not restored (left out of the analysis): " in analysed and "recomputed" not in analysed

    # an output directory holding another config's results: nothing restored (run_batch refuses it too)
    spec_dir_other = cell(new, "speculative", decision.arm_config(base, "m3"))
    spec_dir_other.output_dir = spec.output_dir
    from specrag_batch.run import resume
    from specrag_batch.core import storage
    resume.claim_output(storage.normalize_uri(str(spec.output_dir)), storage.normalize_uri(str(spec.input_dir)),
                        spec.config.config_hash(), {}, "r")
    assert cell_archive.restore_cell(spec_dir_other, archive)["refused"]

    # a tampered archived Parquet is not restored
    std = cell(new, "standard", decision.arm_config(base, "standard"))
    victim = member(archive, "popqa/standard/*/part-0002.*.parquet")
    rewrite_members(archive, {victim: cell_archive.entries(archive)[victim] + b"x"})
    got = cell_archive.restore_cell(std, archive)
    assert got["restored"] == 2 and got["not_restored"] == [
        ("part-0001.parquet", "archived for other input rows"),
        ("part-0002.parquet", "archived Parquet does not match its recorded sha256")]


def rewrite_entry(archive, parquet: str, data: bytes) -> None:
    """Replace an archived entry's Parquet (member ``parquet``) by ``data`` and record its
    sha256, so the entry passes its checks (``cell_archive._entry``) and fails only when read or
    restored."""
    import hashlib

    js = parquet.removesuffix(".parquet") + ".json"
    entry = {**json.loads(cell_archive.entries(archive)[js]), "output_sha256": hashlib.sha256(data).hexdigest()}
    rewrite_members(archive, {parquet: data, js: json.dumps(entry).encode()})


def test_a_shard_that_fails_to_archive_or_restore_is_listed_not_raised(base, tmp_path, capsys):
    """One unreadable output shard, one corrupt archived entry and one whose column type no
    longer matches ``OUTPUT_SCHEMA`` (a schema change since it was archived): each is listed
    with why (restored ones: recomputed), the other shards are archived and restored, and
    neither ``sync_archive`` nor ``--analyse-only``'s planning raises."""
    import pyarrow as pa

    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    cells = {c.arm: c for c in rich_runs(old, base)}
    (cells["standard"].output_dir / "part-0001.parquet").write_bytes(b"not parquet")  # its marker stays valid
    decision.sync_archive(list(cells.values()), archive)
    out = capsys.readouterr().out
    assert "popqa/standard: 3 finished shard(s) added to the archive" in out
    line = next(x for x in out.splitlines() if "not archived" in x)
    assert line.startswith("[decision] popqa/standard: 1 finished shard(s) not archived")
    assert "part-0001.parquet: " in line
    assert cell_archive.archive_cell(cells["standard"], archive)["failed"][0][0] == "part-0001.parquet"

    rewrite_entry(archive, member(archive, "popqa/speculative/*/part-0000.*.parquet"), b"PAR1 corrupt PAR1")
    typed = member(archive, "popqa/speculative/*/part-0002.*.parquet")
    t = pq.read_table(io.BytesIO(cell_archive.entries(archive)[typed]))
    t = t.set_column(t.schema.get_field_index("score"), "score", pa.array(["high"] * t.num_rows))  # score now a string
    buf = io.BytesIO()
    pq.write_table(t, buf)
    rewrite_entry(archive, typed, buf.getvalue())
    new_cells = fresh(old, new, base)
    decision.sync_archive(new_cells, archive)
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("[decision] popqa/speculative:"))
    assert "2 shard(s) restored" in line and "not restored (recomputed): part-0000.parquet: " in line
    assert "part-0002.parquet: Arrow" in line
    spec_cell = next(c for c in new_cells if c.arm == "speculative")
    assert [d is not None for _, _, d in decision.cell_shards(spec_cell)] == [False, True, False, True]
    assert not (spec_cell.output_dir / "part-0002.parquet").exists()  # nothing half-restored


def test_a_shard_name_is_not_a_glob_pattern(tmp_path):
    """``[1]`` in a shard's name is literal when the archive is asked why it has no entry."""
    from types import SimpleNamespace

    archive = tmp_path / "archive"
    c = SimpleNamespace(dataset="popqa", arm="standard")
    cell_archive.write_archive(cell_archive.archive_path(archive, "m"), {
        "popqa/standard/hash_other/part[1].0123456789abcdef.json": b"{}",
        "popqa/standard/hash_decoy/part1.0123456789abcdef.json": b"{}"})
    have = cell_archive.entries(archive)
    assert cell_archive._why_absent(have, c, "hash_mine", "out/part[1].parquet") == \
        "archived under other config hash hash_other"
    assert cell_archive._why_absent(have, c, "hash_mine", "out/part1.parquet") == \
        "archived under other config hash hash_decoy"


def test_input_content_not_file_version_addresses_an_entry(tmp_path):
    """The same rows written again (new mtime, possibly other writer bytes) hash the same; a
    changed value does not."""
    import pyarrow as pa

    t = pa.Table.from_pylist(input_rows(3))
    pq.write_table(t, tmp_path / "a.parquet", compression="snappy")
    pq.write_table(t, tmp_path / "b.parquet", compression="zstd")
    assert (tmp_path / "a.parquet").read_bytes() != (tmp_path / "b.parquet").read_bytes()
    h = cell_archive.table_sha256(pq.read_table(tmp_path / "a.parquet"))
    assert h == cell_archive.table_sha256(pq.read_table(tmp_path / "b.parquet")) == cell_archive.table_sha256(t)
    changed = input_rows(3)
    changed[2]["documents"][1]["text"] = "passage one"
    assert cell_archive.table_sha256(pa.Table.from_pylist(changed, schema=t.schema)) != h


# --- archive files are written once ----------------------------------------------------

def test_archiving_again_rewrites_no_file(base, tmp_path):
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    cells = rich_runs(old, base)
    for c in cells:
        cell_archive.archive_cell(c, archive)

    def snapshot():
        return {p: (p.stat().st_mtime_ns, p.stat().st_ino, p.read_bytes()) for p in cell_archive.archive_files(archive)}
    first = snapshot()
    assert len(first) == 1 and len(cell_archive.entries(archive)) == 2 * (4 * 3 + 3)
    assert not list(archive.rglob(".*.tmp")) and cell_archive._staged(archive) == {}
    left = archive / "staging" / "popqa" / "speculative" / ".part-0001.x.parquet.tmp"  # a killed archiver's
    left.parent.mkdir(parents=True)
    left.write_bytes(b"half")
    for c in cells:  # again, over the same runs directory
        assert cell_archive.archive_cell(c, archive)["added"] == 0
    for c in fresh(old, new, base):  # and over restored shards (their markers are new files)
        cell_archive.restore_cell(c, archive)
        assert cell_archive.archive_cell(c, archive) == {"added": 0, "present": len(list(c.input_dir.glob("*.parquet"))),
                                                         "failed": []}
    assert snapshot() == first and not left.exists()


def test_an_archive_packs_deterministically_and_a_loose_tree_imports_byte_for_byte(base, tmp_path, monkeypatch,
                                                                                    capsys):
    """The same entries pack to the same bytes whatever order they come in (members by name,
    time 0, owner 0 without names, mode 0644), so an unchanged archive written again is the same
    file for git; a loose tree (the layout kept in git before) imports byte for byte, one archive
    per machine (``cell_archive.py import``), and ``list`` names them."""
    import os
    import tarfile

    archive = tmp_path / "archive"
    on_machine(monkeypatch, MACHINE_A)
    for c in rich_runs(tmp_path / "runs", base):
        cell_archive.archive_cell(c, archive)
    path = archive / f"{MACHINE_A['id']}.tar.xz"
    data, got = path.read_bytes(), cell_archive.read_archive(path)
    assert cell_archive.tar_xz_bytes(dict(reversed(list(got.items())))) == data
    with tarfile.open(path, "r:xz") as tar:
        infos = tar.getmembers()
    assert [i.name for i in infos] == sorted(got)
    assert {(i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode) for i in infos} == {(0, 0, 0, "", "", 0o644)}

    loose = tmp_path / "loose"
    for i, (name, blob) in enumerate(got.items()):
        f = loose / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(blob)
        os.utime(f, (1_000_000 + i, 1_000_000 + i))
    assert cell_archive.main(["--archive", str(tmp_path / "imported"), "import", str(loose)]) == 0
    assert (tmp_path / "imported" / path.name).read_bytes() == data
    assert f"{path.name}: {len(got) // 2} entries added" in capsys.readouterr().out
    assert cell_archive.main(["--archive", str(tmp_path / "imported"), "import", str(loose)]) == 0  # again
    assert "nothing to pack" in capsys.readouterr().out and (tmp_path / "imported" / path.name).read_bytes() == data
    assert cell_archive.main(["--archive", str(tmp_path / "imported"), "list"]) == 0
    assert f"{path.name}: {len(got) // 2} entries" in capsys.readouterr().out


def test_the_archive_is_small_and_zstd(base, tmp_path):
    cells = rich_runs(tmp_path / "runs", base)
    cell_archive.archive_cell(cells[1], tmp_path / "archive")
    archive = tmp_path / "archive"
    f = io.BytesIO(cell_archive.entries(archive)[member(archive, "popqa/speculative/*/part-0000.*.parquet")])
    meta = pq.ParquetFile(f).metadata
    assert meta.num_rows == 5 and meta.schema.to_arrow_schema().names == list(cell_archive.KEPT_COLUMNS)
    assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {"ZSTD"}
    kept = pq.read_table(f).column("drafts").type.value_type
    assert "doc_ids" not in [x.name for x in kept] and "rationale" in [x.name for x in kept]


# --- sync before cells run; the watcher while a cell computes --------------------------

def test_sync_archives_then_restores_once_per_cell_and_no_archive_does_nothing(base, tmp_path, capsys):
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    cells = rich_runs(old, base)
    tree = lambda: {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*")}  # noqa: E731
    before = tree()
    decision.sync_archive(cells, None)  # --no-archive: nothing written anywhere
    assert tree() == before and not archive.exists()
    decision.sync_archive(cells, archive)
    assert "4 finished shard(s) added to the archive" in capsys.readouterr().out
    new_cells, synced = fresh(old, new, base), set()
    decision.sync_archive(new_cells, archive, synced)
    out = capsys.readouterr().out.splitlines()
    assert [x.split(":")[0] for x in out] == [f"[decision] {c.name}" for c in new_cells]
    assert all("shard(s) restored from" in x for x in out)
    decision.sync_archive(new_cells, archive, synced)
    assert capsys.readouterr().out == ""


def test_the_watcher_archives_shards_as_they_finish(base, tmp_path):
    runs, archive = tmp_path / "runs", tmp_path / "archive"
    write_inputs(runs / "popqa" / "input", input_rows(10, prefix="r"), 5)
    c = cell(runs, "standard", decision.arm_config(base, "standard"))
    w = decision._ArchiveWatcher(c, archive, every=0.05)
    try:
        write_cell(c.input_dir, c.output_dir, c.config, [{"m": (1, 1, 1)}] * 2)
        import time

        deadline = time.time() + 10
        while time.time() < deadline and len(members(archive, "*.json")) < 2:
            time.sleep(0.05)
        assert len(members(archive, "*.json")) == 2  # before the cell ends: staged,
        assert archive_names(archive) == [] and len(cell_archive._staged(archive)) == 4  # not packed
    finally:
        w.stop()
    assert w.error is None
    assert len(archive_names(archive)) == 1 and cell_archive._staged(archive) == {}  # packed when it ends
    assert len(members(archive, "*.json")) == 2


def test_help_documents_no_archive(capsys):
    with pytest.raises(SystemExit):
        decision.main(["--help"])
    text = capsys.readouterr().out
    import re

    assert re.search(r"^  --no-archive +neither copy", text, re.M) and re.search(r"^  --archive ARCHIVE ", text, re.M)
    assert "``--no-archive`` turns all of this off" in text  # the description says what it turns off


# --- time ratios only on one machine ---------------------------------------------------

def test_no_time_ratio_between_cells_of_different_machines(base, tmp_path, monkeypatch):
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    cells = {c.arm: c for c in rich_runs(old, base)}
    for arm, c in cells.items():  # standard computed on machine A, the others on machine B
        on_machine(monkeypatch, MACHINE_A if arm == "standard" else MACHINE_B)
        cell_archive.archive_cell(c, archive)
    on_machine(monkeypatch, {**MACHINE_A, "id": "cccccccccccc"})  # the new session's machine
    new_cells = fresh(old, new, base)
    for c in new_cells:
        cell_archive.restore_cell(c, archive)
    res, results_json, tables = analyse(new_cells, base, tmp_path / "out")
    cmps = res["datasets"]["popqa"]["comparisons"]
    sec = cmps["speculative - standard"]["seconds"]
    assert sec["withheld"] == "n/a (different machines)" and sec["ratio"] is None
    assert (sec["machines_a"], sec["machines_b"]) == (["bbbbbbbbbbbb"], ["aaaaaaaaaaaa"])
    assert cmps["speculative - standard"]["tokens"]["n"] == 4  # tokens still compared
    assert cmps["speculative - standard"]["n"] == 20  # accuracy too
    assert res["pooled"]["comparisons"]["speculative - standard"]["seconds"]["withheld"]
    # same machine (B): the ratio stands
    assert cmps["fallback_standard - speculative"]["seconds"]["ratio"] == pytest.approx(14.0 / 12.0)
    assert res["cells_loaded"]["popqa"]["standard"]["machines"] == ["aaaaaaaaaaaa"]
    assert res["cells_loaded"]["popqa"]["speculative"]["machines"] == ["bbbbbbbbbbbb"]
    assert set(res["machines"]) == {"aaaaaaaaaaaa", "bbbbbbbbbbbb"} and res["machines"]["aaaaaaaaaaaa"]["cpu_model"] == "CPU A"
    assert "Faster? **not measured (different machines)**" in tables
    assert "n/a (different machines)" in tables.split("## Tables")[1].split("\n\n")[1]  # headline table
    assert "| popqa | standard | aaaaaaaaaaaa |" in tables and "| bbbbbbbbbbbb | CPU B | 2 |" in tables
    spec_std_line = next(x for x in tables.splitlines() if x.startswith("| popqa | 20 |"))
    assert "n/a (different machines)" in spec_std_line and "[" in spec_std_line.split("|")[3]


def test_time_ratio_over_the_shard_pairs_run_on_one_machine(base, tmp_path, monkeypatch):
    """Cells of the archive mix sessions: shards 0-1 of every cell ran on machine A, 2-3 on
    machine B, so no cell ran on one machine, yet every shard pair of speculative - standard
    did: its ratio stands over all 4 pairs. fallback_standard's part-0003 ran on machine C:
    that pair is left out and counted, the ratio and the added s/row are over the other 3."""
    old, new, archive = tmp_path / "old", tmp_path / "new", tmp_path / "archive"
    on_machine(monkeypatch, MACHINE_A)
    for c in rich_runs(old, base):
        cell_archive.archive_cell(c, archive)
    machine_c = {**MACHINE_A, "id": "cccccccccccc"}
    changed = {}
    for js in members(archive, "popqa/*/*/part-000[23].*.json"):
        entry = json.loads(cell_archive.entries(archive)[js])
        entry["machine"] = {**(machine_c if "fallback_standard" in js and "/part-0003" in js
                               else MACHINE_B), "date": "2026-12-01"}
        changed[js] = json.dumps(entry).encode()
    rewrite_members(archive, changed)
    on_machine(monkeypatch, {**MACHINE_A, "id": "dddddddddddd"})  # the new session's machine
    new_cells = fresh(old, new, base)
    for c in new_cells:
        assert cell_archive.restore_cell(c, archive)["not_restored"] == []
    res, _, tables = analyse(new_cells, base, tmp_path / "out")
    assert res["cells_loaded"]["popqa"]["standard"]["machines"] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    cmps = res["datasets"]["popqa"]["comparisons"]
    sec = cmps["speculative - standard"]["seconds"]
    assert "withheld" not in sec and "pairs_across_machines" not in sec
    assert sec["n"] == 4 and sec["ratio"] == pytest.approx(12.0 / 8.0)
    assert res["pooled"]["comparisons"]["speculative - standard"]["seconds"]["n"] == 4
    fb = cmps["fallback_standard - speculative"]["seconds"]
    assert fb["n"] == 3 and fb["pairs_across_machines"] == 1 and fb["ratio"] == pytest.approx(14.0 / 12.0)
    assert "(n = 3 shard pairs on one machine; 1 pairs across machines left out)" in tables
    cost = res["datasets"]["popqa"]["fallback"]["fallback_standard"]["cost"]
    assert cost["added_s_per_row"] == pytest.approx((14.0 - 12.0) / 5)
    assert cost["time"] == "over 3 shard pairs on one machine (15 rows); 1 pairs across machines left out"
    assert "| aaaaaaaaaaaa | CPU A |" in tables and "| cccccccccccc |" in tables  # the Machines table stays


def test_same_machine_rule():
    a, b = {"machines": ["m1"]}, {"machines": ["m1"]}
    assert ds.same_machine(a, b) is True
    assert ds.same_machine(a, {"machines": ["m2"]}) is False
    assert ds.same_machine({"machines": ["m1", "m2"]}, {"machines": ["m1", "m2"]}) is False  # spread: mixed
    assert ds.same_machine({"machines": [None]}, {"machines": [None]}) is False  # unknown
    assert ds.same_machine({}, b) is None  # no machine information: as before


def test_fallback_added_seconds_withheld_across_machines():
    shards = [{"name": "p0", "rows_out": 2, "seconds": 10.0, "engines": {"m": {"prompt_tokens": 5, "generated_tokens": 1}}}]
    base_shards = [{**shards[0], "seconds": 4.0}]
    rows = [{"query_id": "q", "task": "qa", "gold": ["a"], "answer": "a", "correct": True}]
    base = {"rows": rows, "shards": base_shards}
    same = ds.fallback_figures(rows, shards, base, {}, [], reps=10, machines_match=True)["cost"]
    other = ds.fallback_figures(rows, shards, base, {}, [], reps=10, machines_match=False)["cost"]
    assert same["added_s_per_row"] == 3.0 and "time" not in same
    assert other["added_s_per_row"] is None and other["time"] == "n/a (different machines)"
    assert other["added_tokens_per_row"] == same["added_tokens_per_row"] == 0


def test_analyse_only_on_a_new_machine_restores_then_analyses(base, tmp_path, monkeypatch, capsys):
    """``decision.py --analyse-only`` over an empty ``--runs`` (a new session's machine):
    the archive's cells are restored and summarised; with ``--no-archive`` nothing is."""
    old, archive = tmp_path / "old", tmp_path / "archive"
    for c in rich_runs(old, base):
        cell_archive.archive_cell(c, archive)
    monkeypatch.setattr(decision, "reported_rows", lambda name, shared, rows: input_rows(20, prefix="r"))
    monkeypatch.setattr(decision, "tuning_rows", lambda name, shared: input_rows(12, prefix="t"))
    for k in ("PREFECT_HOME", "SPECRAG_PROGRESS", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"):
        monkeypatch.setenv(k, "0" if k == "SPECRAG_PROGRESS" else str(tmp_path / k))
    args = ["--analyse-only", "--config", str(ROOT / "configs" / "test-smollm2.yaml"), "--datasets", "popqa",
            "--arms", "main,fallback", "--rows", "20", "--shard-rows", "5", "--reps", "50", "--archive", str(archive)]
    assert decision.main([*args, "--runs", str(tmp_path / "new"), "--out", str(tmp_path / "out")]) == 0
    printed = capsys.readouterr().out
    assert "[decision] popqa/standard: 4 shard(s) restored from" in printed
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {arm: v["complete"] for arm, v in res["cells_loaded"]["popqa"].items()} == {
        "standard": True, "speculative": True, "fallback_standard": True}
    assert res["calibration"]["popqa"]["tau_min"]  # from the restored tuning cell
    assert res["datasets"]["popqa"]["comparisons"]["speculative - standard"]["n"] == 20
    assert res["archive"] == str(archive) and res["machine"]["id"] == cell_archive.this_machine()["id"]

    assert decision.main([*args, "--no-archive", "--runs", str(tmp_path / "new2"), "--out", str(tmp_path / "out2")]) == 0
    assert "restored" not in capsys.readouterr().out
    res = json.loads((tmp_path / "out2" / "results.json").read_text())
    assert res["cells_loaded"] == {} and res["archive"] is None


# --- one machine's run (--machine) -----------------------------------------------------

def restored_machines(cells) -> dict[str, set]:
    """Arm -> the machine ids its finished shards are attributed to."""
    return {c.arm: {cell_archive.shard_machine(d).get("id") for _, _, d in decision.cell_shards(c) if d}
            for c in cells}


def test_a_shard_computed_again_on_another_machine_gets_its_own_entry_and_is_restored_by_machine(
        base, tmp_path, monkeypatch):
    """Machine A's cells are archived; machine B computes the same cells (same config, same
    input rows) again: B's shards get entries of their own beside A's (A's files untouched),
    and restore_cell gives back A's by default or with machine A, B's with machine B, and
    nothing (listed, recomputed) for a machine that computed none."""
    archive = tmp_path / "archive"
    on_machine(monkeypatch, MACHINE_A)
    for c in rich_runs(tmp_path / "a", base):
        assert cell_archive.archive_cell(c, archive)["added"]
    first = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in cell_archive.archive_files(archive)}
    assert archive_names(archive) == [f"{MACHINE_A['id']}.tar.xz"]
    on_machine(monkeypatch, MACHINE_B)
    for c in rich_runs(tmp_path / "b", base):
        got = cell_archive.archive_cell(c, archive)
        assert got["added"] == len(list(c.input_dir.glob("*.parquet"))) and got["present"] == 0
        assert cell_archive.archive_cell(c, archive) == {"added": 0, "present": got["added"], "failed": []}
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in first} == first  # A's archive as it was
    assert archive_names(archive) == [f"{MACHINE_A['id']}.tar.xz", f"{MACHINE_B['id']}.tar.xz"]
    b_entries = members(archive, f"popqa/*/*/part-*.{MACHINE_B['id']}.json")
    assert b_entries == sorted(n for n in cell_archive.read_archive(archive / f"{MACHINE_B['id']}.tar.xz")
                               if n.endswith(".json"))  # in B's archive, all of them
    assert len(b_entries) == 4 + 4 + 3 + 4 and all(
        json.loads(cell_archive.entries(archive)[n])["machine"]["id"] == MACHINE_B["id"] for n in b_entries)

    on_machine(monkeypatch, {**MACHINE_A, "id": "cccccccccccc"})  # a later session's machine
    for runs, machine, want in (("n0", None, "aaaaaaaaaaaa"), ("na", MACHINE_A["id"], "aaaaaaaaaaaa"),
                                ("nb", MACHINE_B["id"], "bbbbbbbbbbbb")):
        cells = fresh(tmp_path / "a", tmp_path / runs, base)
        for c in cells:
            got = cell_archive.restore_cell(c, archive, machine)
            assert got["restored"] == len(list(c.input_dir.glob("*.parquet"))) and got["not_restored"] == []
        assert restored_machines(cells) == {c.arm: {want} for c in cells}
    c = fresh(tmp_path / "a", tmp_path / "nc", base)[0]
    got = cell_archive.restore_cell(c, archive, "cccccccccccc")
    assert got["restored"] == 0 and got["not_restored"] == [
        (f"part-000{i}.parquet", "archived only from other machines than cccccccccccc (--machine)") for i in range(4)]
    assert cell_archive.restore_line(c, got, archive).endswith(  # one reason said once
        "not restored (recomputed): part-0000.parquet, part-0001.parquet, part-0002.parquet, part-0003.parquet: "
        "archived only from other machines than cccccccccccc (--machine)")


def test_machine_flag_computes_only_on_its_own_machine_and_refuses_a_mixed_runs_directory(
        base, tmp_path, monkeypatch, capsys):
    """``decision.py --machine``: computing for another machine's id, or with --no-archive, is
    refused before anything runs; a runs directory holding another machine's finished shards
    is refused (exit 2, naming a shard); --analyse-only --machine B on a new machine restores
    and summarises B's run alone, and results.json records it."""
    archive = tmp_path / "archive"
    on_machine(monkeypatch, MACHINE_A)
    for c in rich_runs(tmp_path / "a", base):
        cell_archive.archive_cell(c, archive)
    on_machine(monkeypatch, MACHINE_B)
    for c in rich_runs(tmp_path / "b", base):
        cell_archive.archive_cell(c, archive)
    monkeypatch.setattr(decision, "reported_rows", lambda name, shared, rows: input_rows(20, prefix="r"))
    monkeypatch.setattr(decision, "tuning_rows", lambda name, shared: input_rows(12, prefix="t"))
    for k in ("PREFECT_HOME", "SPECRAG_PROGRESS", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"):
        monkeypatch.setenv(k, "0" if k == "SPECRAG_PROGRESS" else str(tmp_path / k))
    args = ["--config", str(ROOT / "configs" / "test-smollm2.yaml"), "--datasets", "popqa", "--arms", "main,fallback",
            "--rows", "20", "--shard-rows", "5", "--reps", "50", "--archive", str(archive)]
    on_machine(monkeypatch, {**MACHINE_A, "id": "cccccccccccc"})
    for extra, why in ((["--machine", MACHINE_B["id"]], "this machine is cccccccccccc"),
                       (["--machine", "this", "--no-archive"], "cannot go with --no-archive"),
                       (["--analyse-only", "--machine", "ffffffffffff"],
                        f"--machine ffffffffffff: no shard in {archive} was computed on that machine (machines there: "
                        f"{', '.join(sorted([MACHINE_A['id'], MACHINE_B['id']]))})"),
                       (["--datasets", "popqa,nosuch"], "--datasets: 'nosuch' is not a benchmark dataset"),
                       (["--ablation-datasets", "popq"], "--ablation-datasets: 'popq' is not a benchmark dataset"),
                       (["--datasets", ""], "--datasets: no dataset named")):
        with pytest.raises(SystemExit) as e:
            decision.main([*args, *extra, "--runs", str(tmp_path / "x"), "--out", str(tmp_path / "ox")])
        assert e.value.code == 2 and why in capsys.readouterr().err
    assert not (tmp_path / "x").exists()

    # a runs directory with machine A's shards (restored without --machine) is refused for B's run
    assert decision.main([*args, "--analyse-only", "--runs", str(tmp_path / "mixed"), "--out", str(tmp_path / "o1")]) == 0
    capsys.readouterr()
    assert decision.main([*args, "--analyse-only", "--machine", MACHINE_B["id"], "--runs", str(tmp_path / "mixed"),
                          "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert "holds 15 finished shard(s) of other machines (e.g. popqa/standard/part-0000.parquet)" in err
    assert not (tmp_path / "o2").exists()

    assert decision.main([*args, "--analyse-only", "--machine", MACHINE_B["id"], "--runs", str(tmp_path / "one"),
                          "--out", str(tmp_path / "o3")]) == 0
    res = json.loads((tmp_path / "o3" / "results.json").read_text())
    assert res["one_machine"] == MACHINE_B["id"]
    assert {arm: v["machines"] for arm, v in res["cells_loaded"]["popqa"].items()} == {
        "standard": ["bbbbbbbbbbbb"], "speculative": ["bbbbbbbbbbbb"], "fallback_standard": ["bbbbbbbbbbbb"]}
    assert res["datasets"]["popqa"]["comparisons"]["speculative - standard"]["seconds"]["n"] == 4


def test_missing_shared_data_is_one_line_naming_the_flag(tmp_path, capsys, monkeypatch):
    """A checkout without ../shared/data (or a wrong --shared) gets one argparse error, not a
    traceback."""
    for k in ("PREFECT_HOME", "SPECRAG_PROGRESS", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"):
        monkeypatch.setenv(k, "0" if k == "SPECRAG_PROGRESS" else str(tmp_path / k))  # main sets them
    with pytest.raises(SystemExit) as e:
        decision.main(["--shared", str(tmp_path / "none"), "--datasets", "popqa", "--arms", "main", "--analyse-only",
                       "--no-archive", "--runs", str(tmp_path / "r"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert e.value.code == 2 and f"--shared {tmp_path / 'none'}: " in err and "no such file" in err
