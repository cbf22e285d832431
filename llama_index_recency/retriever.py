"""A retriever that ranks memories by cosine + recency bonus inside Qdrant, over the whole store.

The top-8-then-re-rank window of :class:`RecencyBonusPostprocessor` can lose a memory
for good: one ranked 9th by raw cosine never gets its bonus. The bonus is at most
``weight``, so every memory that can reach ``threshold`` has raw cosine >= threshold -
weight. This retriever prefetches exactly that window and lets Qdrant add the bonus
(a score-boosting formula over the payload date), apply the threshold and keep the top n.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any, List, Optional

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient, models

from llama_index_recency.scoring import (
    SECONDS_PER_DAY,
    MemoryDateError,
    RecencyPolicy,
    RecencyRanking,
    parse_memory_date,
)

DEFAULT_CANDIDATE_LIMIT = 1000

# Prefetch a hair below threshold - weight, so float rounding of raw scores (float32 in
# Qdrant) can never cut a memory whose bonus would just lift it to the threshold.
_WINDOW_SLACK = 1e-6
# "Any readable datetime": the lower end of a range condition that every date passes.
_EARLIEST = datetime(1, 1, 1, tzinfo=timezone.utc)


class QdrantRecencyRetriever(BaseRetriever):
    """Retrieve memories ranked by ``cosine + weight * exp(-age_days / tau_days)``, computed in Qdrant.

    Returns what :class:`RecencyBonusPostprocessor` with the same ``policy`` would keep if
    it saw every memory: at most ``top_n`` nodes with final score >= ``threshold``, each
    node's score its final score. Works on a collection written by this package
    (``open_memory_index`` / ``memory_node``), sync or async, embedded or on a server.
    """

    def __init__(
        self,
        vector_store: QdrantVectorStore,
        embed_model: BaseEmbedding,
        policy: Optional[RecencyPolicy] = None,
        candidate_limit: int = DEFAULT_CANDIDATE_LIMIT,
        callback_manager: Optional[CallbackManager] = None,
    ) -> None:
        """``policy`` holds the parameters (a ``RecencyBonusPostprocessor`` is one).

        ``candidate_limit`` caps how many memories with raw cosine >= threshold - weight
        Qdrant rescores per query; past it, the lowest-cosine ones are not considered.
        """
        if candidate_limit < 1:
            raise ValueError(f"candidate_limit must be at least 1, got {candidate_limit}")
        super().__init__(callback_manager=callback_manager)
        self._vector_store = vector_store
        self._client: Optional[QdrantClient] = vector_store.client
        # QdrantVectorStore has no public accessor for its async client.
        self._aclient: Optional[AsyncQdrantClient] = vector_store._aclient
        self._embed_model = embed_model
        self._policy = policy or RecencyPolicy()
        self._candidate_limit = candidate_limit
        self._vector_name: Optional[str] = None
        self._ready = False

    @classmethod
    def from_index(
        cls,
        index: VectorStoreIndex,
        policy: Optional[RecencyPolicy] = None,
        **kwargs: Any,
    ) -> "QdrantRecencyRetriever":
        """The retriever over a memory index from ``open_memory_index``, with its embedding model."""
        vector_store = index.vector_store
        if not isinstance(vector_store, QdrantVectorStore):
            raise TypeError(
                f"QdrantRecencyRetriever needs a QdrantVectorStore index, got "
                f"{type(vector_store).__name__}"
            )
        # VectorStoreIndex keeps its embedding model private; its own as_retriever reads it too.
        return cls(vector_store, index._embed_model, policy=policy, **kwargs)

    @property
    def policy(self) -> RecencyPolicy:
        """The recency parameters this retriever ranks with."""
        return self._policy

    def explain(self, query: QueryType) -> RecencyRanking:
        """Every candidate in the prefetch window, ranked by the policy itself (raw, age, bonus, final, verdict).

        Its ``nodes`` are the ones :meth:`retrieve` returns; its rows are what
        ``RecencyBonusPostprocessor.explain`` would show for the same candidates.
        """
        bundle = self._bundle(query)
        if not self._prepare():
            return RecencyRanking(rows=(), nodes=())
        response = self._sync_client().query_points(**self._window_request(self._embed(bundle)))
        return self._policy.rank(self._nodes(response.points))

    async def aexplain(self, query: QueryType) -> RecencyRanking:
        """Async :meth:`explain`."""
        bundle = self._bundle(query)
        if not await self._aprepare():
            return RecencyRanking(rows=(), nodes=())
        client = self._async_client()
        response = await client.query_points(**self._window_request(await self._aembed(bundle)))
        return self._policy.rank(self._nodes(response.points))

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        if not self._prepare():
            return []
        client = self._sync_client()
        vector = self._embed(query_bundle)
        reference = self._policy.reference()
        if self._policy.on_missing_date == "raise":
            undated = client.query_points(**self._undated_request(vector)).points
            self._raise_if_undated(undated)
        response = client.query_points(**self._ranked_request(vector, reference))
        return self._results(response.points)

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        if not await self._aprepare():
            return []
        client = self._async_client()
        vector = await self._aembed(query_bundle)
        reference = self._policy.reference()
        if self._policy.on_missing_date == "raise":
            undated = (await client.query_points(**self._undated_request(vector))).points
            self._raise_if_undated(undated)
        response = await client.query_points(**self._ranked_request(vector, reference))
        return self._results(response.points)

    # --- the Qdrant requests -------------------------------------------------------------

    def _ranked_request(self, vector: List[float], reference: datetime) -> dict[str, Any]:
        """Prefetch the window by raw cosine, rescore with the bonus, cut at threshold and top n."""
        policy = self._policy
        window_filter = None
        if policy.on_missing_date == "drop":
            window_filter = self._dated_filter()
        return {
            "collection_name": self._vector_store.collection_name,
            "prefetch": models.Prefetch(
                query=vector,
                using=self._vector_name,
                filter=window_filter,
                score_threshold=self._window_floor(),
                limit=self._candidate_limit,
            ),
            "query": models.FormulaQuery(
                formula=self._formula(reference),
                # Read only where the conditions above fail to short-circuit the product.
                defaults={policy.date_key: reference.isoformat()},
            ),
            "score_threshold": policy.threshold,
            "limit": policy.top_n,
            "with_payload": True,
        }

    def _formula(self, reference: datetime) -> models.Expression:
        """``$score + bonus``, the bonus being RecencyPolicy's ``weight * exp(-age_days / tau_days)``.

        Qdrant's ``exp_decay`` is ``exp(ln(midpoint) * |x - target| / scale)``; midpoint
        1/e and scale tau in seconds make it ``exp(-age / tau)``. The decay is symmetric,
        so a future date (0 days old for the policy) gets ``weight`` through its own
        condition, and an unreadable or missing date gets no bonus.
        """
        policy = self._policy
        key = policy.date_key
        future = models.FieldCondition(key=key, range=models.DatetimeRange(gt=reference))
        past = models.FieldCondition(
            key=key, range=models.DatetimeRange(gte=_EARLIEST, lte=reference)
        )
        decay = models.ExpDecayExpression(
            exp_decay=models.DecayParamsExpression(
                x=models.DatetimeKeyExpression(datetime_key=key),
                target=models.DatetimeExpression(datetime=reference.isoformat()),
                midpoint=math.exp(-1.0),
                scale=policy.tau_days * SECONDS_PER_DAY,
            )
        )
        return models.SumExpression(
            sum=[
                "$score",
                models.MultExpression(mult=[future, policy.weight]),
                models.MultExpression(mult=[past, policy.weight, decay]),
            ]
        )

    def _window_request(self, vector: List[float]) -> dict[str, Any]:
        """The prefetch window as a plain cosine search: the candidates :meth:`explain` ranks."""
        return {
            "collection_name": self._vector_store.collection_name,
            "query": vector,
            "using": self._vector_name,
            "score_threshold": self._window_floor(),
            "limit": self._candidate_limit,
            "with_payload": True,
        }

    def _undated_request(self, vector: List[float]) -> dict[str, Any]:
        """One window candidate without a readable date, if any (for ``on_missing_date='raise'``)."""
        return {
            **self._window_request(vector),
            "query_filter": models.Filter(must_not=[self._dated()]),
            "limit": 1,
            "with_payload": [self._policy.date_key],
        }

    def _window_floor(self) -> float:
        return self._policy.threshold - self._policy.weight - _WINDOW_SLACK

    def _dated(self) -> models.FieldCondition:
        """Matches points whose date Qdrant can read as a datetime."""
        return models.FieldCondition(
            key=self._policy.date_key, range=models.DatetimeRange(gte=_EARLIEST)
        )

    # --- collection checks, done once ----------------------------------------------------

    def _prepare(self) -> bool:
        """Check the collection once; False while it does not exist or is empty."""
        if self._ready:
            return True
        client = self._sync_client()
        name = self._vector_store.collection_name
        if not client.collection_exists(name):
            return False
        self._vector_name = self._pick_vector_name(client.get_collection(name))
        if not _is_local(client):
            client.create_payload_index(
                name, self._policy.date_key, field_schema=models.PayloadSchemaType.DATETIME
            )
        dated, _ = client.scroll(name, scroll_filter=self._dated_filter(), limit=1)
        if not dated:
            anything, _ = client.scroll(name, limit=1)
            if anything:
                raise self._foreign_collection_error()
            return False
        self._ready = True
        return True

    async def _aprepare(self) -> bool:
        """Async :meth:`_prepare`."""
        if self._ready:
            return True
        client = self._async_client()
        name = self._vector_store.collection_name
        if not await client.collection_exists(name):
            return False
        self._vector_name = self._pick_vector_name(await client.get_collection(name))
        if not _is_local(client):
            await client.create_payload_index(
                name, self._policy.date_key, field_schema=models.PayloadSchemaType.DATETIME
            )
        dated, _ = await client.scroll(name, scroll_filter=self._dated_filter(), limit=1)
        if not dated:
            anything, _ = await client.scroll(name, limit=1)
            if anything:
                raise self._foreign_collection_error()
            return False
        self._ready = True
        return True

    def _dated_filter(self) -> models.Filter:
        return models.Filter(must=[self._dated()])

    def _pick_vector_name(self, info: models.CollectionInfo) -> Optional[str]:
        """The dense vector to search: the store's name, the only one, or the unnamed vector."""
        vectors = info.config.params.vectors
        if not isinstance(vectors, dict):
            return None
        if self._vector_store.dense_vector_name in vectors:
            return self._vector_store.dense_vector_name
        if len(vectors) == 1:
            return next(iter(vectors))
        raise ValueError(
            f"collection {self._vector_store.collection_name!r} has vectors {sorted(vectors)}, "
            f"none named {self._vector_store.dense_vector_name!r}"
        )

    def _foreign_collection_error(self) -> ValueError:
        return ValueError(
            f"collection {self._vector_store.collection_name!r} has points but none with a "
            f"datetime under payload key {self._policy.date_key!r}: it was not written by "
            "llama-index-recency (memory_node / open_memory_index), or date_key is wrong"
        )

    # --- results ---------------------------------------------------------------------------

    def _nodes(self, points: List[models.ScoredPoint]) -> List[NodeWithScore]:
        """Nodes rebuilt from the payload by the vector store's own parser, with Qdrant's scores."""
        result = self._vector_store.parse_to_query_result(points)
        return [
            NodeWithScore(node=node, score=score)
            for node, score in zip(result.nodes, result.similarities or [], strict=True)
        ]

    def _results(self, points: List[models.ScoredPoint]) -> List[NodeWithScore]:
        nodes = self._nodes(points)
        if self._policy.on_missing_date == "no_bonus":
            for candidate in nodes:
                value = candidate.node.metadata.get(self._policy.date_key)
                if not _readable(value):
                    self._policy._warn_undated_once(candidate.node.node_id, value)
                    break
        return nodes

    def _raise_if_undated(self, undated: List[models.ScoredPoint]) -> None:
        if not undated:
            return
        point = undated[0]
        value = (point.payload or {}).get(self._policy.date_key)
        raise MemoryDateError(
            f"memory {str(point.id)!r} has no usable {self._policy.date_key!r} "
            f"(value {value!r}) and on_missing_date='raise'"
        )

    # --- plumbing ----------------------------------------------------------------------------

    def _bundle(self, query: QueryType) -> QueryBundle:
        return QueryBundle(query_str=query) if isinstance(query, str) else query

    def _embed(self, bundle: QueryBundle) -> List[float]:
        if bundle.embedding is None:
            bundle.embedding = self._embed_model.get_agg_embedding_from_queries(
                bundle.embedding_strs
            )
        return bundle.embedding

    async def _aembed(self, bundle: QueryBundle) -> List[float]:
        if bundle.embedding is None:
            bundle.embedding = await self._embed_model.aget_agg_embedding_from_queries(
                bundle.embedding_strs
            )
        return bundle.embedding

    def _sync_client(self) -> QdrantClient:
        if self._client is None:
            raise ValueError(
                "this vector store has only an async Qdrant client; use aretrieve / aexplain"
            )
        return self._client

    def _async_client(self) -> AsyncQdrantClient:
        if self._aclient is None:
            raise ValueError(
                "this vector store has no async Qdrant client; use retrieve / explain, or "
                "open the index with aclient= (or use_async=True for an embedded store)"
            )
        return self._aclient


def _is_local(client: QdrantClient | AsyncQdrantClient) -> bool:
    """Embedded (in-memory or on-disk) Qdrant, where payload indexes do nothing."""
    options = client.init_options
    return options.get("location") == ":memory:" or options.get("path") is not None


def _readable(value: Any) -> bool:
    try:
        parse_memory_date(value)
    except ValueError:
        return False
    return True
