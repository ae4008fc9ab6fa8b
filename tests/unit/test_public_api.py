"""The package's top-level API (``specrag_batch.run_batch``) offers every keyword of the flow
it wraps (``specrag_batch.run.orchestration.run_batch``), with the same defaults, so a documented
option (``allow_empty``) is never missing from the import users start from."""

import inspect


def test_top_level_run_batch_takes_every_keyword_of_the_flow_with_its_default():
    import specrag_batch
    from specrag_batch.run import orchestration

    top = inspect.signature(specrag_batch.run_batch).parameters
    flow = inspect.signature(orchestration.run_batch).parameters
    assert list(top) == list(flow)
    for name, p in flow.items():
        assert top[name].default == p.default, name
        assert top[name].kind == p.kind, name
