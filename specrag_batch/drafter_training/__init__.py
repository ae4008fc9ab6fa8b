"""Specialist drafter (paper §3.1): teacher-written training data, SFT with TRL + PEFT LoRA.

* :mod:`.sources` — which rows of the evaluation data may be used for training (the split).
* :mod:`.data` — the data step: (prompt, completion) pairs in the inference drafter format.
* :mod:`.train` — the training step: SFT, merged model directory, training manifest.
"""
