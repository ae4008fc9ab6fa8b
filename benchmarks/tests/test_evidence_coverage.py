"""benchmarks/evidence_coverage.py on a hand-made cell: which drafts saw the row's own gold
passage (doc id ``<query_id>:gold``; other questions' gold passages are distractors)."""

from __future__ import annotations

import evidence_coverage as ec


def d(doc_ids, answer):
    return {"doc_ids": doc_ids, "answer": answer, "flags": []}


ROWS = [
    {"query_id": "q1", "task": "qa", "gold": ["Paris"], "correct": True,
     "drafts": [d(["q1:gold", "q7:gold"], "Paris"), d(["q3:gold", "q7:gold"], "Rome")]},
    {"query_id": "q2", "task": "qa", "gold": ["Oslo"], "correct": False,   # the other row's gold is a distractor
     "drafts": [d(["q1:gold", "q5:gold"], "Paris"), d(["q5:gold", "q6:gold"], "Oslo")]},
    {"query_id": "q3", "task": "qa", "gold": ["Lima"], "correct": None, "drafts": None},  # an error row
]


def test_coverage_counts_only_the_rows_own_gold_passage():
    c = ec.coverage(ROWS)
    assert c["rows"] == 3 and c["rows_covered"] == 1 and c["uncovered_rows"] == 2
    assert c["subsets_with_gold"] == {0: 2, 1: 1}
    assert c["drafts"] == 4 and c["drafts_covered"] == 1
    assert c["right_covered"] == 1 and c["right_uncovered"] == 1  # q2's "Oslo" without its passage
    assert c["selected_right_covered_rows"] == 1 and c["selected_right_uncovered_rows"] == 0
