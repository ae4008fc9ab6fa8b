"""A run with a failed shard ends its Prefect flow run Failed (the manifest still written and
returned by ``run_flow``); a flow stopped by an error raises it. The states are built as the
flow returns them (``prefect.states``); the real flow run: tests/flows/test_flow.py
(``test_flow_bad_shard_and_bad_rows_lose_nothing``) and tests/flows/test_row_outcomes.py."""

import pickle

import pytest
from prefect.states import Completed, Failed

from specrag_batch.run.orchestration import ShardsFailedError, flow_manifest
from specrag_batch.run.resume import RunConflictError

MANIFEST = {"failed_shards": 1, "rows_in": 5, "rows_out": 3, "manifest_uri": "out/_manifest.json"}


def test_failed_shards_give_a_failed_state_whose_result_is_the_manifest():
    why = "1 of 2 shard(s) failed; see out/_manifest.json"
    state = Failed(message=why, data=ShardsFailedError(why, MANIFEST))
    assert state.is_failed() and flow_manifest(state) == MANIFEST
    with pytest.raises(ShardsFailedError, match="1 of 2 shard") as e:  # a direct call of the flow
        state.result()
    assert e.value.manifest == MANIFEST and str(e.value) == why
    again = pickle.loads(pickle.dumps(e.value))  # a persisted result pickles it whole
    assert str(again) == why and again.manifest == MANIFEST


def test_completed_run_returns_its_manifest_and_a_stopped_run_raises():
    assert flow_manifest(Completed(data={**MANIFEST, "failed_shards": 0}))["failed_shards"] == 0
    with pytest.raises(RunConflictError, match="another config"):
        flow_manifest(Failed(data=RunConflictError("output holds another config")))
