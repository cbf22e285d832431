"""Recency-aware long-term memory for LlamaIndex over Qdrant (Edge on the device, or a server).

:class:`RecencyMemory` is the way in: one object over a store, its embedding model, its
ranking policy and (optionally) a user, with ``add``, ``search``, ``get_all``, ``update``,
``forget``, ``history``, ``export`` / ``import_``, ``remember`` and the integrations.
Memories are dated facts (:func:`memory_node`) ranked by cosine +
``weight * exp(-age_days / tau_days)`` (:class:`RecencyPolicy`; each embedding model has
its own, :func:`index_policy`): exactly over the whole store by
:class:`QdrantRecencyRetriever`, or over a retriever's candidates by
:class:`RecencyBonusPostprocessor`. :class:`MemoryResponseSynthesizer`,
:class:`RecencyChatEngine` and the agent :class:`RecencyMemoryBlock` put them into the
prompt. Every error raised on purpose is a :class:`RecencyError`.

Everything else is imported from its layer's folder (``llama_index_recency.storage``,
``.fitting.calibration``, ``.writing.backup``, ...); ``docs/architecture.md`` draws the layers.
0.3's module paths (``llama_index_recency.store``) still import, with a ``DeprecationWarning``.
"""

from llama_index_recency import _moved
from llama_index_recency.errors import RecencyError
from llama_index_recency.integrations.chat import MemoryResponseSynthesizer, RecencyChatEngine
from llama_index_recency.integrations.memory_block import RecencyMemoryBlock
from llama_index_recency.integrations.postprocessor import RecencyBonusPostprocessor
from llama_index_recency.integrations.retriever import QdrantRecencyRetriever
from llama_index_recency.models.factories import offline_embedding, openai_like_llm
from llama_index_recency.ranking.events import MemoryRankingEvent
from llama_index_recency.ranking.intent import question_intent
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.recency_memory import RecencyMemory
from llama_index_recency.records.nodes import Turn, memory_node
from llama_index_recency.storage import index_policy, open_memory_index

__all__ = [
    "index_policy",
    "memory_node",
    "MemoryRankingEvent",
    "MemoryResponseSynthesizer",
    "offline_embedding",
    "open_memory_index",
    "openai_like_llm",
    "QdrantRecencyRetriever",
    "question_intent",
    "RecencyBonusPostprocessor",
    "RecencyChatEngine",
    "RecencyError",
    "RecencyMemory",
    "RecencyMemoryBlock",
    "RecencyPolicy",
    "Turn",
]

_moved.install()

__getattr__ = _moved.moved_name
