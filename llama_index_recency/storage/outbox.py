"""The memory block's outbox: conversations handed to the writer and not yet stored.

Each conversation is kept here before its extraction starts and removed once its memories
are stored (or the LLM's answer gave none), so a failed write or a process that ends
mid-write loses no turn: the next block opened over the store retries what is left. On
disk it is one JSON object per line, appended with fsync and rewritten atomically on
removal; one process at a time uses a given outbox file.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
import weakref
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.nodes import Turn
from llama_index_recency.storage.access import EDGE_DIRECTORY, MemoryStore, vector_store_of
from llama_index_recency.storage.edge import QdrantEdgeVectorStore

logger = logging.getLogger(__name__)

OUTBOX_DIRECTORY = "outbox"
"""Where a local Edge store (``DIR/edge/<collection>``) keeps its outbox:
``DIR/outbox/<collection>.jsonl``."""


def outbox_path(index: MemoryStore) -> Optional[Path]:
    """``DIR/outbox/<collection>.jsonl`` for a store at ``DIR/edge/<collection>``, else None."""
    store = vector_store_of(index)
    if not isinstance(store, QdrantEdgeVectorStore):
        return None
    shard = Path(store.path)
    if shard.parent.name != EDGE_DIRECTORY:
        return None
    return shard.parent.parent / OUTBOX_DIRECTORY / f"{shard.name}.jsonl"


@dataclass(frozen=True)
class Conversation:
    """Turns for the writer, with the day and user their memories are written under."""

    turns: tuple[Turn, ...]
    day: date
    user_id: Optional[str] = None
    user_name: Optional[str] = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    memories: Optional[tuple[str, ...]] = None
    """The memories extracted from the turns (TextNode JSON), once the LLM has answered: a
    retry then only stores them, never asks again (a new answer could word them otherwise)."""
    seen: Optional[tuple[datetime, ...]] = None
    """When the memory block first saw each turn (timezone-aware), or None if not known: a
    forget of the user drops the turns seen at or before it, also after a restart."""

    @property
    def first_seen(self) -> Optional[datetime]:
        """When the block first saw the earliest of these turns, if known."""
        return None if self.seen is None else min(self.seen)

    def said_after(self, instant: Optional[datetime]) -> Optional["Conversation"]:
        """This conversation without its turns seen at or before ``instant`` (when its user
        was forgotten) and without the memories extracted from them; None when no user turn
        is left."""
        if instant is None or self.seen is None or min(self.seen) > instant:
            return self
        kept = [(turn, seen) for turn, seen in zip(self.turns, self.seen, strict=True)
                if seen > instant]
        if not any(turn.role == "user" for turn, _ in kept):
            return None
        return replace(self, turns=tuple(turn for turn, _ in kept),
                       seen=tuple(seen for _, seen in kept), memories=None)

    def with_memories(self, nodes: Sequence[BaseNode]) -> "Conversation":
        """This conversation with its extracted memories kept."""
        return replace(self, memories=tuple(node.to_json() for node in nodes))

    def extracted(self) -> Optional[list[TextNode]]:
        """The memories extracted earlier, or None when the LLM has not answered yet."""
        if self.memories is None:
            return None
        return [TextNode.from_json(memory) for memory in self.memories]

    def to_json(self) -> str:
        """One line of the outbox file."""
        return json.dumps({
            "id": self.id, "day": self.day.isoformat(), "user_id": self.user_id,
            "user_name": self.user_name,
            "turns": [{"role": turn.role, "text": turn.text} for turn in self.turns],
            "memories": None if self.memories is None else list(self.memories),
            "seen": None if self.seen is None else [seen.isoformat() for seen in self.seen],
        }, ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> "Conversation":
        """Read a line written by :meth:`to_json`; raises ValueError (or KeyError, TypeError)
        for anything else.

        Raises:
            InvalidInputError: No turns, a turn that is not a user or assistant turn with
                text, memories that are not strings, or ``seen`` that is not one instant
                with a time zone per turn.
            ValueError: Not JSON, or a ``day`` (or an instant of ``seen``) that is not ISO.
            KeyError: A field missing (``turns``, a turn's ``role`` or ``text``, ``day``,
                ``user_id``, ``user_name``, ``id``).
            TypeError: A field of the wrong shape (say, ``turns`` not a list of objects).
        """
        data: dict[str, Any] = json.loads(line)
        turns = tuple(Turn(role=turn["role"], text=turn["text"]) for turn in data["turns"])
        if not turns or any(turn.role not in ("user", "assistant") or not isinstance(turn.text, str)
                            for turn in turns):
            raise InvalidInputError("an outbox entry needs user and assistant turns with text")
        memories = data.get("memories")
        if memories is not None and not all(isinstance(memory, str) for memory in memories):
            raise InvalidInputError("an outbox entry's memories are TextNode JSON strings")
        seen = data.get("seen")
        if seen is not None:
            seen = tuple(datetime.fromisoformat(instant) for instant in seen)
            if len(seen) != len(turns) or any(instant.tzinfo is None for instant in seen):
                raise InvalidInputError("an outbox entry's seen is one instant with a time zone "
                                        "per turn")
        return cls(turns=turns, day=date.fromisoformat(data["day"]), user_id=data["user_id"],
                   user_name=data["user_name"], id=str(data["id"]),
                   memories=None if memories is None else tuple(memories), seen=seen)


class Outbox:
    """The conversations waiting to be written to one store: in memory, and in ``path`` if set.

    Use :meth:`at`, so every block of a process over the same file shares one outbox. Its file
    is written only while this process holds the store it belongs to: once that store is
    closed, another process may open it and take the file over.
    """

    def __init__(self, path: Optional[Path]) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._entries: dict[str, Conversation] = {}
        self._disk_failing = False
        self._owner: Optional[QdrantEdgeVectorStore] = None
        self._orphans = self._load()

    @classmethod
    def at(cls, path: Optional[Path], owner: Optional[BasePydanticVectorStore] = None) -> "Outbox":
        """The process's outbox at ``path`` (opened on first use); None: a new in-memory one.
        ``owner``: the store it belongs to (an Edge store's file is left alone once the store
        is closed).

        Raises:
            OSError: The file at ``path`` cannot be read, or (holding an unreadable line)
                rewritten; a failed save later is only logged.
            UnicodeDecodeError: The file is not UTF-8 text.
        """
        if path is None:
            return cls(None)
        key = Path(path).resolve()
        live = owner if isinstance(owner, QdrantEdgeVectorStore) and not owner.closed else None
        with _OPEN_LOCK:
            outbox = _OPEN.get(key)
            if outbox is None or (live is not None and outbox._owner is not None
                                  and outbox._owner.closed):
                # A store opened again: the file may hold what another process queued since.
                outbox = _OPEN[key] = cls(key)
            if live is not None:
                with outbox._lock:
                    outbox._owner = live
            return outbox

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, conversation_id: object) -> bool:
        with self._lock:
            return conversation_id in self._entries

    def waiting(self, user_id: str) -> int:
        """How many of ``user_id``'s conversations wait here."""
        with self._lock:
            return sum(1 for entry in self._entries.values() if entry.user_id == user_id)

    def drop_user(self, user_id: str) -> int:
        """Drop ``user_id``'s conversations (forgotten users are not written back); returns
        how many."""
        with self._lock:
            dropped = [key for key, entry in self._entries.items() if entry.user_id == user_id]
            for key in dropped:
                del self._entries[key]
            self._orphans = [entry for entry in self._orphans if entry.user_id != user_id]
            if dropped and self.path is not None:
                self._persist(self._rewrite)
            return len(dropped)

    def claim_orphans(self) -> list[Conversation]:
        """The conversations found on disk when this outbox opened (a past process's), once."""
        with self._lock:
            orphans, self._orphans = self._orphans, []
            return orphans

    def add(self, conversation: Conversation) -> None:
        """Keep ``conversation`` until :meth:`remove`, replacing a kept one of the same id; on
        disk if there is a path (appended and fsynced, or the file rewritten for a replacement
        and after a failed save)."""
        with self._lock:
            known = conversation.id in self._entries
            self._entries[conversation.id] = conversation
            if self.path is None:
                return
            if known or self._disk_failing:
                # After a failed save, the rewrite also brings what was kept in memory only.
                self._persist(self._rewrite)
            else:
                self._persist(self._append, conversation)

    def replace(self, conversation: Conversation) -> None:
        """Keep the newer state of a conversation already here (its extracted memories)."""
        with self._lock:
            if conversation.id in self._entries:
                self._entries[conversation.id] = conversation
                if self.path is not None:
                    self._persist(self._rewrite)

    def remove(self, conversation_id: str) -> None:
        """Forget a conversation that needs no more writing (the file is rewritten atomically)."""
        with self._lock:
            if self._entries.pop(conversation_id, None) is not None and self.path is not None:
                self._persist(self._rewrite)

    def _load(self) -> list[Conversation]:
        """Read the file's entries; a torn or foreign line (a process killed mid-append) is
        dropped with a warning and the file rewritten without it."""
        if self.path is None or not self.path.exists():
            return []
        data = self.path.read_bytes()  # a line torn inside a character is not UTF-8
        bad = 0
        for line in data.splitlines():
            try:
                conversation = Conversation.from_json(line.decode("utf-8"))
            except (ValueError, KeyError, TypeError):  # UnicodeDecodeError is a ValueError
                bad += 1
                continue
            self._entries[conversation.id] = conversation
        if bad or (data and not data.endswith(b"\n")):
            if bad:
                logger.warning("%s: %d unreadable line%s dropped", self.path, bad,
                               "" if bad == 1 else "s")
            self._rewrite()
        return list(self._entries.values())

    def _persist(self, write: Callable[..., None], *args: Any) -> None:
        """Run a file write; a failure (disk full, permissions) is logged once per streak and
        the entries stay in memory, so the session goes on. None once the owning store is
        closed: the file holds what it held then, for the next process to retry."""
        if self._owner is not None and self._owner.closed:
            return
        try:
            write(*args)
        except OSError as error:
            if not self._disk_failing:
                logger.warning("%s: could not save the outbox, its conversations are kept in "
                               "memory only: %s", self.path, error)
            self._disk_failing = True
        else:
            self._disk_failing = False

    def _append(self, conversation: Conversation) -> None:
        assert self.path is not None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with open(descriptor, "a", encoding="utf-8") as file:
            file.write(conversation.to_json() + "\n")
            file.flush()
            os.fsync(file.fileno())

    def _rewrite(self) -> None:
        """Replace the file with the current entries (temp file, fsync, os.replace); none:
        delete it."""
        assert self.path is not None
        if not self._entries:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(descriptor, "w", encoding="utf-8") as file:
            file.writelines(entry.to_json() + "\n" for entry in self._entries.values())
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, self.path)


_OPEN: "weakref.WeakValueDictionary[Path, Outbox]" = weakref.WeakValueDictionary()
"""The outboxes in use in this process, by resolved path (gone when no block holds them)."""
_OPEN_LOCK = threading.Lock()
