"""The batch-invariance benchmark's layout comparison (benchmarks/batch_invariance.py, issue 9
item 5) on hand-built output records: drafts are paired by their subset (``doc_ids``), not by
position, a layout with fewer drafts is counted rather than truncated, a score set in one layout
and None in the other counts as changed, and rows whose ``correct`` flipped are reported."""

from __future__ import annotations

from batch_invariance import compare_layouts


def _draft(docs, answer, score):
    return {"doc_ids": list(docs), "answer": answer, "score_draft": score}


def _row(answer, score, drafts, correct=None):
    return {"answer": answer, "score": score, "drafts": drafts, "correct": correct}


def test_identical_layouts_change_nothing():
    drafts = [_draft("ab", "yes", -1.0), _draft("cd", "no", -2.0)]
    ref = {"q1": _row("yes", -1.5, drafts, True), "q2": _row("no", -0.5, drafts, False)}
    out = compare_layouts(ref, {k: dict(v) for k, v in ref.items()})
    assert (out["answer_changed"], out["score_changed"], out["draft_answer_changed"],
            out["draft_score_changed"], out["draft_count_changed"], out["drafts_unmatched"],
            out["correct_changed"]) == (0, 0, 0, 0, 0, 0, 0)
    assert out["drafts"] == 4 and out["rows_with_gold"] == 2


def test_drafts_paired_by_subset_and_count_mismatch_counted():
    # Same drafts in another order: nothing changed (zip by index would see 2 changed answers).
    ref = {"q1": _row("yes", -1.0, [_draft("ab", "yes", -1.0), _draft("cd", "no", -2.0)])}
    swapped = {"q1": _row("yes", -1.0, [_draft("cd", "no", -2.0), _draft("ab", "yes", -1.0)])}
    out = compare_layouts(ref, swapped)
    assert (out["drafts"], out["draft_answer_changed"], out["draft_score_changed"]) == (2, 0, 0)
    # One layout lost a draft: the row is counted and the lost draft is unmatched, not dropped.
    fewer = {"q1": _row("yes", -1.0, [_draft("cd", "no", -2.5)])}
    out = compare_layouts(ref, fewer)
    assert out["draft_count_changed"] == 1 and out["drafts_unmatched"] == 1
    assert out["drafts"] == 1 and out["draft_score_changed"] == 1 and out["draft_answer_changed"] == 0


def test_drafts_without_subset_fall_back_to_index():
    ref = {"q1": _row("yes", -1.0, [{"answer": "yes", "score_draft": -1.0},
                                    {"answer": "no", "score_draft": -2.0}])}
    other = {"q1": _row("yes", -1.0, [{"answer": "yes", "score_draft": -1.0}])}
    out = compare_layouts(ref, other)
    assert (out["drafts"], out["draft_count_changed"], out["drafts_unmatched"]) == (1, 1, 1)


def test_score_none_in_one_layout_counts_as_changed():
    ref = {"q1": _row("yes", -1.0, []), "q2": _row(None, None, [])}
    other = {"q1": _row(None, None, []), "q2": _row(None, None, [])}
    out = compare_layouts(ref, other)
    assert out["score_changed"] == 1 and out["answer_changed"] == 1
    assert out["max_abs_score_delta"] is None  # no row has a score in both layouts


def test_correct_changes_reported_by_direction():
    ref = {"q1": _row("yes", -1.0, [], True), "q2": _row("no", -1.0, [], False),
           "q3": _row("no", -1.0, [], None)}
    other = {"q1": _row("no", -1.2, [], False), "q2": _row("yes", -0.9, [], True),
             "q3": _row("yes", -0.9, [], None)}
    out = compare_layouts(ref, other)
    assert (out["rows_with_gold"], out["correct_changed"], out["became_correct"],
            out["became_wrong"]) == (2, 2, 1, 1)
