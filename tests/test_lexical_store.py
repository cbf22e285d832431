"""The lexical signal on real stores: every write path stores a memory's terms, a store
without them is filled in, and the retriever keeps exactly what ranking every memory by
cosine plus the lexical part keeps (Qdrant Edge and qdrant-client's local mode, e5)."""

from __future__ import annotations

from datetime import date

import numpy as np
import pytest
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters
from qdrant_client import QdrantClient, models

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyPolicy,
    memory_node,
    open_memory_index,
)
from llama_index_recency.ranking.lexical import (
    TERMS_KEY,
    LexicalQuery,
    question_terms,
    stored_terms,
    terms,
)
from llama_index_recency.records.nodes import USER_ID_KEY
from llama_index_recency.storage import term_counts
from llama_index_recency.writing.updates import insert_memories

TODAY = date(2026, 9, 10)
FACTS = [
    ("Taro adopted a shiba inu named Kuro.", date(2026, 3, 1)),
    ("Taro has a dog and walks it every morning.", date(2026, 8, 1)),
    ("Taro's sister Hanako moved to Sapporo.", date(2026, 5, 2)),
    ("Taro started learning the cello.", date(2026, 7, 9)),
    ("Taro drinks sweet café au lait lately.", date(2026, 9, 1)),
    ("Taro's favourite ramen shop is Ichiran in Hakata.", date(2025, 12, 24)),
    ("Taro plays tennis with his colleagues on Fridays.", date(2026, 6, 20)),
    ("Taro's cat Mike sleeps on the keyboard.", date(2026, 8, 30)),
]
QUESTIONS = ["What is the name of my shiba inu?", "Where did my sister Hanako move?",
             "Am I learning the cello?", "What is Kuro like?",
             "How do I take my coffee?", "Tell me about Ichiran.", "Who is Mike?"]
POLICY = RecencyPolicy(weight=0.0, threshold=-1e9, top_n=4, lexical_weight=0.3,
                       reference_date=TODAY.isoformat())


def replica(embed, question: str) -> list[str]:
    """The top 4 by cosine + 0.3 x share over every memory, ranked by numpy."""
    texts = [memory_node(fact, day).get_content() for fact, day in FACTS]
    vectors = np.array(embed.get_text_embedding_batch(
        [memory_node(fact, day).get_content(metadata_mode="embed") for fact, day in FACTS]))
    held = [terms(text) for text in texts]
    query = LexicalQuery.from_counts(len(FACTS), {
        t: sum(t in h for h in held) for t in question_terms(question)})
    relevance = vectors @ np.array(embed.get_query_embedding(question)) + 0.3 * np.array(
        [query.share(h) for h in held])
    return [texts[i] for i in np.argsort(-relevance)[:4]]


def ranked(index, question: str) -> list[str]:
    retriever = QdrantRecencyRetriever.from_index(index, POLICY)
    return [n.node.get_content() for n in retriever.retrieve(QueryBundle(question))]


def margin(embed, question: str) -> float:
    """How far apart the replica's 4th and 5th relevance are (ties within noise are skipped)."""
    texts = [memory_node(fact, day).get_content(metadata_mode="embed") for fact, day in FACTS]
    vectors = np.array(embed.get_text_embedding_batch(texts))
    held = [terms(t) for t in texts]
    query = LexicalQuery.from_counts(len(FACTS), {
        t: sum(t in h for h in held) for t in question_terms(question)})
    scores = np.sort(vectors @ np.array(embed.get_query_embedding(question))
                     + 0.3 * np.array([query.share(h) for h in held]))[::-1]
    return float(min(scores[i] - scores[i + 1] for i in range(4)))


@pytest.mark.parametrize("embed_name", ["e5", "e5_other_machine"])
def test_edge_keeps_what_ranking_every_memory_with_its_terms_keeps(
        embed_name, request, tmp_path) -> None:
    embed = request.getfixturevalue(embed_name)
    index = open_memory_index(embed, path=tmp_path / "store")
    insert_memories(index, [memory_node(fact, day) for fact, day in FACTS])
    checked = [q for q in QUESTIONS if margin(embed, q) > 1e-3]
    assert len(checked) >= 4
    for question in checked:
        assert ranked(index, question) == replica(embed, question), question


