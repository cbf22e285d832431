"""``add --file`` with users and links, progress without a terminal, and export / import /
history / ``list --json``: the command writing through ``insert_memories``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from llama_index_recency import memory_node
from llama_index_recency.cli import main
from llama_index_recency.cli.progress import PhaseProgress
from llama_index_recency.records.nodes import SUPERSEDES_KEY
from llama_index_recency.storage import get_memories, open_memory_store

from conftest import KnownCosineEmbedding, error_line, spread_cosines

BLACK = ("The user drinks coffee black.", "2026-05-20")
LATTE = ("The user switched to sweet café au lait.", "2026-09-01")
TEA = ("The user now only drinks green tea.", "2026-09-08")
FACTS = (BLACK, LATTE, TEA)


pytestmark = pytest.mark.usefixtures("cli_environment")


def embedding(*facts: tuple[str, str]) -> KnownCosineEmbedding:
    return KnownCosineEmbedding(spread_cosines(memory_node(fact, day).get_content()
                                               for fact, day in facts))


def node_id(fact: tuple[str, str], user: str | None = None) -> str:
    return memory_node(*fact, user_id=user).node_id


def write_file(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps({"memories": entries}, ensure_ascii=False), "utf-8")
    return path


def stored(store: str) -> dict:
    memories = open_memory_store(path=store)
    try:
        return {node.node_id: node for node in get_memories(memories)}
    finally:
        memories.close()


@pytest.fixture
def chain_store(tmp_path: Path, capsys) -> str:
    """taro's BLACK → LATTE → TEA and hanako's BLACK, stored with ``add --file``."""
    store = str(tmp_path / "store")
    path = write_file(tmp_path / "memories.json", [
        {"fact": BLACK[0], "date": BLACK[1], "key": "coffee"},
        {"fact": LATTE[0], "date": LATTE[1], "supersedes": [node_id(BLACK, "taro")]},
        {"fact": TEA[0], "date": TEA[1], "supersedes": [node_id(LATTE, "taro")]},
        {"fact": BLACK[0], "date": BLACK[1], "user_id": "hanako"},
    ])
    argv = ["add", "--file", str(path), "--store", store, "--user", "taro"]
    assert main(argv, embed_model=embedding(*FACTS)) == 0
    assert capsys.readouterr().out == f"stored 4 new memories (4 in total) in {store}\n"
    return store


# --- add writes through insert_memories, with users and links per entry ---------------------


def test_add_and_import_store_through_insert_memories(chain_store: str, tmp_path: Path,
                                                      monkeypatch, capsys) -> None:
    from llama_index_recency.cli import session

    calls = []
    real = session.insert_memories
    monkeypatch.setattr(session, "insert_memories",
                        lambda index, nodes, **kwargs: calls.append(len(nodes))
                        or real(index, nodes, **kwargs))
    embed = embedding(*FACTS)
    assert main(["add", TEA[0], "--date", TEA[1], "--store", chain_store], embed_model=embed) == 0
    assert main(["export", str(tmp_path / "b.jsonl"), "--store", chain_store]) == 0
    assert main(["import", str(tmp_path / "b.jsonl"), "--store", chain_store],
                embed_model=embed) == 0
    assert calls == [1, 5]
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"stored 0 new memories, 5 already stored (5 in total) in {chain_store}")


def test_add_file_honours_each_entrys_user_and_links(chain_store: str) -> None:
    memories = stored(chain_store)
    taro = [node_id(fact, "taro") for fact in FACTS]
    assert {node.metadata.get("user_id") for node in memories.values()} == {"taro", "hanako"}
    assert memories[taro[1]].metadata[SUPERSEDES_KEY] == [taro[0]]
    assert memories[taro[2]].metadata[SUPERSEDES_KEY] == [taro[1]]
    assert SUPERSEDES_KEY not in memories[taro[2]].get_content(metadata_mode="embed")
    assert memories[node_id(BLACK, "hanako")].metadata["user_id"] == "hanako"


def test_a_readded_entry_keeps_the_links_it_had(chain_store: str, tmp_path: Path,
                                                capsys) -> None:
    """insert_memories unites a re-added memory's links with the stored ones."""
    taro = [node_id(fact, "taro") for fact in FACTS]
    path = write_file(tmp_path / "again.json", [
        {"fact": TEA[0], "date": TEA[1], "user_id": "taro", "supersedes": [taro[0]]}])
    assert main(["add", "--file", str(path), "--store", chain_store],
                embed_model=embedding(*FACTS)) == 0
    assert capsys.readouterr().out == (
        f"stored 0 new memories, 1 already stored (4 in total) in {chain_store}\n")
    assert stored(chain_store)[taro[2]].metadata[SUPERSEDES_KEY] == sorted(taro[:2])


