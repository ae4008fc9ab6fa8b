"""Prompt construction for the drafter, the verifier and the Standard RAG baseline.

All prompts are rendered through the model's own chat template (plain text when it has none)
and tokenised here, so the token ids handed to vLLM are exactly the ones whose positions are
used to locate α and β (never a string search over model output).

Data text never becomes a special token. The chat template is rendered with private-use
placeholders (:data:`_SLOT`) where data goes (query, titles, passages, options, labels,
α, β); the rendered template is split at the placeholders, its own parts are tokenised with
special tokens recognised (so the template's markers are control tokens) and each data part
is tokenised with ``split_special_tokens=True`` (so ``<|im_end|>`` in a passage is plain
text). The placeholders only ever occur in our own rendering of the template, never next to
data, so splicing does not depend on what the data contains.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

from ..core.parsing import option_label
from ..core.schema import Document

RATIONALE_STYLES = {
    "one_or_two_sentences": "First write a short rationale (one or two sentences) based on the "
                            "documents, then give the answer.",
    "one_sentence": "First write a rationale of one sentence based on the documents, then give "
                    "the answer.",
}
"""The rationale instruction of the drafter's system prompt per ``drafter.rationale_style``
(shorter drafts cost fewer drafter tokens; the paper's rationale is free text, §3.2).
``one_or_two_sentences`` is the default."""


def drafter_system(rationale_style: str = "one_or_two_sentences") -> str:
    """The drafter's system prompt with the rationale instruction of ``rationale_style``
    (:data:`RATIONALE_STYLES`).

    Raises:
        ValueError: unknown ``rationale_style``."""
    if rationale_style not in RATIONALE_STYLES:
        raise ValueError(f"drafter rationale style {rationale_style!r}: choose one of "
                         f"{', '.join(RATIONALE_STYLES)}")
    return f"You answer questions using the given documents. {RATIONALE_STYLES[rationale_style]}"


DRAFTER_SYSTEM = drafter_system()
RATIONALE_PREFIX = "Rationale:"

_SLOT = "\ue000{}\ue001"  # private-use code points; only in our own template rendering
_SLOT_RE = re.compile("\ue000(\\d+)\ue001")


@dataclass
class Slots:
    """Collects data values while prompt text is built; ``slot(text)`` returns the placeholder
    that stands for ``text`` in the template (see module docstring)."""

    values: list[str] = field(default_factory=list)

    def __call__(self, text: str) -> str:
        self.values.append(text)
        return _SLOT.format(len(self.values) - 1)


@dataclass(frozen=True)
class Question:
    """The question block's inputs (drafter and verifier; the verifier sees documents only
    with ``verifier.evidence_aware``, :func:`verifier_prompt`)."""

    task: str
    query: str
    choices: tuple[str, ...] | None
    labels: tuple[str, ...]


def task_instruction(task: str, query: str, choices: Sequence[str] | None, labels: Sequence[str],
                     slot=None) -> str:
    """The question block shared by drafter and verifier. Options are labelled A..Z, AA, AB, ...
    (:func:`parsing.option_label`). With ``slot`` (a :class:`Slots`) data values are replaced
    by placeholders; without it the text is plain (for display). ``task``: ``claim`` and
    ``choice`` get their own blocks, any other value the QA block (never raises)."""
    s = slot or (lambda x: x)
    if task == "claim":
        return (f"Claim: {s(query)}\nDoes the evidence support or refute the claim? "
                f"Answer with exactly one of: {s(', '.join(labels))}.")
    if task == "choice":
        opts = "\n".join(f"{option_label(i)}. {s(c)}" for i, c in enumerate(choices or []))
        return f"Question: {s(query)}\nOptions:\n{opts}\nAnswer with the letter of the correct option."
    return f"Question: {s(query)}\nAnswer with a short phrase."


def format_documents(docs: Sequence[Document], slot=None) -> str:
    """Numbered documents, ``[i] title\\ntext`` (data replaced by placeholders with ``slot``)."""
    s = slot or (lambda x: x)
    out = []
    for i, d in enumerate(docs, 1):
        head = f"[{i}] {s(d.title)}" if d.title.strip() else f"[{i}]"
        out.append(f"{head}\n{s(d.text)}" if d.text.strip() else head)
    return "\n\n".join(out)


_PROBE_SYSTEM, _PROBE_USER = "\ue002system\ue003", "\ue002user\ue003"
_SYSTEM_ROLE: dict[str, bool] = {}  # chat template text -> has_system_role


def has_system_role(tokenizer) -> bool:
    """Whether the tokenizer's chat template renders a system message: it renders
    ``[system, user]`` without error and the system text is in the result. False for
    templates that raise on a system message (Gemma 1/2: ``System role not supported``) or
    leave it out; True for Gemma 3's, which folds it into the first user turn itself, and
    for no template at all (``"System: ..."`` blocks). Decided once per template text.
    """
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return True
    if template not in _SYSTEM_ROLE:
        from jinja2 import TemplateError

        try:
            text = tokenizer.apply_chat_template(
                [{"role": "system", "content": _PROBE_SYSTEM}, {"role": "user", "content": _PROBE_USER}],
                tokenize=False, add_generation_prompt=True)
        except TemplateError:
            text = ""
        _SYSTEM_ROLE[template] = _PROBE_SYSTEM in text
    return _SYSTEM_ROLE[template]


def render_chat(tokenizer, messages: list[dict], add_generation_prompt: bool) -> str:
    """The chat template applied to ``messages`` (``[{"role", "content"}]``), as text; no
    template: ``"Role: content"`` blocks.

    System instructions always reach the model. A template without a system role
    (:func:`has_system_role` False) gets the system text at the start of the first user
    message, followed by a blank line: the rule Gemma 3's own template applies.

    Data belongs in the messages only as :class:`Slots` placeholders: tokenise the result with
    :func:`encode_template`, never as a whole (a ``<|im_end|>`` in data would become a control
    token). Used for the drafter, verifier and the drafter-training teacher prompts.

    Raises:
        ValueError: a system message is not followed by a user message on a template without
            a system role.
        jinja2.TemplateError: the template rejects the conversation.
    """
    if getattr(tokenizer, "chat_template", None):
        if messages and messages[0]["role"] == "system" and not has_system_role(tokenizer):
            if len(messages) < 2 or messages[1]["role"] != "user":
                raise ValueError("the chat template has no system role and the system message is "
                                 "not followed by a user message to carry it")
            messages = [{"role": "user", "content": messages[0]["content"] + "\n\n" + messages[1]["content"]},
                        *messages[2:]]
        return tokenizer.apply_chat_template(messages, tokenize=False,
                                             add_generation_prompt=add_generation_prompt)
    text = "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)
    return text + ("\n\nAssistant: " if add_generation_prompt else "")


def encode_plain(tokenizer, text: str) -> list[int]:
    """Token ids of data text as plain text: special-token strings are split into ordinary
    tokens (``split_special_tokens=True``)."""
    if not text:
        return []
    return list(tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def encode_template(tokenizer, rendered: str, values: Sequence[str]) -> tuple[list[int], list[range]]:
    """Tokenise a rendered template whose data sits in placeholders.

    Template parts are tokenised with special tokens recognised, each data value with
    :func:`encode_plain`. A space that ends a template part right before a data value moves
    into the value (``"Answer:" + " Paris"``), so words keep their usual tokens.

    Returns:
        (token ids, per value the half-open token index range it occupies; ``range(0)`` for
        an empty value).
    """
    pieces = _SLOT_RE.split(rendered)
    ids: list[int] = []
    spans: list[range] = [range(0)] * len(values)
    carry = ""
    for j, piece in enumerate(pieces):
        if j % 2 == 0:
            nxt_is_data = j + 1 < len(pieces) and values[int(pieces[j + 1])]
            if nxt_is_data and piece.endswith(" ") and not values[int(pieces[j + 1])][:1].isspace():
                piece, carry = piece[:-1], " "
            if piece:
                ids += tokenizer(piece, add_special_tokens=False)["input_ids"]
            continue
        k = int(piece)
        toks = encode_plain(tokenizer, carry + values[k]) if values[k] else []
        carry = ""
        spans[k] = range(len(ids), len(ids) + len(toks)) if toks else range(0)
        ids += toks
    return ids, spans


PROMPT_LAYOUTS = ("documents_first", "question_first")
"""Orders of the drafter prompt's user turn (``drafter.prompt_layout``)."""


