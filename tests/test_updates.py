"""Successor links for updated facts, and forget: on Qdrant Edge and on qdrant-client's local mode."""

from __future__ import annotations

import threading
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency import (
    QdrantRecencyRetriever,
    RecencyBonusPostprocessor,
    memory_node,
    open_memory_index,
)
from llama_index_recency.errors import MemoryNotFoundError, PartialWriteError
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY, SUPERSEDES_KEY
from llama_index_recency.storage import (
    count_memories,
    delete_memories,
    get_memories,
    is_local_mode_store,
    memory_history,
)
from llama_index_recency.writing import updates
from llama_index_recency.writing.updates import (
    aforget,
    aupdate_memory,
    forget,
    insert_memories,
    update_memory,
)

from conftest import QUERY, KnownCosineEmbedding, cosines_for

TODAY = "2026-09-10"
BLACK = memory_node("Taro drinks coffee black.", "2026-05-20", metadata={"user_id": "taro"})
# The update scores far below the fact it replaces: 0.50 + 0.05·exp(-9/14) = 0.526 vs 0.60.
LATTE = memory_node("Taro switched to sweet café au lait.", "2026-09-01",
                    metadata={"user_id": "taro", SUPERSEDES_KEY: [BLACK.node_id]})
TEA = memory_node("Taro now only drinks green tea.", "2026-09-08",
                  metadata={"user_id": "taro", SUPERSEDES_KEY: [LATTE.node_id]})
TRAINS = memory_node("Taro likes trains.", "2026-08-01", metadata={"user_id": "taro"})
HANAKO = memory_node("Hanako drinks coffee black.", "2026-05-20", metadata={"user_id": "hanako"})
RAWS = [(BLACK, 0.60), (LATTE, 0.30), (TEA, 0.20), (TRAINS, 0.46), (HANAKO, 0.59)]


ENGINES = ["edge", "qdrant-client"]


def open_index(engine: str, path: Path, embed: KnownCosineEmbedding):
    if engine == "qdrant-client":
        from qdrant_client import QdrantClient

        QdrantClient(path=str(path)).close()  # a 0.1.0-style local-mode directory
        assert is_local_mode_store(path)
    return open_memory_index(embed, path=path)


@pytest.fixture(params=ENGINES)
def index(request: pytest.FixtureRequest, tmp_path: Path):
    embed = KnownCosineEmbedding(cosines_for([n for n, _ in RAWS], [raw for _, raw in RAWS]))
    return open_index(request.param, tmp_path, embed)


def fresh(node):
    return node.model_copy(deep=True)


def retrieve(index, **kwargs):
    retriever = QdrantRecencyRetriever.from_index(
        index, RecencyBonusPostprocessor(reference_date=TODAY), **kwargs
    )
    return retriever, retriever.retrieve(QUERY)


