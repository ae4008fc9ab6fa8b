"""The decision benchmark's selection-rule comparison (benchmarks/decision_stats.py,
``selection.rule``): stored drafts re-selected with the paper's ``argmax`` and this product's
``answer_vote`` and ``length_normalised``, paired accuracy vs argmax, the share of oracle rows
each rule answers, the verdict chosen on the tuning cells only, on hand-computed fixtures; and
the post-hoc selection against the product's verification and selection stages run with each
``selection.rule`` (FakeEngine verifier, real tokenizer, real Parquet)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import decision_stats as ds

from .conftest import small_config
from .product_runs import verify_and_select

LABELS = ["SUPPORTS", "REFUTES", "NOT_ENOUGH_INFO"]
L = math.log
RULES = ("argmax", "answer_vote", "length_normalised")


def draft(answer, sd, *, sc=0.0, sr=0.0, tokens=(1, 1, 1), flags=()):
    """An output draft with log ρ_draft ``sd``, log ρ_SC ``sc``, log ρ_SR ``sr`` (nats) and
    ``tokens`` = (drafter tokens of β+α, verifier tokens of α, of β)."""
    return {"doc_ids": ["d"], "answer": answer, "written_answer": answer, "rationale": "because",
            "flags": list(flags), "score": None, "score_draft": sd, "score_self_consistency": sc,
            "score_self_reflection": sr, "logprob_yes": sr, "logprob_no": None,
            "tokens_draft": tokens[0], "tokens_answer": tokens[1], "tokens_rationale": tokens[2]}


def row(qid, gold, drafts, *, correct=None, error=None, fast_path=False):
    return {"query_id": qid, "task": "qa", "gold": gold, "answer": None, "correct": correct,
            "drafts": drafts, "error": error, "fast_path": fast_path}


# With tokens (1, 1, 1) and log ρ_SC = log ρ_SR = 0, the per-token measure equals log ρ.
SHORT = dict(sc=-1.0, sr=-0.1, tokens=(4, 1, 1))    # with sd -2: log ρ -3.1, per token -0.5 - 0.5 - 0.1 = -1.1
LONG = dict(sc=-3.0, sr=-0.1, tokens=(40, 2, 28))   # with sd -4: log ρ -7.1, per token -0.1 - 0.1 - 0.1 = -0.3

ROWS = [
    # ρ: Lyon .30 alone, Paris .25 + .20 + .15 = .60. argmax Lyon (wrong), vote Paris (right),
    # length_normalised = argmax here (wrong)
    row("r1", ["Paris"], [draft("Lyon", L(.30)), draft("Paris", L(.25)), draft("paris.", L(.20)),
                          draft("The Paris", L(.15))], correct=False),
    # short Milan (log ρ -3.1, -1.1/token) vs long Rome (-7.1, -0.3/token): argmax and vote
    # Milan (wrong), length_normalised Rome (right)
    row("r2", ["Rome"], [draft("Milan", -2.0, **SHORT), draft("Rome", -4.0, **LONG)], correct=False),
    # Oslo .5 alone vs Bergen .3 + .3 = .6: argmax and length_normalised Oslo (right), vote Bergen
    row("r3", ["Oslo"], [draft("Oslo", L(.5)), draft("Bergen", L(.3)), draft("Bergen", L(.3))], correct=True),
    row("r4", ["Oslo"], [draft("Oslo", -1.0, sc=None, sr=None)] * 2, correct=True, fast_path=True),  # kept
    row("r5", None, [draft("Lyon", L(.30)), draft("Paris", L(.25))]),                             # ungraded
    row("r6", ["Lima"], None, error="row 5: field 'documents': no documents"),                   # wrong, kept
    # no draft right: every rule wrong, no oracle row
    row("r7", ["Lima"], [draft("Quito", L(.4)), draft("Bogota", L(.3))], correct=False),
]

# Oslo short (log ρ -3.1, -1.1/token) vs Bergen long (-7.1, -0.3/token) and two Bergen at -3.5
# (-3.5/token): Bergen's mass log(e^-7.1 + 2 e^-3.5) = -2.78 > -3.1. Only argmax is right.
ONLY_ARGMAX = row("r8", ["Oslo"], [draft("Oslo", -2.0, **SHORT), draft("Bergen", -4.0, **LONG),
                                   draft("Bergen", -3.4, sr=-0.1), draft("Bergen", -3.4, sr=-0.1)], correct=True)


def test_rules_reselect_hand_computed_drafts():
    picks = {r: [ds.reselect_index(x, seed=0, rule=r) for x in ROWS + [ONLY_ARGMAX]] for r in RULES}
    assert picks == {"argmax": [0, 0, 0, None, 0, None, 0, 0],
                     "answer_vote": [1, 0, 1, None, 0, None, 0, 2],
                     "length_normalised": [0, 1, 0, None, 0, None, 0, 1]}
    units = ds.rule_rows(ROWS, {}, LABELS, seed=0)
    assert [u["query_id"] for u in units] == ["r1", "r2", "r3", "r4", "r6", "r7"]
    assert [u["argmax"] for u in units] == [False, False, True, True, False, False]
    assert [u["answer_vote"] for u in units] == [True, False, False, True, False, False]
    assert [u["length_normalised"] for u in units] == [False, True, True, True, False, False]
    assert [u["oracle"] for u in units] == [True, True, True, True, False, False]
    assert [u["different"] for u in units] == [True, True, True, False, False, False]
    with pytest.raises(ValueError, match="rule"):
        ds.reselect_index(ROWS[0], seed=0, rule="vote")


def test_rule_figures_hand_computed():
    f = ds.rule_figures(ds.rule_rows(ROWS, {}, LABELS, seed=0), reps=300)
    assert (f["n"], f["n_reselected"], f["n_different"], f["n_oracle"], f["baseline"]) == (6, 4, 3, 4, "argmax")
    assert f["accuracy"] == {"argmax": pytest.approx(2 / 6), "answer_vote": pytest.approx(2 / 6),
                             "length_normalised": pytest.approx(3 / 6)}
    # oracle rows r1 r2 r3 r4: argmax right on r3 r4, vote on r1 r4, length_normalised on r2 r3 r4
    assert f["recovered"] == {"argmax": 0.5, "answer_vote": 0.5, "length_normalised": 0.75}
    vote, ln = f["vs_baseline"]["answer_vote"], f["vs_baseline"]["length_normalised"]
    # vote: right only on r1, argmax only on r3 -> b = c = 1, p = 1; length_normalised: b = 1 (r2)
    assert vote["diff"] == 0.0 and vote["mcnemar"] == {"n": 6, "b": 1, "c": 1, "p": 1.0} and vote["n_different"] == 2
    assert ln["diff"] == pytest.approx(1 / 6) and ln["mcnemar"] == {"n": 6, "b": 1, "c": 0, "p": 1.0}
    assert ln["n_different"] == 1 and ln["ci95"][0] <= 1 / 6 <= ln["ci95"][1]
    # the stored rows' own outcome is argmax's: the benchmark's oracle figures agree with the rule's
    o = ds.oracle(ROWS, {}, LABELS)
    assert (o["n_oracle"], o["recovered"]) == (f["n_oracle"], f["recovered"]["argmax"])
    assert ds.rule_figures(ds.rule_rows(ROWS, {}, LABELS, seed=0), reps=300) == f  # seeded


def copies(r, n, tag):
    return [{**r, "query_id": f"{r['query_id']}-{tag}-{i}"} for i in range(n)]


def cell(rows):
    return {"rows": rows, "shards": [], "roles": {}}


def test_rule_verdict_comes_from_the_tuning_cells_only():
    # tuning: r2 (only length_normalised right) ten times in each of two datasets;
    # reported: r8 (only argmax right), which must not decide
    res = ds.summarise({"d": {"speculative": cell(copies(ONLY_ARGMAX, 10, "rep"))}}, {"d": {}}, LABELS, reps=200,
                       tuning={"d": cell(copies(ROWS[1], 10, "d")), "e": cell(copies(ROWS[1], 10, "e"))})
    sr = res["selection_rule"]
    tuned = sr["tuning"]["pooled"]
    assert tuned["n"] == 20 and tuned["datasets"] == ["d", "e"]
    assert tuned["vs_baseline"]["length_normalised"]["ci95"] == [1.0, 1.0]
    assert tuned["vs_baseline"]["answer_vote"]["ci95"] == [0.0, 0.0]
    assert ds.verdict_variant(tuned) == "length_normalised"
    assert ds.verdict_variant(sr["reported"]["pooled"]) == "argmax"  # shown, not the verdict
    text = ds.verdicts(res)
    line = next(x for x in text.splitlines() if "**Selection rule**" in x)
    assert "the tuning cells favour **length_normalised**" in line and "n = 20 rows" in line
    assert "length_normalised 100.0% vs argmax 0.0%, difference +100.0 points [+100.0, +100.0]" in line
    assert "of the 20 oracle rows answered right: argmax 0.0%, answer_vote 0.0%, length_normalised 100.0%" in line
    table = ds.tables(res)
    assert "| tuning (chooses the default) | pooled | 20 (20; 20) | 0.0 | 0.0 | 100.0 |" in table
    assert "| 20 | 0.0 | 0.0 | 100.0 |" in table  # oracle rows, recovered per rule
    assert "| reported (not used for choosing) | d | 10 (10; 10) | 100.0 | 0.0 | 0.0 |" in table
    # tuning rows pulling both ways: no interval clears 0
    mixed = ds.summarise({}, {"d": {}}, LABELS, reps=200, tuning={"d": cell(ROWS)})
    assert ds.verdict_variant(mixed["selection_rule"]["tuning"]["pooled"]) == "undecided"
    assert "**undecided**: the tuning cells favour neither" in next(
        x for x in ds.verdicts(mixed).splitlines() if "**Selection rule**" in x)
    assert "**Selection rule** (`selection.rule`, chosen on the tuning cells only): **not measured**" in ds.verdicts(
        ds.summarise({}, {}, LABELS, reps=50))


def test_post_hoc_rules_equal_a_run_with_each_rule():
    """A run with ``selection.rule: argmax``, written to Parquet, re-selected with each rule
    after the fact, picks the draft the product's verification and selection stages pick when
    run with that rule on the same drafts (same verifier scores)."""
    from specrag_batch.core.records import Draft, QueryRow

    from .fakes import FakeEngine

    engine = FakeEngine()

    def rows():
        rng = np.random.default_rng(5)
        out = []
        for i in range(40):
            # 4 drafts over 2 answers, so an answer can win by the mass of two drafts; rationales
            # of one length, so log ρ_SC stays within a few nats; drafter tokens vary, so the
            # per-token measure ranks differently
            drafts = [Draft([f"d{j}"], f"answer {i} {j % 2}", f"rationale {j} of row {i}.",
                            score_draft=float(-3 * rng.random()), tokens_draft=int(rng.integers(5, 60)))
                      for j in range(4)]
            out.append(QueryRow(i, f"q{i}", f"Question {i}?", "qa", gold=[f"answer {i} 0"], drafts=drafts))
        return out

    picked = {}
    for rule in RULES:
        # the paper's three terms of log ρ, as configs/bench.yaml's cells ran them
        cfg = small_config(**{"selection.rule": rule, "selection.use_self_consistency": True})
        picked[rule], out = verify_and_select(rows(), cfg, engine)
        if rule == "argmax":
            stored = out
    for rule in RULES:
        assert [ds.reselect_index(r, seed=0, rule=rule) for r in stored] == picked[rule]
    # the rules disagree on some rows, so the check above has teeth
    for rule in RULES[1:]:
        assert sum(a != b for a, b in zip(picked["argmax"], picked[rule])) >= 3


# ρ_SC misleads: the right draft A has the better ρ_draft, the wrong B the better ρ_SC. log ρ:
# A -1 - 10 - 0.1 = -11.1, B -5 - 2 - 0.1 = -7.1 (paper: B). Without ρ_SC A -1.1 > B -5.1;
# without ρ_draft B -2.1 > A -10.1; without ρ_SR B -7 > A -11.
SC_MISLEADS = row("t1", ["Oslo"], [draft("Oslo", -1.0, sc=-10.0, sr=-0.1), draft("Bergen", -5.0, sc=-2.0, sr=-0.1)],
                  correct=False)


def test_score_terms_are_chosen_on_the_tuning_cells_only():
    """The score-terms comparison (``selection.use_*``: the paper's log ρ vs one term left out,
    Table 3) picks each row's draft by the product's selection on the stored scores, and its
    verdict comes from the tuning cells, not from the reported ones."""
    units = ds.term_rows([SC_MISLEADS, ROWS[3]], {}, LABELS, seed=0)
    assert [u["picked"] for u in units] == [
        {"paper": 1, "without_draft_score": 1, "without_self_consistency": 0, "without_self_reflection": 1},
        {"paper": None, "without_draft_score": None, "without_self_consistency": None,
         "without_self_reflection": None}]  # the fast-path row keeps its answer
    assert [u["without_self_consistency"] for u in units] == [True, True] and units[0]["paper"] is False
    flipped = {**SC_MISLEADS, "query_id": "t2", "gold": ["Bergen"], "correct": True}  # ρ_SC right here
    res = ds.summarise({"d": {"speculative": cell(copies(flipped, 10, "rep"))}}, {"d": {}}, LABELS, reps=200,
                       tuning={"d": cell(copies(SC_MISLEADS, 10, "d")), "e": cell(copies(SC_MISLEADS, 10, "e"))})
    tuned = res["score_terms"]["tuning"]["pooled"]
    assert tuned["n"] == 20 and tuned["baseline"] == "paper"
    assert tuned["vs_baseline"]["without_self_consistency"]["ci95"] == [1.0, 1.0]
    assert ds.verdict_variant(tuned) == "without_self_consistency"
    reported = res["score_terms"]["reported"]["pooled"]  # shown, not the verdict
    assert reported["vs_baseline"]["without_self_consistency"]["ci95"] == [-1.0, -1.0]
    assert ds.verdict_variant(reported) == "undecided"  # two variants tie with paper there
    line = next(x for x in ds.verdicts(res).splitlines() if "**Score terms**" in x)
    assert "the tuning cells favour **without_self_consistency**" in line and "n = 20 rows" in line
    table = ds.tables(res)
    assert "| tuning (chooses the default) | pooled | 20 (20; 20) | 0.0 | 0.0 | 100.0 | 0.0 |" in table
    assert "| reported (not used for choosing) | d | 10 (10; 10) | 100.0 | 100.0 | 0.0 | 100.0 |" in table


def test_post_hoc_verifier_variants_equal_runs_of_the_default_and_without_the_verifier():
    """The verifier comparison (``VERIFIER_VARIANTS``, declared 2026-12-04): ``default``
    re-selected from a paper-terms run's stored drafts is what a run with the default config
    (log ρ_SC off) picks; ``draft_score_only`` is what a run with ``use_self_reflection: false``
    as well picks, a run whose verification stage scores nothing. The figures count the verified
    drafts per row the default needs and none for ``draft_score_only``, and the cheaper-variant
    verdict reads them."""
    from specrag_batch.core.records import Draft, QueryRow

    from .fakes import FakeEngine

    engine = FakeEngine()

    def rows():
        rng = np.random.default_rng(11)
        return [QueryRow(i, f"q{i}", f"Question {i}?", "qa", gold=[f"answer {i} 0"],
                         drafts=[Draft([f"d{j}"], f"answer {i} {j}", f"rationale {j} of row {i}.",
                                       score_draft=float(-0.2 * rng.random())) for j in range(3)])
                for i in range(30)]

    _, stored = verify_and_select(rows(), small_config(**{"selection.use_self_consistency": True}), engine)
    default, _ = verify_and_select(rows(), small_config(), engine)
    no_verifier_rows = rows()
    without, _ = verify_and_select(no_verifier_rows, small_config(**{"selection.use_self_reflection": False}), engine)
    assert all(d.score_self_reflection is None for r in no_verifier_rows for d in r.drafts)  # no verifier pass
    assert [ds.reselect_index(r, seed=0, **ds.VERIFIER_VARIANTS["default"]) for r in stored] == default
    assert [ds.reselect_index(r, seed=0, **ds.VERIFIER_VARIANTS["draft_score_only"]) for r in stored] == without
    assert sum(a != b for a, b in zip(default, without)) >= 3  # ρ_SR within 0.2 nats of ρ_draft: picks differ
    units = ds.verifier_rows(stored, {}, LABELS, seed=0)
    f = ds.verifier_figures(units, reps=200)
    assert f["cost"]["default"] == {"drafts": 3.0, "verifier": 3.0}
    assert f["cost"]["draft_score_only"] == {"drafts": 3.0, "verifier": 0.0}
    verdict = ds.verdict_cheaper(f)
    assert verdict == ("draft_score_only" if f["vs_baseline"]["draft_score_only"]["ci95"][0] > -ds.NON_INFERIORITY_MARGIN
                       else "default")


def test_default_selection_vs_standard_reselects_with_the_default_terms(tmp_path, capsys):
    """benchmarks/default_selection_vs_standard.py: a paper-terms cell's rows (``--arm``, e.g. a
    tuned drafter's) re-selected with log ρ_draft alone (the default since 2026-12-04; ``--terms
    without_self_consistency``, the default before it, leaves out log ρ_SC only) and paired with
    Standard RAG's rows, or (``--versus``) with another speculative cell selected the same way;
    an adaptive cell is refused (its stopped rows hold one round's drafts)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import default_selection_vs_standard as dvs

    # q1: ρ_SC favours the wrong draft, so the paper's pick is wrong and both defaults' right;
    # q3: ρ_SR favours the wrong draft: without ρ_SC it is still wrong, with ρ_draft alone right
    spec = [row("q1", ["Paris"], [draft("Paris", L(0.9), sc=-9.0), draft("Lyon", L(0.5), sc=-1.0)], correct=False),
            row("q2", ["Rome"], [draft("Rome", L(0.9)), draft("Milan", L(0.1))], correct=True),
            row("q3", ["Oslo"], [draft("Oslo", L(0.6), sr=-5.0), draft("Bergen", L(0.5), sr=-0.1)], correct=False)]
    std = [row("q1", ["Paris"], [draft("Lyon", L(0.5))], correct=False),
           row("q2", ["Rome"], [draft("Milan", L(0.5))], correct=False),
           row("q3", ["Oslo"], [draft("Oslo", L(0.5))], correct=True)]
    for arm, rows_ in (("speculative-tuned-qwen", spec), ("standard", std),
                       ("input", [{"query_id": r["query_id"], "choices": None} for r in spec])):
        (tmp_path / "hotpotqa" / arm).mkdir(parents=True)
        pq.write_table(pa.Table.from_pylist(rows_), tmp_path / "hotpotqa" / arm / "part-0000.parquet")
    dvs.main(["--runs", str(tmp_path)])  # no speculative cell here
    assert capsys.readouterr().out.startswith("no dataset of")
    dvs.main(["--runs", str(tmp_path), "--arm", "speculative-tuned-qwen"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("hotpotqa: n = 3, default selection 100.0% (paper's log ρ 33.3%), standard 33.3%, "
                             "difference +66.7")
    assert out[1].startswith("pooled: n = 3, default selection 100.0%") and out[1].endswith("(2/0)")
    dvs.main(["--runs", str(tmp_path), "--arm", "speculative-tuned-qwen", "--terms", "without_self_consistency"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("hotpotqa: n = 3, default selection 66.7% (paper's log ρ 33.3%), standard 33.3%")
    # --versus a speculative cell: selected again with the same terms (its stored outcome, 1 of 3
    # right, is the paper's pick)
    (tmp_path / "hotpotqa" / "speculative").mkdir()
    pq.write_table(pa.Table.from_pylist(spec), tmp_path / "hotpotqa" / "speculative" / "part-0000.parquet")
    dvs.main(["--runs", str(tmp_path), "--arm", "speculative-tuned-qwen", "--versus", "speculative"])
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("hotpotqa: n = 3, default selection 100.0% (paper's log ρ 33.3%), speculative 100.0%, "
                             "difference +0.0")
    adaptive = [{**r, "draft_rounds": 1} for r in spec]
    pq.write_table(pa.Table.from_pylist(adaptive), tmp_path / "hotpotqa" / "speculative-tuned-qwen" / "part-0000.parquet")
    with pytest.raises(SystemExit, match="drafted adaptively"):
        dvs.main(["--runs", str(tmp_path), "--arm", "speculative-tuned-qwen"])