def drafter_prompt_ids(tokenizer, task: str, query: str, docs: Sequence[Document],
                       choices: Sequence[str] | None, labels: Sequence[str],
                       layout: str = "documents_first",
                       rationale_style: str = "one_or_two_sentences") -> list[int]:
    """Token ids of the drafter prompt (paper §3.2): documents δ_j + question; the reply is
    prefilled with ``"Rationale:"`` so the model writes β then ``Answer: α``. Data is plain
    text (see module docstring). The system prompt's rationale instruction is
    ``rationale_style``'s (:func:`drafter_system`).

    ``layout`` (:data:`PROMPT_LAYOUTS`): ``documents_first`` = documents, question block,
    reply format; ``question_first`` = question block, reply format, documents, so the m
    prompts of one row (same question, other subsets) share every token up to the first
    document and vLLM's prefix cache can compute that prefix once per call.

    Raises:
        ValueError: unknown ``layout`` or ``rationale_style``."""
    system = drafter_system(rationale_style)
    if layout not in PROMPT_LAYOUTS:
        raise ValueError(f"drafter prompt layout {layout!r}: choose one of {', '.join(PROMPT_LAYOUTS)}")
    slot = Slots()
    question = task_instruction(task, query, choices, labels, slot)
    reply = f"Reply in exactly this format:\n{RATIONALE_PREFIX} <rationale>\nAnswer: <answer>"
    documents = f"Documents:\n{format_documents(docs, slot)}"
    parts = (question, reply, documents) if layout == "question_first" else (documents, question, reply)
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]
    ids, _ = encode_template(tokenizer, render_chat(tokenizer, msgs, True) + RATIONALE_PREFIX, slot.values)
    return ids


