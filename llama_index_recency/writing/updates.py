"""Writing and forgetting memories: the one store-level write, updates, and deletes.

:func:`insert_memories` is how the API, the writer, the agent block and the CLI store
memories: idempotent (same id, same memory: nothing written), a re-added memory keeps what
it was stored with, batches with progress, and an exact count of what was stored when a
batch fails. Links are only the newer memory's ``supersedes`` (see
:mod:`llama_index_recency.records.links`), so storing never rewrites another memory.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from typing import Any, Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import BaseNode, MetadataMode, TextNode
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)

from llama_index_recency.errors import InvalidInputError, MemoryStoreFullError, PartialWriteError
from llama_index_recency.ranking.sentences import SENTENCES_KEY, decoded
from llama_index_recency.records.links import (
    LINK_KEYS,
    check_link,
    exclude_links_from_text,
    linked_ids,
    memory_time,
    relinked,
)
from llama_index_recency.records.nodes import (
    SUPERSEDED_BY_KEY,
    SUPERSEDES_KEY,
    USER_ID_KEY,
    canonical_id,
    check_user_id,
    is_memory_id,
    memory_node,
    quoted,
    says_something,
)
from llama_index_recency.storage import (
    WRITES,
    MemoryStore,
    Outbox,
    QdrantEdgeVectorStore,
    collection_metadata,
    delete_memories,
    embedding_of,
    forgotten_at,
    get_memories,
    get_memory,
    memory_scope,
    outbox_path,
    save_forgotten,
    sentence_payloads,
    stored_sentences,
    vector_store_of,
    write_sentences,
    write_terms,
)
from llama_index_recency.twins import in_thread

EMBED_BATCH_SIZE = 16
"""Memories embedded per call: small enough for a device, large enough to batch."""

_LEADING_DAY = re.compile(r"^\s*\d{4}-\d{2}-\d{2}:\s*")

WRITE_BATCH_SIZE = 64
"""Memories stored per write: a failure loses at most one batch's work, never a stored one."""

Progress = Callable[[str, int, int], None]
"""``(phase, done, total)``: phase "embedding" or "storing", called as the phase starts
(``done`` 0) and after each batch; a phase with nothing to do is not reported."""


