"""RecencyMemory: one object over a real Edge store, doing what the module functions do."""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import pytest

from llama_index_recency.errors import (
    InvalidInputError,
    MemoryNotFoundError,
    MemoryStoreLockedError,
    RecencyError,
)
from llama_index_recency.models.factories import openai_like_llm
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.recency_memory import RecencyMemory
from llama_index_recency.records.nodes import memory_node
from llama_index_recency.storage import index_policy, open_memory_index
from llama_index_recency.writing.backup import export_memories
from llama_index_recency.writing.writer import Turn

from conftest import OpenAIServer

TODAY = "2026-09-10"
COFFEE = "How do I take my coffee again?"
BLACK = ("The user drinks black coffee every morning.", "2025-03-01")
SWEET = ("The user has been drinking sweet café au lait lately.", "2026-09-08")
TRAIN = ("The user commutes by train.", "2026-08-01")


@pytest.fixture
def memory(e5, tmp_path: Path):
    with RecencyMemory(e5, path=tmp_path / "store", user_id="taro", user_name="Taro",
                       policy=None) as bound:
        bound.policy = index_policy(bound.index, reference_date=TODAY)
        yield bound


def test_add_then_search_ranks_the_recent_fact_first_with_its_numbers(memory) -> None:
    stored = memory.add([BLACK, SWEET, TRAIN])
    assert len(stored.new) == 3
    assert memory.add([BLACK]).unchanged == (stored.new[0],)  # storing twice writes nothing
    ranking = memory.search(COFFEE)
    assert ranking.nodes[0].node.get_content() == f"{SWEET[1]}: Taro has been drinking sweet café au lait lately."
    best = ranking.rows[0]
    assert best.kept and best.final == pytest.approx(best.raw + best.bonus)
    assert "Taro" in str(ranking)  # the table of raw, bonus, final, verdict


def test_a_bound_user_sees_and_changes_only_their_own_memories(memory, e5) -> None:
    (taro_tea,) = memory.add([("The user drinks green tea.", "2026-09-01")]).new
    hanako = memory_node("Hanako drinks oolong tea.", "2026-09-01", user_id="hanako")
    RecencyMemory(index=memory.index).add([hanako])  # a bound object writes only its user's
    assert [node.node_id for node in memory.get_all()] == [taro_tea]
    assert memory.get(taro_tea).metadata["user_id"] == "taro"
    with pytest.raises(MemoryNotFoundError, match="of user 'taro'"):
        memory.get(hanako.node_id)
    with pytest.raises(ValueError, match="bound to user 'taro', not 'hanako'"):
        memory.get_all(user_id="hanako")
    assert all(row.node_id != hanako.node_id for row in memory.search("oolong tea").rows)
    with pytest.raises(ValueError, match="never deletes everything"):
        memory.forget()
    assert memory.forget([hanako.node_id]) == 0  # another user's: out of reach
    assert memory.forget(before="2026-09-05") == 1
    assert memory.get_all() == [] and len(get_all_users(memory)) == 1


def get_all_users(memory: RecencyMemory):
    return RecencyMemory(index=memory.index).get_all()


def test_update_keeps_the_history_and_export_import_round_trips(memory, e5, tmp_path) -> None:
    (tea,) = memory.add([("The user drinks green tea.", "2026-09-01")]).new
    oolong = memory.update(tea, "The user has switched to oolong tea.", "2026-09-09")
    assert oolong.get_content() == "2026-09-09: Taro has switched to oolong tea."
    assert [node.node_id for node in memory.history(tea)] == [tea, oolong.node_id]
    assert memory.export(tmp_path / "taro.jsonl") == 2
    with RecencyMemory(e5, path=tmp_path / "copy") as copy:
        assert copy.import_(tmp_path / "taro.jsonl") == 2
        assert copy.import_(tmp_path / "taro.jsonl") == 0
        export_memories(copy.index, tmp_path / "again.jsonl")
    assert ([json.loads(line) for line in (tmp_path / "again.jsonl").read_text().splitlines()]
            == [json.loads(line) for line in (tmp_path / "taro.jsonl").read_text().splitlines()])


@pytest.mark.slow
def test_remember_writes_a_conversation_through_the_llm(memory, openai_server: OpenAIServer
                                                         ) -> None:
    openai_server.reply = json.dumps({"memories": [
        {"turn": 1, "kind": "habit_change", "fact": "The user has switched to green tea."}]})
    with pytest.raises(ValueError, match="no LLM"):
        memory.remember([Turn("user", "I've switched to green tea.")])
    llm = openai_like_llm(api_base=openai_server.base_url, timeout=5.0, max_retries=0)
    (stored,) = memory.remember([Turn("user", "I've switched to green tea.")],
                                memory_date="2026-09-09", llm=llm)
    assert stored.get_content() == "2026-09-09: Taro has switched to green tea."
    assert memory.get(stored.node_id).metadata["user_id"] == "taro"


