"""Successor links: the newer memory names the ones it updates in ``supersedes``; nothing else.

That list is the single source of truth. Successors are found when needed by a filtered
search (the memories whose ``supersedes`` contains an id, inside the reader's scope), so
a memory stored by any path (``index.insert_nodes``, :func:`insert_memories`, a copy
between stores, a second writer on a server) is linked the moment it is stored, with no
read-modify-write of the memory it updates. Stores written by 0.2.0 also carry the back
link ``superseded_by``; it is still followed, never written.

Walks are batched (one search per link level for all the memories walked together, each
id searched once), stay inside one user, and end on cycles and self-links.
"""

from __future__ import annotations

import asyncio
from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Optional

from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY, SUPERSEDES_KEY, USER_ID_KEY, is_memory_id
from llama_index_recency.records.dates import parse_memory_date
from llama_index_recency.ranking.ranked import RankedMemory, RecencyRanking
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.storage.filters import memory_scope
from llama_index_recency.ranking.plan import MemorySearch, SearchPlan, linked_memories
from llama_index_recency.storage.store import MemoryStore, get_memories, get_memory, index_policy

LINK_KEYS = (SUPERSEDES_KEY, SUPERSEDED_BY_KEY)

LinkWalk = Generator[MemorySearch, Sequence[NodeWithScore], dict[str, list[NodeWithScore]]]
"""Yields searches, receives their results, returns the memories reached from each origin."""


@dataclass(frozen=True)
class Direction:
    """Which way a walk goes: the key on the next memories that names the current ones
    (searched with a filter), and the key on the current ones that names the next (ids)."""

    naming_current: str
    named_by_current: str


NEWER = Direction(naming_current=SUPERSEDES_KEY, named_by_current=SUPERSEDED_BY_KEY)
"""Towards successors: memories whose ``supersedes`` names the current one (and legacy back links)."""

OLDER = Direction(naming_current=SUPERSEDED_BY_KEY, named_by_current=SUPERSEDES_KEY)
"""Towards predecessors: the ids the current one's ``supersedes`` names (and legacy back links)."""


def check_link(newer: BaseNode, older: BaseNode) -> None:
    """Refuse ``newer`` superseding ``older`` unless both belong to the same user (or both to
    none): a link across users would put one user's fact in place of another's."""
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


def walk_links(
    origins: Sequence[NodeWithScore],
    direction: Direction,
    filters: Optional[MetadataFilters] = None,
) -> LinkWalk:
    """Every memory reached from each origin by links in ``direction``, level by level, by
    origin id; each reached once, only memories of the origin's own user (and in ``filters``)."""
    known = {origin.node.node_id: origin for origin in origins}
    steps: dict[str, set[str]] = {}  # memory id -> the ids one link away
    reached: dict[str, list[NodeWithScore]] = {node_id: [] for node_id in known}
    seen = {node_id: {node_id} for node_id in known}
    frontiers = {node_id: {node_id} for node_id in known}
    while any(frontiers.values()):
        todo = sorted(set().union(*frontiers.values()) - steps.keys())
        if todo:
            found = yield from _one_level(todo, known, direction, filters)
            known.update((node.node.node_id, node) for node in found)
            for node_id in todo:
                steps[node_id] = _next_ids(known[node_id], known, found, direction)
        for origin, frontier in frontiers.items():
            step = set().union(*(steps[node_id] for node_id in frontier)) - seen[origin]
            seen[origin] |= step
            reached[origin].extend(sorted((known[node_id] for node_id in step),
                                          key=lambda n: (-(n.score or 0.0), n.node.node_id)))
            frontiers[origin] = step
    return reached


def _one_level(
    todo: list[str], known: dict[str, NodeWithScore], direction: Direction,
    filters: Optional[MetadataFilters],
) -> Generator[MemorySearch, Sequence[NodeWithScore], list[NodeWithScore]]:
    """The memories one link away from ``todo``: a filtered search (:func:`linked_memories`),
    then the named ids it did not already find."""
    found = yield from linked_memories(direction.naming_current, tuple(todo), filters)
    have = known.keys() | {node.node.node_id for node in found}
    named = sorted({link for node_id in todo
                    for link in linked_ids(known[node_id].node, direction.named_by_current)} - have)
    if named:
        found.extend((yield MemorySearch(limit=len(named), filters=filters, ids=tuple(named))))
    return found


