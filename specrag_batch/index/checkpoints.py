"""Phase checkpoints of an index build, so that a build killed in any phase and started again
costs what was left, not a whole build.

The embedding phase leaves one done marker per corpus shard (:mod:`.shards`). Each later phase
(``trained``: the trained, empty FAISS index; ``added``: the filled one; ``tuned``: the
operating point, :mod:`.tuning`; ``store``: the passage store; ``bm25``: the BM25 part) leaves
its files in the build's work area (``<index>/_build/``) and then a marker
``_build/_done/phase-<name>.json`` naming them and the key of what made them (the corpus
shards' fingerprints, the embedding settings and the phase's own options). A later build whose
key for that phase is the same and whose files are all there takes them instead of doing the
phase again; any other marker is ignored and overwritten. The work area goes once the build is
committed (:func:`.layout.stale_entries`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from ..core import storage
from .layout import DONE_DIR, fetch, is_local, publish


def phase_key(*parts) -> str:
    """Hash (16 hex digits) of ``parts`` (JSON-serialisable): what a phase's result depends on."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Checkpoints:
    """The phase checkpoints in the work area ``work_uri``; ``tmp`` is the build's local
    scratch directory (files to save are made there; a remote work area's files are fetched
    there)."""

    def __init__(self, work_uri: str, tmp: Path):
        self.work, self.tmp = work_uri, Path(tmp)
        self._local: dict[str, Path] = {}  # remote work area: the local copy of each saved file

    def _marker(self, phase: str) -> str:
        return storage.join(self.work, DONE_DIR, f"phase-{phase}.json")

    def done(self, phase: str, key: str) -> dict | None:
        """The marker of ``phase`` (``files``: names in the work area, ``info``: what the phase
        recorded) when it was made under ``key`` and all its files are in the work area, else
        None (the phase is done again)."""
        try:
            m = storage.read_json_object(self._marker(phase))
        except ValueError:  # a marker cut short or damaged: the phase is done again
            return None
        if not m or m.get("key") != key:
            return None
        if not all(storage.exists(storage.join(self.work, name)) for name in m.get("files", [])):
            return None
        return m

    def save(self, phase: str, key: str, files: list[Path] | None = None, info: dict | None = None) -> None:
        """Move ``files`` (local, under :attr:`tmp`; named in the work area by their path below
        it) into the work area, then write the marker of ``phase``: a kill between the two
        leaves no marker, and the phase is done again."""
        names = []
        for path in files or []:
            name = Path(path).relative_to(self.tmp).as_posix()
            uri = storage.join(self.work, name)
            if is_local(uri):
                publish(path, uri)
            else:  # kept locally too: later phases and the final publish read it from here
                keep = self.tmp / ".kept" / name
                keep.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, keep)
                publish(path, uri)
                self._local[name] = keep
            names.append(name)
        marker = {"phase": phase, "key": key, "files": names, "info": info or {}}
        storage.write_bytes_atomic(self._marker(phase), json.dumps(marker, indent=2).encode())

    def path(self, name: str) -> Path:
        """A local path of the work area's file ``name`` (a download into :attr:`tmp` for a
        remote work area, unless this build saved it)."""
        if name in self._local:
            return self._local[name]
        uri = storage.join(self.work, name)
        local = fetch(uri, self.tmp)
        if not is_local(uri):
            self._local[name] = local
        return local

    def publish(self, name: str, uri: str) -> None:
        """Move the work area's file ``name`` to ``uri`` (a rename when both are local)."""
        local = self.path(name)
        publish(local, uri)
        self._local.pop(name, None)