BAD_ENTRIES = {
    "links not a list": ({"supersedes": "x"}, '"supersedes" must be a list of memory ids '
                                              '(see `list`), got "x"'),
    "a link that is no id": ({"supersedes": ["m1"]},
                             "supersedes names 'm1', which is not a memory id (a UUID string)"),
    "a link to nothing": ({"supersedes": [node_id(TEA, "carol")]},
                          f"supersedes names {node_id(TEA, 'carol')}, which is no memory in the "
                          "store or the file"),
    "another user's memory": ({"user_id": "hanako", "supersedes": [node_id(BLACK, "taro")]},
                              f"memory {node_id(LATTE, 'hanako')} of user 'hanako' may not "
                              f"supersede memory {node_id(BLACK, 'taro')} of user 'taro'"),
    "a blank user": ({"user_id": " "}, '"user_id" must be a non-blank string, got " "'),
    "a user with a newline": ({"user_id": "al\nice"},
                              "the user 'al\\nice' contains the control character '\\n'; a user id "
                              "is one line of printable text"),
}


@pytest.mark.parametrize("entry, message", BAD_ENTRIES.values(), ids=BAD_ENTRIES)
def test_a_bad_user_or_link_in_a_memory_file_is_one_line_naming_the_entry(
        entry: dict, message: str, chain_store: str, tmp_path: Path, capsys) -> None:
    path = write_file(tmp_path / "bad.json", [{"fact": TEA[0], "date": "2026-09-09"},
                                              {"fact": LATTE[0], "date": LATTE[1], **entry}])
    argv = ["add", "--file", str(path), "--store", chain_store, "--user", "taro"]
    assert main(argv, embed_model=embedding(*FACTS)) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {path}, memory 2: {message}")
    assert len(stored(chain_store)) == 4  # nothing stored


# --- progress ----------------------------------------------------------------------------


class Clock:
    def __init__(self, *times: float) -> None:
        self.times = list(times)

    def __call__(self) -> float:
        return self.times.pop(0)


def test_progress_lines_without_a_terminal_say_count_rate_and_eta(capsys) -> None:
    from rich.console import Console

    recorded: list[tuple[str, float]] = []
    lines = Console(stderr=True)
    clock = Clock(0.0, 1.0, 6.0, 7.0, 12.0, 12.0, 13.0, 14.0, 14.0, 15.0, 16.0, 25.0)
    with PhaseProgress(Console(), lines, lambda *stage: recorded.append(stage),
                       clock=clock) as progress:
        for call in (("embedding", 0, 100), ("embedding", 16, 100), ("embedding", 32, 100),
                     ("embedding", 48, 100), ("embedding", 100, 100), ("storing", 0, 100),
                     ("storing", 64, 100), ("storing", 100, 100)):
            progress(*call)  # insert_memories reports each phase's start with 0 done
        for call in (("storing", 0, 5000), ("storing", 10, 5000), ("storing", 20, 5000),
                     ("storing", 5000, 5000)):
            progress(*call)  # a phase of its own, though of the same name
    assert capsys.readouterr() == ("", "\n".join([
        "embedding: 32/100 memories, 5/s, ETA 13 s",  # 5 s after the start, then not before 11
        "embedding: 100/100 memories, 8/s, done in 12 s",
        # storing 100 took 2 s: no line at all
        "storing: 5000/5000 memories, 455/s, done in 11 s",  # over 5 s: its closing line
    ]) + "\n")
    assert recorded == [("embedding 100 memories", 12.0), ("storing 100 memories", 2.0),
                        ("storing 5000 memories", 11.0)]


