"""The run report's Prefect artifacts are keyed by the run's output (issue 40 item 9): runs into
one output add versions to one history, runs into other outputs (nightly partitions, backfills,
ad-hoc runs) keep their own, and every key passes Prefect's own validation whatever the output
is called (docs/operations.md, "Run report"). No Prefect server: the artifact calls are
recorded, the keys checked with Prefect's client schema."""

from __future__ import annotations

import pytest

HOSTILE = [
    "s3://specrag-data/answers/date=2026-11-28",
    "s3://specrag-data/answers/date=2026-11-29",
    "/tmp/out/demo",
    "s3://Bucket/OUT",
    "s3://bucket/out",
    "/données/été résultats",            # accents
    "/数据/输出",                          # nothing left after sanitising
    "/Ⅻ/ｆｕｌｌｗｉｄｔｈ/🙂",               # compatibility forms, an emoji
    "",                                   # empty
    "///---___",                          # only separators
    "/tmp/a b/c\td\ne",                   # spaces, a tab, a newline
    "s3://b/a%2Fb?versionId=1#frag*[x]",  # URL-ish characters in a key
    "s3://b/" + "very-long-name/" * 80,   # very long
    "s3://b/" + "x" * 2000,
    "s3://u:<redacted sha256:0123456789ab>@host/out",  # a redacted URL password
    "/tmp/bad-\udcff-bytes",              # an undecodable file name (surrogate escape)
    "C:\\Users\\me\\out",
]


def _prefect_accepts(key: str) -> None:
    """Prefect's own check of an artifact key (the client's create schema)."""
    from prefect.client.schemas.actions import ArtifactCreate

    ArtifactCreate(key=key, type="markdown", data="x")


@pytest.mark.parametrize("output", HOSTILE, ids=range(len(HOSTILE)))
def test_every_output_gets_a_valid_short_stable_key(output):
    from specrag_batch.run.report.publish import artifact_key

    key = artifact_key(output)
    _prefect_accepts(key)
    _prefect_accepts(f"{key}-table")
    assert key.startswith("specrag-run-report-") and "--" not in key and not key.endswith("-")
    assert len(key) <= 80, key
    assert artifact_key(output) == key  # the same output, the same history


def test_outputs_keep_separate_histories():
    from specrag_batch.run.report.publish import artifact_key

    keys = [artifact_key(o) for o in HOSTILE]
    assert len(set(keys)) == len(HOSTILE)  # also where the readable parts agree (case, scripts)
    assert "date-2026-11-28" in artifact_key(HOSTILE[0])  # the output's tail is readable


def test_published_artifacts_are_keyed_by_the_output(monkeypatch):
    """Two outputs publish under two keys (before: both under ``specrag-run-report``); the
    same output again under the same key; the table artifact beside the markdown one."""
    import prefect.artifacts

    from specrag_batch.run.report import publish_artifacts

    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(prefect.artifacts, "create_markdown_artifact",
                        lambda **kw: calls.append(("markdown", kw["key"])))
    monkeypatch.setattr(prefect.artifacts, "create_table_artifact",
                        lambda **kw: calls.append(("table", kw["key"])))

    def report(output: str) -> dict:
        return {"output": output, "markdown": "# report\n| rows | 1 |", "report_uri": f"{output}/_report/report.md",
                "shards": 1, "rows": 1}

    monkeypatch.setattr("specrag_batch.run.report.publish.table_rows", lambda s: [{"metric": "rows", "value": "1"}])
    for output in ("s3://answers/date=2026-11-28", "/tmp/adhoc run", "s3://answers/date=2026-11-28"):
        publish_artifacts(report(output))
    (m1, t1), (m2, t2), (m3, t3) = [(calls[i][1], calls[i + 1][1]) for i in range(0, 6, 2)]
    assert m1 != m2 and (m1, t1) == (m3, t3)
    assert t1 == f"{m1}-table" and t2 == f"{m2}-table"
    for key in (m1, t1, m2, t2):
        _prefect_accepts(key)
