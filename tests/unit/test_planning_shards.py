"""An input prefix without any ``.parquet`` shard is refused when the run is planned
(``planning.require_shards``), before the flow starts, unless empty inputs are allowed."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specrag_batch.run.planning import NoShardsError, plan_shards, require_shards


@pytest.mark.parametrize("layout", ["empty", "only_csv", "csv_file"])
def test_an_input_without_shards_is_refused(tmp_path, layout):
    inp = tmp_path / "in"
    inp.mkdir()
    if layout != "empty":
        (inp / "q.csv").write_text("query_id,query\n")
    uri = str(inp / "q.csv") if layout == "csv_file" else str(inp)
    shards, skipped = plan_shards(uri)
    with pytest.raises(NoShardsError, match="holds no .parquet shard"):
        require_shards(uri, shards, skipped, allow_empty=False)
    require_shards(uri, shards, skipped, allow_empty=True)
    from specrag_batch.cli.commands import app

    res = CliRunner().invoke(app, ["run", "-i", uri, "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and "holds no .parquet shard" in " ".join(res.output.split())
    assert not (tmp_path / "out").exists()  # refused before the flow starts: nothing written
