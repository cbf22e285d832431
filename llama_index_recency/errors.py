"""Every error llama-index-recency raises on purpose, under one root: :class:`RecencyError`.

Each error also keeps its standard base (``except ValueError`` catches a
:class:`FutureMemoryDateError`, ``except OSError`` a full disk), so code written against
those bases keeps working. ``except RecencyError`` catches them all; anything else
escaping the package is a bug or a failure of something below it.

The tree (each class's standard base in parentheses; a subclass has its parent's too)::

    RecencyError (Exception)
      InvalidInputError (ValueError)
        InvalidSettingError
      UnsupportedStoreError (TypeError)
      MemoryStorePathError (NotADirectoryError)
      PermissionDeniedError (PermissionError)
      MemoryStoreClosedError (RuntimeError)
      MemoryStoreLockedError (RuntimeError)
      _StoreDiskError (OSError)
        MemoryStoreReadOnlyError
        MemoryStoreFullError
      MemoryStoreDamagedError (RuntimeError)
      MemoryStoreNotFoundError (FileNotFoundError)
      MemoryStoreUnreachableError (ConnectionError)
      MigrationIncompleteError (RuntimeError)
      MissingExtraError (ImportError)
      FutureMemoryDateError (ValueError)
      MemoryFileError (ValueError)
      PartialWriteError (RuntimeError)
      MemoryWriteError (RuntimeError)
        RetryableWriteError
        FinalWriteError
      EmbeddingAPIError (RuntimeError)
      EmbeddingMismatchError (ValueError)
      MemoryDateError (ValueError)
      MemoryNotFoundError (LookupError)
      CommandError
      LLMError (RuntimeError)

``_StoreDiskError`` is private (catch its two kinds, or ``OSError``); the module's one other
class, :class:`OneLineValidation`, is no error but the base that turns a pydantic class's
refusal into :class:`InvalidSettingError`.

A write that failed can be worth repeating or not: :class:`RetryableWriteError` (the LLM
call failed: asking again may work) and :class:`FinalWriteError` (the LLM answered and
no valid memory came of it: asking again gets the same) are both :class:`MemoryWriteError`;
:class:`PartialWriteError` says how much of a store write was done (rerunning it stores
the rest).

"""

from __future__ import annotations

import errno
import os
from datetime import date
from pathlib import Path
from typing import Any, ClassVar, Optional

from llama_index.core.bridge.pydantic import ValidationError

__all__ = [
    "FinalWriteError",
    "InvalidInputError",
    "InvalidSettingError",
    "MemoryStoreClosedError",
    "MemoryStoreDamagedError",
    "MemoryStoreFullError",
    "MemoryStoreLockedError",
    "MemoryStoreNotFoundError",
    "MemoryStorePathError",
    "MemoryStoreReadOnlyError",
    "MemoryStoreUnreachableError",
    "MigrationIncompleteError",
    "MissingExtraError",
    "PermissionDeniedError",
    "UnsupportedStoreError",
    "FutureMemoryDateError",
    "MemoryFileError",
    "MemoryWriteError",
    "PartialWriteError",
    "RecencyError",
    "RetryableWriteError",
    "CommandError",
    "EmbeddingAPIError",
    "EmbeddingMismatchError",
    "LLMError",
    "MemoryDateError",
    "MemoryNotFoundError",
]



class RecencyError(Exception):
    """The root of every error llama-index-recency raises on purpose."""


class InvalidInputError(RecencyError, ValueError):
    """A value the package refuses (a bad date, id, name, option or file line), named in one
    line."""


class UnsupportedStoreError(RecencyError, TypeError):
    """A vector store this package cannot rank (neither Qdrant Edge nor Qdrant)."""


class MemoryStorePathError(RecencyError, NotADirectoryError):
    """A store path that is a file, not a directory."""


class PermissionDeniedError(RecencyError, PermissionError):
    """The store's files cannot be opened with this process's permissions."""


class MemoryStoreClosedError(RecencyError, RuntimeError):
    """A store used after its ``close``."""


class MemoryStoreLockedError(RecencyError, RuntimeError):
    """The embedded store at a path is already open in another process or handle."""


class _StoreDiskError(RecencyError, OSError):
    """The disk holding an embedded store refuses what comes next: an ``OSError`` with the
    class's :attr:`code` as its errno, shown as its message alone."""

    code: ClassVar[int]

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)

    def __str__(self) -> str:
        return str(self.strerror)


class MemoryStoreReadOnlyError(_StoreDiskError):
    """The embedded store is on a read-only filesystem (errno EROFS). Qdrant Edge loads a
    shard for writing even to read it (qdrant-edge-py has no read-only load), so the store
    is read from a temporary copy: raised by a write, or when no copy can be made."""

    code = errno.EROFS


class MemoryStoreDamagedError(RecencyError, RuntimeError):
    """Edge cannot load the shard: a file of it is missing, truncated or not what it wrote."""


class MemoryStoreFullError(_StoreDiskError):
    """The disk holding an embedded store has too little free space for what comes next
    (errno ENOSPC); nothing of that was written."""

    code = errno.ENOSPC


class MemoryStoreNotFoundError(RecencyError, FileNotFoundError):
    """A command that only reads was pointed at a path that holds no memory store."""


