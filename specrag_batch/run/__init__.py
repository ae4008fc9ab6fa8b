"""Running the pipeline over data: the batch flow (:mod:`.orchestration`) plans shards
(:mod:`.planning`), runs each shard's rows through the stages (:mod:`.shard`,
:mod:`.pipeline`, :mod:`.output`), resumes (:mod:`.resume`, :mod:`.intermediate`,
:mod:`.layout`), reuses earlier answers (:mod:`.reuse`), writes the manifest (:mod:`.manifest`)
and the report (:mod:`.report`, read back by :mod:`.results`); nights and backfills over date
partitions (:mod:`.scheduled`, :mod:`.partitions`), bulk claim verification
(:mod:`.claim_verification`), drift between nights (:mod:`.drift`), choosing a mode per task
(:mod:`.tuning`), and a fake engine for tests of runs (:mod:`.testing`)."""