def test_a_rare_name_the_question_repeats_brings_its_memory_first(e5, tmp_path) -> None:
    index = open_memory_index(e5, path=tmp_path / "store")
    insert_memories(index, [memory_node(fact, day) for fact, day in FACTS])
    assert "Kuro" in ranked(index, "What is Kuro like?")[0]


def test_each_question_weighs_its_words_in_the_store_as_the_last_write_left_it(
        e5, tmp_path) -> None:
    index = open_memory_index(e5, path=tmp_path / "store")
    insert_memories(index, [memory_node(fact, day) for fact, day in FACTS])
    store, asked = index.vector_store, question_terms("What is Kuro like?")
    assert term_counts(store, asked, None) == (8, {"kuro": 1})
    assert term_counts(store, asked, None) == (8, {"kuro": 1})  # kept, as it is
    chewed = memory_node("Kuro chewed the user's slippers.", date(2026, 9, 2))
    insert_memories(index, [chewed])
    assert term_counts(store, asked, None) == (9, {"kuro": 2})
    store.delete_nodes(node_ids=[chewed.node_id])
    assert term_counts(store, asked, None) == (8, {"kuro": 1})


def test_each_users_words_are_weighed_in_that_users_memories(e5, tmp_path) -> None:
    index = open_memory_index(e5, path=tmp_path / "store")
    insert_memories(index, [
        memory_node("Kuro chewed the user's slippers.", date(2026, 9, 2), user_id="taro"),
        memory_node("Hanako walks Kuro on Sundays.", date(2026, 9, 3), user_id="hanako"),
        memory_node("Hanako drinks green tea.", date(2026, 9, 4), user_id="hanako")])

    def scope(user: str) -> MetadataFilters:
        return MetadataFilters(filters=[MetadataFilter(key=USER_ID_KEY, value=user)])

    store, asked = index.vector_store, question_terms("What is Kuro like?")
    assert term_counts(store, asked, scope("taro")) == (1, {"kuro": 1})
    assert term_counts(store, asked, scope("hanako")) == (2, {"kuro": 1})
    assert term_counts(store, asked, None) == (3, {"kuro": 2})


def test_plain_insert_nodes_into_local_mode_are_filled_in_and_ranked_alike(e5) -> None:
    client = QdrantClient(location=":memory:")
    index = open_memory_index(e5, client=client)
    index.insert_nodes([memory_node(fact, day) for fact, day in FACTS])  # no terms written
    records, _ = client.scroll(index.vector_store.collection_name, limit=100, with_payload=True)
    assert not any(TERMS_KEY in (r.payload or {}) for r in records)
    checked = [q for q in QUESTIONS if margin(e5, q) > 1e-3]
    assert len(checked) >= 4
    for question in checked:
        assert ranked(index, question) == replica(e5, question), question
    records, _ = client.scroll(index.vector_store.collection_name, limit=100, with_payload=True)
    by_text = {memory_node(fact, day).get_content(): fact for fact, day in FACTS}
    assert sorted(r.payload[TERMS_KEY] for r in records) == sorted(
        stored_terms(text) for text in by_text)


def test_insert_memories_into_local_mode_writes_the_terms(e5) -> None:
    client = QdrantClient(location=":memory:")
    index = open_memory_index(e5, client=client)
    insert_memories(index, [memory_node(fact, day) for fact, day in FACTS])
    lacking = client.count(index.vector_store.collection_name, count_filter=models.Filter(
        must=[models.IsEmptyCondition(is_empty=models.PayloadField(key=TERMS_KEY))])).count
    assert lacking == 0