@dataclass(frozen=True)
class StoredMemories:
    """What :func:`insert_memories` did, by memory id."""

    new: tuple[str, ...] = ()
    """Memories the store did not hold."""
    changed: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Memories stored again with new metadata, each with the metadata it had before."""
    unchanged: tuple[str, ...] = ()
    """Memories already stored as given: nothing written."""
    forgotten: tuple[str, ...] = ()
    """Memories left out: their user was forgotten after what they were extracted from was said."""


def insert_memories(
    index: VectorStoreIndex,
    nodes: Sequence[BaseNode],
    *,
    on_progress: Optional[Progress] = None,
    replace: bool = False,
    said_at: Optional[datetime] = None,
    sentences: Optional[Mapping[str, dict[str, Any]]] = None,
) -> StoredMemories:
    """Store ``nodes`` (memory_node's, or any with UUID ids): the one write every path uses.

    Ids and ``supersedes`` links are stored as
    :func:`~llama_index_recency.records.nodes.canonical_id` spells them (``nodes`` are updated in
    place), so a memory is one memory whatever the spelling it was given in; it is given
    once per write (two versions of it would leave one unstored).

    A memory already stored keeps what it had (its metadata, merged under the new; its
    links, united; ``nodes`` are updated in place to what is stored) and is skipped when
    nothing changes, so rerunning a write is free; only ``replace`` lets a node give it
    another user. ``said_at``: when the conversation ``nodes`` were extracted from was
    first said; the nodes of a user forgotten since (:func:`forget`) are left out. A
    refused node raises :class:`InvalidInputError` before anything is written. Nodes
    without an embedding are embedded with the index's model, in batches, and so are the
    sentences of a node of several, unless ``sentences`` gives its stored ones (by id, as
    an export carries them) and they fit its text (an embedding error raises as is, before
    anything is stored); then stored in batches; a failed batch raises
    :class:`PartialWriteError` with the exact number stored.

    Raises:
        InvalidInputError: A memory given twice, of a ``user_id`` that names no user (``""``,
            a number), superseding another user's, or given other text or (without
            ``replace``) another user than it is stored with; nothing is written.
        PartialWriteError: A batch failed; it says how many memories were stored.
    """
    with WRITES:
        for node in nodes:
            _spell_canonically(node)
            _check_owner(node)
        _check_repeats(nodes)
        unique, forgotten = _not_forgotten(index, nodes, said_at)
        stored = {canonical_id(node.node_id): node
                  for node in get_memories(index, _ids_and_links(unique))}
        _check_links(unique, stored)
        _check_texts(unique, stored)
        if not replace:
            _check_users(unique, stored)
        pending: list[BaseNode] = []
        changed: dict[str, dict[str, Any]] = {}
        unchanged: list[str] = []
        for node in unique:
            old = stored.get(node.node_id)
            if old is not None:
                _keep_what_it_had(node, old)
                if node.metadata == old.metadata and _text(node) == _text(old):
                    unchanged.append(node.node_id)
                    continue
                changed[node.node_id] = dict(old.metadata)
                if node.embedding is None and _text(node) == _text(old):
                    node.embedding = old.embedding
            exclude_links_from_text(node)
            pending.append(node)
        vectors = _embed(index, pending, on_progress, sentences or {})
        _store(index, pending, vectors, on_progress)
        new = tuple(node.node_id for node in unique if node.node_id not in stored)
        return StoredMemories(new=new, changed=changed, unchanged=tuple(unchanged),
                              forgotten=forgotten)


ainsert_memories = in_thread(insert_memories)


def _spell_canonically(node: BaseNode) -> None:
    """The node's id and links as :func:`~llama_index_recency.records.nodes.canonical_id` spells
    them: the store finds a point under any spelling but keeps the id as written, so an
    upper-case id would be a memory no lower-case lookup or link ever matches."""
    if is_memory_id(node.node_id):
        node.id_ = canonical_id(node.node_id)
    links = node.metadata.get(SUPERSEDES_KEY)
    if isinstance(links, list):
        node.metadata[SUPERSEDES_KEY] = [canonical_id(link) if is_memory_id(link) else link
                                         for link in links]


def _ids_and_links(nodes: Sequence[BaseNode]) -> list[str]:
    """The ids to read before a write: the nodes themselves and the memories they supersede."""
    return sorted({node.node_id for node in nodes}
                  | {link for node in nodes for link in linked_ids(node, SUPERSEDES_KEY)})


def _check_links(nodes: Sequence[BaseNode], stored: dict[str, BaseNode]) -> None:
    known = {**stored, **{node.node_id: node for node in nodes}}
    for node in nodes:
        for old_id in linked_ids(node, SUPERSEDES_KEY):
            if old_id in known:
                check_link(node, known[old_id])


def _check_repeats(nodes: Sequence[BaseNode]) -> None:
    """Each memory once per write: two nodes with one id (the same fact, date and user) are
    one memory, and only one of their metadata and links would be stored."""
    seen: set[str] = set()
    for node in nodes:
        if node.node_id in seen:
            raise InvalidInputError(
                f"memory {node.node_id} is given twice (the same fact, date and user); keep one "
                "of them")
        seen.add(node.node_id)


def _not_forgotten(index: VectorStoreIndex, nodes: Sequence[BaseNode],
                   said_at: Optional[datetime]) -> tuple[list[BaseNode], tuple[str, ...]]:
    """``nodes`` but those of a user forgotten at or after ``said_at``, and the ids left out."""
    if said_at is None:
        return list(nodes), ()
    metadata = collection_metadata(index)
    kept, left_out = [], []
    for node in nodes:
        forgotten = forgotten_at(metadata, node.metadata.get(USER_ID_KEY))
        if forgotten is not None and forgotten >= said_at:
            left_out.append(node.node_id)
        else:
            kept.append(node)
    return kept, tuple(left_out)


def _check_owner(node: BaseNode) -> None:
    """Refuse a memory whose ``user_id`` names no user (``""``, a number): no reader scoped to
    a user could find it, and every unscoped one would."""
    owner = node.metadata.get(USER_ID_KEY)
    if owner is not None:
        try:
            check_user_id(owner)
        except InvalidInputError as error:
            raise InvalidInputError(f"memory {node.node_id}: {error}") from None


def _check_users(nodes: Sequence[BaseNode], stored: dict[str, BaseNode]) -> None:
    """Refuse giving a stored memory another user: it would leave its user's memories."""
    for node in nodes:
        old = stored.get(node.node_id)
        if old is None or USER_ID_KEY not in node.metadata:
            continue
        before, after = old.metadata.get(USER_ID_KEY), node.metadata[USER_ID_KEY]
        if before != after:
            raise InvalidInputError(
                f"memory {node.node_id} is stored with user {before!r}, not {after!r}: a "
                "write never moves a memory to another user; forget it first, or import "
                "with replace")


