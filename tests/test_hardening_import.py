"""import and ``add --file`` refuse what would change, hide or loop stored memories: a line
changing a stored memory, ids written otherwise than canonically, control characters,
self-links and cycles, and the same memory twice in one file."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from llama_index_recency import memory_node, open_memory_index
from llama_index_recency.cli import main
from llama_index_recency.records.nodes import SUPERSEDES_KEY
from llama_index_recency.storage import (
    close_memory_index,
    get_memories,
    memory_history,
    open_memory_store,
)
from llama_index_recency.writing.updates import insert_memories

from conftest import KnownCosineEmbedding, error_line

BLACK = ("The user drinks coffee black.", "2026-05-20")
LATTE = ("The user switched to sweet café au lait.", "2026-09-01")
TEA = ("The user now only drinks green tea.", "2026-09-08")
FACTS = (BLACK, LATTE, TEA)

pytestmark = pytest.mark.usefixtures("cli_environment")


def embedding() -> KnownCosineEmbedding:
    return KnownCosineEmbedding({memory_node(*fact).get_content(): 0.5 for fact in FACTS})


def node_id(fact: tuple[str, str], user: str | None = None) -> str:
    return memory_node(*fact, user_id=user).node_id


def stored(store: str) -> dict:
    memories = open_memory_store(path=store)
    try:
        return {node.node_id: (node.text, node.metadata) for node in get_memories(memories)}
    finally:
        memories.close()


def write_lines(path: Path, *items: dict) -> Path:
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items),
                    "utf-8")
    return path


def line(fact: tuple[str, str], user: str | None = None, **fields) -> dict:
    return {"id": node_id(fact, user), "text": fact[0], "date": fact[1], "user_id": user,
            "supersedes": [], "metadata": {}, **fields}


@pytest.fixture
def alice_store(tmp_path: Path, capsys) -> str:
    """alice's BLACK (key "coffee") → LATTE, added with ``add --file``."""
    store = str(tmp_path / "store")
    path = tmp_path / "alice.json"
    path.write_text(json.dumps({"memories": [
        {"fact": BLACK[0], "date": BLACK[1], "key": "coffee"},
        {"fact": LATTE[0], "date": LATTE[1], "supersedes": [node_id(BLACK, "alice")]},
    ]}), "utf-8")
    assert main(["add", "--file", str(path), "--store", store, "--user", "alice"],
                embed_model=embedding()) == 0
    capsys.readouterr()
    return store


def exported(store: str, path: Path, capsys) -> list[dict]:
    assert main(["export", str(path), "--store", store]) == 0
    capsys.readouterr()
    return [json.loads(text) for text in path.read_text("utf-8").splitlines()]


UNSTORED = str(uuid.UUID(int=7))

# --- a line may not change a stored memory ------------------------------------------------

CHANGES = {
    "another user": ({"user_id": "bob"},
                     'is stored with user_id "alice", this line has user_id "bob"'),
    "no user": ({"user_id": None}, 'is stored with user_id "alice", this line has no user_id'),
    "another key": ({"metadata": {"key": "tea"}},
                    'is stored with key "coffee", this line has key "tea"'),
    "a new field": ({"metadata": {"key": "coffee", "kind": "habit"}},
                    'is stored with no kind, this line has kind "habit"'),
    "no key": ({"metadata": {}}, 'is stored with key "coffee", this line has no key'),
    "another text": ({"text": "The user drinks coffee with milk."},
                     "is stored with text \"The user drinks coffee black.\", this line has text "
                     "\"The user drinks coffee with milk.\""),
    "another day": ({"date": "2026-05-21"},
                    'is stored with date "2026-05-20", this line has date "2026-05-21"'),
    "an instant of the day": ({"date": "2026-05-20T10:00:00+09:00"},
                              'is stored with date "2026-05-20", this line has date '
                              '"2026-05-20T10:00:00+09:00"'),
}