def test_an_edge_store_without_terms_is_filled_in_when_the_signal_is_on(e5, tmp_path) -> None:
    index = open_memory_index(e5, path=tmp_path / "store")
    insert_memories(index, [memory_node(fact, day) for fact, day in FACTS])
    store = index.vector_store
    import qdrant_edge as edge

    ids = [str(p.id) for p in store.client.scroll(edge.ScrollRequest(limit=100))[0]]
    store.client.update(edge.UpdateOperation.delete_payload(ids, [TERMS_KEY]))
    assert store.count() == len(FACTS)
    lacking = store.client.count(edge.CountRequest(
        exact=True, filter=edge.Filter(must=[edge.IsEmptyCondition(TERMS_KEY)])))
    assert lacking == len(FACTS)
    assert "Kuro" in ranked(index, "What is Kuro like?")[0]
    lacking = store.client.count(edge.CountRequest(
        exact=True, filter=edge.Filter(must=[edge.IsEmptyCondition(TERMS_KEY)])))
    assert lacking == 0


def test_with_the_words_the_seeds_newer_coffee_still_leads_and_the_table_shows_their_part(
        e5, tmp_path) -> None:
    """The old coffee memory holds the question's words "drink" and "coffee", the newer one
    says "café au lait": the words lift the old one, but a newer version is judged without
    them."""
    from llama_index_recency import RecencyMemory, index_policy
    from llama_index_recency.records.examples import example_memories

    memory = RecencyMemory(e5, path=tmp_path / "store")
    memory.add(example_memories())
    memory.policy = index_policy(memory.index, reference_date="2026-09-10")  # e5's: words on
    ranking = memory.search("How do I drink my coffee again?")
    assert [n.node.metadata["key"] for n in ranking.nodes][:2] == ["cafe_au_lait",
                                                                   "coffee_black"]
    parts = {row.text.split(": ", 1)[1][:12]: row.lexical for row in ranking.rows}
    assert parts["Taro drinks "] > 0.0 == parts["Taro has bee"]
    assert "| Words |" in ranking.to_table()
    memory.policy = memory.policy.model_copy(update={"language_lexical_weights": {}})
    assert "| Words |" not in memory.search("How do I drink my coffee again?").to_table()


def test_words_that_say_when_lift_no_memory_that_says_them(e5, tmp_path) -> None:
    """"these days" is no "day": the seed's "These days Taro goes for walks…" got the drink
    question's words' part (+0.075) and came second, above the black coffee (found by an
    exploratory user). On both paths the two drinks now lead and the walk has no words' part
    (its cosine alone may still pass: that is the model's)."""
    from llama_index_recency import RecencyBonusPostprocessor, index_policy
    from llama_index_recency.records.examples import example_memories

    index = open_memory_index(e5, path=tmp_path / "store")
    insert_memories(index, example_memories())
    recency = RecencyBonusPostprocessor.from_index(index, reference_date="2026-09-10")
    retriever = QdrantRecencyRetriever.from_index(
        index, index_policy(index, reference_date="2026-09-10"))
    bundle = QueryBundle("What do I drink these days?")
    for ranking in (recency.explain(index.as_retriever(similarity_top_k=8).retrieve(bundle),
                                    bundle), retriever.explain(bundle)):
        assert [n.node.metadata["key"] for n in ranking.nodes][:2] == ["cafe_au_lait",
                                                                       "coffee_black"]
        walks = [row for row in ranking.rows if "walks in the evening" in row.text]
        assert walks and all(row.lexical == 0.0 for row in walks)


def test_the_postprocessor_from_the_index_ranks_with_the_words_as_the_retriever(
        e5, tmp_path) -> None:
    """On an existing index: its top-8 candidates (all eight memories here) re-ranked by the
    postprocessor with the store's whole policy and the words equal the exact retriever's
    answer with the same policy."""
    from llama_index_recency import RecencyBonusPostprocessor, index_policy

    index = open_memory_index(e5, path=tmp_path / "store")
    insert_memories(index, [memory_node(fact, day) for fact, day in FACTS])
    options = {"threshold": -1e9, "top_n": 4, "lexical_weight": 0.3,
               "reference_date": TODAY.isoformat()}
    recency = RecencyBonusPostprocessor.from_index(index, **options)
    retriever = QdrantRecencyRetriever.from_index(index, index_policy(index, **options))
    checked = [q for q in QUESTIONS if margin(e5, q) > 1e-3]
    assert len(checked) >= 4
    lifted = 0
    for question in checked:
        candidates = index.as_retriever(similarity_top_k=8).retrieve(question)
        explained = recency.explain(candidates, QueryBundle(question))
        lifted += any(row.lexical > 0 for row in explained.rows)
        assert [n.node.node_id for n in explained.nodes] == [
            n.node.node_id for n in retriever.retrieve(QueryBundle(question))], question
    assert lifted >= 3  # the words moved something


