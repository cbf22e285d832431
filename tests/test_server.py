"""The same answers on a Qdrant server: run with QDRANT_URL=http://host:6333 (skipped without one).

No Qdrant server binary can be installed on the project's machines, so CI skips these; they
exercise the server-only parts: exact search params, the datetime and tenant payload indexes,
and async through AsyncQdrantClient.
"""

from __future__ import annotations

import os
import uuid

import pytest

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyBonusPostprocessor,
    memory_node,
    open_memory_index,
)
from llama_index_recency.storage import close_memory_index
from llama_index_recency.writing.updates import forget

from conftest import QUERY, KnownCosineEmbedding, cosines_for

QDRANT_URL = os.environ.get("QDRANT_URL")
pytestmark = [
    pytest.mark.server,
    pytest.mark.skipif(not QDRANT_URL, reason="set QDRANT_URL to run against a Qdrant server"),
]

H2 = [
    ("Taro is stabilizing the TTS server.", "2026-08-28", 0.456),
    ("Taro made mentaiko pasta at home.", "2026-09-08", 0.421),
    ("Taro finished the benchmark article.", "2026-09-09", 0.408),
    ("Taro bought a keyboard.", "2026-06-01", 0.449),
    ("Taro likes anime.", "2026-09-10", 0.399),
]


@pytest.fixture
def server_index():
    nodes = [memory_node(fact, day, user_id=user) for user in ("taro", "hanako")
             for fact, day, _ in H2]
    embed = KnownCosineEmbedding(cosines_for(nodes, [raw for _ in range(2) for *_, raw in H2]))
    collection = f"test-{uuid.uuid4().hex[:12]}"
    index = open_memory_index(embed, url=QDRANT_URL, collection_name=collection)
    index.insert_nodes(nodes)
    yield index
    index.vector_store.client.delete_collection(collection)
    close_memory_index(index)


def retriever(index, **kwargs):
    return QdrantRecencyRetriever.from_index(
        index, RecencyBonusPostprocessor(reference_date="2026-09-10"), **kwargs
    )


def test_the_seed_h2_table_on_a_server(server_index) -> None:
    found = retriever(server_index, user_id="taro").retrieve(QUERY)
    assert [round(n.score, 3) for n in found] == [0.476, 0.464, 0.455]
    info = server_index.vector_store.client.get_collection(server_index.vector_store.collection_name)
    assert {"date", "user_id", "supersedes"} <= set(info.payload_schema)


async def test_async_on_a_server_matches_sync(server_index) -> None:
    sync = retriever(server_index, user_id="hanako").retrieve(QUERY)
    found = await retriever(server_index, user_id="hanako").aretrieve(QUERY)
    assert [n.node.node_id for n in found] == [n.node.node_id for n in sync]
    assert {n.node.metadata["user_id"] for n in found} == {"hanako"}


def test_forget_by_user_on_a_server(server_index) -> None:
    assert forget(server_index, user_id="hanako", before="2026-09-01") == 2
    assert len(retriever(server_index, user_id="hanako").retrieve(QUERY)) == 2


def test_a_successor_written_by_a_second_writer_is_brought_on_a_server(server_index) -> None:
    """Two writers on one server: the newer memory's supersedes alone links it."""
    tts = memory_node("Taro is stabilizing the TTS server.", "2026-08-28", user_id="taro")
    newer = memory_node("Taro finished the TTS server.", "2026-09-09", user_id="taro",
                        supersedes=[tts.node_id])
    newer.embedding = [0.1] + [0.0] * (len(H2) * 2)
    newer.embedding[-1] = (1 - 0.01) ** 0.5
    second = open_memory_index(server_index._embed_model, url=QDRANT_URL,
                               collection_name=server_index.vector_store.collection_name)
    second.insert_nodes([newer])
    rows = {row.node_id: row.reason
            for row in retriever(server_index, user_id="taro").explain(QUERY).rows}
    assert rows[newer.node_id] == f"successor of {tts.node_id}"
