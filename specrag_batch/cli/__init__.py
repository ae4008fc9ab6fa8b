"""The ``specrag-batch`` command line: the Typer app and its commands (:mod:`.commands`), shared
options (:mod:`.options`), console output (:mod:`.console`), and the ``calibrate``, ``drift``,
``index`` and ``tune`` commands in modules of their own.

``main`` and ``app`` resolve to :mod:`.commands`' on first use (the package itself imports nothing,
so ``specrag_batch.cli.options`` does not load every command)."""


def __getattr__(name: str):
    """``app`` / ``main``: :data:`specrag_batch.cli.commands.app` and :func:`specrag_batch.cli.commands.main`.

    Raises:
        AttributeError: any other unknown name."""
    if name in ("app", "main"):
        from . import commands

        return getattr(commands, name)
    raise AttributeError(f"module 'specrag_batch.cli' has no attribute {name!r}")
