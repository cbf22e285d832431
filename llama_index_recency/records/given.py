"""What the memory object is given, checked before anything is embedded or stored: memories
(facts, ``(fact, date)`` pairs, nodes), conversation turns and questions."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime
from typing import Any, Optional

from llama_index.core.schema import BaseNode

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.nodes import USER_ID_KEY, Turn, memory_node


def memory_items(memories: object) -> list[object]:
    """What :meth:`~llama_index_recency.RecencyMemory.add` was given, as a list of items.

    Raises:
        InvalidInputError: Something that is neither an item nor a list of them.
    """
    if isinstance(memories, (str, tuple, BaseNode, dict)):
        return [memories]
    if isinstance(memories, Iterable) and not isinstance(memories, bytes):
        return list(memories)
    raise InvalidInputError(
        f"add takes facts, (fact, date) pairs or memory nodes, got {memories!r}")


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
            f"add takes facts, (fact, date) pairs or memory nodes, got {memory!r}"
            + ("; a conversation goes to remember()" if isinstance(memory, dict) else ""))
    return memory_node(fact, day, user_id=user, user_name=user_name, metadata=metadata)


def check_limit(limit: object) -> None:
    """Refuse a ``limit`` that is not None or a whole number >= 1.

    Raises:
        InvalidInputError: Anything else, named.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise InvalidInputError(f"limit must be a whole number >= 1, got {limit!r}")
