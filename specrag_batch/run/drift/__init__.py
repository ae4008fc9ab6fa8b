"""Drift between nights: each run's profile (:mod:`.profile`, written with its report), the
comparison of a night's profile with the nights before it (:mod:`.compare`), the stored
result's schema (:mod:`.schema`) and the watch that runs after every night (:mod:`.watch`).
The thresholds are the ``drift`` config section (:class:`specrag_batch.config.DriftConfig`);
the ``drift`` command is :mod:`specrag_batch.cli.drift`."""