class PromptTooLongError(ValueError):
    """Even with the smallest per-document budget the prompt exceeds the context window."""


def truncate_documents(tokenizer, docs: Sequence[Document], budget: int) -> tuple[list[Document], bool]:
    """Cut each document's text to at most ``budget`` tokens (of ``tokenizer``, the drafter's).

    A cut text is the decoded first ``budget`` tokens, right-stripped, plus ``" ..."`` (so it
    may re-encode to a few tokens more than ``budget``). Titles are kept whole.

    Returns:
        (documents, whether any was truncated): one :class:`Document` per input, in order."""
    out, cut = [], False
    for document in docs:
        ids = encode_plain(tokenizer, document.text)
        if len(ids) > budget:
            cut = True
            out.append(Document(document.doc_id, document.title,
                                tokenizer.decode(ids[:budget]).rstrip() + " ..."))
        else:
            out.append(document)
    return out, cut


def fitted_prompt(tokenizer, task: str, query: str, docs: Sequence[Document], choices, labels,
                  doc_budget: int, max_prompt_tokens: int,
                  layout: str = "documents_first",
                  rationale_style: str = "one_or_two_sentences") -> tuple[list[int], bool]:
    """Token ids of the drafter prompt in ``layout`` with the rationale instruction of
    ``rationale_style`` (:func:`~specrag_batch.stages.prompts.drafter_prompt_ids`),
    shrinking the per-document budget (tokens) until it fits ``max_prompt_tokens``.

    The budget starts at ``doc_budget`` and is multiplied by 0.6 (floor 16) after each try
    that does not fit.

    Returns (token ids, whether any document was truncated).

    Raises:
        PromptTooLongError: the prompt does not fit even at 16 tokens per document.
        ValueError: unknown ``layout`` or ``rationale_style``.
    """
    budget = doc_budget
    while True:
        cut_docs, cut = truncate_documents(tokenizer, docs, budget)
        ids = drafter_prompt_ids(tokenizer, task, query, cut_docs, choices, labels, layout, rationale_style)
        if len(ids) <= max_prompt_tokens:
            return ids, cut
        if budget <= 16:
            raise PromptTooLongError(
                f"prompt needs {len(ids)} tokens at 16 tokens per document; the context allows "
                f"{max_prompt_tokens}")
        budget = max(16, int(budget * 0.6))


@dataclass
class VerifierPrompt:
    """Token ids of ``[Q, α, β, R]`` (or, evidence-aware, ``[Q, δ, α, β, R]``) up to the
    assistant's reply, and the token index ranges of α and β (half-open ranges into
    ``token_ids``; empty when the text is empty). The next token after ``token_ids`` is where
    the verifier answers R ("Yes"/"No"). ``document_tokens``: per document of δ, the range of
    its text (empty without documents, or for a document whose text is empty)."""

    token_ids: list[int]
    answer_tokens: range
    rationale_tokens: range
    document_tokens: tuple[range, ...] = ()


