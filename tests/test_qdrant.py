"""End to end through a real QdrantVectorStore (local mode) with known cosines."""

from __future__ import annotations

import pytest

from llama_index_recency import RecencyBonusPostprocessor, memory_node, open_memory_index

from conftest import QUERY, KnownCosineEmbedding, cosines_for

SEED_TODAY = "2026-09-10"

# Eight old memories outrank the three recent ones on raw cosine; the seed's H2 trio
# (Aug 28 / Sep 8 / Sep 9) sit at 0.456 / 0.421 / 0.408 behind them.
MEMORIES = [
    ("Taro likes trains.", "2026-05-01", 0.470),
    ("Taro has a cat named Mochi.", "2026-05-02", 0.460),
    ("Taro stabilized the TTS server.", "2026-08-28", 0.456),
    ("Taro plays the guitar.", "2026-05-03", 0.440),
    ("Taro made mentaiko pasta at home.", "2026-09-08", 0.421),
    ("Taro visited Nagano.", "2026-05-04", 0.415),
    ("Taro finished the benchmark article.", "2026-09-09", 0.408),
    ("Taro reads manga.", "2026-05-05", 0.300),
    ("Taro likes rain.", "2026-05-06", 0.200),
]


def build(insert: bool = True, **kwargs: object):
    nodes = [memory_node(fact, day) for fact, day, _ in MEMORIES]
    embed = KnownCosineEmbedding(cosines_for(nodes, [raw for _, _, raw in MEMORIES]))
    index = open_memory_index(embed, **kwargs)
    if insert:
        index.insert_nodes(nodes)
    return index, nodes


def test_recent_memories_ranked_below_the_top_3_are_promoted() -> None:
    index, _ = build()
    candidates = index.as_retriever(similarity_top_k=8).retrieve(QUERY)
    assert [round(c.score, 3) for c in candidates] == [0.47, 0.46, 0.456, 0.44, 0.421, 0.415, 0.408, 0.3]
    kept = RecencyBonusPostprocessor(reference_date=SEED_TODAY).postprocess_nodes(candidates)
    assert [n.node.get_content() for n in kept] == [
        "2026-08-28: Taro stabilized the TTS server.",
        "2026-05-01: Taro likes trains.",
        "2026-09-08: Taro made mentaiko pasta at home.",  # 5th by raw cosine
    ]
    assert [round(n.score, 3) for n in kept] == [0.476, 0.470, 0.464]


def test_h2_table_through_qdrant() -> None:
    index, _ = build()
    postprocessor = RecencyBonusPostprocessor(reference_date=SEED_TODAY, top_n=8)
    ranking = postprocessor.explain(index.as_retriever(similarity_top_k=8).retrieve(QUERY))
    recent = [(row.date, round(row.raw, 3), round(row.bonus, 3), round(row.final, 3))
              for row in ranking.rows if row.date >= "2026-08"]
    assert recent == [
        ("2026-08-28", 0.456, 0.020, 0.476),
        ("2026-09-08", 0.421, 0.043, 0.464),
        ("2026-09-09", 0.408, 0.047, 0.455),
    ]
    # All three clear 0.45 as in the seed; the two old 0.47 / 0.46 memories pass on raw cosine.
    assert [row.reason for row in ranking.rows][:5] == ["kept"] * 5


def test_date_is_in_the_payload_and_re_adding_does_not_duplicate() -> None:
    index, nodes = build()
    index.insert_nodes([memory_node(fact, day) for fact, day, _ in MEMORIES])  # same memories again
    client = index.vector_store.client
    assert client.count("memories").count == len(MEMORIES)
    (point,) = client.retrieve("memories", ids=[nodes[4].node_id], with_payload=True)
    assert point.payload["date"] == "2026-09-08"


def test_persisted_store_survives_reopening(tmp_path: pytest.TempPathFactory) -> None:
    index, nodes = build(path=str(tmp_path))
    index.vector_store.client.close()
    reopened, _ = build(insert=False, path=str(tmp_path))
    assert reopened.vector_store.client.count("memories").count == len(nodes)
    kept = RecencyBonusPostprocessor(reference_date=SEED_TODAY).postprocess_nodes(
        reopened.as_retriever(similarity_top_k=8).retrieve(QUERY)
    )
    assert round(kept[0].score, 3) == 0.476


async def test_async_retrieval_and_postprocessing() -> None:
    nodes = [memory_node(fact, day) for fact, day, _ in MEMORIES]
    embed = KnownCosineEmbedding(cosines_for(nodes, [raw for _, _, raw in MEMORIES]))
    index = open_memory_index(embed, use_async=True)
    await index.ainsert_nodes(nodes)
    candidates = await index.as_retriever(similarity_top_k=8).aretrieve(QUERY)
    kept = await RecencyBonusPostprocessor(reference_date=SEED_TODAY).apostprocess_nodes(candidates)
    assert [round(n.score, 3) for n in kept] == [0.476, 0.470, 0.464]