@pytest.mark.slow
@pytest.mark.parametrize("change, message", CHANGES.values(), ids=CHANGES)
def test_a_line_changing_a_stored_memory_is_refused_naming_the_line(
        change: dict, message: str, alice_store: str, tmp_path: Path, capsys) -> None:
    black = exported(alice_store, tmp_path / "alice.jsonl", capsys)[1]
    assert black["id"] == node_id(BLACK, "alice")
    backup = write_lines(tmp_path / "backup.jsonl", line(TEA, "alice"), {**black, **change})
    before = stored(alice_store)
    assert main(["import", str(backup), "--store", alice_store], embed_model=embedding()) == 2
    advice = ("a memory's text and date never change (its id is made from them): forget it "
              "first to store this line instead") if ("text" in message or "date" in message) \
        else ("an import never changes a stored memory: forget it first, or import with "
              "replace (--replace) to take this line's user and metadata")
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {backup}, line 2: memory {node_id(BLACK, 'alice')} {message}; "
        f"{advice}")
    assert stored(alice_store) == before  # nothing of the file stored, nothing changed


def test_a_moved_memory_stays_with_its_user(alice_store: str, tmp_path: Path, capsys) -> None:
    """The reported attack: alice's export, user_id edited to bob, imported."""
    backup = tmp_path / "backup.jsonl"
    lines = exported(alice_store, backup, capsys)
    write_lines(backup, *({**item, "user_id": "bob"} for item in lines))
    assert main(["import", str(backup), "--store", alice_store], embed_model=embedding()) == 2
    capsys.readouterr()
    assert main(["export", str(tmp_path / "bob.jsonl"), "--store", alice_store,
                 "--user", "bob"]) == 0
    assert main(["export", str(tmp_path / "alice.jsonl"), "--store", alice_store,
                 "--user", "alice"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"exported 0 memories of user bob from {alice_store} to {tmp_path / 'bob.jsonl'}",
        f"exported 2 memories of user alice from {alice_store} to {tmp_path / 'alice.jsonl'}",
    ]


def test_a_line_adding_a_link_to_a_stored_memory_is_still_imported(
        alice_store: str, tmp_path: Path, capsys) -> None:
    """Links are united, never replaced: a line's extra link is kept, a missing one stays."""
    black = line(BLACK, "alice", supersedes=[UNSTORED], metadata={"key": "coffee"})
    backup = write_lines(tmp_path / "more.jsonl", black, line(LATTE, "alice"))
    assert main(["import", str(backup), "--store", alice_store], embed_model=embedding()) == 0
    assert capsys.readouterr().out == (
        f"stored 0 new memories, 2 already stored (2 in total) in {alice_store}\n")
    links = {key: value[1].get(SUPERSEDES_KEY) for key, value in stored(alice_store).items()}
    assert links == {node_id(BLACK, "alice"): [UNSTORED],
                     node_id(LATTE, "alice"): [node_id(BLACK, "alice")]}


# --- ids and links are stored and looked up canonically ------------------------------------

FORMS = {"upper-case": str.upper, "braced": lambda i: "{" + i + "}",
         "hyphen-less": lambda i: i.replace("-", ""), "urn": lambda i: f"urn:uuid:{i}"}


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS)
@pytest.mark.slow
def test_imported_ids_and_links_are_stored_canonically(form, tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    black, latte = node_id(BLACK), node_id(LATTE)
    backup = write_lines(tmp_path / "b.jsonl", {**line(BLACK), "id": form(black)},
                         {**line(LATTE), "id": form(latte), "supersedes": [form(black)]})
    assert main(["import", str(backup), "--store", store], embed_model=embedding()) == 0
    assert stored(store)[latte][1][SUPERSEDES_KEY] == [black]
    capsys.readouterr()
    for asked in (black, form(black)):
        assert main(["history", asked, "--store", store]) == 0
        assert "2 versions of memory" in capsys.readouterr().out
    # Imported again, written canonically: the same memories, nothing new.
    write_lines(backup, line(BLACK), {**line(LATTE), "supersedes": [black]})
    assert main(["import", str(backup), "--store", store], embed_model=embedding()) == 0
    assert capsys.readouterr().out == (
        f"stored 0 new memories, 2 already stored (2 in total) in {store}\n")


def test_two_spellings_of_one_id_in_a_file_are_one_memory_twice(tmp_path: Path,
                                                                capsys) -> None:
    backup = write_lines(tmp_path / "b.jsonl", line(BLACK),
                         {**line(BLACK), "id": node_id(BLACK).upper()})
    assert main(["import", str(backup), "--store", str(tmp_path / "s")],
                embed_model=embedding()) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {backup}, line 2: memory {node_id(BLACK)} is also on line 1")


def test_add_file_links_written_otherwise_name_the_memory(alice_store: str, tmp_path: Path,
                                                          capsys) -> None:
    path = tmp_path / "tea.json"
    path.write_text(json.dumps({"memories": [
        {"fact": TEA[0], "date": TEA[1], "supersedes": [node_id(LATTE, "alice").upper()]}]}),
        "utf-8")
    assert main(["add", "--file", str(path), "--store", alice_store, "--user", "alice"],
                embed_model=embedding()) == 0
    capsys.readouterr()
    assert main(["history", node_id(BLACK, "alice"), "--store", alice_store]) == 0
    assert "3 versions of memory" in capsys.readouterr().out


def test_insert_memories_stores_ids_and_links_canonically(tmp_path: Path) -> None:
    """Nodes made by hand, written otherwise: one memory per id whatever the spelling."""
    black, latte = memory_node(*BLACK), memory_node(*LATTE)
    black.id_ = black.node_id.upper()
    latte.metadata[SUPERSEDES_KEY] = ["{" + node_id(BLACK) + "}"]
    index = open_memory_index(embedding(), path=tmp_path / "s")
    try:
        insert_memories(index, [black, latte])
        assert {node.node_id: node.metadata.get(SUPERSEDES_KEY)
                for node in get_memories(index)} == {node_id(BLACK): None,
                                                     node_id(LATTE): [node_id(BLACK)]}
        assert [node.node_id for node in memory_history(index, node_id(BLACK))] == [
            node_id(BLACK), node_id(LATTE)]
        other = memory_node(*TEA)
        other.id_ = node_id(BLACK).upper()
        with pytest.raises(ValueError, match="a memory's text never changes"):
            insert_memories(index, [other])
    finally:
        close_memory_index(index)


def test_memory_node_writes_links_canonically() -> None:
    black = node_id(BLACK)
    assert memory_node(*LATTE, supersedes=["{" + black.upper() + "}"]).metadata[
        SUPERSEDES_KEY] == [black]
    assert memory_node(*LATTE, metadata={SUPERSEDES_KEY: [black.replace("-", "")]}).metadata[
        SUPERSEDES_KEY] == [black]


# --- the checks of memory_node, on every path ----------------------------------------------


REFUSED_LINES = {
    "ESC in the text": ({"text": "The user likes \x1b[31mred\x1b[0m."},
                        "the text contains the control character '\\x1b'; a fact is one line "
                        "of printable text"),
    "NUL in the text": ({"text": "The user likes tea.\x00"},
                        "the text contains the control character '\\x00'; a fact is one line "
                        "of printable text"),
    "a newline in the text": ({"text": "The user likes\ntea."},
                              "the text contains the control character '\\n'; a fact is one "
                              "line of printable text"),
    "a newline in the user": ({"user_id": "u\n1"},
                              "user_id 'u\\n1' contains the control character '\\n'; a user id "
                              "is one line of printable text"),
    "ESC in the user": ({"user_id": "u\x1b1"},
                        "user_id 'u\\x1b1' contains the control character '\\x1b'; a user id "
                        "is one line of printable text"),
    "a self-link": ({"id": UNSTORED, "supersedes": [UNSTORED]},
                    f"memory {UNSTORED} cannot supersede itself"),
}


@pytest.mark.parametrize("change, message", REFUSED_LINES.values(), ids=REFUSED_LINES)
def test_import_refuses_what_memory_node_refuses(change: dict, message: str, tmp_path: Path,
                                                 capsys) -> None:
    backup = write_lines(tmp_path / "b.jsonl", line(TEA), {**line(BLACK), **change})
    store = str(tmp_path / "s")
    assert main(["import", str(backup), "--store", store], embed_model=embedding()) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {backup}, line 2: {message}")


def test_memory_node_refuses_control_characters_and_a_user_that_is_not_one_line() -> None:
    with pytest.raises(ValueError, match=r"the fact contains the control character '\\x1b'"):
        memory_node("The user likes \x1b[31mred.", "2026-09-01")
    with pytest.raises(ValueError, match=r"user_id 'u\\n1' contains the control character"):
        memory_node("The user likes tea.", "2026-09-01", user_id="u\n1")
    # Spacing is still normalised, as it always was.
    assert memory_node("The user\nlikes  tea.", "2026-09-01").text == (
        "2026-09-01: The user likes tea.")


def test_import_refuses_a_supersedes_cycle_in_the_file(tmp_path: Path, capsys) -> None:
    black, latte = node_id(BLACK), node_id(LATTE)
    backup = write_lines(tmp_path / "b.jsonl", {**line(BLACK), "supersedes": [latte]},
                         {**line(LATTE), "supersedes": [black]})
    assert main(["import", str(backup), "--store", str(tmp_path / "s")],
                embed_model=embedding()) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {backup}, line 1: supersedes makes a cycle: {black} → {latte} → "
        f"{black}; a memory can only update earlier ones")


