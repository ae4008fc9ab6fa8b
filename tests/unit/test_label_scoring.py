"""How many tokens of each label the label scores read (``stages.label_scoring``,
``method="prefix"``): up to the first token that tells a label apart from the others."""

import pytest

from specrag_batch.stages.label_scoring import distinguishing_lengths, score_labels


def test_labels_with_different_first_tokens_need_one_token_each():
    toks = {"SUPPORTS": [50736, 50], "REFUTES": [38029, 53785], "NOT_ENOUGH_INFO": [4183, 6300, 83733, 9068],
            "DISPUTED": [11977, 6221, 1479]}
    assert distinguishing_lengths(toks) == {k: 1 for k in toks}


def test_labels_sharing_first_tokens_are_scored_until_they_part():
    toks = {"NOT_ENOUGH_INFO": [9695, 79, 2680, 63], "NOT_SUPPORTED": [9695, 79, 67, 11957], "SUPPORTS": [1, 2]}
    assert distinguishing_lengths(toks) == {"NOT_ENOUGH_INFO": 3, "NOT_SUPPORTED": 3, "SUPPORTS": 1}


def test_a_label_that_is_a_prefix_of_another_is_scored_whole():
    assert distinguishing_lengths({"A": [5], "AB": [5, 6], "C": [7]}) == {"A": 1, "AB": 2, "C": 1}
    assert distinguishing_lengths({"X": [3, 4]}) == {"X": 1}


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError, match="method must be one of"):
        score_labels(None, [], [], lambda i: [], max_model_len=10, method="first")