def _check_texts(nodes: Sequence[BaseNode], stored: dict[str, BaseNode]) -> None:
    """Refuse storing other text under a stored memory's id (the old fact would be lost),
    and a new node that says nothing ("." or "?", given as a node rather than a fact)."""
    for node in nodes:
        if node.node_id not in stored and not says_something(
                _LEADING_DAY.sub("", node.get_content(), count=1)):
            raise InvalidInputError(
                f"memory {node.node_id}'s text {quoted(node.get_content(), 60)} holds no word; "
                "a memory says something in at least one word")
        old = stored.get(node.node_id)
        if old is not None and old.get_content() != node.get_content():
            raise InvalidInputError(
                f"memory {node.node_id} is stored as {quoted(old.get_content(), 60)}, not "
                f"{quoted(node.get_content(), 60)}: a memory's text never changes; store the new "
                "fact with update_memory (it supersedes the old one) or forget the old one first")


def _keep_what_it_had(node: BaseNode, old: BaseNode) -> None:
    """A re-added memory keeps its stored metadata unless given anew, all its links, and what
    it kept out of its embedded and LLM text."""
    merged = {**old.metadata, **node.metadata}
    for key in LINK_KEYS:
        links = set(old.metadata.get(key) or []) | set(node.metadata.get(key) or [])
        if links:
            merged[key] = sorted(links)
    node.metadata = merged
    for excluded, kept_out in ((node.excluded_embed_metadata_keys, old.excluded_embed_metadata_keys),
                               (node.excluded_llm_metadata_keys, old.excluded_llm_metadata_keys)):
        excluded.extend(key for key in kept_out if key not in excluded)


def _text(node: BaseNode) -> str:
    return node.get_content(metadata_mode=MetadataMode.EMBED)


