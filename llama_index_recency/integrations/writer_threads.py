"""The memory blocks' writer threads, and what a process ending does about them.

A writer is a daemon thread. One still running Python when the interpreter finalizes is torn
down inside the native frames that called it (pydantic's validators, Edge's writes), which
aborts the process. So at exit every writer stores what it was handed, for at most
:data:`EXIT_WAIT_SECONDS`, then leaves; what is left stays in the outbox for the next process.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

EXIT_WAIT_SECONDS = 30.0
"""How long a process ending waits for its writer threads to store what they were handed."""

LEAVING = threading.Event()
"""Set at exit: no writer starts, and no failed write is retried."""

_deadline = math.inf  # when writers stop taking the next conversation (time.monotonic)
_RUNNING: dict[threading.Thread, threading.Condition] = {}  # each writer, its block's lock


def start_writer(work: Callable[[], None], name: str, lock: threading.Condition) -> threading.Thread:
    """Start a writer thread running ``work``, woken through ``lock`` when the process ends."""
    thread = threading.Thread(target=work, name=name, daemon=True)
    _RUNNING[thread] = lock
    thread.start()
    return thread


def writer_left() -> None:
    """Said by a writer thread as it leaves."""
    _RUNNING.pop(threading.current_thread(), None)


def past_deadline() -> bool:
    """Whether a writer must leave now rather than take its next conversation."""
    return time.monotonic() > _deadline


def finish_at_exit() -> None:
    """Let every writer store what it was handed, for at most :data:`EXIT_WAIT_SECONDS`
    (registered with ``atexit``); a Ctrl-C during the wait leaves the rest in the outbox."""
    global _deadline
    LEAVING.set()
    _deadline = time.monotonic() + EXIT_WAIT_SECONDS
    writers = list(_RUNNING.items())
    if writers:
        logger.info("storing the conversations handed to the memory writer before the process "
                    "ends (at most %.0f s)", EXIT_WAIT_SECONDS)
    try:
        for worker, lock in writers:
            with lock:
                lock.notify_all()
            worker.join(max(0.0, _deadline - time.monotonic()))
    except KeyboardInterrupt:
        _deadline = -math.inf
        logger.warning("interrupted: the conversations not stored yet stay in the outbox for "
                       "the next process")
        return
    if any(worker.is_alive() for worker, _ in writers):
        logger.warning("a memory writer was still writing %.0f s after the process began to "
                       "end; what it was handed stays in the outbox for the next process",
                       EXIT_WAIT_SECONDS)


atexit.register(finish_at_exit)
