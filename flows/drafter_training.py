"""Prefect entrypoint (prefect.yaml): the specialist drafter's training flow (paper §3.1)."""

from specrag_batch.drafter_training.flow import drafter_training_flow

__all__ = ["drafter_training_flow"]
