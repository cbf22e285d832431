"""Successor links on a memory record: the newer memory names the ones it updates in
``supersedes``; nothing else.

That list is the single source of truth (stores written before it also carry the back link
``superseded_by``: still followed, never written). This module checks and reads links on one
record; :mod:`~llama_index_recency.ranking.successors` walks them through searches and
:mod:`~llama_index_recency.storage.history` reads a fact's versions from a store.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Optional

from llama_index.core.schema import BaseNode

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.dates import parse_memory_date
from llama_index_recency.records.nodes import (
    SUPERSEDED_BY_KEY,
    SUPERSEDES_KEY,
    USER_ID_KEY,
    is_memory_id,
)

LINK_KEYS = (SUPERSEDES_KEY, SUPERSEDED_BY_KEY)


def check_link(newer: BaseNode, older: BaseNode) -> None:
    """Refuse ``newer`` superseding ``older`` unless both belong to the same user (or both to
    none): a link across users would put one user's fact in place of another's.

    Raises:
        InvalidInputError: ``newer`` and ``older`` belong to different users (or one to none).
    """
    users = [node.metadata.get(USER_ID_KEY) for node in (newer, older)]
    if users[0] != users[1]:
        whose = ["no user" if user is None else f"user {user!r}" for user in users]
        raise InvalidInputError(f"memory {newer.node_id} of {whose[0]} may not supersede memory "
                                f"{older.node_id} of {whose[1]}")


def linked_ids(node: BaseNode, key: str) -> list[str]:
    """The memory ids ``node`` names under ``key`` (anything that is not a memory id is ignored)."""
    return [link for link in node.metadata.get(key) or [] if is_memory_id(link)]


def exclude_links_from_text(node: BaseNode) -> None:
    """Link ids are bookkeeping: never embedded, never shown to the LLM."""
    for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
        excluded.extend(key for key in LINK_KEYS if key in node.metadata and key not in excluded)


def memory_time(node: BaseNode, date_key: str = "date") -> Optional[datetime]:
    """The memory's date as an instant, or None when it has no readable one."""
    try:
        return parse_memory_date(node.metadata.get(date_key))
    except ValueError:
        return None


def relinked(node: BaseNode, gone: dict[str, BaseNode]) -> Optional[dict[str, Any]]:
    """``node``'s link lists once the memories in ``gone`` are deleted, or None if unchanged.

    A chain stays whole: a memory that superseded a deleted one now supersedes what that one
    superseded (A → B → C without B is A → C). Back links (``superseded_by``, carried by
    older stores) to deleted ids are dropped.
    """
    links: dict[str, Any] = {}
    older = _through(node, SUPERSEDES_KEY, gone)
    if older != set(node.metadata.get(SUPERSEDES_KEY) or []):
        links[SUPERSEDES_KEY] = sorted(older)
    if SUPERSEDED_BY_KEY in node.metadata:
        newer = set(node.metadata[SUPERSEDED_BY_KEY] or []) - gone.keys()
        if newer != set(node.metadata[SUPERSEDED_BY_KEY] or []):
            links[SUPERSEDED_BY_KEY] = sorted(newer)
    return links or None


def _through(node: BaseNode, key: str, gone: dict[str, BaseNode]) -> set[str]:
    """The ids ``node`` names under ``key`` that stay, reached through deleted ones of its
    own user (a link across users, never followed, is not carried on either)."""
    user = node.metadata.get(USER_ID_KEY)
    kept: set[str] = set()
    seen = {node.node_id}
    frontier = list(node.metadata.get(key) or [])
    while frontier:
        link = frontier.pop()
        if link in seen:
            continue
        seen.add(link)
        if link not in gone:
            kept.add(link)
        elif gone[link].metadata.get(USER_ID_KEY) == user:
            frontier.extend(gone[link].metadata.get(key) or [])
    return kept
