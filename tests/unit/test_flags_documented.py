"""Every flag an output row or draft can carry (``records.Flag``) is documented where the flags
are (docs/data-contract.md, "Errors and flags"), so no flag reaches the outputs undocumented."""

from __future__ import annotations

import pytest

from specrag_batch.core.records import Flag

from ..conftest import ROOT

pytestmark = pytest.mark.unit


def test_every_flag_is_named_in_the_errors_and_flags_section():
    page = (ROOT / "docs" / "data-contract.md").read_text(encoding="utf-8")
    section = page.split("## Errors and flags", 1)[1].split("\n## ", 1)[0]
    missing = [f.value for f in Flag if f"`{f.value}`" not in section]
    assert missing == [], f"flags not documented in docs/data-contract.md, 'Errors and flags': {missing}"
