"""What an Edge store handle has read from its shard, kept until the handle's next write.

Edge counts a filtered selection by scanning every point that matches (a question's common
word held by 10k memories costs a millisecond), while one handle makes every write to its
shard (the shard is locked to it). So a count stays true until that handle writes again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

MAX_KEPT = 4096
"""Most values kept at once (beyond it, values are computed and not kept)."""


class WriteAwareCache:
    """Values read from the shard, kept by key until the next write; one read while a write
    was under way, or with one started meanwhile, is returned but not kept."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = 0
        self._finished = 0
        self._kept: dict[Hashable, Any] = {}
        self._kept_at = 0

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Wrap each write: the values kept before it are dropped."""
        with self._lock:
            self._started += 1
        try:
            yield
        finally:
            with self._lock:
                self._finished += 1

    def version(self) -> Optional[int]:
        """How many writes have started, None while one is under way."""
        with self._lock:
            return self._started if self._started == self._finished else None

    def get(self, key: Hashable, read: Callable[[], Any]) -> Any:
        """The value kept for ``key``, or ``read()`` (kept when no write overlapped it)."""
        with self._lock:
            settled = self._started if self._started == self._finished else None
            if settled is not None and settled == self._kept_at and key in self._kept:
                return self._kept[key]
        value = read()
        with self._lock:
            if settled is not None and settled == self._started == self._finished:
                if self._kept_at != settled:
                    self._kept, self._kept_at = {}, settled
                if len(self._kept) < MAX_KEPT:
                    self._kept[key] = value
        return value
