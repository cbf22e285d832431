"""A fact's versions read from a store: the memories linked to one, oldest first."""

from __future__ import annotations

from typing import Optional

from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.vector_stores.types import FilterOperator, MetadataFilter, MetadataFilters

from llama_index_recency.ranking.successors import NEWER, OLDER, LinkWalk, walk_links
from llama_index_recency.records.links import memory_time
from llama_index_recency.records.nodes import USER_ID_KEY
from llama_index_recency.storage.access import MemoryStore
from llama_index_recency.storage.metadata import index_policy
from llama_index_recency.storage.store import get_memories, get_memory
from llama_index_recency.twins import in_thread


def memory_history(index: MemoryStore, node_id: str, *, user_id: Optional[str] = None
                   ) -> list[BaseNode]:
    """Every version of the fact memory ``node_id`` holds, oldest first, each once: the
    memories it supersedes and those superseding it, transitively, within its own user.

    An id that is not a memory (of ``user_id``, when given) raises
    :class:`~llama_index_recency.errors.MemoryNotFoundError` naming it.

    Raises:
        MemoryNotFoundError: ``node_id`` is not a memory (of ``user_id``, when given).
    """
    start = get_memory(index, node_id, user_id=user_id)  # found under any spelling of the id
    owner = start.metadata.get(USER_ID_KEY)
    # The owner as stored, whatever it is (a check is for what a caller asks).
    scope = None if owner is None else MetadataFilters(filters=[MetadataFilter(
        key=USER_ID_KEY, operator=FilterOperator.EQ, value=owner)])
    date_key = index_policy(index).date_key
    versions = {start.node_id: start}
    for direction in (OLDER, NEWER):
        reached = _look_up(index, walk_links([NodeWithScore(node=start)], direction, scope),
                           date_key)
        versions.update((n.node.node_id, n.node) for n in reached[start.node_id])
    return sorted(versions.values(), key=lambda node: _oldest_first(node, date_key))


amemory_history = in_thread(memory_history)


def _look_up(index: MemoryStore, walk: LinkWalk, date_key: str
             ) -> dict[str, list[NodeWithScore]]:
    """Run a walk with plain lookups (no vector, no score) instead of vector searches."""
    try:
        search = next(walk)
        while True:
            found = get_memories(index, search.ids, search.metadata_filters(date_key))
            search = walk.send([NodeWithScore(node=node) for node in found[:search.limit]])
    except StopIteration as done:
        return done.value


def _oldest_first(node: BaseNode, date_key: str) -> tuple[int, float, str]:
    when = memory_time(node, date_key)
    return (1, 0.0, node.node_id) if when is None else (0, when.timestamp(), node.node_id)
