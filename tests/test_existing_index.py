"""An index another program made (an app's own Qdrant collection): ranked with the shipped
policy of the model that embeds it, and only read, never written to."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from llama_index.core import StorageContext, VectorStoreIndex
from llama_index.core.schema import QueryBundle, TextNode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient

from llama_index_recency import QdrantRecencyRetriever, RecencyBonusPostprocessor
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.ranking.policy import RecencyPolicy

FACTS = [("Taro drinks coffee black, without sugar or milk.", "2026-08-20"),
         ("Taro has been drinking sweet café au lait lately.", "2026-09-01"),
         ("Taro went to a hot spring in Hakone with his sister.", "2026-07-12")]
FACTS += [(f"Taro read chapter {i} of a novel about sailing.", f"2026-07-{i + 1:02d}")
          for i in range(18)]  # 21 memories: over the size at which a store fits its gate


@pytest.fixture
def app_index(e5, tmp_path: Path):
    """The app's own local-mode collection, written by LlamaIndex's Qdrant store."""
    client = QdrantClient(path=str(tmp_path / "qdrant"))
    store = QdrantVectorStore(client=client, collection_name="user_docs")
    nodes = [TextNode(text=text, metadata={"date": day}) for text, day in FACTS]
    index = VectorStoreIndex(nodes, storage_context=StorageContext.from_defaults(
        vector_store=store), embed_model=e5)
    yield index, client
    client.close()


def test_an_apps_own_index_ranks_with_the_shipped_policy_of_its_model(app_index, e5) -> None:
    """The collection records no model: the index's own (e5) names the policy, not the
    seed's generic 0.05 / 0.45, whose gate lets every memory of an e5 store through."""
    index, _ = app_index
    shipped = RecencyPolicy(**CALIBRATED_POLICIES[e5.model_name])
    for made in (RecencyBonusPostprocessor.from_index(index),
                 QdrantRecencyRetriever.from_index(index).policy):
        assert (made.weight, made.language_thresholds) == (shipped.weight,
                                                           shipped.language_thresholds)


def test_a_retriever_only_reads_an_index_another_program_made(app_index, caplog) -> None:
    """No gate saved into the app's collection, no terms added to its points: said once."""
    index, client = app_index
    before = client.get_collection("user_docs").config.metadata
    payloads = [point.payload for point in client.scroll("user_docs", limit=100)[0]]
    with caplog.at_level(logging.WARNING):
        retriever = QdrantRecencyRetriever.from_index(index)
        QdrantRecencyRetriever.from_index(index)
    for question in ("How do I take my coffee again?", "What am I reading?"):
        retriever.retrieve(question)
    retriever.wait_for_refit()
    assert client.get_collection("user_docs").config.metadata == before
    assert [point.payload for point in client.scroll("user_docs", limit=100)[0]] == payloads
    said = [r.message for r in caplog.records if "records no embedding model" in r.message]
    assert said == ["collection 'user_docs' records no embedding model (open_memory_index did "
                    "not make it): it is only read, its gate is not fitted and the shipped "
                    "threshold ranks; open it with open_memory_index(client=...) to let it fit "
                    "one (not said again)"]


def test_an_apps_own_index_holds_no_words_so_each_memory_ranks_on_relevance(app_index) -> None:
    """Its points carry no stored terms, so the store's counts say no memory holds the
    question's words: no row gets a words part, on either path, and the newer coffee leads as
    it does on cosine and bonus alone (found by an exploratory user: the older one led)."""
    index, _ = app_index
    question = QueryBundle("How do I take my coffee?")
    candidates = index.as_retriever(similarity_top_k=8).retrieve(question)
    for ranking in (RecencyBonusPostprocessor.from_index(index).explain(candidates, question),
                    QdrantRecencyRetriever.from_index(index).explain(question)):
        assert [row.lexical for row in ranking.rows] == [0.0] * len(ranking.rows)
        assert ranking.nodes[0].node.get_content().startswith("Taro has been drinking sweet")


def test_a_hybrid_collections_named_vectors_are_read_not_embedded_again(
        e5, monkeypatch: pytest.MonkeyPatch) -> None:
    """LlamaIndex's hybrid Qdrant store names its dense vector ("text-dense"): the versions
    step reads it, as it reads an unnamed one, and embeds no candidate again."""
    def sparse(texts: list[str]) -> tuple[list[list[int]], list[list[float]]]:
        return [[len(word) for word in text.split()[:3]] for text in texts], \
            [[1.0] * len(text.split()[:3]) for text in texts]

    store = QdrantVectorStore(client=QdrantClient(":memory:"), collection_name="hybrid",
                              enable_hybrid=True, sparse_doc_fn=sparse, sparse_query_fn=sparse)
    index = VectorStoreIndex([TextNode(text=text, metadata={"date": day}) for text, day in FACTS],
                             storage_context=StorageContext.from_defaults(vector_store=store),
                             embed_model=e5)
    recency = RecencyBonusPostprocessor.from_index(index, reference_date="2026-09-10")
    assert recency.supersede_margin is not None  # e5's policy compares versions' vectors
    question = QueryBundle("How do I take my coffee again?")
    candidates = index.as_retriever(similarity_top_k=8).retrieve(question)
    assert not any(c.node.embedding for c in candidates)

    def embedded(*_: object, **__: object) -> list[list[float]]:
        raise AssertionError("a stored candidate was embedded again")

    monkeypatch.setattr(type(recency.embed_model), "get_text_embedding_batch", embedded)
    assert recency.explain(candidates, question).nodes