def test_integrations_share_the_store_policy_user_and_llm(memory, openai_server) -> None:
    memory.add([SWEET])
    memory.llm = openai_like_llm(api_base=openai_server.base_url, timeout=5.0, max_retries=0)
    retriever = memory.retriever()
    assert retriever.policy is memory.policy
    block = memory.as_memory_block(background=False)
    assert (block.index, block.policy, block.user_id, block.llm) == (
        memory.index, memory.policy, "taro", memory.llm)
    openai_server.reply = "Sweet café au lait!"
    answer = memory.chat_engine(system_prompt="You are Mimi.").chat(COFFEE)
    assert str(answer) == "Sweet café au lait!"
    assert "sweet café au lait" in openai_server.system_text()
    assert f"Today is {TODAY}." in openai_server.system_text()


@pytest.mark.slow
def test_calibrate_save_ranks_with_the_fitted_threshold_from_now_on(memory, e5, tmp_path) -> None:
    memory.add([BLACK, SWEET, TRAIN])
    whole_store = RecencyMemory(index=memory.index)  # the saved policy ranks every user
    fit = whole_store.calibrate(save=True)
    assert whole_store.policy.threshold == fit.threshold
    memory.close()
    with RecencyMemory(e5, path=tmp_path / "store") as reopened:
        assert reopened.policy.threshold == fit.threshold


def test_closing_releases_the_store_and_an_index_excludes_opening_options(e5, tmp_path) -> None:
    with RecencyMemory(e5, path=tmp_path / "store") as first:
        with pytest.raises(MemoryStoreLockedError):
            RecencyMemory(e5, path=tmp_path / "store")
        with pytest.raises(ValueError, match="got index and path"):
            RecencyMemory(index=first.index, path=tmp_path / "store")
    with RecencyMemory(e5, path=tmp_path / "store") as again:
        assert isinstance(again.policy, RecencyPolicy)
    index = open_memory_index(e5)
    assert RecencyMemory(index=index, policy=RecencyPolicy(threshold=0.5)).policy.threshold == 0.5


ASYNC_TWINS = ["add", "update", "forget", "remember", "import_", "search", "get", "get_all",
               "history", "export", "calibrate"]


@pytest.mark.parametrize("name", ASYNC_TWINS)
def test_each_async_twin_has_its_method_signature(name: str) -> None:
    method, twin = getattr(RecencyMemory, name), getattr(RecencyMemory, f"a{name}")
    assert inspect.iscoroutinefunction(twin) and twin.__name__ == f"a{name}"
    assert inspect.signature(twin) == inspect.signature(method)


async def test_async_twins_do_what_their_methods_do(memory) -> None:
    stored = await memory.aadd([SWEET, TRAIN])
    ranking = await memory.asearch(COFFEE)
    assert ranking.nodes[0].node.node_id == stored.new[0]
    assert [n.node_id for n in await memory.aget_all()] == list(stored.new)
    assert await memory.aforget(list(stored.new)) == 2


