"""The execution settings (``execution.ExecutionConfig``): the task runner and the Ray options
each stage's tasks get."""

from __future__ import annotations

import pytest

from specrag_batch.config.execution import ExecutionConfig


def test_execution_config_ray_options():
    ex = ExecutionConfig.coerce({"task_runner": "ray", "drafter_resources": {"num_gpus": 1}})
    assert ex.distributed and ExecutionConfig.coerce(None).task_runner == "threads"
    from prefect_ray.context import RemoteOptionsContext

    with ex.remote({"num_gpus": 1, "resources": {"verifier": 1}}):
        opts = RemoteOptionsContext.get().current_remote_options
    assert opts == {"num_gpus": 1, "resources": {"verifier": 1}, "max_calls": 0}
    with ex.remote({"num_cpus": 1}):
        assert RemoteOptionsContext.get().current_remote_options == {"num_cpus": 1}
    with ExecutionConfig().remote({"num_gpus": 1}):  # threads: no Ray options at all
        assert RemoteOptionsContext.get().current_remote_options == {}
    with pytest.raises(Exception, match="stages"):
        ExecutionConfig.coerce({"stages": "split"})