def test_a_passing_superseded_memory_brings_its_newest_successor_first(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    insert_memories(index, [fresh(LATTE)])
    insert_memories(index, [fresh(TEA)])
    stored = {n.node_id: n for n in get_memories(index)}
    assert not any(SUPERSEDED_BY_KEY in n.metadata for n in stored.values())  # no back links
    assert SUPERSEDES_KEY not in stored[LATTE.node_id].get_content(metadata_mode="llm")

    retriever, found = retrieve(index, user_id="taro")
    # TEA (0.20 raw) is far under the threshold, but it is BLACK's newest successor.
    assert [n.node.node_id for n in found] == [TEA.node_id, BLACK.node_id, TRAINS.node_id]
    assert found[0].score == pytest.approx(0.20 + 0.05 * 2.718281828 ** (-2 / 14), abs=1e-6)
    rows = {row.node_id: row.reason for row in retriever.explain(QUERY).rows}
    assert rows[TEA.node_id] == f"successor of {BLACK.node_id}"
    assert rows[BLACK.node_id] == f"kept; superseded by {TEA.node_id}"


def test_successors_stay_inside_the_scope(index, monkeypatch) -> None:
    leaked = memory_node("Hanako switched to tea.", "2026-09-09",
                         metadata={"user_id": "hanako", SUPERSEDES_KEY: [BLACK.node_id]})
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    # A cross-user link (as written before links were checked) must not bring hanako's
    # memory into taro's prompt.
    leaked.embedding = [0.1] + [0.0] * len(RAWS)
    leaked.embedding[1] = (1 - 0.01) ** 0.5
    monkeypatch.setattr("llama_index_recency.writing.updates.check_link", lambda newer, older: None)
    insert_memories(index, [leaked])
    _, found = retrieve(index, user_id="taro")
    assert {n.node.metadata["user_id"] for n in found} == {"taro"}


def test_a_memory_never_supersedes_another_users(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    hanakos = memory_node("Hanako switched to tea.", "2026-09-09",
                          metadata={"user_id": "hanako", SUPERSEDES_KEY: [BLACK.node_id]})
    unscoped = memory_node("The user switched to tea.", "2026-09-09",
                           supersedes=[HANAKO.node_id])
    for node, message in ((hanakos, f"of user 'hanako' may not supersede memory "
                                    f"{BLACK.node_id} of user 'taro'"),
                          (unscoped, f"of no user may not supersede memory "
                                     f"{HANAKO.node_id} of user 'hanako'")):
        node.embedding = [0.1] + [0.0] * len(RAWS)
        node.embedding[1] = (1 - 0.01) ** 0.5
        with pytest.raises(ValueError, match=f"^memory {node.node_id} {message}$"):
            insert_memories(index, [node])
    assert count_memories(index) == 3  # nothing written
    insert_memories(index, [fresh(LATTE)])  # within one user: linked
    assert [n.node_id for n in memory_history(index, BLACK.node_id)] == [BLACK.node_id,
                                                                          LATTE.node_id]


def test_forget_by_id_by_user_and_by_date_keeps_links_consistent(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    insert_memories(index, [fresh(LATTE)])
    insert_memories(index, [fresh(TEA)])

    assert forget(index, [LATTE.node_id]) == 1
    stored = {n.node_id: n for n in get_memories(index)}
    assert stored[TEA.node_id].metadata[SUPERSEDES_KEY] == [BLACK.node_id]  # over LATTE

    assert forget(index, user_id="taro", before="2026-06-01") == 1  # BLACK only, not hanako's
    stored = {n.node_id: n for n in get_memories(index)}
    assert set(stored) == {TRAINS.node_id, TEA.node_id, HANAKO.node_id}
    assert SUPERSEDES_KEY not in stored[TEA.node_id].metadata
    assert forget(index, user_id="hanako") == 1
    assert forget(index, ["5f1d6e3c-0000-4000-8000-000000000000"]) == 0  # no such memory
    assert count_memories(index) == 2


def test_forgetting_the_middle_of_a_chain_keeps_the_newest_fact_reachable(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    insert_memories(index, [fresh(LATTE)])
    insert_memories(index, [fresh(TEA)])
    forget(index, [LATTE.node_id])  # BLACK → LATTE → TEA: BLACK must still lead to TEA
    retriever, found = retrieve(index, user_id="taro")
    assert [n.node.node_id for n in found] == [TEA.node_id, BLACK.node_id, TRAINS.node_id]
    rows = {row.node_id: row.reason for row in retriever.explain(QUERY).rows}
    assert rows[TEA.node_id] == f"successor of {BLACK.node_id}"


def test_an_update_racing_a_forget_of_the_memory_it_updates_keeps_the_chain_whole(
        index, monkeypatch: pytest.MonkeyPatch) -> None:
    """The forget starts once the update has read the old memory: it waits for the update,
    then links the new version past the forgotten one (never to a memory that is gone)."""
    insert_memories(index, [fresh(n) for n in (BLACK, LATTE)])
    forgetting = threading.Thread(target=forget, args=(index, [LATTE.node_id]))
    make = updates.memory_node

    def read_then_forget(*args: Any, **kwargs: Any) -> Any:
        forgetting.start()
        forgetting.join(timeout=1.0)  # done by now, unless it waits for the update
        return make(*args, **kwargs)

    monkeypatch.setattr(updates, "memory_node", read_then_forget)
    tea = update_memory(index, LATTE.node_id, "Taro now only drinks green tea.", "2026-09-08")
    forgetting.join()
    (stored,) = get_memories(index, [tea.node_id])
    assert stored.metadata[SUPERSEDES_KEY] == [BLACK.node_id]
    assert [n.node_id for n in memory_history(index, tea.node_id)] == [BLACK.node_id, tea.node_id]


def test_forget_refuses_to_delete_everything_and_bad_dates(index) -> None:
    with pytest.raises(ValueError, match="never deletes everything"):
        forget(index)
    with pytest.raises(ValueError, match="'31/08/2026'"):
        forget(index, before="31/08/2026")


def test_filters_without_a_condition_never_delete_everything(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    hollow = MetadataFilters(filters=[MetadataFilters(filters=[])])  # translates to no condition
    with pytest.raises(ValueError, match=r"filters with a condition, got filters=MetadataFilters"):
        forget(index, filters=hollow)
    with pytest.raises(ValueError, match=r"filters with a condition, or both; got filters=Meta"):
        delete_memories(index, filters=hollow)
    assert count_memories(index) == 3
    assert forget(index, user_id="hanako", filters=hollow) == 1  # a real condition still selects


def test_storing_a_memory_again_keeps_its_links(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    insert_memories(index, [fresh(LATTE)])
    # The same fact stored again without its link (a conversation remembered twice, a
    # user's own insert): same id, and the link it had stays.
    again = memory_node("Taro switched to sweet café au lait.", "2026-09-01",
                        metadata={"user_id": "taro", "kind": "habit_change"})
    assert again.node_id == LATTE.node_id
    insert_memories(index, [fresh(BLACK), again])
    stored = {n.node_id: n for n in get_memories(index)}
    assert stored[LATTE.node_id].metadata[SUPERSEDES_KEY] == [BLACK.node_id]
    assert stored[LATTE.node_id].metadata["kind"] == "habit_change"


@pytest.mark.parametrize("engine", ENGINES)
def test_a_successor_stored_with_plain_insert_nodes_is_brought(engine: str, tmp_path: Path) -> None:
    """The issue's new user: memory_node(supersedes=...) stored with index.insert_nodes."""
    embed = KnownCosineEmbedding(cosines_for([n for n, _ in RAWS], [raw for _, raw in RAWS]))
    index = open_index(engine, tmp_path, embed)
    index.insert_nodes([fresh(n) for n in (BLACK, TRAINS, HANAKO, LATTE)])
    _, found = retrieve(index, user_id="taro")
    assert [n.node.node_id for n in found] == [LATTE.node_id, BLACK.node_id, TRAINS.node_id]


def test_a_store_with_only_0_2_back_links_is_still_followed(index) -> None:
    """0.2.0 stores carry superseded_by on the older memory; a successor whose own
    supersedes was lost (edited by hand) is still reached through it."""
    black, latte = fresh(BLACK), fresh(LATTE)
    latte.metadata.pop(SUPERSEDES_KEY)
    black.metadata[SUPERSEDED_BY_KEY] = [LATTE.node_id]
    black.excluded_embed_metadata_keys.append(SUPERSEDED_BY_KEY)
    index.insert_nodes([black, latte, fresh(TRAINS), fresh(HANAKO)])
    _, found = retrieve(index, user_id="taro")
    assert [n.node.node_id for n in found] == [LATTE.node_id, BLACK.node_id, TRAINS.node_id]
    forget(index, [LATTE.node_id])  # the back link to a deleted memory goes with it
    assert SUPERSEDED_BY_KEY not in get_memories(index, [BLACK.node_id])[0].metadata


def test_a_successor_dated_before_the_memory_it_updates_is_not_brought_in(index) -> None:
    backdated = memory_node("Taro switched to sweet café au lait.", "2026-05-01",
                            metadata={"user_id": "taro", SUPERSEDES_KEY: [BLACK.node_id]})
    backdated.embedding = [0.3] + [0.0] * len(RAWS)
    backdated.embedding[2] = (1 - 0.09) ** 0.5
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    insert_memories(index, [backdated])
    _, found = retrieve(index, user_id="taro")
    assert backdated.node_id not in [n.node.node_id for n in found]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_successor_chain_costs_one_search_per_link_level(engine: str, tmp_path: Path,
                                                                monkeypatch) -> None:
    """Three kept memories at the head of a 200-link chain share one search per level."""
    chain = []
    for i in range(201):  # m0 → m1 → ... → m200, one day apart; m0-m2 pass, the rest do not
        day = (date(2026, 2, 1) + timedelta(days=i)).isoformat()
        chain.append(memory_node(f"Taro's coffee, version {i}.", day, user_id="taro",
                                 supersedes=[chain[-1].node_id] if chain else None))
    raws = [0.60, 0.59, 0.58] + [0.20] * 198
    index = open_index(engine, tmp_path, KnownCosineEmbedding(cosines_for(chain, raws)))
    insert_memories(index, chain)
    searches = []
    store_class = type(index.vector_store)
    original = store_class.query
    monkeypatch.setattr(store_class, "query",
                        lambda store, *args, **kwargs: searches.append(1) or original(
                            store, *args, **kwargs))
    retriever, found = retrieve(index, user_id="taro")
    head, newest = [node.node_id for node in chain[:3]], chain[-1].node_id
    assert [n.node.node_id for n in found] == [newest, *head]
    assert len(searches) <= 200 + 5  # the chain's depth, plus the exact search's few
    rows = {row.node_id: row.reason for row in retriever.explain(QUERY).rows}
    assert [rows[i] for i in head] == [f"kept; superseded by {newest}"] * 3


# -- the one store-level write ---------------------------------------------------------------

def many(count: int) -> tuple[list, KnownCosineEmbedding]:
    nodes = [memory_node(f"Taro's fact number {i}.", "2026-09-01", user_id="taro")
             for i in range(count)]
    return nodes, KnownCosineEmbedding(cosines_for(nodes, [0.1] * count))


def counting_adds(index, monkeypatch) -> list[int]:
    """The sizes of the store's add calls from now on."""
    calls: list[int] = []
    store_class = type(index.vector_store)
    original = store_class.add
    monkeypatch.setattr(store_class, "add", lambda store, nodes, **kw: calls.append(len(nodes))
                        or original(store, nodes, **kw))
    return calls


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_write_in_batches_reports_progress_and_a_rerun_writes_nothing(
        engine: str, tmp_path: Path, monkeypatch) -> None:
    nodes, embed = many(70)
    index = open_index(engine, tmp_path, embed)
    progress: list[tuple[str, int, int]] = []
    adds = counting_adds(index, monkeypatch)
    result = insert_memories(index, nodes, on_progress=lambda *step: progress.append(step))
    assert len(result.new) == 70 and not result.changed and not result.unchanged
    assert adds == [64, 6] and count_memories(index) == 70
    assert progress == [("embedding", done, 70) for done in (0, 16, 32, 48, 64, 70)] + [
        ("storing", 0, 70), ("storing", 64, 70), ("storing", 70, 70)]
    again = insert_memories(index, [fresh(node) for node in nodes])
    assert again.new == () and len(again.unchanged) == 70 and adds == [64, 6]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_a_failed_batch_says_exactly_how_many_were_stored_and_a_rerun_stores_the_rest(
        engine: str, tmp_path: Path, monkeypatch) -> None:
    nodes, embed = many(70)
    index = open_index(engine, tmp_path, embed)
    store_class = type(index.vector_store)
    original = store_class.add
    calls = []

    def fail_second(store, batch, **kwargs):
        calls.append(len(batch))
        if len(calls) == 2:
            raise OSError("disk on fire")
        return original(store, batch, **kwargs)

    monkeypatch.setattr(store_class, "add", fail_second)
    with pytest.raises(PartialWriteError, match=r"^stored 64 of 70 memories; 6 not stored: "
                                                r"OSError: disk on fire$") as raised:
        insert_memories(index, [fresh(node) for node in nodes])
    assert (raised.value.stored, raised.value.total) == (64, 70)
    assert count_memories(index) == 64
    rerun = insert_memories(index, [fresh(node) for node in nodes])
    assert len(rerun.new) == 6 and len(rerun.unchanged) == 64 and count_memories(index) == 70


def test_a_re_added_memory_reports_what_it_had(index) -> None:
    insert_memories(index, [fresh(BLACK)])
    black = memory_node("Taro drinks coffee black.", "2026-05-20",
                        metadata={"user_id": "taro", "kind": "habit"})
    result = insert_memories(index, [black])
    assert result.changed == {BLACK.node_id: BLACK.metadata}
    assert get_memories(index, [BLACK.node_id])[0].metadata["kind"] == "habit"


# -- update_memory -----------------------------------------------------------------------------

def test_update_memory_stores_a_new_version_owned_by_the_old_ones_user(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    latte = update_memory(index, BLACK.node_id, "Taro switched to sweet café au lait.",
                          "2026-09-01")
    assert latte.node_id == LATTE.node_id  # the same memory the writer would have made
    assert latte.metadata["user_id"] == "taro"
    assert latte.metadata[SUPERSEDES_KEY] == [BLACK.node_id]
    assert count_memories(index) == 4  # the old version is kept
    assert [n.node_id for n in memory_history(index, BLACK.node_id)] == [BLACK.node_id,
                                                                          LATTE.node_id]
    _, found = retrieve(index, user_id="taro")
    assert [n.node.node_id for n in found][:2] == [LATTE.node_id, BLACK.node_id]


def test_update_memory_refuses_an_unknown_or_another_users_id_in_one_line(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, HANAKO)])
    missing = "5f1d6e3c-0000-4000-8000-000000000000"
    with pytest.raises(MemoryNotFoundError, match=f"^no memory '{missing}' in the store$"):
        update_memory(index, missing, "Taro drinks tea.", "2026-09-01")
    with pytest.raises(MemoryNotFoundError,
                       match=f"^no memory '{HANAKO.node_id}' of user 'taro' in the store$"):
        update_memory(index, HANAKO.node_id, "Taro drinks tea.", "2026-09-01", user_id="taro")
    assert count_memories(index) == 2


async def test_aupdate_memory_and_aforget(index) -> None:
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    latte = await aupdate_memory(index, BLACK.node_id, "Taro switched to sweet café au lait.",
                                 "2026-09-01", user_id="taro")
    assert latte.node_id == LATTE.node_id
    assert await aforget(index, [BLACK.node_id]) == 1
    assert SUPERSEDES_KEY not in get_memories(index, [LATTE.node_id])[0].metadata


def test_a_re_added_node_keeps_what_it_kept_out_of_its_texts(index) -> None:
    """A plain LlamaIndex node (its topic in the embedded text) stored again is unchanged."""
    from llama_index.core.schema import TextNode

    node = TextNode(id_="5f1d6e3c-0000-4000-8000-00000000000a", text="2026-09-01: Taro likes trains.",
                    metadata={"date": "2026-09-01", "topic": "hobby"},
                    excluded_llm_metadata_keys=["date"], excluded_embed_metadata_keys=["date"])
    node.embedding = [0.3] + [0.0] * len(RAWS)
    node.embedding[1] = (1 - 0.09) ** 0.5
    insert_memories(index, [node.model_copy(deep=True)])
    again = insert_memories(index, [node.model_copy(deep=True)])
    assert again.unchanged == (node.node_id,)
    stored = get_memories(index, [node.node_id])[0]
    assert stored.get_content(metadata_mode="embed") == "topic: hobby\n\n2026-09-01: Taro likes trains."


def test_other_text_under_a_stored_memorys_id_is_refused(index) -> None:
    insert_memories(index, [fresh(BLACK)])
    other = fresh(TRAINS)
    other.id_ = BLACK.node_id
    with pytest.raises(ValueError, match=rf"^memory {BLACK.node_id} is stored as '2026-05-20: "
                                         r"Taro drinks coffee black.', not '2026-08-01: Taro "
                                         r"likes trains.': a memory's text never changes"):
        insert_memories(index, [other])
    assert get_memories(index)[0].get_content() == BLACK.get_content()


def test_update_memory_refuses_the_same_fact_and_an_earlier_date(index) -> None:
    insert_memories(index, [fresh(BLACK)])
    with pytest.raises(ValueError, match=f"^memory {BLACK.node_id} .* cannot supersede itself$"):
        update_memory(index, BLACK.node_id, "Taro drinks coffee black.", "2026-05-20")
    with pytest.raises(ValueError, match="dated 2026-05-01, before memory .* \\(2026-05-20\\)"):
        update_memory(index, BLACK.node_id, "Taro drinks tea.", "2026-05-01")
    assert count_memories(index) == 1


def test_forget_never_carries_a_link_across_users(index) -> None:
    """A cross-user link written by a plain insert (no checks) is not passed on by forget."""
    insert_memories(index, [fresh(n) for n in (BLACK, TRAINS, HANAKO)])
    hanakos = memory_node("Hanako switched to tea.", "2026-09-09", user_id="hanako",
                          supersedes=[LATTE.node_id])
    hanakos.embedding = [0.1] + [0.0] * len(RAWS)
    hanakos.embedding[1] = (1 - 0.01) ** 0.5
    index.insert_nodes([fresh(LATTE), hanakos])  # LATTE (taro) supersedes BLACK
    forget(index, [LATTE.node_id])
    assert SUPERSEDES_KEY not in get_memories(index, [hanakos.node_id])[0].metadata