def test_import_refuses_a_cycle_through_the_store(tmp_path: Path, capsys) -> None:
    """BLACK stored superseding TEA (not stored); the file's TEA supersedes LATTE, which
    supersedes BLACK: TEA → LATTE → BLACK → TEA."""
    store = str(tmp_path / "s")
    black, latte, tea = node_id(BLACK), node_id(LATTE), node_id(TEA)
    first = write_lines(tmp_path / "first.jsonl", {**line(BLACK), "supersedes": [tea]})
    assert main(["import", str(first), "--store", store], embed_model=embedding()) == 0
    capsys.readouterr()
    backup = write_lines(tmp_path / "b.jsonl", {**line(TEA), "supersedes": [latte]},
                         {**line(LATTE), "supersedes": [black]})
    assert main(["import", str(backup), "--store", store], embed_model=embedding()) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {backup}, line 1: supersedes makes a cycle: {tea} → {latte} → "
        f"{black} → {tea}; a memory can only update earlier ones")
    assert list(stored(store)) == [black]


def test_add_file_refuses_a_two_cycle(tmp_path: Path, capsys) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"memories": [
        {"fact": BLACK[0], "date": BLACK[1], "supersedes": [node_id(LATTE)]},
        {"fact": LATTE[0], "date": LATTE[1], "supersedes": [node_id(BLACK)]}]}), "utf-8")
    store = str(tmp_path / "s")
    assert main(["add", "--file", str(path), "--store", store], embed_model=embedding()) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {path}, memory 1: supersedes makes a cycle: {node_id(BLACK)} → "
        f"{node_id(LATTE)} → {node_id(BLACK)}; a memory can only update earlier ones")


