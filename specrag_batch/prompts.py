"""Prompt construction for the drafter, the verifier and the Standard RAG baseline.

All prompts are rendered through the model's own chat template (plain text when it has none)
and tokenised here, so the token ids handed to vLLM are exactly the ones whose offsets are
used to locate α, β and "Yes" (never a string search over model output).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .parsing import LETTERS
from .schema import Document

DRAFTER_SYSTEM = (
    "You answer questions using the given documents. First write a short rationale (one or two "
    "sentences) based on the documents, then give the answer.")
RATIONALE_PREFIX = "Rationale:"

_SENT = "\u2063{}\u2063"  # invisible separator: sentinel that no real text contains


def task_instruction(task: str, query: str, choices: Sequence[str] | None, labels: Sequence[str]) -> str:
    """The question block shared by drafter and verifier (the verifier sees no documents)."""
    if task == "claim":
        return (f"Claim: {query}\nDoes the evidence support or refute the claim? "
                f"Answer with exactly one of: {', '.join(labels)}.")
    if task == "choice":
        opts = "\n".join(f"{LETTERS[i]}. {c}" for i, c in enumerate(choices or []))
        return f"Question: {query}\nOptions:\n{opts}\nAnswer with the letter of the correct option."
    return f"Question: {query}\nAnswer with a short phrase."


def format_documents(docs: Sequence[Document]) -> str:
    """Numbered documents, ``[i] title\\ntext``."""
    out = []
    for i, d in enumerate(docs, 1):
        head = f"[{i}] {d.title}".rstrip()
        out.append(f"{head}\n{d.text}".strip())
    return "\n\n".join(out)


def _render(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    text = "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)
    return text + ("\n\nAssistant: " if add_generation_prompt else "")


def drafter_prompt(tokenizer, task: str, query: str, docs: Sequence[Document],
                   choices: Sequence[str] | None, labels: Sequence[str]) -> str:
    """Drafter prompt (paper §3.2): documents δ_j + question; reply prefilled with
    ``"Rationale:"`` so the model writes β then ``Answer: α``."""
    user = (f"Documents:\n{format_documents(docs)}\n\n"
            f"{task_instruction(task, query, choices, labels)}\n\n"
            f"Reply in exactly this format:\n{RATIONALE_PREFIX} <rationale>\nAnswer: <answer>")
    msgs = [{"role": "system", "content": DRAFTER_SYSTEM}, {"role": "user", "content": user}]
    return _render(tokenizer, msgs, True) + RATIONALE_PREFIX


@dataclass
class VerifierPrompt:
    """Token ids of ``[Q, α, β, R, "Yes"]`` and the token index ranges of α, β and "Yes".

    Ranges are half-open token index ranges into ``token_ids``; empty when the text is empty."""

    token_ids: list[int]
    answer_tokens: range
    rationale_tokens: range
    yes_tokens: range


def _token_range(offsets: list[tuple[int, int]], start: int, end: int) -> range:
    idx = [i for i, (s, e) in enumerate(offsets) if e > start and s < end and e > s]
    return range(idx[0], idx[-1] + 1) if idx and end > start else range(0)


def verifier_prompt(tokenizer, question_block: str, answer: str, rationale: str,
                    reflection_question: str) -> VerifierPrompt:
    """Build the verifier's single forward-pass input (paper §3.3).

    The chat template is rendered with sentinels in place of α and β, which are then spliced
    in while their character spans are recorded; the tokeniser's offset mapping turns those
    spans into token ranges. "Yes" is the final assistant reply.

    Raises:
        ValueError: the tokenizer is not a fast tokenizer (no offset mapping).
    """
    a_s, b_s = _SENT.format("A"), _SENT.format("B")
    msgs = [{"role": "user", "content": question_block},
            {"role": "assistant", "content": f"Answer: {a_s}\nRationale: {b_s}"},
            {"role": "user", "content": reflection_question}]
    tmpl = _render(tokenizer, msgs, True)
    pre, rest = tmpl.split(a_s, 1)
    mid, post = rest.split(b_s, 1)
    text = pre + answer + mid + rationale + post
    a_span = (len(pre), len(pre) + len(answer))
    b0 = a_span[1] + len(mid)
    b_span = (b0, b0 + len(rationale))
    y_span = (len(text), len(text) + 3)
    text += "Yes"
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    if "offset_mapping" not in enc:
        raise ValueError("verifier tokenizer must be a fast tokenizer with offset mapping")
    offs = [tuple(o) for o in enc["offset_mapping"]]
    return VerifierPrompt(list(enc["input_ids"]), _token_range(offs, *a_span),
                          _token_range(offs, *b_span), _token_range(offs, *y_span))
