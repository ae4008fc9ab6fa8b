"""The progress bar of ``specrag-batch index build``: one rich bar per build stage."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from .build import Progress


@contextmanager
def progress_bar(console) -> Iterator[Progress | None]:
    """On a terminal (rich ``console``; ``SPECRAG_PROGRESS=0`` turns it off), a bar per stage
    (embedding, indexing, bm25: passages done of the corpus's, time left); yields the
    ``progress`` callback of :func:`~specrag_batch.index.build.build_index`, else None."""
    if os.environ.get("SPECRAG_PROGRESS", "1") == "0" or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bars, TextColumn, TimeRemainingColumn

    tasks: dict[str, int] = {}
    with Bars(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
              console=console) as bars:
        def progress(stage: str, advance: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bars.add_task(stage, total=total)
            bars.advance(tasks[stage], advance)
        yield progress