def _next_ids(current: NodeWithScore, known: dict[str, NodeWithScore],
              found: Sequence[NodeWithScore], direction: Direction) -> set[str]:
    node_id = current.node.node_id
    naming = {n.node.node_id for n in found
              if node_id in (n.node.metadata.get(direction.naming_current) or [])}
    named = {link for link in linked_ids(current.node, direction.named_by_current) if link in known}
    user = current.node.metadata.get(USER_ID_KEY)
    return {other for other in naming | named
            if known[other].node.metadata.get(USER_ID_KEY) == user}


def memory_history(index: MemoryStore, node_id: str, *, user_id: Optional[str] = None
                   ) -> list[BaseNode]:
    """Every version of the fact memory ``node_id`` holds, oldest first, each once: the
    memories it supersedes and those superseding it, transitively, within its own user.

    An id that is not a memory (of ``user_id``, when given) raises
    :class:`~llama_index_recency.storage.store.MemoryNotFoundError` naming it.
    """
    start = get_memory(index, node_id, user_id=user_id)  # found under any spelling of the id
    owner = start.metadata.get(USER_ID_KEY)
    scope = None if owner is None else memory_scope(user_id=owner)
    date_key = index_policy(index).date_key
    versions = {start.node_id: start}
    for direction in (OLDER, NEWER):
        reached = _look_up(index, walk_links([NodeWithScore(node=start)], direction, scope),
                           date_key)
        versions.update((n.node.node_id, n.node) for n in reached[start.node_id])
    return sorted(versions.values(), key=lambda node: _oldest_first(node, date_key))


async def amemory_history(index: MemoryStore, node_id: str, *, user_id: Optional[str] = None
                          ) -> list[BaseNode]:
    """Async :func:`memory_history`, run in a thread (the store's calls are blocking)."""
    return await asyncio.to_thread(memory_history, index, node_id, user_id=user_id)


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


def with_successors(
    ranking: RecencyRanking,
    policy: RecencyPolicy,
    reference: datetime,
    filters: Optional[MetadataFilters] = None,
) -> SearchPlan:
    """Put each kept memory's newest successor right before it, whatever the successor's score.

    A plan step like :func:`~llama_index_recency.ranking.plan.exact_recency_search`: its searches
    go through the engine (scored, inside ``filters``); it returns the ranking with
    successor rows ("successor of …") and the superseded rows' reason extended ("kept;
    superseded by …").
    """
    # The walk scores what it reaches by the nodes' scores: the kept ones' raw, not final.
    raw = {row.node_id: row.raw for row in ranking.rows}
    reached = yield from walk_links(
        [NodeWithScore(node=kept.node, score=raw[kept.node.node_id]) for kept in ranking.nodes],
        NEWER, filters)
    successors: dict[str, NodeWithScore] = {}
    for kept in ranking.nodes:
        newest = _newest(kept.node, reached[kept.node.node_id], policy.date_key)
        if newest is not None:
            successors[kept.node.node_id] = newest
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
    return replace(ranking, rows=tuple(rows), nodes=tuple(nodes))


def _newest(node: BaseNode, reached: Sequence[NodeWithScore], date_key: str
            ) -> Optional[NodeWithScore]:
    """The newest of the memories ``node`` leads to, if any is dated no earlier than it."""
    # A successor dated before the memory it updates (written with a past date) would
    # contradict "trust the newer date": only later ones count.
    since = memory_time(node, date_key)
    dated = [(n, when) for n in reached if (when := memory_time(n.node, date_key)) is not None
             and (since is None or when >= since)]
    return max(dated, key=lambda pair: pair[1])[0] if dated else None


def memory_time(node: BaseNode, date_key: str = "date") -> Optional[datetime]:
    """The memory's date as an instant, or None when it has no readable one."""
    try:
        return parse_memory_date(node.metadata.get(date_key))
    except ValueError:
        return None


def relinked(node: BaseNode, gone: dict[str, BaseNode]) -> Optional[dict[str, Any]]:
    """``node``'s link lists once the memories in ``gone`` are deleted, or None if unchanged.

    A chain stays whole: a memory that superseded a deleted one now supersedes what that one
    superseded (A → B → C without B is A → C). Legacy back links to deleted ids are dropped.
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
