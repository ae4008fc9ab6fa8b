"""Stage 1, retrieval: each row's top-N documents, given or searched in the index (dense, BM25 or
hybrid: ``retrieval.method``)."""

from __future__ import annotations

from typing import Sequence

from ..config import RunConfig
from ..core.records import Document, ErrorReason, Flag, QueryRow, add_flag, visible_text
from ..index import retriever_for
from .base import Stage


def prepare_documents(row: QueryRow, documents: list[Document] | None, top_n: int) -> list[Document]:
    """Top-N in given order, without empty or duplicate passages (flags on ``row`` record
    removals). Emptiness and duplicates are judged on the visible text (:func:`visible_text`),
    so a copy with zero-width spaces or a BOM is a duplicate and a passage of invisible
    characters is empty; kept passages keep their text as given."""
    kept, seen = [], set()
    for document in documents or []:
        key = visible_text(document.text)
        if not key:
            add_flag(row.flags, Flag.EMPTY_DOCUMENTS_REMOVED)
            continue
        if key in seen:
            add_flag(row.flags, Flag.DUPLICATE_DOCUMENTS_REMOVED)
            continue
        seen.add(key)
        kept.append(document)
        if len(kept) == top_n:
            break
    return kept


class Retrieval(Stage):
    """Rows without documents are searched in the index (``retrieval.index``, by
    ``retrieval.method``, one batched search per chunk); every row keeps its top-N (``retrieval.top_n``) non-empty,
    distinct documents. A row left with none gets an error on field ``documents`` and flag
    ``no_documents``."""

    name = timer_name = "retrieval"
    reads = ("query", "documents")
    writes = ("documents", "top_documents", "num_documents")

    def __init__(self, config: RunConfig):
        self.config = config

    def _search(self, rows: Sequence[QueryRow]) -> None:
        """Rows without documents get the index's top-N (one batched search)."""
        retrieval = self.config.retrieval
        need = [row for row in rows if row.error is None and row.documents is None]
        if need and retrieval.index:
            found = retriever_for(retrieval).search([row.query for row in need], retrieval.top_n)
            for row, documents in zip(need, found):
                row.documents = documents

    def __call__(self, rows: Sequence[QueryRow]) -> None:
        retrieval = self.config.retrieval
        self._search(rows)
        for row in rows:
            if row.error is not None:
                continue
            if row.documents is None:
                row.fail("documents", "missing and no retrieval index configured (retrieval.index)",
                         code=ErrorReason.NO_RETRIEVAL_INDEX)
                row.flags.append(Flag.NO_DOCUMENTS)
                continue
            top = prepare_documents(row, row.documents, retrieval.top_n)
            row.num_documents = len(top)
            if top:
                row.top_documents = top
            else:
                row.fail("documents", "no documents (N = 0)", code=ErrorReason.NO_DOCUMENTS)
                row.flags.append(Flag.NO_DOCUMENTS)


class WiderRetrieval(Retrieval):
    """The ``wider`` fallback's retrieval: every row is searched in the index
    (``retrieval.index``, required) for N' = ``retrieval.top_n`` of the config it is given
    (the run's ``retrieval.fallback_top_n``); the row's own documents (all given in the input,
    or the first pass's search) come first, then the index's passages not already among them
    (compared by :func:`visible_text`, not flagged as duplicates), cut to the N' best as
    :class:`Retrieval` does."""

    name = "wider_retrieval"

    def _search(self, rows: Sequence[QueryRow]) -> None:
        active = [row for row in rows if row.error is None]
        if not active:
            return
        # N' more than the longest own list: the index's hits that repeat a row's own
        # documents still leave N' distinct documents where the index has them
        k = self.config.retrieval.top_n + max(len(row.documents or []) for row in active)
        found = retriever_for(self.config.retrieval).search([row.query for row in active], k)
        for row, documents in zip(active, found):
            own = list(row.documents or [])
            seen = {visible_text(d.text) for d in own}
            row.documents = own + [d for d in documents if visible_text(d.text) not in seen]
