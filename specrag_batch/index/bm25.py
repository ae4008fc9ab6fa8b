"""The lexical part of an index: BM25 (Lucene's variant, k1 = 1.5, b = 0.75) with bm25s, which
scores a query as a sum of columns of a sparse (CSC) document x term matrix.

bm25s builds that matrix from every document's token list held in memory; here it is built in
two streaming passes so memory stays bounded by a batch and the index itself: the first
tokenises the passages batch by batch (bm25s's tokenizer: lower case, English stop words, no
stemming; words split by :func:`split`, CJK text as overlapping character bigrams), counts document frequencies and spills each (document, term, frequency) triple to
a scratch file; the second writes each triple's score into its column of memory-mapped CSC
arrays. The files are the ones ``bm25s.BM25.save`` writes, so ``bm25s.BM25.load(mmap=True)``
serves them; ``tests/unit/test_index_bm25.py`` checks the scores equal bm25s's own index.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from pathlib import Path
from typing import Sequence

import numpy as np

K1, B = 1.5, 0.75
_TRIPLE = np.dtype([("doc", np.int32), ("term", np.int32), ("tf", np.float32)])
_PASS2_BLOCK = 4_000_000


def _bm25s():
    """The bm25s module, imported with numba hidden so that it takes its numpy backend: bm25s
    imports numba when it can, and a process where numba's llvmlite is loaded cannot start a
    vLLM CPU engine afterwards (vLLM's kernel registration trips over llvmlite's wrappers)."""
    import sys

    if "bm25s" in sys.modules or "numba" in sys.modules:
        import bm25s

        return bm25s
    sys.modules["numba"] = None  # `import numba` raises ImportError while bm25s is imported
    try:
        import bm25s
    finally:
        del sys.modules["numba"]
    return bm25s


TOKENIZER_VERSION = 2
"""The word splitting of an index's BM25 part, recorded in ``meta.json`` (``bm25.tokenizer_version``)
so that queries are split as its passages were: 2 = :func:`split`; 1 (an index without the key)
= bm25s's default, where a run of CJK characters was one word."""
TOKENIZER = "lower case, English stop words, no stemming (bm25s); CJK as overlapping character bigrams"
"""The tokenizer in words, as ``meta.json`` (``bm25.tokenizer``) records it."""

_CJK = ("\u1100-\u11ff\u3040-\u309f\u30a0-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
        "\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f")
"""Han (CJK unified ideographs, extensions, compatibility), Hiragana, Katakana (and its
half-width forms) and Hangul (syllables and jamo): the scripts Lucene's CJK analyzer splits
into bigrams."""
_CJK_CHAR = re.compile(f"[{_CJK}]")
_TOKENS = re.compile(f"((?:(?=\\w)[{_CJK}])+)|((?:(?![{_CJK}])\\w){{2,}})")
_WORDS = re.compile(r"(?u)\b\w\w+\b")  # bm25s's default splitter (tokenizer version 1)


def split(text: str) -> list[str]:
    """The words of ``text`` (already lower-cased) for BM25, queries and passages alike: runs of
    2+ word characters, as bm25s splits them, except that a run of CJK characters (:data:`_CJK`:
    scripts written without spaces between words) becomes its overlapping character bigrams, as
    Lucene's CJK analyzer does (``東京都`` -> ``東京``, ``京都``), and a CJK character standing
    alone stays one word. So a query for a two-character word finds the passages whose text
    holds it anywhere, not only those where it stands between spaces or punctuation. Letters
    of other scripts next to CJK text are a word of their own (``iphone手机`` -> ``iphone``,
    ``手机``)."""
    if not _CJK_CHAR.search(text):
        return _WORDS.findall(text)
    out = []
    for cjk, other in _TOKENS.findall(text):
        if other:
            out.append(other)
        elif len(cjk) == 1:
            out.append(cjk)
        else:
            out.extend(cjk[i:i + 2] for i in range(len(cjk) - 1))
    return out


