"""Documents that differ only by invisible characters are one document; a passage of
invisible characters is empty (NFKC + Unicode format characters dropped before the checks)."""

import pytest

from specrag_batch.stages.retrieval import prepare_documents as _prepare_documents
from specrag_batch.core.schema import Document, QueryRow

TEXT = "The yen is the official currency of Japan."


def prepare(*texts, top_n=10):
    row = QueryRow(row_index=0, query_id="q", query="Currency of Japan?", task="qa")
    docs = [Document(doc_id=f"d{i}", title="", text=t) for i, t in enumerate(texts)]
    return row, _prepare_documents(row, docs, top_n)


@pytest.mark.parametrize("copy", [
    TEXT.replace(" ", " \u200b"),            # zero-width spaces
    "\ufeff" + TEXT,                          # leading BOM
    TEXT.replace("yen", "y\u200de\u200cn"),  # zero-width joiner / non-joiner inside a word
    TEXT.replace("currency", "cur\u00adrency"),  # soft hyphen
    TEXT.replace(" ", "\u2063 "),            # invisible separator
    TEXT.replace(" ", "\u00a0"),             # no-break spaces (NFKC -> space)
    "\uff34he yen is the official currency of \uff2aapan.",  # full-width letters (NFKC)
])
def test_copy_with_invisible_or_compatibility_characters_is_a_duplicate(copy):
    row, kept = prepare(TEXT, copy)
    assert [d.doc_id for d in kept] == ["d0"]
    assert kept[0].text == TEXT  # the kept passage keeps its text as given
    assert row.flags == ["duplicate_documents_removed"]


@pytest.mark.parametrize("blank", ["\u200b\u200b", "\ufeff", "\u200b \u2060\ufeff\u00ad", "\u00a0\u2063"])
def test_passage_of_invisible_characters_is_empty(blank):
    row, kept = prepare(blank, TEXT)
    assert [d.doc_id for d in kept] == ["d1"]
    assert row.flags == ["empty_documents_removed"]


def test_different_passages_and_top_n_unchanged():
    row, kept = prepare(TEXT, "Paris is the capital of France.", "Tokyo is in Japan.", top_n=2)
    assert [d.doc_id for d in kept] == ["d0", "d1"] and row.flags == []
