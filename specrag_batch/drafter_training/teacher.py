"""What the teacher sees (paper §3.1): the subset's documents, the question and the gold answer,
as one chat prompt whose reply is prefilled with ``"Rationale:"`` like the drafter's.

The teacher (any model vLLM loads; default the configured verifier) writes the rationale E the
drafter is trained to produce; :mod:`.filters` decides whether E is kept.
"""

from __future__ import annotations

import hashlib

from ..core.parsing import LETTERS
from ..stages.prompts import (RATIONALE_PREFIX, Slots, encode_template, format_documents, render_chat,
                       task_instruction)
from ..core.schema import Document

TEACHER_SYSTEM = ("You cite evidence from the given documents. You are told the correct answer; "
                  "write only what the documents say that supports it.")
TEACHER_INSTRUCTION = ("In one to three sentences, state what the documents say that supports this answer "
                       "(e.g. \"Document [2] states that ...\"). Do not restate the answer or the question, "
                       "and do not begin with \"The correct answer\". Then stop.")
"""The task the teacher is given after the gold: the rationale is the documents' evidence for the
answer (paper §3.1), not a restatement of the answer, the label or the question."""


def teacher_prompt_hash() -> str:
    """sha256 (16 hex) of the teacher's fixed prompt text (system and instruction): part of the
    data step's shard key, so a changed prompt re-does every shard."""
    return hashlib.sha256(f"{TEACHER_SYSTEM}\n{TEACHER_INSTRUCTION}".encode()).hexdigest()[:16]


def teacher_prompt_ids(tokenizer, task: str, query: str, docs: list[Document], choices, labels,
                       answer: str) -> list[int]:
    """Token ids of the teacher input: the subset's documents, the question block the drafter
    sees, and the gold answer (for choice: letter and option text); the reply is prefilled with
    ``"Rationale:"`` like the drafter's.

    Encoded like the inference prompts (:mod:`specrag_batch.stages.prompts`): documents, query,
    options, labels and the answer are data segments (``split_special_tokens=True``), so a
    ``<|im_end|>`` in a passage stays plain text and the ids hold only the chat template's own
    special tokens."""
    slot = Slots()
    shown = slot(answer)
    if task == "choice" and choices:
        shown = f"{shown}. {slot(choices[LETTERS.index(answer)])}"
    user = (f"Documents:\n{format_documents(docs, slot)}\n\n"
            f"{task_instruction(task, query, choices, labels, slot)}\n\n"
            f"Correct answer: {shown}\n\n{TEACHER_INSTRUCTION}")
    msgs = [{"role": "system", "content": TEACHER_SYSTEM}, {"role": "user", "content": user}]
    ids, _ = encode_template(tokenizer, render_chat(tokenizer, msgs, True) + RATIONALE_PREFIX, slot.values)
    return ids
