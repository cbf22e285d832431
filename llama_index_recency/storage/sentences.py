"""Each memory's sentence vectors in the store: written with the memories the package writes,
embedded once for any other (a memory stored by plain ``insert_nodes`` or before 0.4) the
first time a question meets it, and stored then; a store another program made is only read,
its memories' sentence vectors kept in memory instead."""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import models

from llama_index_recency.ranking.plan import MemorySentences
from llama_index_recency.ranking.sentences import (
    SENTENCES_KEY,
    decoded,
    encoded,
    memory_sentences,
)
from llama_index_recency.records.text import is_one_statement
from llama_index_recency.storage.edge import QdrantEdgeVectorStore
from llama_index_recency.storage.edge_points import point_id

logger = logging.getLogger(__name__)

KEPT = 4096
"""Memories whose sentence vectors a reader keeps in memory when it may not store them."""


def sentence_payloads(embed_model: BaseEmbedding,
                      memories: Sequence[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    """``(id, payload fields)`` holding the sentence vectors of the ``memories`` (id, text) of
    several sentences, embedded in one batch (none for a memory of one sentence)."""
    several = [(identifier, memory_sentences(text)) for identifier, text in memories
               if not is_one_statement(text)]
    several = [(identifier, texts) for identifier, texts in several if len(texts) > 1]
    if not several:
        return []
    vectors = embed_model.get_text_embedding_batch([t for _, texts in several for t in texts])
    text_of = dict(memories)
    payloads, start = [], 0
    for identifier, texts in several:
        payloads.append((identifier, {SENTENCES_KEY: encoded(vectors[start:start + len(texts)],
                                                             text_of[identifier])}))
        start += len(texts)
    return payloads


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
    client.batch_update_points(store.collection_name, [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload=fields,
                                                                 points=[identifier]))
        for identifier, fields in payloads])


class SentenceReader:
    """A search's sentence vectors for :class:`MemorySentences` requests: read from the store
    in one call, the missing ones embedded with ``embed_model`` and stored (``writes``) or
    kept in memory (up to :data:`KEPT` memories); without a store, every one embedded once
    and kept."""

    def __init__(self, store: Optional[BasePydanticVectorStore], embed_model: BaseEmbedding,
                 writes: bool) -> None:
        self.store, self.embed_model, self.writes = store, embed_model, writes
        self._warned = False
        self._kept: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()

    def matrices(self, request: MemorySentences, size: int) -> dict[str, np.ndarray]:
        """Each requested memory's sentence matrix (unit rows of ``size``)."""
        found = self._known(request, size)
        missing = [(i, t) for i, t in zip(request.ids, request.texts, strict=True)
                   if i not in found]
        if missing:
            payloads = sentence_payloads(self.embed_model, missing)
            found.update(self._keep(payloads, dict(missing), size))
        return found

    async def amatrices(self, request: MemorySentences, size: int) -> dict[str, np.ndarray]:
        """Async :meth:`matrices` for a store with only an async Qdrant client: it reads the
        store and embeds asynchronously, and keeps what it embeds in memory."""
        assert isinstance(self.store, QdrantVectorStore)
        records = await self.store._aclient.retrieve(
            self.store.collection_name, ids=list(request.ids), with_payload=[SENTENCES_KEY],
            with_vectors=False)
        found = self._read(records, request, size)
        missing = [(i, t) for i, t in zip(request.ids, request.texts, strict=True)
                   if i not in found]
        for identifier, text in missing:
            texts = memory_sentences(text)
            if len(texts) > 1:
                vectors = await self.embed_model.aget_text_embedding_batch(texts)
                found.update(self._keep([(identifier, {SENTENCES_KEY: encoded(vectors, text)})],
                                        {identifier: text}, size, store=False))
        return found

    def _known(self, request: MemorySentences, size: int) -> dict[str, np.ndarray]:
        found = {i: self._kept[(i, t)] for i, t in zip(request.ids, request.texts, strict=True)
                 if (i, t) in self._kept}
        wanted = [i for i in request.ids if i not in found]
        if wanted:
            found.update(self._read(self._records(wanted), request, size))
        return found

    def _records(self, ids: Sequence[str]) -> list[Any]:
        if self.store is None:
            return []
        if isinstance(self.store, QdrantEdgeVectorStore):
            shard = self.store.client
            return [] if shard is None else shard.retrieve(
                [point_id(i) for i in ids], [SENTENCES_KEY], False)
        assert isinstance(self.store, QdrantVectorStore)
        client: Any = self.store.client
        return client.retrieve(self.store.collection_name, ids=list(ids),
                               with_payload=[SENTENCES_KEY], with_vectors=False)

    @staticmethod
    def _read(records: Sequence[Any], request: MemorySentences,
              size: int) -> dict[str, np.ndarray]:
        """The stored matrices of the memories' texts as they are now."""
        texts = dict(zip(request.ids, request.texts, strict=True))
        found = {}
        for record in records:
            identifier = str(record.id)
            if identifier in texts:
                matrix = decoded((record.payload or {}).get(SENTENCES_KEY), size,
                                 texts[identifier])
                if matrix is not None:
                    found[identifier] = matrix
        return found

    def _keep(self, payloads: Sequence[tuple[str, dict[str, Any]]], texts: Mapping[str, str],
              size: int, store: Optional[bool] = None) -> dict[str, np.ndarray]:
        """Store what was embedded, or keep it in memory when the store may not be written."""
        store = self.writes if store is None else store
        if self.store is None or (isinstance(self.store, QdrantEdgeVectorStore)
                                  and self.store.read_only):
            store = False
        if store and payloads:
            assert self.store is not None
            try:
                write_sentences(self.store, payloads)
            except Exception as error:  # a question never fails for a write it need not make
                store = False
                if not self._warned:
                    self._warned = True
                    logger.warning("llama-index-recency: sentence vectors kept in memory, not "
                                   "stored (%s: %s; not said again)", type(error).__name__, error)
        found = {}
        for identifier, fields in payloads:
            matrix = decoded(fields[SENTENCES_KEY], size, texts[identifier])
            if matrix is None:
                continue
            found[identifier] = matrix
            if not store:
                self._kept[(identifier, texts[identifier])] = matrix
                while len(self._kept) > KEPT:
                    self._kept.popitem(last=False)
        return found
