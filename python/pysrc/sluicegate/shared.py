"""Shared-memory regions: the state behind ``shared=``.

A region is a file (a bare name ``"api"`` is ``/dev/shm/sluicegate-api``) that
every worker process of a host maps, so that ``KeyedLimiter(..., shared="api")``
in each gunicorn or uvicorn worker is one limiter. In a region a key is its bytes:
a ``str`` as UTF-8 and an ``int`` as its decimal text, so ``"7"``, ``b"7"`` and
``7`` are one key there (in a process's own table they are three).
"""

from __future__ import annotations

import os

from ._sluicegate import _shared_open, _shared_unlink

__all__ = ["open", "unlink"]


def open(  # noqa: A001 - the module's verb, as in os.open
    name: str | os.PathLike[str],
    *,
    memory: int | None = None,
    limits: int | None = None,
    mode: int = 0o600,
    allow_other_owner: bool = False,
) -> str:
    """Opens region ``name``, creating it if absent, with these options, and
    keeps it for this process: every later ``shared=`` of that name uses it.
    Returns the region's path.

    ``memory`` is the bytes for keys (16 each) and their eviction sketch
    (16 MiB by default); ``limits`` how many limits it can register (1,024);
    ``mode`` the file's permission bits when created (``0o660`` lets a group of
    worker users share it); ``allow_other_owner`` accepts a region another user
    created (a master running as root that made it for its workers). A region
    that exists with another size raises ``SharedMemoryError`` naming both.

    Call it where the region should be made, e.g. in gunicorn's master with
    ``--preload`` or an ``on_starting`` hook, before the workers' ``shared=``.
    """
    return _shared_open(name, memory, limits, mode, allow_other_owner)


def unlink(name: str | os.PathLike[str]) -> None:
    """Removes region ``name`` (a path, or a bare name under ``/dev/shm``).
    Limiters that use it keep their mapping; the next ``shared=`` of that name
    makes a new region. A region that does not exist is not an error."""
    _shared_unlink(name)