class MemoryStoreUnreachableError(RecencyError, ConnectionError):
    """The Qdrant server at a url did not answer (nothing listening, no route, a timeout)."""


class MigrationIncompleteError(RecencyError, RuntimeError):
    """A migration that copied fewer memories than the source holds (the source is untouched)."""


class MissingExtraError(RecencyError, ImportError):
    """An optional dependency (an extra such as ``[minilm]``) is not installed."""


class FutureMemoryDateError(RecencyError, ValueError):
    """A memory dated after tomorrow: it would keep the full recency bonus until that day.

    ``day`` is the memory's calendar day, ``today`` the reference day it was checked against.
    """

    def __init__(self, day: date, today: date, hint: str = "pass allow_future=True") -> None:
        self.day, self.today = day, today
        super().__init__(f"the memory's date {day.isoformat()} is after tomorrow (today is "
                         f"{today.isoformat()}); {hint} if that is meant")


class MemoryFileError(RecencyError, ValueError):
    """A line of a memory file that cannot be imported; nothing of the file was stored."""

    def __init__(self, path: str | os.PathLike[str], line: int, problem: str) -> None:
        self.path, self.line, self.problem = Path(path), line, problem
        super().__init__(f"{path}, line {line}: {problem}")


class PartialWriteError(RecencyError, RuntimeError):
    """A write that stopped part way: ``stored`` of ``total`` memories are in the store.

    Rerunning the same write stores the rest (stored ones are skipped)."""

    def __init__(self, stored: int, total: int, reason: str) -> None:
        self.stored, self.total, self.reason = stored, total, reason
        super().__init__(f"stored {stored} of {total} memor{'y' if total == 1 else 'ies'}; "
                         f"{total - stored} not stored: {reason}")


class MemoryWriteError(RecencyError, RuntimeError):
    """Memories could not be made from a conversation; nothing was stored.

    Raised as one of its two kinds: :class:`RetryableWriteError` or :class:`FinalWriteError`.
    """


class RetryableWriteError(MemoryWriteError):
    """The LLM call failed (HTTP error, timeout, refused connection): writing the same
    conversation again may succeed. The failure is the ``__cause__``."""


class FinalWriteError(MemoryWriteError):
    """The LLM answered, but no valid memory came of it (not a JSON object, no ``memories``
    field, off the schema, or every proposed fact invalid): asking again gets the same."""


class InvalidSettingError(InvalidInputError):
    """A setting of a policy, postprocessor or memory block that its class refuses.

    ``problems`` holds (field, value, reason) for each refused field; a missing field has
    reason "required", a rule across fields has field "" and the whole instruction as its
    reason."""

    def __init__(self, model: str, problems: list[tuple[str, Any, str]]) -> None:
        self.model, self.problems = model, problems
        super().__init__(f"{model}: " + "; ".join(
            reason if not field else f"{field} is required" if reason == "required"
            else f"{field}={value!r}: {reason}" for field, value, reason in problems))

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from what it was made of (its args hold only the message), so it crosses
        # a process boundary and copies.
        return type(self), (self.model, self.problems)


class OneLineValidation:
    """Base for the package's pydantic classes: a refused argument raises
    :class:`InvalidSettingError` naming it in one line, not pydantic's multi-line report."""

    def __init__(self, **data: Any) -> None:
        """Validate ``data`` as the pydantic class does.

        Raises:
            InvalidSettingError: A field is missing or refused, naming each such field.
        """
        try:
            super().__init__(**data)
        except ValidationError as error:
            raise InvalidSettingError(type(self).__name__, [
                (".".join(str(part) for part in problem["loc"]),
                 None if problem["type"] == "missing" else problem["input"],
                 "required" if problem["type"] == "missing"
                 else "no such setting" if problem["type"] == "extra_forbidden"
                 else str(problem["msg"]).removeprefix("Value error, "))
                for problem in error.errors(include_url=False)]) from None


class EmbeddingAPIError(RecencyError, RuntimeError):
    """The embedding API refused the request (4xx other than 429) or answered nonsense."""


class EmbeddingMismatchError(RecencyError, ValueError):
    """Two embedding spaces that must be one disagree (API vs local, or model vs collection)."""


class MemoryDateError(RecencyError, ValueError):
    """A memory's date is missing or unreadable and the policy says to raise."""


class MemoryNotFoundError(RecencyError, LookupError):
    """No memory with that id (in that user's memories, when a user is given)."""

    def __init__(self, node_id: str, user_id: Optional[str] = None) -> None:
        self.node_id, self.user_id = node_id, user_id
        whose = "" if user_id is None else f" of user {user_id!r}"
        super().__init__(f"no memory {node_id!r}{whose} in the store")

    def __str__(self) -> str:  # LookupError would quote the message like a key
        return str(self.args[0])


class CommandError(RecencyError):
    """Bad input or a refused action, reported as one line and exit ``code``."""

    def __init__(self, message: str, code: int = 2) -> None:
        super().__init__(message)
        self.code = code


class LLMError(RecencyError, RuntimeError):
    """The chat LLM failed (HTTP error, timeout, unreadable answer)."""
