"""Walking successor links in a plan: the memories a kept one leads to, found by searches the
engine runs (one search per link level for all the memories walked together, each id searched
once), inside one user, ending on cycles and self-links.

Successors are found when needed by a filtered search (the memories whose ``supersedes``
contains an id, inside the reader's scope), so a memory stored by any path is linked the
moment it is stored, with no read-modify-write of the memory it updates.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Optional

from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency.ranking.plan import MemorySearch, SearchPlan, linked_memories
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RankedMemory, RecencyRanking
from llama_index_recency.records.links import linked_ids, memory_time
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY, SUPERSEDES_KEY, USER_ID_KEY

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
