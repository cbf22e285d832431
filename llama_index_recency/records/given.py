"""What the memory object is given, checked before anything is embedded or stored: memories
(facts, ``(fact, date)`` pairs, nodes), chat messages, conversation turns and questions."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any, Optional, TypeGuard, Union

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.schema import BaseNode

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.nodes import (
    SUPERSEDES_KEY,
    USER_ID_KEY,
    Turn,
    check_user_id,
    checked_metadata,
    memory_node,
    quoted,
)

MemoryDate = date | datetime | str
Fact = tuple[str, MemoryDate]
"""A fact to store and its date: ``("The user has switched to green tea.", "2026-09-09")``."""

Message = Union[dict[str, Any], ChatMessage, Turn]
"""A chat message: ``{"role": "user", "content": "..."}``, a LlamaIndex ``ChatMessage`` or a
:class:`Turn`."""

WRITER_KEYS = ("date", USER_ID_KEY, SUPERSEDES_KEY, "kind")
"""The metadata the writer sets on the facts it extracts (memory_node's date key, the user, the
updated memories, the kind of fact): not for ``metadata=``."""

_ROLES = frozenset(role.value for role in MessageRole)


@dataclass(frozen=True)
class ToAdd:
    """What :meth:`~llama_index_recency.RecencyMemory.add` was given: memories made into nodes,
    or (``turns`` not None) a conversation for the writer, the metadata for its facts and when
    it was heard (``said_at``, for :func:`~llama_index_recency.writing.updates.insert_memories`:
    as in ``remember``, a forget of the user while the LLM answers covers it)."""

    nodes: list[BaseNode] = field(default_factory=list)
    turns: Optional[list[Turn]] = None
    metadata: dict[str, Any] = field(default_factory=dict)
    said_at: Optional[datetime] = None

    def with_metadata(self, nodes: Sequence[BaseNode]) -> list[BaseNode]:
        """The writer's ``nodes`` with :attr:`metadata` added (kept out of the embedded and the
        LLM's text, as :func:`memory_node` keeps its metadata)."""
        for node in nodes:
            node.metadata.update(self.metadata)
            for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
                excluded.extend(key for key in self.metadata if key not in excluded)
        return list(nodes)


def to_add(data: object, default_date: date | datetime | str | None, user: Optional[str],
           user_name: Optional[str], metadata: Optional[dict[str, Any]], *, has_llm: bool
           ) -> ToAdd:
    """Read what :meth:`~llama_index_recency.RecencyMemory.add` was given: memories, made into
    nodes of ``user`` (facts dated ``default_date``, default today), or chat messages, as the
    writer's turns (user and assistant messages with text; system, tool and empty ones are
    left out), which need an LLM (``has_llm``).

    Raises:
        InvalidInputError: Neither memories nor messages; memories and messages in one call;
            messages without an LLM, with a role or content no chat message has, or with a
            ``metadata`` key the writer sets (:data:`WRITER_KEYS`); what
            :func:`as_memory_node` refuses.
    """
    items = memory_items(data)
    messages = [item for item in items if is_message(item)]
    if not messages:
        day = datetime.now().date() if default_date is None else default_date
        return ToAdd([as_memory_node(item, day, user, user_name, metadata) for item in items])
    if len(messages) < len(items):
        other = next(item for item in items if not is_message(item))
        raise InvalidInputError(
            f"add takes memories or chat messages, not both in one call: got the message "
            f"{_short(messages[0])} and {_short(other)}; add them in two calls")
    metadata = None if metadata is None else checked_metadata(metadata)
    if not has_llm:
        raise InvalidInputError(
            f"chat messages need an LLM to extract facts from, and this memory has none: pass "
            f"llm= to RecencyMemory (or set its .llm), or add the facts themselves; got "
            f"{_short(messages[0])}")
    taken = [key for key in WRITER_KEYS if key in (metadata or {})]
    if taken:
        raise InvalidInputError(f"metadata key {taken[0]!r} is set by the writer on the facts "
                                f"it extracts from chat messages; use another key")
    turns = [turn for turn in map(message_turn, messages) if turn is not None]
    return ToAdd(turns=turns, metadata=dict(metadata or {}), said_at=datetime.now(timezone.utc))


def memory_items(memories: object) -> list[object]:
    """What :meth:`~llama_index_recency.RecencyMemory.add` was given, as a list of items.

    Raises:
        InvalidInputError: Something that is neither an item nor a list of them.
    """
    if isinstance(memories, (str, tuple, BaseNode, dict, ChatMessage, Turn)):
        return [memories]
    if isinstance(memories, Iterable) and not isinstance(memories, bytes):
        return list(memories)
    raise InvalidInputError(f"add takes facts, (fact, date) pairs or memory nodes, got "
                            f"{memories!r} (or chat messages: role/content dicts, ChatMessages)")