def test_a_postprocessor_with_the_words_but_no_store_says_how_to_make_one(e5) -> None:
    from llama_index.core.schema import NodeWithScore

    from llama_index_recency import RecencyBonusPostprocessor
    from llama_index_recency.errors import InvalidInputError

    recency = RecencyBonusPostprocessor(lexical_weight=0.1)
    node = NodeWithScore(node=memory_node(*FACTS[0]), score=0.9)
    with pytest.raises(InvalidInputError, match="from_index"):
        recency.postprocess_nodes([node], query_bundle=QueryBundle("Who is Kuro?"))


def test_a_postprocessor_copied_from_the_shipped_policy_ranks_without_the_words(
        e5, caplog) -> None:
    """e5's shipped policy reads an English question's words in the store: a postprocessor
    built by hand from it (no store) ranks by cosine and the bonus, and says why once."""
    from llama_index.core.schema import NodeWithScore

    from llama_index_recency import RecencyBonusPostprocessor, index_policy

    index = open_memory_index(e5)
    recency = RecencyBonusPostprocessor(**dict(index_policy(index, reference_date=TODAY)))
    assert recency.for_question("Who is Kuro?").lexical_weight > 0.0
    node = NodeWithScore(node=memory_node(*FACTS[0]), score=0.9)
    for _ in range(2):
        ranking = recency.explain([node], QueryBundle("Who is Kuro?"))
        assert [row.lexical for row in ranking.rows] == [0.0]
    assert len([r for r in caplog.records if "words are left out" in r.getMessage()]) == 1


BILINGUAL = [("Taro's sister Hanako moved to Sapporo.", date(2026, 5, 2)),
             ("Taro started learning the cello.", date(2026, 7, 9)),
             ("太郎の妹の花子は札幌に引っ越した。", date(2026, 5, 2)),
             ("太郎はチェロを習い始めた。", date(2026, 7, 9))]


def test_a_language_can_weigh_the_words_apart(e5, tmp_path) -> None:
    """``language_lexical_weights``: English questions ranked with the words, Japanese ones
    by cosine alone, by the retriever and by the postprocessor on the same store."""
    from llama_index_recency import RecencyBonusPostprocessor, index_policy

    index = open_memory_index(e5, path=tmp_path / "store")
    insert_memories(index, [memory_node(fact, day) for fact, day in BILINGUAL])
    options = {"threshold": -1e9, "top_n": 4, "lexical_weight": 0.15,
               "language_lexical_weights": {"ja": 0.0}, "reference_date": TODAY.isoformat()}
    retriever = QdrantRecencyRetriever.from_index(index, index_policy(index, **options))
    recency = RecencyBonusPostprocessor.from_index(index, **options)
    for question, worded in (("Where did my sister Hanako move?", True),
                             ("妹の花子はどこに引っ越した？", False)):
        candidates = index.as_retriever(similarity_top_k=8).retrieve(question)
        for ranking in (retriever.explain(question),
                        recency.explain(candidates, QueryBundle(question))):
            assert any(row.lexical > 0 for row in ranking.rows) == worded, question


def test_a_language_lexical_weight_below_zero_is_one_line_naming_it() -> None:
    from llama_index_recency.errors import RecencyError

    with pytest.raises(RecencyError, match=r"^RecencyPolicy: language_lexical_weights.ja=-0.1: "
                                           r"Input should be greater than or equal to 0$"):
        RecencyPolicy(language_lexical_weights={"ja": -0.1})