def test_a_write_whose_gate_refit_fails_keeps_its_memories_and_says_so_once(
        e5, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    from llama_index_recency.querying import gate

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("No space left on device")

    monkeypatch.setattr(gate, "refit_gate", broken)
    with RecencyMemory(e5, path=tmp_path / "store", user_id="taro", min_fit_memories=1) as bound:
        stored = bound.add([BLACK, SWEET])
        assert len(stored.new) == 2 and len(bound.get_all()) == 2
    warnings = [r.getMessage() for r in caplog.records if "not refitted" in r.getMessage()]
    assert warnings == ["the gate was not refitted: OSError: No space left on device"]


def test_searches_share_one_retriever_until_the_policy_changes(memory) -> None:
    """One retriever (one count of the store, one gate follower) per user for every search; a
    policy set since gets a new one, so the search ranks with what was set."""
    memory.add([BLACK, SWEET])
    memory.search(COFFEE)
    (first,) = memory._searchers.values()
    memory.search("What do I do in the morning?")
    assert list(memory._searchers.values()) == [first]
    memory.policy = RecencyPolicy(weight=0.0, threshold=0.99, reference_date=TODAY)
    assert memory.search(COFFEE).nodes == ()  # the new policy's gate
    assert list(memory._searchers.values()) != [first]


def test_add_takes_one_fact_a_pair_a_node_or_a_list_of_them(memory) -> None:
    """As mem0's add(data): a plain fact is dated today (or ``date=``)."""
    from datetime import date

    single = memory.add("The user drinks coffee black.")
    (stored,) = memory.get_all()
    assert single.new == (stored.node_id,) and stored.metadata["date"] == date.today().isoformat()
    memory.add(["The user likes tea.", ("The user walks at night.", "2026-09-01")],
               date="2026-08-01")
    days = {node.get_content(): node.metadata["date"] for node in memory.get_all()}
    assert days["2026-08-01: Taro likes tea."] == "2026-08-01"  # the user's name filled in
    assert days["2026-09-01: Taro walks at night."] == "2026-09-01"


@pytest.mark.parametrize(("call", "message"), [
    (lambda m: m.add([(None, "2026-09-01")]), "add takes facts, (fact, date) pairs or memory "
                                               "nodes, got (None, '2026-09-01')"),
    (lambda m: m.add(42), "add takes facts, (fact, date) pairs or memory nodes, got 42"),
    (lambda m: m.add({"role": "user", "content": "hi"}), "chat messages need an LLM"),
    (lambda m: m.search(""), "the question is blank: ''"),
    (lambda m: m.search(None), "the question must be text, got None"),
    (lambda m: m.search("caf\ud800"), "the question holds a lone surrogate"),
], ids=["fact None", "not a list", "a chat message", "blank", "None", "lone surrogate"])
def test_bad_input_to_the_memory_object_is_one_recency_error_line(memory, call, message) -> None:
    with pytest.raises(RecencyError) as raised:
        call(memory)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_remember_takes_role_and_text_pairs(memory, openai_server: OpenAIServer) -> None:
    openai_server.reply = json.dumps({"memories": [
        {"turn": 1, "kind": "habit_change", "fact": "The user has switched to green tea."}]})
    llm = openai_like_llm(api_base=openai_server.base_url, timeout=5.0, max_retries=0)
    (stored,) = memory.remember([("user", "I've switched to green tea.")],
                                memory_date="2026-09-09", llm=llm)
    assert stored.get_content().endswith("switched to green tea.")
    with pytest.raises(RecencyError, match="a Turn or a"):
        memory.remember([("user",)], llm=llm)


def test_a_store_path_under_a_file_is_one_line_naming_the_file(tmp_path: Path, e5) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a store")
    with pytest.raises(RecencyError, match=f"lies under the file {a_file}, not a directory"):
        RecencyMemory(e5, path=a_file / "store")


def test_a_policy_copied_with_a_high_threshold_lets_nothing_in_in_any_language(memory) -> None:
    memory.add([BLACK, SWEET, ("ユーザーはブラックコーヒーを飲む。", "2026-09-01")])
    assert memory.search(COFFEE).nodes  # the shipped gate lets the coffee memories in
    memory.policy = memory.policy.model_copy(update={"threshold": 0.99})
    for question in (COFFEE, "コーヒーはどう飲むんだっけ？"):
        assert memory.search(question).nodes == (), question



# --- one object, many users (mem0's verbs) ---------------------------------------------------


@pytest.fixture
def shared(e5, tmp_path: Path):
    with RecencyMemory(e5, path=tmp_path / "store", user_name=None) as unbound:
        unbound.policy = index_policy(unbound.index, reference_date=TODAY)
        yield unbound


def test_one_unbound_object_serves_each_user_per_call(shared) -> None:
    shared.add("The user drinks coffee black.", date="2026-09-01", user_id="alice")
    shared.add("The user drinks green tea.", date="2026-09-02", user_id="bob")
    alice = shared.get_all(user_id="alice")
    assert [n.metadata["user_id"] for n in alice] == ["alice"]
    found = shared.search("What do I drink?", user_id="bob")
    assert [n.node.metadata["user_id"] for n in found.nodes] == ["bob"]
    assert len(shared.search("What do I drink?", user_id="alice", limit=1).nodes) <= 1
    assert len(shared.get_all(limit=1)) == 1 and len(shared.get_all()) == 2
    assert shared.forget(user_id="alice") == 1
    assert [n.metadata["user_id"] for n in shared.get_all()] == ["bob"]


def test_two_threads_writing_for_two_users_lose_nothing(shared) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def write(user: str) -> None:
        for i in range(15):
            shared.add(f"The user noted thing {i} for {user}.", date="2026-09-01", user_id=user)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, ["alice", "bob"]))
    for user in ("alice", "bob"):
        texts = {n.get_content() for n in shared.get_all(user_id=user)}
        assert texts == {f"2026-09-01: The user noted thing {i} for {user}." for i in range(15)}


