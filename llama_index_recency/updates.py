"""Updated facts and forgetting: successor links between memories, kept consistent on delete.

A later fact that updates an earlier one (black coffee → sweet café au lait) is stored
with ``supersedes`` naming the earlier memories, and each of those gets
``superseded_by`` naming it: a payload update, never a delete, so the history stays and
the character can still say "you switched from black coffee". The recency bonus alone
cannot surface an update whose cosine is far below the fact it replaced; the link can
(see :class:`~llama_index_recency.QdrantRecencyRetriever`).
"""

from __future__ import annotations

import asyncio

import threading
from collections.abc import Generator, Sequence
from dataclasses import replace
from datetime import date, datetime
from typing import Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.vector_stores.types import (
    MetadataFilters,
)

from llama_index_recency.filters import memory_scope
from llama_index_recency.memory import SUPERSEDED_BY_KEY, SUPERSEDES_KEY, USER_ID_KEY
from llama_index_recency.scoring import (
    RankedMemory,
    RecencyPolicy,
    RecencyRanking,
    parse_memory_date,
)
from llama_index_recency.search import MemorySearch, SearchPlan
from llama_index_recency.store import MemoryStore, delete_memories, get_memories, vector_store_of

LINK_KEYS = (SUPERSEDES_KEY, SUPERSEDED_BY_KEY)

# Link lists are read, changed and written back: one writer at a time in this process,
# so a background write never re-creates a memory that forget just deleted.
_LINKS = threading.RLock()

LinkChange = tuple[str, set[str], set[str]]
"""(metadata key, ids to add, ids to remove) for one memory's link list."""


def insert_memories(index: VectorStoreIndex, nodes: Sequence[BaseNode]) -> None:
    """Store ``nodes`` and mark every memory they supersede with ``superseded_by``.

    A memory stored again keeps the links it already has (storing replaces a point's whole
    payload), so rerunning a conversation never unlinks anything. A memory superseding
    another user's raises ValueError (:func:`check_link`) before anything is written.
    """
    with _LINKS:
        older = {old_id for node in nodes for old_id in node.metadata.get(SUPERSEDES_KEY) or []}
        stored = {node.node_id: node
                  for node in get_memories(index, sorted({n.node_id for n in nodes} | older))}
        known = {**stored, **{node.node_id: node for node in nodes}}
        for node in nodes:
            for old_id in node.metadata.get(SUPERSEDES_KEY) or []:
                if old_id in known:
                    check_link(node, known[old_id])
        for node in nodes:
            old = stored.get(node.node_id)
            for key in LINK_KEYS:
                kept = [] if old is None else old.metadata.get(key) or []
                links = set(kept) | set(node.metadata.get(key) or [])
                if links:
                    node.metadata[key] = sorted(links)
            _exclude_links_from_text(node)
        index.insert_nodes(list(nodes))
        changes: dict[str, list[LinkChange]] = {}
        for node in nodes:
            for old_id in node.metadata.get(SUPERSEDES_KEY) or []:
                changes.setdefault(old_id, []).append((SUPERSEDED_BY_KEY, {node.node_id}, set()))
        _update_links(index, changes)


def check_link(newer: BaseNode, older: BaseNode) -> None:
    """Refuse ``newer`` superseding ``older`` unless both belong to the same user (or both to
    none): a link across users would put one user's fact in place of another's."""
    users = [node.metadata.get(USER_ID_KEY) for node in (newer, older)]
    if users[0] != users[1]:
        whose = ["no user" if user is None else f"user {user!r}" for user in users]
        raise ValueError(f"memory {newer.node_id} of {whose[0]} may not supersede memory "
                         f"{older.node_id} of {whose[1]}")


