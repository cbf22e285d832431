"""Each memory's sentence vectors in the store: written with the memories the package writes,
filled in once, where the embedding model is at hand, for memories written otherwise (plain
``insert_nodes``, an older store), and read by id on the question path, never
embedded there. A collection another program made is only read unless
:func:`fill_sentences` is called on it."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Any, Optional

import numpy as np
import qdrant_edge as edge
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import models

from llama_index_recency.ranking.plan import MemorySentences
from llama_index_recency.ranking.sentences import SENTENCES_KEY, SPLIT_RULES, decoded
from llama_index_recency.records.nodes import canonical_id, is_memory_id
from llama_index_recency.records.text import is_one_statement
from llama_index_recency.storage.access import WRITES
from llama_index_recency.storage.edge import QdrantEdgeVectorStore
from llama_index_recency.storage.edge_files import is_edge_panic
from llama_index_recency.storage.edge_points import (
    point_id,
    point_node,
    scroll,
    sentence_payloads,
)
from llama_index_recency.storage.terms import page_text, pages

logger = logging.getLogger(__name__)

BATCH = 64
"""Memories embedded and stored per call while filling in."""

RULE_KEY = f"{SENTENCES_KEY}.rule"
"""The stored sentence rule, which the fill selects on: a memory split by another rule is
embedded again."""

KEPT = 512
"""Memories whose sentence vectors a reader keeps between questions (a few MB)."""


def write_sentences(store: BasePydanticVectorStore,
                    payloads: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Store :func:`sentence_payloads` with their memories, in one call."""
    if not payloads:
        return
    if isinstance(store, QdrantEdgeVectorStore):
        store.set_payloads(list(payloads))
        return
    assert isinstance(store, QdrantVectorStore)
    client: Any = store.client
    if client is None:  # async only: filled in when a sync client opens it
        return
    client.batch_update_points(store.collection_name, [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload=fields,
                                                                 points=[identifier]))
        for identifier, fields in payloads])