# --- add --file: one memory, one entry -----------------------------------------------------


def test_add_file_with_one_memory_under_two_keys_names_both_entries(tmp_path: Path,
                                                                    capsys) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"memories": [
        {"fact": BLACK[0], "date": BLACK[1], "key": "coffee"},
        {"fact": TEA[0], "date": TEA[1]},
        {"fact": BLACK[0], "date": BLACK[1], "key": "black_coffee"}]}), "utf-8")
    store = str(tmp_path / "s")
    assert main(["add", "--file", str(path), "--store", store], embed_model=embedding()) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {path}, memory 3: the same fact, date and user as memory 1 (key "
        "'black_coffee' here, 'coffee' there); keep one of them")


def test_import_replace_moves_a_memory_to_another_user_only_when_asked_and_says_so(
        alice_store: str, tmp_path: Path, capsys) -> None:
    backup = tmp_path / "backup.jsonl"
    lines = exported(alice_store, backup, capsys)
    write_lines(backup, *({**item, "user_id": "bob"} for item in lines))
    assert main(["import", str(backup), "--store", alice_store, "--replace"],
                embed_model=embedding()) == 0
    out = capsys.readouterr().out.splitlines()
    ids = sorted(item["id"] for item in lines)
    assert out[-1].startswith("replaced the user or metadata of 2 stored memories: ")
    assert sorted(out[-1].split(": ")[1].split(", ")) == ids
    assert {value[1].get("user_id") for value in stored(alice_store).values()} == {"bob"}
    # The text never changes under an id, not even with --replace.
    edited = {**lines[0], "user_id": "bob", "text": lines[0]["text"] + " Really."}
    write_lines(backup, edited)
    assert main(["import", str(backup), "--store", alice_store, "--replace"],
                embed_model=embedding()) == 2
    assert "text and date never change" in capsys.readouterr().err
