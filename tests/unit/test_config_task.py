"""A run for one task (config ``task``): the input's task column becomes optional, a null cell
takes the task and another task is a row error; an unset task leaves the config hash as it
was; claim labels are tidied."""

from __future__ import annotations

import pyarrow as pa
import pytest

from specrag_batch.core.schema import InputSchemaError, validate_table


def test_config_hash_unchanged_by_unset_task():
    from specrag_batch.config import RunConfig

    base = RunConfig()
    assert base.config_hash() == RunConfig.model_validate(base.model_dump(exclude={"task"})).config_hash()
    assert RunConfig(task="claim").config_hash() != base.config_hash()


def _table(**cols):
    data = {"query_id": ["a", "b"], "query": ["x is y", "who?"], **cols}
    return pa.table(data)


def test_fixed_task_makes_task_column_optional_and_flags_other_tasks():
    rows = validate_table(_table(), "f.parquet", task="claim")
    assert [r.task for r in rows] == ["claim", "claim"] and all(r.error is None for r in rows)
    rows = validate_table(_table(task=["claim", "qa"]), "f.parquet", task="claim")
    assert rows[0].error is None
    assert rows[1].error == ("f.parquet: row 1 (query_id='b'): field 'task': 'qa', but this run "
                             "only takes 'claim' rows (config 'task')")
    with pytest.raises(InputSchemaError, match="column 'task': required column missing"):
        validate_table(_table(), "f.parquet")


def test_null_task_cell_takes_the_fixed_task_and_labels_are_tidied():
    from specrag_batch.config import RunConfig

    rows = validate_table(_table(task=pa.array([None, "claim"], pa.string())), "f.parquet", task="claim")
    assert [(r.task, r.error) for r in rows] == [("claim", None), ("claim", None)]
    assert RunConfig(claim_labels=[" SUPPORTS ", "REFUTES"]).claim_labels == ["SUPPORTS", "REFUTES"]
    with pytest.raises(Exception, match="empty labels"):
        RunConfig(claim_labels=["SUPPORTS", " "])