def forget(
    index: MemoryStore,
    ids: Optional[Sequence[str]] = None,
    *,
    user_id: Optional[str] = None,
    before: Optional[date | datetime | str] = None,
    filters: Optional[MetadataFilters] = None,
) -> int:
    """Delete memories for real; returns how many were deleted.

    Selects the memories with ``ids`` AND of ``user_id`` AND dated before ``before`` AND
    matching ``filters``; at least one is required, and ``filters`` without a condition
    do not count (nothing deletes everything by accident). Links are kept consistent:
    memories that named a deleted one in ``supersedes`` or ``superseded_by`` no longer do,
    and a chain stays whole: forgetting B of A → B → C links A → C, so A still leads to
    the newest fact.
    """
    scope = memory_scope(user_id=user_id, before=before, filters=filters)
    if ids is None and scope is None:
        raise ValueError(f"forget needs ids, user_id, before or filters with a condition, got "
                         f"filters={filters!r}; it never deletes everything")
    with _LINKS:
        return _forget(index, ids, scope)


async def aforget(
    index: MemoryStore,
    ids: Optional[Sequence[str]] = None,
    *,
    user_id: Optional[str] = None,
    before: Optional[date | datetime | str] = None,
    filters: Optional[MetadataFilters] = None,
) -> int:
    """Async :func:`forget`, run in a thread (the store's calls are blocking)."""
    return await asyncio.to_thread(forget, index, ids, user_id=user_id, before=before,
                                   filters=filters)


def _forget(index: MemoryStore, ids: Optional[Sequence[str]],
            scope: Optional[MetadataFilters]) -> int:
    doomed = get_memories(index, ids, scope)
    if not doomed:
        return 0
    gone = {node.node_id: node for node in doomed}
    delete_memories(index, sorted(gone))
    changes: dict[str, list[LinkChange]] = {}
    for node in doomed:
        older = _kept_links(node, SUPERSEDES_KEY, gone)
        newer = _kept_links(node, SUPERSEDED_BY_KEY, gone)
        for other in older:
            changes.setdefault(other, []).append((SUPERSEDED_BY_KEY, newer, {node.node_id}))
        for other in newer:
            changes.setdefault(other, []).append((SUPERSEDES_KEY, older, {node.node_id}))
    _update_links(index, changes)
    return len(doomed)


def _kept_links(node: BaseNode, key: str, gone: dict[str, BaseNode]) -> set[str]:
    """The memories ``node`` links to under ``key`` that stay, reached through deleted ones."""
    kept: set[str] = set()
    seen = {node.node_id}
    frontier = list(node.metadata.get(key) or [])
    while frontier:
        link = frontier.pop()
        if link in seen:
            continue
        seen.add(link)
        if link in gone:
            frontier.extend(gone[link].metadata.get(key) or [])
        else:
            kept.add(link)
    return kept


def with_successors(
    ranking: RecencyRanking,
    policy: RecencyPolicy,
    reference: datetime,
    filters: Optional[MetadataFilters] = None,
) -> SearchPlan:
    """Put each kept memory's newest successor right before it, whatever the successor's score.

    A plan step like :func:`~llama_index_recency.search.exact_recency_search`: it yields
    searches restricted to linked ids (so the engine scores them, inside ``filters``)
    and returns the ranking with successor rows ("successor of …") and the superseded
    rows' reason extended ("kept; superseded by …").
    """
    kept_nodes = [kept.node for kept in ranking.nodes]
    reached = yield from _successor_chains(kept_nodes, filters)
    successors: dict[str, NodeWithScore] = {}
    for node in kept_nodes:
        newest = _newest(node, reached[node.node_id], policy.date_key)
        if newest is not None:
            successors[node.node_id] = newest
    if not successors:
        return ranking
    kept_ids = {n.node.node_id for n in ranking.nodes}
    placed: set[str] = set()
    nodes: list[NodeWithScore] = []
    rows: list[RankedMemory] = []
    by_id = {row.node_id: row for row in ranking.rows}
    for kept in ranking.nodes:
        node_id = kept.node.node_id
        if node_id in placed:
            continue
        successor = successors.get(node_id)
        if successor is not None and successor.node.node_id not in placed:
            row = replace(policy.rank([successor], reference).rows[0], kept=True,
                          reason=f"successor of {node_id}")
            nodes.append(NodeWithScore(node=successor.node, score=row.final))
            rows.append(row)
            placed.add(successor.node.node_id)
        nodes.append(kept)
        placed.add(node_id)
        reason = "kept" if successor is None else f"kept; superseded by {successor.node.node_id}"
        rows.append(replace(by_id[node_id], reason=reason))
    rows.extend(row for row in ranking.rows if row.node_id not in placed | kept_ids)
    return RecencyRanking(rows=tuple(rows), nodes=tuple(nodes), relevance=ranking.relevance)


