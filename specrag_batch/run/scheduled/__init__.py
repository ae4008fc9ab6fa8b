"""Scheduled and bulk Prefect flows over the batch flow (:mod:`specrag_batch.run.orchestration`):
the nightly date partition, backfills of date ranges, bulk claim verification. ``flows/*.py``
re-export them as the ``prefect.yaml`` deployment entrypoints."""
