"""Run report: ``<output>/_report/report.md``, ``summary.json`` and PNG plots, from a run's
output shards, also published as Prefect artifacts of the flow run.

* :mod:`.rows` - the trusted output shards as one polars frame (:func:`load_rows`, a lazy scan
  per shard: :func:`scan_shard`, conformed to the output schema's types), with the per-token
  confidence ``mean_logprob`` (:func:`with_mean_logprob`).
* :mod:`.summary` - the numbers (:func:`summary`) and their Markdown / table forms.
* :mod:`.plots` - score of correct vs wrong rows, risk-coverage curves.
* :mod:`.publish` - :func:`write_report` (files) and :func:`publish_artifacts` (Prefect).
"""

from .plots import PLOTS, plots
from .publish import REPORT_DIR, publish_artifacts, report_run, write_report
from ..results import (COLUMNS, ESSENTIAL_COLUMNS, MANIFEST, OPTIONAL_COLUMNS, RunData, listed_outputs, load_rows,
                   scan_shard, trusted_outputs, with_mean_logprob)
from .summary import UNRECORDED, markdown, summary, table_rows

__all__ = ["COLUMNS", "ESSENTIAL_COLUMNS", "MANIFEST", "OPTIONAL_COLUMNS", "PLOTS", "REPORT_DIR", "UNRECORDED",
           "RunData", "listed_outputs", "load_rows", "markdown", "plots", "publish_artifacts", "report_run", "scan_shard", "summary",
           "table_rows", "trusted_outputs", "with_mean_logprob", "write_report"]
