"""The memory store: Qdrant Edge by default, 0.1.0 local-mode stores still open, migrate between them."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient, models

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyBonusPostprocessor,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.errors import MemoryStoreLockedError, MemoryStoreNotFoundError
from llama_index_recency.models.embeddings import EmbeddingMismatchError
from llama_index_recency.storage import (
    EMBEDDING_METADATA_KEY,
    QdrantEdgeVectorStore,
    check_memory_store,
    close_memory_index,
    count_memories,
    edge_shard_path,
    get_memories,
    index_policy,
    migrate_store,
    save_policy,
)

from conftest import QUERY, KnownCosineEmbedding, cosines_for

SEED_TODAY = "2026-09-10"
MEMORIES = [
    ("Taro likes trains.", "2026-05-01", 0.470),
    ("Taro has a cat named Mochi.", "2026-05-02", 0.460),
    ("Taro stabilized the TTS server.", "2026-08-28", 0.456),
    ("Taro plays the guitar.", "2026-05-03", 0.440),
    ("Taro made mentaiko pasta at home.", "2026-09-08", 0.421),
    ("Taro visited Nagano.", "2026-05-04", 0.415),
    ("Taro finished the benchmark article.", "2026-09-09", 0.408),
    ("Taro reads manga.", "2026-05-05", 0.300),
]
NODES = [memory_node(fact, day) for fact, day, _ in MEMORIES]
TOP3 = [0.476, 0.470, 0.464]  # TTS + bonus, trains (raw), pasta + bonus


def embed() -> KnownCosineEmbedding:
    return KnownCosineEmbedding(cosines_for(NODES, [raw for *_, raw in MEMORIES]))


def top3(index) -> list[float]:
    retriever = QdrantRecencyRetriever.from_index(
        index, RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    )
    return [round(n.score, 3) for n in retriever.retrieve(QUERY)]


def write_0_1_0_store(path: Path) -> None:
    """A store exactly as 0.1.0 wrote it: qdrant-client's local mode, identity in the metadata."""
    client = QdrantClient(path=str(path))
    client.create_collection(
        "memories",
        vectors_config=models.VectorParams(size=len(MEMORIES) + 1, distance=models.Distance.COSINE),
        # The key exactly as 0.1.0 wrote it: renaming the constant must break this test.
        metadata={"llama_index_recency.embedding": {"model": "known-cosine",
                                                    "dimensions": len(MEMORIES) + 1}},
    )
    store = QdrantVectorStore(collection_name="memories", client=client)
    vectors = embed()
    for node in NODES:
        node.embedding = vectors.get_text_embedding(node.get_content(metadata_mode="embed"))
    store.add([node.model_copy() for node in NODES])
    client.close()


def test_a_path_opens_an_edge_shard_that_survives_reopening(tmp_path: Path) -> None:
    index = open_memory_index(embed(), path=tmp_path)
    assert isinstance(index.vector_store, QdrantEdgeVectorStore)
    index.insert_nodes(NODES)
    index.insert_nodes([memory_node(fact, day) for fact, day, _ in MEMORIES])  # same ids: no copies
    assert count_memories(index) == len(MEMORIES)
    assert top3(index) == TOP3
    close_memory_index(index)

    reopened = open_memory_index(embed(), path=tmp_path)
    stored = {node.node_id: node for node in get_memories(reopened)}
    assert stored[NODES[4].node_id].metadata["date"] == "2026-09-08"
    assert stored[NODES[4].node_id].get_content() == "2026-09-08: Taro made mentaiko pasta at home."
    assert top3(reopened) == TOP3


async def test_no_path_is_a_temporary_edge_shard_with_async(tmp_path: Path) -> None:
    index = open_memory_index(embed())
    await index.ainsert_nodes(NODES)
    retriever = QdrantRecencyRetriever.from_index(
        index, RecencyBonusPostprocessor(reference_date=SEED_TODAY)
    )
    assert [round(n.score, 3) for n in await retriever.aretrieve(QUERY)] == TOP3
    candidates = await index.as_retriever(similarity_top_k=8).aretrieve(QUERY)
    assert len(candidates) == 8


def test_another_embedding_model_is_refused(tmp_path: Path) -> None:
    close_memory_index(open_memory_index(embed(), path=tmp_path))
    with pytest.raises(EmbeddingMismatchError, match="'known-cosine' .*refusing to use it with 'other'"):
        open_memory_index(embed(), path=tmp_path, embedding_name="other")


def test_a_0_1_0_store_opens_unchanged_with_a_notice(tmp_path: Path, caplog) -> None:
    write_0_1_0_store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        index = open_memory_index(embed(), path=tmp_path)
    assert isinstance(index.vector_store, QdrantVectorStore)
    assert any(f"llama-index-recency migrate {tmp_path}" in r.getMessage() for r in caplog.records)
    assert count_memories(index) == len(MEMORIES)
    assert top3(index) == TOP3
    close_memory_index(index)


