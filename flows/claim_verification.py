"""Bulk claim verification (``prefect.yaml`` entrypoint
``flows/claim_verification.py:claim_verification_flow``); the flow lives in
:mod:`specrag_batch.run.claim_verification`."""

from __future__ import annotations

from specrag_batch.run.claim_verification import (
    NOT_A_LABEL,
    NO_ANSWER,
    claim_verification_flow,
    label_counts,
)

__all__ = ["NOT_A_LABEL", "NO_ANSWER", "claim_verification_flow", "label_counts"]
