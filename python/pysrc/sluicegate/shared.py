"""Shared-memory regions: the state behind ``shared=``.

A region is a file (a bare name ``"api"`` is ``/dev/shm/sluicegate-api``) that
every worker process of a host maps, so that ``KeyedLimiter(..., shared="api")``
in each gunicorn or uvicorn worker is one limiter. In a region a key is its bytes:
a ``str`` as UTF-8 and an ``int`` as its decimal text, so ``"7"``, ``b"7"`` and
``7`` are one key there (in a process's own table they are three).
"""

from __future__ import annotations

import os

from ._sluicegate import _shared_unlink

__all__ = ["unlink"]


def unlink(name: str | os.PathLike[str]) -> None:
    """Removes region ``name`` (a path, or a bare name under ``/dev/shm``).
    Limiters that use it keep their mapping; the next ``shared=`` of that name
    makes a new region. A region that does not exist is not an error."""
    _shared_unlink(name)
