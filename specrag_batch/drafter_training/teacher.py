"""What the teacher sees (paper §3.1): the subset's documents, the question and the gold answer,
as one chat prompt whose reply is prefilled with ``"Rationale:"`` like the drafter's.

The teacher (any model vLLM loads; default the configured verifier) writes the rationale E the
drafter is trained to produce; :mod:`.filters` decides whether E is kept.
"""

from __future__ import annotations

from ..parsing import LETTERS
from ..prompts import (RATIONALE_PREFIX, Slots, encode_template, format_documents, render_chat,
                       task_instruction)
from ..schema import Document

TEACHER_SYSTEM = ("You explain answers using only the given documents. You are told the correct "
                  "answer; write the reasoning a careful reader would give from the documents.")


def teacher_prompt_ids(tokenizer, task: str, query: str, docs: list[Document], choices, labels,
                       answer: str) -> list[int]:
    """Token ids of the teacher input: the subset's documents, the question block the drafter
    sees, and the gold answer (for choice: letter and option text); the reply is prefilled with
    ``"Rationale:"`` like the drafter's.

    Encoded like the inference prompts (:mod:`specrag_batch.prompts`): documents, query,
    options, labels and the answer are data segments (``split_special_tokens=True``), so a
    ``<|im_end|>`` in a passage stays plain text and the ids hold only the chat template's own
    special tokens."""
    slot = Slots()
    shown = slot(answer)
    if task == "choice" and choices:
        shown = f"{shown}. {slot(choices[LETTERS.index(answer)])}"
    user = (f"Documents:\n{format_documents(docs, slot)}\n\n"
            f"{task_instruction(task, query, choices, labels, slot)}\n\n"
            f"Correct answer: {shown}\n\nIn one or two sentences, explain from the documents why "
            "this answer is correct: name the facts in the documents that show it. Then stop.")
    msgs = [{"role": "system", "content": TEACHER_SYSTEM}, {"role": "user", "content": user}]
    ids, _ = encode_template(tokenizer, render_chat(tokenizer, msgs, True) + RATIONALE_PREFIX, slot.values)
    return ids