def stored_sentences(store: BasePydanticVectorStore,
                     ids: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
    """The stored sentence vectors of the memories ``ids`` as :func:`write_sentences` takes
    them, in one read (for a write that replaces whole payloads to put back)."""
    return [(str(record.id), {SENTENCES_KEY: (record.payload or {})[SENTENCES_KEY]})
            for record in _records(store, [i for i in ids if is_memory_id(i)], False)
            if (record.payload or {}).get(SENTENCES_KEY) is not None]


def _records(store: BasePydanticVectorStore, ids: Sequence[str], with_text: bool) -> list[Any]:
    """The points ``ids`` with their sentence vectors (and their text), in one read."""
    if not ids:
        return []
    if isinstance(store, QdrantEdgeVectorStore):
        shard = store.client
        return [] if shard is None else shard.retrieve(
            [point_id(i) for i in ids], True if with_text else [SENTENCES_KEY], False)
    assert isinstance(store, QdrantVectorStore)
    client: Any = store.client
    if client is None:
        return []
    return client.retrieve(store.collection_name, ids=list(ids),
                           with_payload=True if with_text else [SENTENCES_KEY],
                           with_vectors=False)


def fill_sentences(store: BasePydanticVectorStore, embed_model: BaseEmbedding) -> int:
    """Store the sentence vectors of every memory of ``store`` that lacks them, embedding
    those of several sentences with ``embed_model`` in batches; how many were embedded
    (0 for a read-only store or one with only an async client). A failure (a full disk, the
    model) is logged and the rest left for the next time: reading goes on without them."""
    if isinstance(store, QdrantEdgeVectorStore) and (store.client is None or store.read_only):
        return 0
    if isinstance(store, QdrantVectorStore) and store.client is None:
        return 0
    embedded, announced = 0, False
    try:
        for batch in _lacking(store):
            if not announced and any(not is_one_statement(text) for _, text in batch):
                announced = True
                logger.warning("llama-index-recency: embedding the sentences of the memories "
                               "stored without them, once (a large store takes a while)")
            payloads = sentence_payloads(embed_model, batch)
            with WRITES:  # no write of the package between the check and this write
                write_sentences(store, _unchanged(store, dict(batch), payloads))
            embedded += sum(1 for _, fields in payloads if fields[SENTENCES_KEY]["rows"])
    except BaseException as error:
        # An interrupt stays an interrupt; Edge reports a damaged payload file as a panic
        # (the question's own read then names the store).
        if not isinstance(error, Exception) and not is_edge_panic(error):
            raise
        logger.warning("llama-index-recency: sentence vectors left to fill in next time "
                       "(%s: %s)", type(error).__name__, error)
    if embedded:
        logger.info("llama-index-recency: stored the sentence vectors of %d memories that "
                    "lacked them", embedded)
    return embedded


def _unchanged(store: BasePydanticVectorStore, texts: dict[str, str],
               payloads: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """``payloads`` of the memories whose text is still the one embedded (read again just
    before the write: one rewritten or forgotten meanwhile keeps what its own write put)."""
    now = {_canonical(str(record.id)): page_text(record.payload or {})
           for record in _records(store, [i for i, _ in payloads], True)}
    return [(identifier, fields) for identifier, fields in payloads
            if now.get(_canonical(identifier)) == texts[identifier]]


def _lacking(store: BasePydanticVectorStore) -> Iterator[list[tuple[str, str]]]:
    """(id, text) of the memories without sentence vectors split by today's rule (none, or
    another rule's), :data:`BATCH` at a time."""
    if isinstance(store, QdrantEdgeVectorStore):
        shard = store.client
        assert shard is not None
        lacking = edge.Filter(must_not=[edge.FieldCondition(
            key=RULE_KEY, match=edge.MatchValue(SPLIT_RULES))])
        # Kept until the store's next write: a retriever made again on an unchanged store
        # does not scan it again.
        found = store.kept(("sentences lacking",), lambda: [
            (str(point.id), point_node(point).get_content())
            for point in scroll(shard, lacking, with_vector=False)])
        for start in range(0, len(found), BATCH):
            yield found[start:start + BATCH]
        return
    assert isinstance(store, QdrantVectorStore)
    client: Any = store.client
    if not client.collection_exists(store.collection_name):
        return
    selection = models.Filter(must_not=[models.FieldCondition(
        key=RULE_KEY, match=models.MatchValue(value=SPLIT_RULES))])
    for records in pages(client, store.collection_name, selection):
        found = [(str(record.id), page_text(record.payload or {})) for record in records]
        for start in range(0, len(found), BATCH):
            yield found[start:start + BATCH]


class SentenceReader:
    """Answers a plan's :class:`MemorySentences` requests from the store: one read by id,
    what was read kept for the next questions (up to :data:`KEPT` memories; a memory's
    sentence vectors depend on its text alone, so they hold as long as the text does)."""

    def __init__(self, store: Optional[BasePydanticVectorStore]) -> None:
        self.store = store
        self._kept: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def matrices(self, request: MemorySentences, size: int) -> dict[str, np.ndarray]:
        """Each requested memory's stored sentence matrix (unit rows of ``size``), for its
        text as it is; a memory without one (or a node that is no memory) is left out."""
        asked, found = self._asked(request)
        if not asked or self.store is None:
            return found
        records = _records(self.store, [i for i, _ in asked.values()], False)
        return {**found, **self._read(records, asked, size)}

    async def amatrices(self, request: MemorySentences, size: int) -> dict[str, np.ndarray]:
        """Async :meth:`matrices`, for a store with an async Qdrant client."""
        assert isinstance(self.store, QdrantVectorStore)
        asked, found = self._asked(request)
        if not asked:
            return found
        records = await self.store._aclient.retrieve(
            self.store.collection_name, ids=[i for i, _ in asked.values()],
            with_payload=[SENTENCES_KEY], with_vectors=False)
        return {**found, **self._read(records, asked, size)}

    def _asked(self, request: MemorySentences
               ) -> tuple[dict[str, tuple[str, str]], dict[str, np.ndarray]]:
        """The memories to read, (id as requested, text) by canonical id, and those kept."""
        asked: dict[str, tuple[str, str]] = {}
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for identifier, text in zip(request.ids, request.texts, strict=True):
                if not is_memory_id(identifier):
                    continue  # a document's node ("faq-7") is no memory
                key = _canonical(identifier)
                kept = self._kept.get((key, text))
                if kept is None:
                    asked[key] = (identifier, text)
                else:
                    self._kept.move_to_end((key, text))
                    found[identifier] = kept
        return asked, found

    def _read(self, records: Sequence[Any], asked: dict[str, tuple[str, str]],
              size: int) -> dict[str, np.ndarray]:
        """The stored matrices by the ids as requested (the store spells a UUID its own way)."""
        found = {}
        for record in records:
            key = _canonical(str(record.id))
            identifier, text = asked.get(key, (None, ""))
            if identifier is None:
                continue
            matrix = decoded((record.payload or {}).get(SENTENCES_KEY), size, text)
            if matrix is not None:
                found[identifier] = matrix
                with self._lock:
                    self._kept[(key, text)] = matrix
                    while len(self._kept) > KEPT:
                        self._kept.popitem(last=False)
        return found


def _canonical(point: str) -> str:
    """A point id as :func:`canonical_id` spells it; one that is no UUID (another program's
    integer) as it is."""
    return canonical_id(point) if is_memory_id(point) else point