def _embed(index: VectorStoreIndex, nodes: Sequence[BaseNode], on_progress: Optional[Progress],
           given: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Embed the nodes that have no vector, and the sentences of every node of several but
    those ``given`` stored vectors that fit it; a failure raises as is: nothing is stored yet.
    Returns the sentence vectors' payloads by id."""
    missing = [node for node in nodes if node.embedding is None]
    if missing and on_progress is not None:
        on_progress("embedding", 0, len(missing))
    model = embedding_of(index)
    for start in range(0, len(missing), EMBED_BATCH_SIZE):
        batch = missing[start:start + EMBED_BATCH_SIZE]
        vectors = model.get_text_embedding_batch([_text(n) for n in batch])
        for node, vector in zip(batch, vectors, strict=True):
            node.embedding = vector
        if on_progress is not None:
            on_progress("embedding", start + len(batch), len(missing))
    sentences = {n.node_id: {SENTENCES_KEY: given[n.node_id]} for n in nodes
                 if n.node_id in given and n.embedding
                 and decoded(given[n.node_id], len(n.embedding), n.get_content()) is not None}
    rest = [n for n in nodes if n.node_id not in sentences]
    for start in range(0, len(rest), EMBED_BATCH_SIZE):
        sentences.update(sentence_payloads(model, [(n.node_id, n.get_content())
                                                   for n in rest[start:start + EMBED_BATCH_SIZE]]))
    return sentences  # one sentence: the mark that none is needed


def _store(index: VectorStoreIndex, nodes: Sequence[BaseNode],
           sentences: Mapping[str, dict[str, Any]], on_progress: Optional[Progress]) -> None:
    """Store ``nodes`` in batches, each with its terms and ``sentences`` (vectors by id)."""
    if nodes and on_progress is not None:
        on_progress("storing", 0, len(nodes))
    store = vector_store_of(index)
    edge = isinstance(store, QdrantEdgeVectorStore)  # its points carry terms and the marks
    for start in range(0, len(nodes), WRITE_BATCH_SIZE):
        batch = nodes[start:start + WRITE_BATCH_SIZE]
        try:
            index.insert_nodes(list(batch))
            if not isinstance(store, QdrantEdgeVectorStore):
                write_terms(store, batch)  # LlamaIndex's: none
            write_sentences(store, [(n.node_id, sentences[n.node_id]) for n in batch
                                    if not edge or sentences[n.node_id][SENTENCES_KEY]["rows"]])
        except Exception as error:  # an interrupt stays an interrupt: never swallowed
            raise PartialWriteError(_count_stored(index, nodes, at_least=start), len(nodes),
                                    error_summary(error)) from error
        if on_progress is not None:
            on_progress("storing", min(start + WRITE_BATCH_SIZE, len(nodes)), len(nodes))


def _count_stored(index: VectorStoreIndex, nodes: Sequence[BaseNode], *, at_least: int) -> int:
    """How many of ``nodes`` the store now holds as intended (recounted after a failure)."""
    try:
        stored = {node.node_id: node for node in get_memories(index, [n.node_id for n in nodes])}
    except Exception:  # the store itself is failing: the batches before are what we know
        return at_least
    return sum(1 for node in nodes
               if node.node_id in stored and stored[node.node_id].metadata == node.metadata)


def error_summary(error: BaseException) -> str:
    """One line for a failure: the store-full message as is, else the class and message."""
    if isinstance(error, MemoryStoreFullError):  # says what it is: no class name needed
        return str(error)
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def update_memory(
    index: VectorStoreIndex,
    node_id: str,
    text: str,
    memory_date: date | datetime | str,
    *,
    user_id: Optional[str] = None,
    **node_options: Any,
) -> TextNode:
    """Store a new version of memory ``node_id`` and return it: a memory with fact ``text``
    dated ``memory_date``, owned by the old one's user, that supersedes it (the old one is
    kept, so its history is too). ``node_options`` go to :func:`memory_node`
    (``user_name``, ``metadata``, ``allow_future``, ...).

    Raises:
        MemoryNotFoundError: No memory ``node_id`` (of ``user_id``, when given).
        InvalidInputError: A date before the old memory's, or a fact or date
            :func:`memory_node` refuses.
        FutureMemoryDateError: A date after tomorrow, without ``allow_future=True``.
        PartialWriteError: The new memory could not be stored.
    """
    with WRITES:  # a forget of the old memory waits, then links the new one past it
        old = get_memory(index, node_id, user_id=user_id)
        new = memory_node(text, memory_date, user_id=old.metadata.get(USER_ID_KEY),
                          supersedes=[old.node_id], **node_options)
        since, when = memory_time(old), memory_time(new)
        if since is not None and when is not None and when < since:
            raise InvalidInputError(
                f"the new version is dated {new.metadata['date']}, before memory {node_id} it "
                f"updates ({old.metadata.get('date')}): a newer fact needs a date no earlier "
                "than the old one")
        insert_memories(index, [new])
        return new


aupdate_memory = in_thread(update_memory)


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
    do not count (nothing deletes everything by accident). A chain stays whole: forgetting
    B of A → B → C makes C supersede A, so A still leads to the newest fact. Forgetting a
    whole user (``user_id`` alone, or ``filters`` of ``user_id`` only) records when with the
    store and then drops that user's conversations waiting in the store's outbox: no memory
    block, in this process or a later one, writes back what the user said before.

    Raises:
        InvalidInputError: No condition given, ``ids`` given as one string, or a ``before``
            that is not a readable date.
        MemoryStoreReadOnlyError: An Edge store read from a temporary copy (its filesystem
            is read-only).
        MemoryStoreFullError: An Edge store's disk is too full to rewrite the links,
            delete or record the forget.
    """
    if isinstance(ids, str):  # a string is a sequence too: of one-character "ids"
        raise InvalidInputError(f"ids is a list of memory ids, got the string {ids!r}: pass "
                                f"[{ids!r}]")
    scope = memory_scope(user_id=user_id, before=before, filters=filters)
    if ids is None and scope is None:
        raise InvalidInputError(
            f"forget needs ids, user_id, before or filters with a condition, got "
            f"filters={filters!r}; it never deletes everything")
    whole_user = _whole_user(user_id, filters) if ids is None and before is None else None
    with WRITES:
        at = datetime.now(timezone.utc)
        doomed = get_memories(index, ids, scope)
        if doomed:
            _delete(index, doomed)
        # Only once the memories are gone: a failed forget leaves every conversation waiting.
        if whole_user is not None:
            save_forgotten(index, whole_user, at)
            path = outbox_path(index)
            if path is not None:
                Outbox.at(path).drop_user(whole_user)
        return len(doomed)


aforget = in_thread(forget)


def _whole_user(user_id: Optional[str], filters: Optional[MetadataFilters]) -> Optional[str]:
    """The user whose memories all go when ``user_id`` and ``filters`` (``user_id`` equal to
    one value, nothing else) name only them, or None."""
    named = set() if user_id is None else {user_id}
    if filters is not None and memory_scope(filters=filters) is not None:
        if filters.condition not in (None, FilterCondition.AND) or not all(
                isinstance(kept, MetadataFilter) and kept.key == USER_ID_KEY
                and kept.operator == FilterOperator.EQ and isinstance(kept.value, str)
                for kept in filters.filters):
            return None
        named |= {check_user_id(kept.value) for kept in filters.filters
                  if isinstance(kept, MetadataFilter) and isinstance(kept.value, str)}
    return named.pop() if len(named) == 1 else None


def _delete(index: MemoryStore, doomed: Sequence[BaseNode]) -> None:
    """Delete ``doomed``, first linking the memories that named them past them (hold
    ``WRITES``)."""
    gone = {node.node_id: node for node in doomed}
    neighbours = [node for node in get_memories(index, filters=_naming(sorted(gone)))
                  if node.node_id not in gone]
    relinked_nodes = []
    for node in neighbours:
        links = relinked(node, gone)
        if links is not None:
            for key, value in links.items():
                if value:
                    node.metadata[key] = value
                else:
                    node.metadata.pop(key, None)
            relinked_nodes.append(node)
    # Relinked first: if the delete then fails, C supersedes A and B, still consistent.
    if relinked_nodes:
        store = vector_store_of(index)
        sentences = stored_sentences(store, [node.node_id for node in relinked_nodes])
        store.add(relinked_nodes)  # same ids, same vectors: links only
        if not isinstance(store, QdrantEdgeVectorStore):
            write_terms(store, relinked_nodes)  # the add wrote the whole payload again
        write_sentences(store, sentences)
    delete_memories(index, sorted(gone))


def _naming(ids: list[str]) -> MetadataFilters:
    """The memories whose links name one of ``ids``: ``supersedes``, or the back link
    ``superseded_by`` older stores carry."""
    return MetadataFilters(
        filters=[MetadataFilter(key=key, operator=FilterOperator.IN, value=ids)
                 for key in (SUPERSEDES_KEY, SUPERSEDED_BY_KEY)],
        condition=FilterCondition.OR,
    )