VERIFIER_ORDERS = ("answer_first", "rationale_first")
"""Orders of α and β in the verifier's assistant turn (:func:`verifier_prompt`):
``answer_first`` is the paper's [Q, α, β, R] (§3.3); ``rationale_first`` (β then α, the order
the drafter writes them) is a diagnostic of benchmarks/verifier_variants.py, not a run option."""


def verifier_prompt(tokenizer, question: Question, answer: str, rationale: str,
                    reflection_question: str, order: str = "answer_first",
                    documents: Sequence[Document] = ()) -> VerifierPrompt:
    """Build the verifier's single forward-pass input (paper §3.3).

    Messages: user = question block, assistant = ``Answer: α\\nRationale: β``, user = R; then
    the template's assistant opening, where the verifier's next token answers R. α and β are
    data values (placeholders, see module docstring), so their token ranges are known exactly
    whatever the query, the documents or the draft contain.

    ``documents`` (``verifier.evidence_aware``; the paper's variant Score(α|Q,β,δ), documents added to the rationale): the
    draft's own subset δ_j, numbered as in the drafter prompt, goes into the first user turn
    after the question block (``Documents:`` then :func:`format_documents`), so the input is
    [Q, δ_j, α_j, β_j, R] and its prefix up to the last document is the same for every draft of
    one row drawn from the same subset. Empty (the default): the paper's §3.3 input, no
    documents, the token ids of every earlier version.

    ``order`` (:data:`VERIFIER_ORDERS`): ``rationale_first`` renders the assistant turn as
    ``Rationale: β\\nAnswer: α``; the spans still name α and β.

    Raises:
        ValueError: unknown ``order``.
    """
    if order not in VERIFIER_ORDERS:
        raise ValueError(f"verifier order {order!r}: choose one of {', '.join(VERIFIER_ORDERS)}")
    slot = Slots()
    q = task_instruction(question.task, question.query, question.choices, question.labels, slot)
    first = len(slot.values)
    if documents:
        q += f"\n\nDocuments:\n{format_documents(documents, slot)}"
    texts, at = [], first  # the slot of each document's text, in format_documents' order
    for document in documents:
        at += bool(document.title.strip())
        texts.append(at if document.text.strip() else None)
        at += bool(document.text.strip())
    a_s, b_s = slot(answer), slot(rationale)
    turn = f"Answer: {a_s}\nRationale: {b_s}" if order == "answer_first" else f"Rationale: {b_s}\nAnswer: {a_s}"
    msgs = [{"role": "user", "content": q},
            {"role": "assistant", "content": turn},
            {"role": "user", "content": reflection_question}]
    ids, spans = encode_template(tokenizer, render_chat(tokenizer, msgs, True), slot.values)
    n = len(slot.values)
    return VerifierPrompt(ids, spans[n - 2], spans[n - 1],
                          tuple(range(0) if i is None else spans[i] for i in texts))


def fitted_verifier_prompt(tokenizer, question: Question, answer: str, rationale: str,
                           reflection_question: str, documents: Sequence[Document], doc_budget: int,
                           max_prompt_tokens: int) -> tuple[VerifierPrompt, bool]:
    """The evidence-aware verifier input [Q, δ_j, α_j, β_j, R] (:func:`verifier_prompt` with
    ``documents``; the paper's variant Score(α|Q,β,δ), documents added to the rationale) fitted to the verifier's context.

    Each document's text is cut to at most ``doc_budget`` tokens of ``tokenizer`` (the
    verifier's; ``retrieval.max_doc_tokens``) by :func:`truncate_documents`; while the input
    exceeds ``max_prompt_tokens`` tokens the budget is multiplied by 0.6 (floor 16) and the
    documents cut again, as :func:`fitted_prompt` does for the drafter. Q, α, β and R are never
    cut: the scores are of the draft as written.

    Returns:
        (prompt, whether any document was cut). An input that does not fit even at 16 tokens
        per document comes back at 16 tokens per document, longer than ``max_prompt_tokens``:
        the caller flags the draft ``verifier_input_too_long``, as without documents.
    """
    budget = doc_budget
    while True:
        cut_docs, cut = truncate_documents(tokenizer, documents, budget)
        prompt = verifier_prompt(tokenizer, question, answer, rationale, reflection_question, documents=cut_docs)
        if len(prompt.token_ids) <= max_prompt_tokens or budget <= 16:
            return prompt, cut
        budget = max(16, int(budget * 0.6))