def is_message(item: object) -> TypeGuard[Message]:
    """Whether ``item`` is (meant as) a chat message: a :class:`Turn`, a ``ChatMessage`` or a
    dict with a ``role`` or a ``content``."""
    return isinstance(item, (Turn, ChatMessage)) or (
        isinstance(item, dict) and ("role" in item or "content" in item))


def message_turn(message: Message) -> Optional[Turn]:
    """A chat message as the writer's :class:`Turn`; None for one the writer does not read (a
    system, tool or other message, or one without text).

    Raises:
        InvalidInputError: A dict without ``role`` and ``content``, a role no chat message
            has, content that is not text, or text with a lone surrogate.
    """
    if isinstance(message, Turn):
        return message
    if isinstance(message, ChatMessage):
        role, content = message.role.value, message.content
    else:
        if "role" not in message or "content" not in message:
            raise InvalidInputError(
                f"a chat message has a 'role' and a 'content', got {_short(message)}")
        role, content = message["role"], message["content"]
        role = role.value if isinstance(role, MessageRole) else role
        if role not in _ROLES:
            raise InvalidInputError(f"a chat message's role is one of {', '.join(sorted(_ROLES))}"
                                    f", got {role!r}")
        if content is not None and not isinstance(content, str):
            raise InvalidInputError(f"a chat message's content is text, got {_short(content)}")
    if role not in ("user", "assistant") or not content or not content.strip():
        return None
    try:
        content.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(
            f"a chat message holds a lone surrogate: {quoted(content, 60)}") from None
    return Turn("user" if role == "user" else "assistant", content.strip())


def _short(item: object, limit: int = 80) -> str:
    """``repr(item)`` for a one-line message (a ``ChatMessage`` by its role and content), cut
    after ``limit`` characters."""
    shown = (f"ChatMessage(role={item.role.value!r}, content={item.content!r})"
             if isinstance(item, ChatMessage) else repr(item))
    return shown if len(shown) <= limit else shown[:limit] + "..."


def check_question(query: object) -> None:
    """Refuse a question the search cannot embed or the LLM cannot be sent.

    Raises:
        InvalidInputError: ``query`` is not text, is blank, or holds a lone surrogate.
    """
    if not isinstance(query, str):
        raise InvalidInputError(f"the question must be text, got {query!r}")
    if not query.strip():
        raise InvalidInputError(f"the question is blank: {query!r}")
    try:
        query.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError(f"the question holds a lone surrogate: {query!r}") from None


def as_turn(turn: object) -> Turn:
    """A turn of a conversation given to :meth:`~llama_index_recency.RecencyMemory.remember`, as a :class:`Turn`.

    Raises:
        InvalidInputError: Neither a :class:`Turn` nor a ``(role, text)`` pair of text.
    """
    if isinstance(turn, Turn):
        return turn
    if isinstance(turn, tuple) and len(turn) == 2 and all(isinstance(x, str) for x in turn):
        return Turn(*turn)
    raise InvalidInputError(f"a conversation turn is a Turn or a (role, text) pair, got {turn!r}")


def as_memory_node(memory: object, default_date: date | datetime | str, user: Optional[str],
                   user_name: Optional[str], metadata: Optional[dict[str, Any]]) -> BaseNode:
    """One memory given to :meth:`~llama_index_recency.RecencyMemory.add`, as a node of
    ``user``: a fact (dated ``default_date``) or a ``(fact, date)`` pair made with
    :func:`memory_node`, a node as it is.

    Raises:
        InvalidInputError: Anything but a fact, a ``(fact, date)`` pair or a node; a node of
            another user than ``user`` (when there is one); what :func:`memory_node` refuses.
    """
    if isinstance(memory, BaseNode):
        owner = memory.metadata.get(USER_ID_KEY)
        if user is not None and owner != user:
            raise InvalidInputError(f"memory {memory.node_id} is of user {owner!r}, not "
                                    f"{user!r}: a write for one user stores only theirs")
        return memory
    if isinstance(memory, str):
        fact, day = memory, default_date
    elif isinstance(memory, tuple) and len(memory) == 2 and isinstance(memory[0], str):
        fact, day = memory
    else:
        raise InvalidInputError(
            f"add takes facts, (fact, date) pairs or memory nodes, got {memory!r} (or chat "
            "messages: role/content dicts, ChatMessages)")
    return memory_node(fact, day, user_id=user, user_name=user_name, metadata=metadata)


def check_limit(limit: object) -> None:
    """Refuse a ``limit`` that is not None or a whole number >= 1.

    Raises:
        InvalidInputError: Anything else, named.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise InvalidInputError(f"limit must be a whole number >= 1, got {limit!r}")


def call_user(bound: Optional[str], user_id: Optional[str]) -> Optional[str]:
    """The user a call on an object bound to ``bound`` is for: ``user_id``, else ``bound``.

    Raises:
        InvalidInputError: ``user_id`` is not a non-blank line of text, or not ``bound``.
    """
    if user_id is None:
        return bound
    if bound is not None and user_id != bound:
        raise InvalidInputError(f"this memory is bound to user {bound!r}, not {user_id!r}")
    return check_user_id(user_id)
