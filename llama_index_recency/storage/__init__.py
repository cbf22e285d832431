"""Storage: the memory store over Qdrant Edge, qdrant-client's local mode or a Qdrant server,
what each collection records with it, and how each engine runs a search.

This is the storage layer's front: the layers above import from here. Inside, ``store`` opens
and reads stores, ``access`` reaches them, ``metadata`` keeps what a collection records,
``edge`` / ``edge_files`` / ``edge_points`` are the embedded engine, ``engine`` runs a plan's
searches, ``filters`` translates LlamaIndex filters, ``migration`` moves local-mode stores to
Edge, ``history`` reads a fact's versions and ``outbox`` keeps conversations not yet written.
"""

from llama_index_recency.storage.access import (
    DEFAULT_COLLECTION,
    EDGE_DIRECTORY,
    WRITES,
    MemoryStore,
    MemoryVectorStore,
    check_collection_name,
    edge_shard_path,
    is_local_mode_store,
    vector_store_of,
)
from llama_index_recency.storage.edge import (
    QdrantEdgeVectorStore,
)
from llama_index_recency.storage.edge_points import sentence_payloads
from llama_index_recency.storage.engine import (
    QuestionScans,
    arun_search,
    aterm_counts,
    has_async_client,
    is_local,
    payload_indexes,
    run_search,
    stored_vectors,
    sync_client,
    term_counts,
)
from llama_index_recency.storage.filters import (
    memory_scope,
    to_edge_filter,
    to_qdrant_filter,
)
from llama_index_recency.storage.history import (
    amemory_history,
    memory_history,
)
from llama_index_recency.storage.metadata import (
    EMBEDDING_METADATA_KEY,
    FORGOTTEN_METADATA_KEY,
    GATE_METADATA_KEY,
    GATE_REFUSED_METADATA_KEY,
    POLICY_METADATA_KEY,
    USER_GATES_METADATA_KEY,
    collection_metadata,
    embedding_identity,
    forgotten_at,
    gate_record,
    gate_refusal,
    has_saved_policy,
    index_policy,
    made_here,
    policy_records,
    save_forgotten,
    save_gate_fit,
    save_gate_refusal,
    save_policy,
    shipped_policy,
)
from llama_index_recency.storage.migration import (
    Migration,
    migrate_store,
)
from llama_index_recency.storage.outbox import (
    Conversation,
    Outbox,
    outbox_path,
)
from llama_index_recency.storage.sentences import (
    SentenceReader,
    fill_sentences,
    stored_sentences,
    write_sentences,
)
from llama_index_recency.storage.store import (
    aget_memories,
    check_memory_store,
    check_open_options,
    close_memory_index,
    count_memories,
    delete_memories,
    embedding_of,
    get_memories,
    get_memory,
    open_memory_index,
    open_memory_store,
)
from llama_index_recency.storage.terms import fill_terms, write_terms

__all__ = [
    "WRITES",
    "aget_memories",
    "amemory_history",
    "arun_search",
    "aterm_counts",
    "check_collection_name",
    "check_memory_store",
    "check_open_options",
    "close_memory_index",
    "collection_metadata",
    "Conversation",
    "count_memories",
    "DEFAULT_COLLECTION",
    "delete_memories",
    "EDGE_DIRECTORY",
    "edge_shard_path",
    "embedding_identity",
    "EMBEDDING_METADATA_KEY",
    "embedding_of",
    "fill_sentences",
    "fill_terms",
    "forgotten_at",
    "FORGOTTEN_METADATA_KEY",
    "GATE_METADATA_KEY",
    "gate_record",
    "gate_refusal",
    "GATE_REFUSED_METADATA_KEY",
    "USER_GATES_METADATA_KEY",
    "get_memories",
    "get_memory",
    "has_async_client",
    "has_saved_policy",
    "made_here",
    "shipped_policy",
    "index_policy",
    "is_local",
    "is_local_mode_store",
    "memory_history",
    "memory_scope",
    "MemoryStore",
    "MemoryVectorStore",
    "migrate_store",
    "Migration",
    "open_memory_index",
    "open_memory_store",
    "Outbox",
    "outbox_path",
    "payload_indexes",
    "POLICY_METADATA_KEY",
    "policy_records",
    "QdrantEdgeVectorStore",
    "QuestionScans",
    "run_search",
    "save_forgotten",
    "save_gate_fit",
    "save_gate_refusal",
    "save_policy",
    "SentenceReader",
    "sentence_payloads",
    "stored_sentences",
    "stored_vectors",
    "sync_client",
    "term_counts",
    "to_edge_filter",
    "to_qdrant_filter",
    "vector_store_of",
    "write_sentences",
    "write_terms",
]