def test_a_bound_object_refuses_another_users_reads_and_writes(memory, tmp_path: Path) -> None:
    alice_node = memory_node("The user likes jazz.", "2026-09-01", user_id="alice")
    with pytest.raises(RecencyError, match="is of user 'alice', not 'taro'"):
        memory.add([alice_node])
    with pytest.raises(RecencyError, match="bound to user 'taro', not 'alice'"):
        memory.search(COFFEE, user_id="alice")
    with pytest.raises(RecencyError, match="bound to user 'taro', not 'alice'"):
        memory.get_all(user_id="alice")
    with pytest.raises(RecencyError, match="bound to user 'taro', not 'alice'"):
        memory.as_memory_block(user_id="alice")  # Alice's memories in Taro's prompt
    assert memory.as_memory_block(user_id=None).user_id == "taro"  # not every user's
    with pytest.raises(RecencyError, match="saves the whole store's policy"):
        memory.calibrate(save=True)
    other = RecencyMemory(index=memory.index, user_id="alice")
    other.add([alice_node])
    other.export(tmp_path / "alice.jsonl")
    with pytest.raises(RecencyError, match="a memory of user 'alice', not 'taro'"):
        memory.import_(tmp_path / "alice.jsonl")
    assert memory.get_all() == []  # nothing of Alice's was written for Taro


@pytest.mark.parametrize("user", ["", "  ", 123])
def test_a_user_id_that_names_no_user_is_refused_by_every_reader_and_writer(
        shared, tmp_path: Path, user: object) -> None:
    """``""`` or a number would select no memory (or, forgetting, record a user that never
    was) and answer "nothing": every verb names the value instead, and nothing changes."""
    from llama_index_recency import QdrantRecencyRetriever, RecencyBonusPostprocessor
    from llama_index_recency.integrations.memory_block import RecencyMemoryBlock
    from llama_index_recency.writing.updates import forget

    stored = shared.add("The user drinks coffee black.", date="2026-09-01", user_id="alice")
    memory_id = stored.new[0]
    before = shared.index.vector_store.metadata
    calls = {
        "object": lambda: RecencyMemory(index=shared.index, user_id=user),
        "add": lambda: shared.add("The user drinks tea.", date="2026-09-02", user_id=user),
        "update": lambda: shared.update(memory_id, "The user drinks tea.", "2026-09-02",
                                        user_id=user),
        "search": lambda: shared.search(COFFEE, user_id=user),
        "get": lambda: shared.get(memory_id, user_id=user),
        "get_all": lambda: shared.get_all(user_id=user),
        "history": lambda: shared.history(memory_id, user_id=user),
        "export": lambda: shared.export(tmp_path / "out.jsonl", user_id=user),
        "forget": lambda: shared.forget(user_id=user),
        "forget()": lambda: forget(shared.index, user_id=user),
        "retriever": lambda: QdrantRecencyRetriever.from_index(shared.index, user_id=user),
        "postprocessor": lambda: RecencyBonusPostprocessor.from_index(shared.index, user_id=user),
        "block": lambda: RecencyMemoryBlock(index=shared.index, user_id=user),
    }
    for name, call in calls.items():
        with pytest.raises(RecencyError) as caught:
            call()
        assert repr(user) in str(caught.value) and "\n" not in str(caught.value), name
    assert [n.node_id for n in shared.get_all()] == [memory_id]
    assert shared.index.vector_store.metadata == before and not (tmp_path / "out.jsonl").exists()


HALF_EMOJI = json.loads('"\\ud83c"')  # a lone surrogate, as JSON text can decode to
LOOP: dict[str, object] = {}
LOOP["self"] = LOOP