@pytest.mark.slow
def test_migrate_copies_every_memory_and_the_identity_and_leaves_the_source(tmp_path: Path) -> None:
    source, target = tmp_path / "old", tmp_path / "new"
    write_0_1_0_store(source)
    before = sorted((p.relative_to(source), p.stat().st_size) for p in source.rglob("*") if p.is_file())

    first = migrate_store(source, target)
    again = migrate_store(source, target)  # idempotent
    assert (first.source_count, first.copied, first.target_count) == (8, 8, 8)
    assert again.target_count == 8

    after = sorted((p.relative_to(source), p.stat().st_size) for p in source.rglob("*") if p.is_file())
    assert after == before
    migrated = open_memory_index(embed(), path=target)
    assert isinstance(migrated.vector_store, QdrantEdgeVectorStore)
    assert {n.node_id for n in get_memories(migrated)} == {n.node_id for n in NODES}
    assert migrated.vector_store.metadata[EMBEDDING_METADATA_KEY] == {
        "model": "known-cosine", "dimensions": 9
    }
    assert top3(migrated) == TOP3


@pytest.mark.slow
def test_a_migrate_killed_mid_copy_keeps_its_identity_and_a_rerun_finishes(tmp_path: Path) -> None:
    source, target = tmp_path / "old", tmp_path / "new"
    write_0_1_0_store(source)
    code = f"""
        import os
        import llama_index_recency.storage.migration as migration
        migration._COPY_BATCH = 3  # 8 memories: kill -9 after the first of three batches
        migration.migrate_store({str(source)!r}, {str(target)!r},
                                progress=lambda copied: os.kill(os.getpid(), 9))
    """
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert child.returncode == -signal.SIGKILL, child.stderr
    shard = QdrantEdgeVectorStore(edge_shard_path(target))
    assert shard.count() == 3
    shard.close()

    with pytest.raises(EmbeddingMismatchError, match="'known-cosine' .*refusing to use it with 'other'"):
        open_memory_index(embed(), path=target, embedding_name="other")  # same dimension
    rerun = migrate_store(source, target)
    assert (rerun.source_count, rerun.copied, rerun.target_count) == (8, 8, 8)
    client = QdrantClient(path=str(source))
    expected = {str(r.id): r.payload for r in client.scroll("memories", limit=100)[0]}
    client.close()
    shard = QdrantEdgeVectorStore(edge_shard_path(target))
    assert {id_: payload for id_, _, payload in shard.iter_points()} == expected
    shard.close()


def test_migrate_refuses_what_it_cannot_copy(tmp_path: Path) -> None:
    with pytest.raises(MemoryStoreNotFoundError, match="not a llama-index-recency 0.1.0 store"):
        migrate_store(tmp_path / "nothing", tmp_path / "new")


def test_check_memory_store_fails_fast(tmp_path: Path) -> None:
    with pytest.raises(MemoryStoreNotFoundError, match="no memory store at"):
        check_memory_store(tmp_path / "typo", must_exist=True)
    check_memory_store(tmp_path / "new", must_exist=False)
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file"):
        check_memory_store(tmp_path / "file", must_exist=False)
    index = open_memory_index(embed(), path=tmp_path / "held")
    with pytest.raises(MemoryStoreLockedError, match=f"the memory store at {tmp_path / 'held'}"):
        check_memory_store(tmp_path / "held", must_exist=True)
    close_memory_index(index)
    check_memory_store(tmp_path / "held", must_exist=True)


def test_check_memory_store_sees_a_held_0_1_0_store(tmp_path: Path) -> None:
    write_0_1_0_store(tmp_path)
    check_memory_store(tmp_path, must_exist=True)
    client = QdrantClient(path=str(tmp_path))
    with pytest.raises(MemoryStoreLockedError, match="already open"):
        check_memory_store(tmp_path, must_exist=True)
    client.close()


@pytest.mark.slow
def test_killed_writer_on_edge_loses_nothing(tmp_path: Path) -> None:
    """Writes without flush or close, then kill -9: every memory is there on reopening."""
    tests = Path(__file__).parent
    code = f"""
        import os, sys
        sys.path.insert(0, {str(tests)!r})
        from test_store import NODES, embed
        from llama_index_recency import open_memory_index
        index = open_memory_index(embed(), path={str(tmp_path)!r})
        for node in NODES:
            index.insert_nodes([node])
        os.kill(os.getpid(), 9)
    """
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert child.returncode == -signal.SIGKILL, child.stderr
    index = open_memory_index(embed(), path=tmp_path)
    assert count_memories(index) == len(MEMORIES)
    assert top3(index) == TOP3