def new_tokenizer(version: int = TOKENIZER_VERSION):
    """bm25s's tokenizer as the index uses it: lower case, words by :func:`split` (``version``
    1: bm25s's own splitter, for an index built before), English stop words removed, no
    stemming."""
    bm25s = _bm25s()

    splitter = split if version >= 2 else _WORDS.pattern
    return bm25s.tokenization.Tokenizer(lower=True, splitter=splitter, stopwords="en", stemmer=None)


class BM25Builder:
    """Streams passages into a BM25 index: :meth:`add` batches in index order, then
    :meth:`finish` into a directory. ``scratch`` holds the spilled triples (12 bytes per
    distinct term of a passage)."""

    def __init__(self, scratch: Path):
        self.tokenizer = new_tokenizer()
        self._spill_path = Path(scratch) / "bm25-triples.bin"
        self._spill = open(self._spill_path, "wb")
        self._df = np.zeros(0, np.int64)
        self._lengths: list[np.ndarray] = []
        self.documents = 0

    def add(self, texts: Sequence[str]) -> None:
        """Tokenise the next passages (their order is their row in the index)."""
        ids = list(self.tokenizer.streaming_tokenize(list(texts), update_vocab=True, allow_empty=True))
        lengths = np.fromiter(map(len, ids), np.int64, len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), np.int64, int(lengths.sum()))
        vocab = len(self.tokenizer.get_vocab_dict())
        doc = np.repeat(np.arange(len(ids), dtype=np.int64), lengths)
        keys, tf = np.unique(doc * vocab + flat, return_counts=True)
        terms = keys % vocab
        triples = np.empty(len(keys), _TRIPLE)
        triples["doc"], triples["term"], triples["tf"] = keys // vocab + self.documents, terms, tf
        triples.tofile(self._spill)
        if len(self._df) < vocab:
            self._df = np.concatenate([self._df, np.zeros(vocab - len(self._df), np.int64)])
        self._df += np.bincount(terms, minlength=vocab)[:vocab]
        self._lengths.append(lengths.astype(np.int32))
        self.documents += len(ids)

    def finish(self, out: Path) -> dict:
        """Write the index into directory ``out`` (bm25s's file names) and remove the scratch
        file; returns its summary (documents, vocabulary, non-zero scores, the tokenizer and
        its :data:`TOKENIZER_VERSION`)."""
        bm25s = _bm25s()

        self._spill.close()
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        vocab = len(self.tokenizer.get_vocab_dict())
        df = np.concatenate([self._df, np.zeros(vocab - len(self._df), np.int64)])
        n = self.documents
        doc_len = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int32)
        avg = float(doc_len.mean()) if n else 1.0
        idf = np.log(1 + (n - df + 0.5) / (df + 0.5)).astype(np.float32)  # Lucene's idf, as bm25s
        indptr = np.zeros(vocab + 1, np.int64)
        np.cumsum(df, out=indptr[1:])
        nnz = int(indptr[-1])
        data = np.lib.format.open_memmap(out / "data.csc.index.npy", "w+", np.float32, (nnz,))
        indices = np.lib.format.open_memmap(out / "indices.csc.index.npy", "w+", np.int32, (nnz,))
        cursor = indptr[:-1].copy()
        triples = np.memmap(self._spill_path, _TRIPLE, "r") if nnz else np.zeros(0, _TRIPLE)
        for start in range(0, nnz, _PASS2_BLOCK):
            part = np.asarray(triples[start:start + _PASS2_BLOCK])
            order = np.argsort(part["term"], kind="stable")  # within a term, documents stay ascending
            terms, docs, tf = part["term"][order].astype(np.int64), part["doc"][order], part["tf"][order]
            new = np.flatnonzero(np.diff(terms)) + 1
            starts = np.repeat(np.r_[0, new], np.diff(np.r_[0, new, len(terms)]))
            pos = cursor[terms] + (np.arange(len(terms)) - starts)
            norm = K1 * ((1 - B) + B * doc_len[docs] / avg)
            data[pos] = idf[terms] * (tf / (norm + tf))
            indices[pos] = docs
            cursor += np.bincount(terms, minlength=vocab)
        data.flush()
        indices.flush()
        del data, indices, triples
        np.save(out / "indptr.csc.index.npy", indptr)
        word_to_id = self.tokenizer.get_vocab_dict()
        (out / "vocab.index.json").write_text(json.dumps(word_to_id, ensure_ascii=False), encoding="utf-8")
        params = {"k1": K1, "b": B, "delta": 0.5, "method": "lucene", "idf_method": "lucene", "dtype": "float32",
                  "int_dtype": "int32", "num_docs": n, "version": bm25s.__version__, "backend": "numpy"}
        (out / "params.index.json").write_text(json.dumps(params, indent=2))
        self.tokenizer.save_vocab(str(out))
        self.tokenizer.save_stopwords(str(out))
        self._spill_path.unlink(missing_ok=True)
        return {"documents": n, "vocabulary": vocab, "nonzero": nnz, "tokenizer": TOKENIZER,
                "tokenizer_version": TOKENIZER_VERSION}