def _successor_chains(
    nodes: Sequence[BaseNode], filters: Optional[MetadataFilters]
) -> Generator[MemorySearch, Sequence[NodeWithScore], dict[str, list[NodeWithScore]]]:
    """Every memory reached from each of ``nodes`` by ``superseded_by`` links, scored, by node id.

    The chains are walked together, one link level at a time: one ids search per level for
    all of them, and no memory searched twice, so a long chain costs its depth in searches,
    not its depth times the kept memories on it.
    """
    scored: dict[str, NodeWithScore] = {}
    searched: set[str] = set()
    seen = {node.node_id: {node.node_id} for node in nodes}
    reached: dict[str, list[NodeWithScore]] = {node.node_id: [] for node in nodes}
    frontiers = {node.node_id: set(node.metadata.get(SUPERSEDED_BY_KEY) or []) - {node.node_id}
                 for node in nodes}
    while any(frontiers.values()):
        wanted = sorted(set().union(*frontiers.values()) - searched)
        if wanted:
            batch = yield MemorySearch(limit=len(wanted), filters=filters, ids=tuple(wanted))
            searched.update(wanted)
            scored.update((found.node.node_id, found) for found in batch)
        for origin, frontier in frontiers.items():
            seen[origin].update(frontier)
            level = sorted((scored[link] for link in frontier if link in scored),
                           key=lambda found: (-(found.score or 0.0), found.node.node_id))
            reached[origin].extend(level)
            frontiers[origin] = {link for found in level
                                 for link in found.node.metadata.get(SUPERSEDED_BY_KEY) or []
                                 } - seen[origin]
    return reached


def _newest(node: BaseNode, reached: Sequence[NodeWithScore], date_key: str
            ) -> Optional[NodeWithScore]:
    """The newest of the memories ``node`` leads to, if any is dated no earlier than it."""
    # A successor dated before the memory it updates (written with a past date) would
    # contradict "trust the newer date": only later ones count.
    since = _when(node, date_key)
    dated = [(n, when) for n in reached if (when := _when(n.node, date_key)) is not None
             and (since is None or when >= since)]
    return max(dated, key=lambda pair: pair[1])[0] if dated else None


def _when(node: BaseNode, date_key: str) -> Optional[datetime]:
    try:
        return parse_memory_date(node.metadata.get(date_key))
    except ValueError:
        return None


def _update_links(index: MemoryStore, changes: dict[str, list[LinkChange]]) -> None:
    """Rewrite the link lists of the memories in ``changes``: (key, ids to add, ids to remove)."""
    if not changes:
        return
    nodes = get_memories(index, sorted(changes))
    for node in nodes:
        for key, added, removed in changes[node.node_id]:
            links = (set(node.metadata.get(key) or []) | added) - removed
            if links:
                node.metadata[key] = sorted(links)
            else:
                node.metadata.pop(key, None)
        _exclude_links_from_text(node)
    if nodes:
        vector_store_of(index).add(nodes)  # same ids, same vectors: a payload update


def _exclude_links_from_text(node: BaseNode) -> None:
    """Link ids are bookkeeping: never embedded, never shown to the LLM."""
    for excluded in (node.excluded_embed_metadata_keys, node.excluded_llm_metadata_keys):
        excluded.extend(key for key in LINK_KEYS if key in node.metadata and key not in excluded)