@pytest.mark.parametrize("call, message", [
    (lambda m: m.add("The user likes tea " + HALF_EMOJI, date="2026-09-01"),
     r"the fact 'The user likes tea \\ud83c' holds a lone surrogate"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", user_id="bo" + HALF_EMOJI),
     r"user_id 'bo\\ud83c' holds a lone surrogate"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata={1: "a"}),
     "metadata has the key 1, which is not text"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata=["a"]),
     r"metadata must be a dict, got \['a'\]"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata={"mood": math.nan}),
     r"metadata\['mood'\] is nan, which is not JSON"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata={"raw": b"\xff"}),
     r"metadata\['raw'\] is b'\\xff', which is not JSON"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata={"tags": {"a"}}),
     r"metadata\['tags'\] is \{'a'\}, which is not JSON"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata={"a": [{1: "x"}]}),
     r"metadata\['a'\]\[0\] has the key 1, which is not text"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata={HALF_EMOJI: "x"}),
     r"the key of metadata '\\ud83c' holds a lone surrogate"),
    (lambda m: m.add([{"role": "user", "content": "I like tea."}], metadata={"mood": math.inf}),
     r"metadata\['mood'\] is inf, which is not JSON"),
    (lambda m: m.add("The user likes tea.", date="2026-09-01", metadata=LOOP),
     r"metadata\['self'\] holds itself; metadata must be JSON \(a tree\)"),
    (lambda m: m.add("The user swims daily.", date=""), "not a date: ''"),
    (lambda m: m.forget(m.get_all()[0].node_id), "ids is a list of memory ids, got the string"),
])
def test_input_no_store_keeps_as_given_is_one_line_naming_it(shared, call, message) -> None:
    """A half emoji, a NaN, bytes or a set would fail inside the store (a traceback) or be
    stored as something else; "" was dated today; one id string was read as 36 ids."""
    shared.add("The user drinks coffee black.", date="2026-09-01")
    with pytest.raises(RecencyError, match=message) as caught:
        call(shared)
    assert "\n" not in str(caught.value)
    assert [n.get_content() for n in shared.get_all()] == ["2026-09-01: The user drinks coffee "
                                                           "black."]


def test_dates_and_uuids_in_metadata_are_stored_as_their_text(shared) -> None:
    import uuid
    from datetime import date, datetime, timezone

    ref = uuid.UUID("12345678-1234-5678-1234-567812345678")
    shared.add("The user likes tea.", date="2026-09-01", metadata={
        "seen": datetime(2026, 9, 1, 8, 30, tzinfo=timezone.utc), "due": date(2026, 9, 2),
        "refs": [ref], "score": 0.5})
    (stored,) = shared.get_all()
    assert {key: stored.metadata[key] for key in ("seen", "due", "refs", "score")} == {
        "seen": "2026-09-01T08:30:00+00:00", "due": "2026-09-02", "refs": [str(ref)],
        "score": 0.5}


def test_a_user_id_naming_no_user_is_refused_in_nodes_and_forget_filters_too(shared) -> None:
    """A node made with ``user_id=""`` would be no user's memory, and a forget filtering on
    ``user_id == ""`` would record a user that never was; a memory some other writer stored
    so still shows its history."""
    from llama_index.core.vector_stores.types import MetadataFilter, MetadataFilters

    from llama_index_recency.writing.updates import forget

    blank = memory_node("The user likes tea.", "2026-09-01")
    blank.metadata["user_id"] = ""
    with pytest.raises(RecencyError, match=f"memory {blank.node_id}: user_id must be a "
                                           "non-blank string, got ''"):
        shared.add(blank)
    before = shared.index.vector_store.metadata
    with pytest.raises(RecencyError, match="user_id must be a non-blank string, got ' '"):
        forget(shared.index, filters=MetadataFilters(filters=[MetadataFilter(key="user_id",
                                                                             value=" ")]))
    assert shared.index.vector_store.metadata == before
    shared.index.insert_nodes([blank])  # LlamaIndex's own write checks no owner
    assert [n.node_id for n in shared.history(blank.node_id)] == [blank.node_id]


def test_an_unbound_objects_chat_engine_answers_from_the_user_it_is_made_for(shared) -> None:
    """One object serving every user: the chat engine made for Alice reads Alice's memories
    only (it ignored ``user_id`` and read everyone's)."""
    shared.add("The user drinks coffee black.", date="2026-09-01", user_id="alice")
    shared.add("The user drinks green tea.", date="2026-09-02", user_id="bob")
    llm = openai_like_llm(model="m", api_base="http://127.0.0.1:9/v1", api_key="k")
    engine = shared.chat_engine(llm=llm, user_id="alice")
    found = engine._retriever.retrieve("What do I drink?")
    assert found and {n.node.metadata["user_id"] for n in found} == {"alice"}
    bound = RecencyMemory(index=shared.index, user_id="bob")
    with pytest.raises(RecencyError, match="bound to user 'bob', not 'alice'"):
        bound.chat_engine(llm=llm, user_id="alice")


def test_an_argument_no_store_takes_is_refused_by_name(tmp_path) -> None:
    with pytest.raises(InvalidInputError, match=r"unknown argument 'reference_date'.*policy="):
        RecencyMemory(path=tmp_path / "store", reference_date="2026-09-01")
