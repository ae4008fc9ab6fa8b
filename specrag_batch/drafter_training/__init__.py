"""Specialist drafter (paper §3.1): teacher-written training data, SFT with TRL + PEFT LoRA.

* the rows training may read: :mod:`specrag_batch.core.datasets` (the evaluation reserve).
* :mod:`.teacher` — the teacher's prompt (documents, question, gold answer).
* :mod:`.filters` — which rows and teacher rationales give an example (drop reasons), and
  the completion format.
* :mod:`.data` — the data step: (prompt, completion) pairs in the inference drafter format,
  data shards and their manifest.
* :mod:`.train` — the training step: SFT, merged model directory, training manifest.
"""