def test_a_shard_of_another_dimension_is_refused_as_a_mismatch(tmp_path: Path) -> None:
    edge = QdrantEdgeVectorStore(tmp_path / "edge" / "memories", dimensions=3)
    edge.close()
    with pytest.raises(EmbeddingMismatchError, match="an unrecorded model.*3 dims.*9 dims"):
        open_memory_index(embed(), path=tmp_path)


@pytest.mark.parametrize("engine", ["edge", "0.1.0"])
def test_a_calibrated_policy_is_saved_with_the_store_and_read_back(tmp_path: Path, engine: str) -> None:
    if engine == "0.1.0":
        write_0_1_0_store(tmp_path)
    index = open_memory_index(embed(), path=tmp_path)
    assert index_policy(index) == RecencyPolicy()  # nothing recorded, no shipped default: the seed's
    save_policy(index, RecencyPolicy(weight=0.0267, tau_days=30, threshold=0.83, top_n=2))
    close_memory_index(index)
    reopened = open_memory_index(embed(), path=tmp_path)
    policy = index_policy(reopened, reference_date=SEED_TODAY)
    assert (policy.weight, policy.tau_days, policy.threshold, policy.top_n) == (0.0267, 30, 0.83, 2)
    assert policy.reference_date == SEED_TODAY


def test_a_store_without_a_record_gets_its_models_shipped_policy(tmp_path: Path) -> None:
    index = open_memory_index(embed(), path=tmp_path, embedding_name="Qwen/Qwen3-Embedding-0.6B")
    assert index_policy(index) == RecencyPolicy(weight=0.05, tau_days=14, threshold=0.45,
                                                threshold_origin="shipped")


def test_the_saved_policy_is_read_through_an_async_only_client_too(tmp_path: Path) -> None:
    write_0_1_0_store(tmp_path)
    index = open_memory_index(embed(), path=tmp_path, use_async=True)  # local mode: async only
    save_policy(index, RecencyPolicy(weight=0.02, tau_days=30, threshold=0.83))
    assert index_policy(index).threshold == 0.83  # not the seed's 0.45 by a silent fallback


@pytest.mark.parametrize("use_async", [False, True], ids=["sync client", "async only"])
def test_closing_a_local_mode_store_releases_it(tmp_path: Path, use_async: bool) -> None:
    write_0_1_0_store(tmp_path)
    index = open_memory_index(embed(), path=tmp_path, use_async=use_async)
    close_memory_index(index)
    QdrantClient(path=str(tmp_path)).close()  # raises while another client holds the folder
    assert index is not None  # still referenced: closing, not collecting, released it


def test_get_memories_of_one_user_newest_first_and_the_async_twins(tmp_path) -> None:
    from llama_index_recency.storage import aget_memories, get_memories
    from llama_index_recency.writing.updates import aforget

    embed = KnownCosineEmbedding({memory_node(f"Fact {i}.", d, user_id=u).get_content(): 0.5
                                  for i, (d, u) in enumerate(DAYS_USERS)})
    index = open_memory_index(embed, path=tmp_path / "store")
    index.insert_nodes([memory_node(f"Fact {i}.", d, user_id=u)
                        for i, (d, u) in enumerate(DAYS_USERS)])
    taro = get_memories(index, user_id="taro")
    assert [n.metadata["date"] for n in taro] == ["2026-09-09", "2026-09-01", "2026-08-20"]
    assert {n.metadata["user_id"] for n in taro} == {"taro"}
    assert [n.node_id for n in asyncio.run(aget_memories(index, user_id="taro"))] == [
        n.node_id for n in taro]
    assert get_memories(index, user_id="nobody") == []
    assert asyncio.run(aforget(index, user_id="hanako")) == 1
    assert len(get_memories(index)) == 3


DAYS_USERS = [("2026-09-01", "taro"), ("2026-08-20", "taro"), ("2026-09-09", "taro"),
              ("2026-09-05", "hanako")]


def test_a_saved_policy_with_a_setting_this_version_lacks_still_ranks(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A policy saved by a newer version (or edited by hand) may carry a setting this one does
    not know: the store still ranks, without it, and says so once."""
    from llama_index_recency.storage.metadata import POLICY_METADATA_KEY

    index = open_memory_index(KnownCosineEmbedding({}), path=tmp_path / "store")
    save_policy(index, RecencyPolicy(threshold=0.61, top_n=2))
    store = index.vector_store
    store.update_metadata({POLICY_METADATA_KEY: {**store.metadata[POLICY_METADATA_KEY],
                                                 "saved_by": "0.9.0"}})
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            policy = index_policy(index)
            assert (policy.threshold, policy.top_n) == (0.61, 2)
    assert [r.getMessage() for r in caplog.records] == [
        "the policy saved with the store has settings this version does not know (saved_by): "
        "it ranks without them"]
    close_memory_index(index)