def test_a_model_of_another_size_than_the_collections_is_one_line_naming_both(
        app_index) -> None:
    """qdrant-client's local mode fails in numpy ("shapes (21,384) and (8,) not aligned")."""
    from llama_index.core import MockEmbedding

    from llama_index_recency.errors import EmbeddingMismatchError

    index, _ = app_index
    retriever = QdrantRecencyRetriever(index.vector_store, MockEmbedding(embed_dim=8),
                                       RecencyPolicy(reference_date="2026-09-10"))
    with pytest.raises(EmbeddingMismatchError, match=r"^the question's vector has 8 dimensions "
                       r"\('unknown'\) but the store holds 384-dimensional vectors: rank it "
                       "with the model that embedded it$"):
        retriever.retrieve("How do I take my coffee again?")


def test_from_index_on_an_index_of_another_store_says_what_works_there(e5) -> None:
    from llama_index_recency.errors import UnsupportedStoreError

    index = VectorStoreIndex([TextNode(text="Taro likes trains.", metadata={"date": "2026-09-01"})],
                             embed_model=e5)  # LlamaIndex's own SimpleVectorStore
    with pytest.raises(UnsupportedStoreError, match=r"not in a SimpleVectorStore: from_index "
                       r"reads the store's policy and vectors; for this index, make the "
                       r"postprocessor by hand \(RecencyBonusPostprocessor\(weight=\.\.\., "):
        RecencyBonusPostprocessor.from_index(index)


def test_a_retriever_from_index_takes_the_policys_settings_over_the_stores(e5) -> None:
    """An app's dates under ``created_at``: ``date_key=`` as the postprocessor takes it."""
    client = QdrantClient(":memory:")
    store = QdrantVectorStore(client=client, collection_name="app")
    facts = [("Taro drinks coffee black.", "2026-08-20"),
             ("Taro has been drinking sweet café au lait lately.", "2026-09-01")]
    index = VectorStoreIndex([TextNode(text=text, metadata={"created_at": day})
                              for text, day in facts],
                             storage_context=StorageContext.from_defaults(vector_store=store),
                             embed_model=e5)
    retriever = QdrantRecencyRetriever.from_index(index, date_key="created_at", top_n=2)
    assert (retriever.policy.date_key, retriever.policy.top_n) == ("created_at", 2)
    rows = retriever.explain("How do I take my coffee?").rows
    assert {row.date for row in rows} == {"2026-08-20", "2026-09-01"}
    assert all(row.bonus > 0 for row in rows)


def test_a_server_search_adds_no_index_to_a_collection_another_program_made(
        app_index, e5, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a server the exact search indexes the date and user fields of its own stores; an
    app's collection is only read. (Local mode stands in for the server here: no Qdrant
    server runs in the test suite.)"""
    from llama_index_recency import open_memory_index
    from llama_index_recency.querying import exact

    index, client = app_index
    created: list[str] = []
    real = client.create_payload_index
    monkeypatch.setattr(client, "create_payload_index",
                        lambda name, *args, **kw: created.append(name) or real(name, *args, **kw))
    monkeypatch.setattr(exact, "is_local", lambda _: False)
    QdrantRecencyRetriever.from_index(index).retrieve("How do I take my coffee again?")
    assert created == []
    ours = open_memory_index(e5, client=client, collection_name="ours")
    ours.insert_nodes([TextNode(text="Taro likes trains.", metadata={"date": "2026-09-01"})])
    created.clear()
    QdrantRecencyRetriever.from_index(ours).retrieve("Do I like trains?")
    assert created and set(created) == {"ours"}


def test_a_named_vector_collection_of_another_size_is_not_adopted(tmp_path: Path) -> None:
    from llama_index.core import MockEmbedding
    from qdrant_client import models

    from llama_index_recency import open_memory_index
    from llama_index_recency.errors import EmbeddingMismatchError

    client = QdrantClient(":memory:")
    client.create_collection("app", vectors_config={"text-dense": models.VectorParams(
        size=384, distance=models.Distance.COSINE)})
    with pytest.raises(EmbeddingMismatchError, match="collection 'app' holds 384-dimensional "
                       "vectors but 'unknown' makes 8-dimensional ones"):
        open_memory_index(MockEmbedding(embed_dim=8), client=client, collection_name="app")
    assert client.get_collection("app").config.metadata is None  # nothing recorded
    # Only the dense vector LlamaIndex searches counts: another named one may be any size.
    client.create_collection("photos", vectors_config={
        "text-dense": models.VectorParams(size=8, distance=models.Distance.COSINE),
        "image": models.VectorParams(size=512, distance=models.Distance.COSINE)})
    open_memory_index(MockEmbedding(embed_dim=8), client=client, collection_name="photos")
    client.create_collection("other", vectors_config={"embedding": models.VectorParams(
        size=8, distance=models.Distance.COSINE)})
    with pytest.raises(EmbeddingMismatchError, match=r"collection 'other' has no dense vector "
                       r"named 'text-dense' \(it has \['embedding'\]\)"):
        open_memory_index(MockEmbedding(embed_dim=8), client=client, collection_name="other")