@pytest.mark.slow
def test_add_file_prints_progress_lines_on_stderr_without_a_terminal(tmp_path: Path,
                                                                     monkeypatch, capsys) -> None:
    monkeypatch.setattr("llama_index_recency.cli.progress.PROGRESS_INTERVAL", 0.0)
    facts = [(f"The user noted thing number {i}.", "2026-09-01") for i in range(100)]
    path = write_file(tmp_path / "many.json", [{"fact": f, "date": d} for f, d in facts])
    store = str(tmp_path / "store")
    assert main(["add", "--file", str(path), "--store", store], embed_model=embedding(*facts)) == 0
    out, err = capsys.readouterr()
    assert out == f"stored 100 new memories (100 in total) in {store}\n"
    lines = err.splitlines()
    assert lines[0].startswith("embedding: 16/100 memories, ") and ", ETA " in lines[0]
    assert lines[6].startswith("embedding: 100/100 memories, ") and ", done in " in lines[6]
    assert lines[7].startswith("storing: 64/100 memories, ")
    assert lines[8].startswith("storing: 100/100 memories, ") and len(lines) == 9
    assert all("/s" in line for line in lines)

    export = tmp_path / "b.jsonl"
    assert main(["export", str(export), "--store", store]) == 0
    capsys.readouterr()
    assert main(["import", str(export), "--store", str(tmp_path / "copy")],
                embed_model=embedding(*facts)) == 0  # import shows the same progress
    assert capsys.readouterr().err.splitlines()[-1].startswith("storing: 100/100 memories, ")


def test_on_a_terminal_progress_is_a_bar_not_lines(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr("llama_index_recency.cli.progress.PROGRESS_INTERVAL", 0.0)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws live displays as on a terminal
    store = str(tmp_path / "store")
    path = write_file(tmp_path / "m.json", [{"fact": f, "date": d} for f, d in FACTS])
    assert main(["add", "--file", str(path), "--store", store], embed_model=embedding(*FACTS)) == 0
    out, err = capsys.readouterr()
    assert "storing memories" in out and err == ""


# --- export, import, history, list --json ------------------------------------------------


@pytest.mark.slow
def test_export_then_import_restores_the_store(chain_store: str, tmp_path: Path,
                                               capsys) -> None:
    backup, copy = tmp_path / "backup.jsonl", str(tmp_path / "copy")
    assert main(["export", str(backup), "--store", chain_store, "--with-embeddings"]) == 0
    assert capsys.readouterr().out == (
        f"exported 4 memories with their embeddings from {chain_store} to {backup}\n")
    embed = embedding(*FACTS)
    assert main(["import", str(backup), "--store", copy], embed_model=embed) == 0
    assert main(["import", str(backup), "--store", copy], embed_model=embed) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"stored 4 new memories (4 in total) in {copy}",
        f"stored 0 new memories, 4 already stored (4 in total) in {copy}",
    ]
    before, after = stored(chain_store), stored(copy)
    assert {k: (n.text, n.metadata) for k, n in before.items()} == {
        k: (n.text, n.metadata) for k, n in after.items()}

    assert main(["export", str(tmp_path / "taro.jsonl"), "--store", copy, "--user", "taro"]) == 0
    assert capsys.readouterr().out == (
        f"exported 3 memories of user taro from {copy} to {tmp_path / 'taro.jsonl'}\n")
    assert main(["list", "--json", "--store", copy, "--user", "taro"]) == 0
    exported = (tmp_path / "taro.jsonl").read_text("utf-8").splitlines()
    assert json.loads(capsys.readouterr().out) == [json.loads(line) for line in exported]


def test_list_json_is_the_exports_objects_without_markup_or_wrapping(chain_store: str,
                                                                     tmp_path: Path,
                                                                     monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    assert main(["list", "--json", "--store", chain_store]) == 0
    out = capsys.readouterr().out
    lines = json.loads(out)  # one JSON list
    assert [line["date"] for line in lines] == ["2026-09-08", "2026-09-01", "2026-05-20",
                                                "2026-05-20"]
    assert lines[0] == {"id": node_id(TEA, "taro"), "text": TEA[0], "date": TEA[1],
                        "user_id": "taro", "supersedes": [node_id(LATTE, "taro")],
                        "metadata": {}}
    assert main(["list", "--json", "--store", chain_store, "--user", "carol"]) == 0
    assert json.loads(capsys.readouterr().out) == []


@pytest.mark.slow
def test_list_json_works_in_a_pipe(chain_store: str) -> None:
    """The real command, its output read by `head -1`, which stops reading early."""
    command = (f"{sys.executable} -m llama_index_recency list --json --store {chain_store} "
               "| head -1")
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True,
                            env={**os.environ, "COLUMNS": "40"}, timeout=120)
    assert result.returncode == 0 and result.stderr == b""
    assert result.stdout == b"[\n"  # the document's first line