class BM25Index:
    """A BM25 index written by :class:`BM25Builder`, memory-mapped (``bm25s.BM25.load``): bm25s's
    tokenizer and CSC score matrix, scored over the postings a query touches (:meth:`search`).
    ``tokenizer_version``: the index's (``meta.json``), so queries are split as its passages
    were; an index of version 1 holding CJK words is served, with a warning to rebuild it.

    Raises (constructor):
        ValueError: a tokenizer version newer than this version of specrag-batch knows."""

    def __init__(self, directory: Path, tokenizer_version: int = TOKENIZER_VERSION):
        bm25s = _bm25s()

        if tokenizer_version > TOKENIZER_VERSION:
            raise ValueError(f"{directory}: BM25 tokenizer version {tokenizer_version} is newer than this version "
                             f"reads ({TOKENIZER_VERSION}); upgrade specrag-batch or rebuild the index")
        self.tokenizer = new_tokenizer(tokenizer_version)
        self.tokenizer.load_vocab(str(directory))
        if tokenizer_version < 2 and any(_CJK_CHAR.search(w) for w in self.tokenizer.get_vocab_dict()):
            logging.getLogger(__name__).warning(
                "%s: this BM25 index was built before CJK text was split into character bigrams: a Chinese, "
                "Japanese or Korean word inside a longer run of CJK text is not found; rebuild it with "
                "`specrag-batch index build`", directory)
        self.tokenizer.load_stopwords(str(directory))
        self.retriever = bm25s.BM25.load(str(directory), mmap=True, load_vocab=True)
        self.documents = int(self.retriever.scores["num_docs"])

    def search(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` (scores, row ids) of each query, best first (ties: lower row first), as
        arrays (q, k); -1 past the last passage holding a query term, so a query sharing no
        term with the corpus finds nothing (bm25s would return passages without terms).

        A query's score of a passage is bm25s's (the sum of its terms' column entries, a
        term repeated in the query counted again), computed over the passages holding a
        query term only: O(postings touched), not O(corpus) as bm25s's numpy scorer, whose
        ``np.add.at`` over a dense score vector per query made 1M passages serve about 5
        queries a second here (benchmarks/index_scale.md)."""
        k = max(1, min(k, self.documents))
        scores = np.zeros((len(queries), k), np.float32)
        rows = np.full((len(queries), k), -1, np.int64)
        if not queries:
            return scores, rows
        ids = self.tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids", show_progress=False)
        empty = self.tokenizer.get_vocab_dict().get("")
        matrix = self.retriever.scores
        data, indices, indptr = matrix["data"], matrix["indices"], matrix["indptr"]
        for i, terms in enumerate(ids):
            terms = np.asarray([t for t in terms if t != empty], dtype=np.int64)
            if not terms.size:
                continue
            starts, lengths = indptr[terms], indptr[terms + 1] - indptr[terms]
            total = int(lengths.sum())
            if not total:
                continue
            pos = np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(total)
            docs, where = np.unique(np.asarray(indices[pos]), return_inverse=True)
            summed = np.bincount(where, weights=np.asarray(data[pos], dtype=np.float64)).astype(np.float32)
            n = min(k, len(docs))
            best = np.lexsort((docs, -summed))[:n]  # score descending, then row ascending
            scores[i, :n], rows[i, :n] = summed[best], docs[best]
        return scores, rows
