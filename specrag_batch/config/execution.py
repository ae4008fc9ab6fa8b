"""Where and how shards run: Prefect task runner (threads in this process, or a Ray cluster
through prefect-ray) and the stage topology (fused, or disaggregated drafting/verification).

Execution settings never change results, so they are not part of :class:`RunConfig` nor of
its hash: the same run can be resumed on another topology. What runs where:

* ``task_runner="threads"``: shard tasks in this process (Prefect's ``ThreadPoolTaskRunner``);
  one engine per model, engine calls serialised (see :mod:`engines`).
* ``task_runner="ray"``: each shard task is a Ray task (``prefect_ray.RayTaskRunner``). A Ray
  worker process keeps its own vLLM engines between tasks (:func:`engines.get_engine` caches per
  process), so a cluster of W workers holds W engine replicas. ``*_resources`` are Ray
  ``@remote`` options per task (``num_cpus``, ``num_gpus``, custom ``resources`` naming a
  worker group, ``runtime_env``...). vLLM tensor/pipeline/data-parallel settings pass through
  ``ModelConfig.engine_kwargs`` unchanged.
* ``stages="disaggregated"``: drafting tasks (``drafter_resources``: e.g. many small drafter
  replicas) write intermediate draft Parquet (:mod:`intermediate`); verification tasks
  (``verifier_resources``: e.g. one large verifier) read it. Each shard's verification starts
  as soon as its drafts are written. Intermediate files carry done markers, so a re-run
  resumes either stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Literal

from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, ConfigDict, Field


class ExecutionConfig(BaseModel):
    """Task runner and stage topology of a run (not part of the results' identity)."""

    model_config = ConfigDict(extra="forbid")

    task_runner: Literal["threads", "ray"] = Field(
        "threads", description="threads = this process; ray = a Ray cluster via prefect-ray")
    ray_address: str | None = Field(
        None, description="Ray cluster address: 'auto' (a cluster started on this host with "
        "`ray start`), 'ray://head:10001' (remote, e.g. KubeRay), or None (start a local Ray "
        "inside this process)")
    ray_init_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="extra `ray.init` arguments (e.g. runtime_env)")
    stages: Literal["fused", "disaggregated"] = Field(
        "fused", description="fused = one task per shard runs all stages; disaggregated = "
        "drafting tasks write intermediate draft Parquet, verification tasks read it")
    keep_drafts: bool = Field(
        False, description="disaggregated: keep intermediate draft shards under `_drafts/` after "
        "their shard's output is done (default: removed; the drafts are in the output too)")
    max_workers: int = Field(
        1, ge=1, description="threads runner: shard tasks at once in this process (storage I/O "
        "overlaps; engine calls are serialised per process)")
    shard_resources: dict[str, Any] = Field(
        default_factory=lambda: {"num_cpus": 1},
        description="Ray @remote options of a fused shard task")
    drafter_resources: dict[str, Any] = Field(
        default_factory=lambda: {"num_cpus": 1},
        description="Ray @remote options of a drafting task (disaggregated)")
    verifier_resources: dict[str, Any] = Field(
        default_factory=lambda: {"num_cpus": 1},
        description="Ray @remote options of a verification task (disaggregated)")

    @classmethod
    def coerce(cls, value: ExecutionConfig | dict | None) -> ExecutionConfig:
        """An ExecutionConfig from itself, a mapping (flow parameters, YAML) or None (defaults).

        Raises:
            pydantic.ValidationError: unknown key or bad value (named in the message)."""
        return value if isinstance(value, cls) else cls.model_validate(value or {})

    def task_runner_instance(self):
        """A new Prefect task runner for a flow run (``flow.with_options(task_runner=...)``).

        Raises:
            ImportError: ``task_runner="ray"`` without the ``ray`` extra (prefect-ray)."""
        if self.task_runner == "ray":
            from prefect_ray import RayTaskRunner

            return RayTaskRunner(address=self.ray_address, init_kwargs=dict(self.ray_init_kwargs))
        return StoppableThreadPoolTaskRunner(max_workers=self.max_workers)

    def check_mode(self, config: Any) -> None:
        """Raises ValueError when the topology cannot run ``config``'s mode (a ``RunConfig``, or
        its ``mode`` string): disaggregated stages need some task in speculative mode (standard
        RAG has no drafts to hand over; under a per-task mode the verifier side answers the
        Standard RAG rows whole)."""
        modes = getattr(config, "modes", None) or {config}
        if self.stages == "disaggregated" and "speculative" not in modes:
            raise ValueError(f"execution.stages 'disaggregated' needs config mode 'speculative' "
                             f"(got {getattr(config, 'mode', config)!r}); use stages 'fused' for Standard RAG")

    @property
    def distributed(self) -> bool:
        """True when tasks run in other processes (engines must not be loaded by the driver)."""
        return self.task_runner == "ray"

    def remote(self, options: dict[str, Any]) -> AbstractContextManager:
        """Context in which submitted tasks get these Ray ``@remote`` options (no-op with threads).

        A task asking for GPUs keeps its worker process (``max_calls=0``) unless told
        otherwise: Ray's default for GPU tasks (a new process per call) would reload the vLLM
        engine for every shard."""
        if self.task_runner != "ray":
            return nullcontext()
        from prefect_ray.context import remote_options

        opts = dict(options)
        if opts.get("num_gpus") and "max_calls" not in opts:
            opts["max_calls"] = 0
        return remote_options(**opts)


class StoppableThreadPoolTaskRunner(ThreadPoolTaskRunner):
    """Prefect's ``ThreadPoolTaskRunner`` that does not wait for the task in flight when the
    flow is interrupted: on leaving with a ``BaseException`` that is not an ``Exception``
    (SIGTERM as Prefect's ``TerminationSignal``, Ctrl-C, :class:`stopping.StopRequested`) it
    sets Prefect's cancel events and cancels the queued tasks, as Prefect's own ``cancel_all``
    does, but shuts its executor down with ``wait=False``: a thread cannot be interrupted, and
    Prefect's ``wait=True`` kept a stopped run alive until its shard in flight (minutes with a
    real model) was finished and marked done (:mod:`specrag_batch.core.stopping`). On Prefect's
    ``TerminationSignal`` (SIGTERM: the process is being ended, e.g. a Prefect worker cancelling
    the flow run) it also marks the process as stopping (:func:`stopping.request`), so that the
    shard in flight writes no output and no done marker. Leaving normally or with an error, it
    is Prefect's runner unchanged."""

    def __exit__(self, exc_type, exc_value, traceback) -> None:
        from prefect.exceptions import TerminationSignal

        from ..core import stopping

        if exc_type is not None and issubclass(exc_type, TerminationSignal):
            stopping.request()
        if exc_type is not None and not issubclass(exc_type, Exception) and self._executor is not None:
            for event in self._cancel_events.values():
                event.set()
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        super().__exit__(exc_type, exc_value, traceback)


@contextmanager
def ray_session(ex: ExecutionConfig) -> Iterator[None]:
    """Connect this process to Ray once for several runs (e.g. the dates of a backfill), so
    that per-run task runners share the connection instead of each starting and shutting down
    their own. No-op for the threads runner."""
    if ex.task_runner != "ray":
        yield
        return
    import ray

    owned = not ray.is_initialized()
    if owned:
        address = None if ex.ray_address in (None, "auto") else ex.ray_address
        ray.init(address, **ex.ray_init_kwargs)
    try:
        yield
    finally:
        if owned:
            ray.shutdown()