@pytest.mark.slow
def test_a_rich_table_read_by_head_ends_quietly() -> None:
    """`demo` prints rich tables: a reader that stops early is no failure there either (rich
    alone would exit with 1)."""
    command = f"{sys.executable} -m llama_index_recency demo --no-llm | head -1"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True,
                            env={**os.environ, "COLUMNS": "40", "RECENCY_LLM_BASE_URL": "",
                                 "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    assert len(result.stdout.splitlines()) == 1


@pytest.mark.slow
def test_a_write_whose_output_nobody_reads_is_no_success(chain_store: str) -> None:
    """`forget` shows what it will delete before deleting: when the reader is gone by then,
    the run may have stopped before its write, so it does not exit 0."""
    command = (f"{sys.executable} -m llama_index_recency forget --store {chain_store} "
               "--user hanako --yes | true")
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True,
                            env={**os.environ, "COLUMNS": "40", "HF_HUB_OFFLINE": "1"},
                            timeout=300)
    listed = subprocess.run([sys.executable, "-m", "llama_index_recency", "list", "--json",
                             "--store", chain_store, "--user", "hanako"], capture_output=True,
                            timeout=300)
    assert result.returncode != 0 or json.loads(listed.stdout) == []


def test_history_lists_every_version_oldest_first(chain_store: str, capsys) -> None:
    taro = [node_id(fact, "taro") for fact in FACTS]
    assert main(["history", taro[1], "--store", chain_store, "--user", "taro"]) == 0
    out = capsys.readouterr().out
    assert "3 versions of memory" in out
    positions = [out.index(f"{day}: {fact}") for fact, day in FACTS]
    assert positions == sorted(positions)
    assert main(["history", node_id(BLACK, "hanako"), "--store", chain_store]) == 0
    assert "1 version of memory" in capsys.readouterr().out


@pytest.mark.parametrize("which, user", [("unknown", None), ("other user's", "taro")])
def test_history_of_no_such_memory_is_one_line_naming_it(which: str, user: str | None,
                                                         chain_store: str, capsys) -> None:
    wanted = {"unknown": node_id(TEA, "carol"), "other user's": node_id(BLACK, "hanako")}[which]
    argv = ["history", wanted, "--store", chain_store] + (["--user", user] if user else [])
    assert main(argv) == 1
    whose = f" of user {user}" if user else ""
    assert error_line(capsys.readouterr().err) == f"error: no memory {wanted}{whose} in {chain_store}"


def test_import_problems_are_one_line(chain_store: str, tmp_path: Path, capsys) -> None:
    embed, target = embedding(*FACTS), str(tmp_path / "target")
    missing = tmp_path / "missing.jsonl"
    assert main(["import", str(missing), "--store", target], embed_model=embed) == 2
    assert error_line(capsys.readouterr().err) == f"error: memory file {missing} does not exist"
    assert main(["import", str(tmp_path), "--store", target], embed_model=embed) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: cannot read memory file {tmp_path}: Is a directory")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": TEA[0], "date": TEA[1]}) + "\n"
                   + json.dumps({"text": TEA[0], "date": "2026-13-01"}) + "\n", "utf-8")
    assert main(["import", str(bad), "--store", target], embed_model=embed) == 2
    assert error_line(capsys.readouterr().err).startswith(
        f"error: memory file {bad}, line 2: not an ISO 8601 date")
    assert not Path(target).exists()  # refused before the store was opened

    vectors = tmp_path / "vectors.jsonl"
    assert main(["export", str(vectors), "--store", chain_store, "--with-embeddings"]) == 0
    capsys.readouterr()
    other = KnownCosineEmbedding({memory_node(*fact).get_content(): 0.5 for fact in FACTS[:2]})
    assert main(["import", str(vectors), "--store", target], embed_model=other) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {vectors}, line 1: its embedding is from 'known-cosine' (4 dims) "
        "but the store holds vectors of 'known-cosine' (3 dims): vectors of different models "
        "are not comparable; remove the embeddings to embed the memories again")


def test_export_problems_are_one_line(chain_store: str, tmp_path: Path, capsys) -> None:
    nowhere = tmp_path / "no such folder" / "backup.jsonl"
    assert main(["export", str(nowhere), "--store", chain_store]) == 1
    assert error_line(capsys.readouterr().err) == (
        f"error: cannot write {nowhere}: No such file or directory")
    assert main(["export", str(tmp_path / "b.jsonl"), "--store", str(tmp_path / "nothing")]) == 1
    assert error_line(capsys.readouterr().err).startswith(
        f"error: no memory store at {tmp_path / 'nothing'}")
