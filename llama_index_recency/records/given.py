"""What the memory object is given, checked before anything is embedded or stored: memories
(facts, ``(fact, date)`` pairs, nodes), conversation turns and questions."""

from __future__ import annotations

from collections.abc import Iterable

from llama_index.core.schema import BaseNode

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.nodes import Turn


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
