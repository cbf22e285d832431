"""The async twin of a blocking call, made one way: :func:`in_thread`.

The package's async convention (docs/architecture.md): where there is I/O to plan (the exact
search, the link walk) an I/O-free plan is driven by a sync and an async loop; everywhere else
the async twin of a blocking function or method is ``in_thread(it)``, run in a worker thread
(Qdrant Edge and the files have no async API, and hold the GIL only per call). In a pydantic
class (LlamaIndex's embeddings and memory blocks), whose class body declares fields, the async
method awaits ``in_thread(self.method)(...)``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")


def in_thread(blocking: Callable[_P, _R]) -> Callable[_P, Coroutine[Any, Any, _R]]:
    """The async twin of ``blocking`` (a function, a method in its class body, or a bound
    method): the same parameters, run in a worker thread, named ``a<name>`` (``_a<name>`` for a
    private one)."""

    @functools.wraps(blocking)
    async def twin(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        return await asyncio.to_thread(blocking, *args, **kwargs)

    public = blocking.__name__.removeprefix("_")
    twin.__name__ = f"a{public}" if public == blocking.__name__ else f"_a{public}"
    owner = blocking.__qualname__.rpartition(".")[0]
    twin.__qualname__ = f"{owner}.{twin.__name__}" if owner else twin.__name__
    role = "meth" if owner else "func"
    twin.__doc__ = (f"Async :{role}:`{blocking.__name__}`, run in a worker thread."
                    + (f"\n\n{blocking.__doc__}" if blocking.__doc__ else ""))
    return twin
