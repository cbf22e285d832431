"""Issue 27, items 6 and 7: a store its own disk cannot open for writing is still read; a
collection name is a plain name, never a path."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_cli_errors
from test_cli_errors import MEMORY, QUESTION, embedding_for, run_in_child

from llama_index_recency import memory_node, open_memory_index
from llama_index_recency.cli import main
from llama_index_recency.errors import MemoryStoreLockedError
from llama_index_recency.storage import (
    QdrantEdgeVectorStore,
    close_memory_index,
    edge_shard_path,
    open_memory_store,
    outbox_path,
)

from conftest import KnownCosineEmbedding, error_line, spread_cosines

pytestmark = pytest.mark.usefixtures("cli_environment")

small_tmpfs = test_cli_errors.small_tmpfs  # a fixture: a tmpfs of the size given

MANY = [(f"The user noted thing number {i}, with a sentence of detail like a real memory.",
         "2026-09-01") for i in range(300)]


def written(store: str) -> dict[Path, tuple[int, int]]:
    """Every file of ``store`` with its size and modification time."""
    return {path: (path.stat().st_size, path.stat().st_mtime_ns)
            for path in Path(store).rglob("*") if path.is_file()}


def add_many(store: str, tmp_path: Path) -> KnownCosineEmbedding:
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"memories": [{"fact": f, "date": d} for f, d in MANY]}), "utf-8")
    embed = KnownCosineEmbedding(spread_cosines(memory_node(f, d).get_content()
                                                for f, d in [*MANY, MEMORY]))
    assert main(["add", "--file", str(path), "--store", store], embed_model=embed) == 0
    return embed


def assert_every_read_works(store: str, embed: KnownCosineEmbedding, tmp_path: Path,
                            count: int) -> None:
    """list, list --json, export, history and ask on ``store``, each in a forked child."""
    code, out, err = run_in_child(["list", "--store", store])
    assert (code, err) == (0, ""), err
    assert f"{count} memories in {store}" in out
    code, out, err = run_in_child(["list", "--json", "--store", store])
    assert (code, err) == (0, ""), err
    listed = json.loads(out)
    first = listed[0]
    assert len(listed) == count
    exported = tmp_path / "export.jsonl"
    code, out, err = run_in_child(["export", str(exported), "--store", store])
    assert (code, err) == (0, ""), err
    assert len(exported.read_text("utf-8").splitlines()) == count
    code, out, err = run_in_child(["history", first["id"], "--store", store])
    assert (code, err) == (0, ""), err
    assert "1 version of memory" in out
    code, out, err = run_in_child(["ask", QUESTION, "--store", store, "--today", "2026-09-10"],
                                embed)
    assert (code, err) == (0, ""), err
    assert "The user noted thing number" in out


# --- item 6: read-only commands work when the store's disk cannot take a writable open ------


@pytest.mark.slow
@pytest.mark.parametrize("small_tmpfs", ["24m"], indirect=True)
def test_a_store_its_small_tmpfs_cannot_reopen_is_still_read_and_writes_say_why(
        small_tmpfs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """300 memories fit a 24 MB tmpfs, but Edge fills the holes of its mapped files on
    loading (about 50 MB): the write warns, reads open a copy on another disk, writes refuse."""
    store = str(small_tmpfs / "store")
    shard = edge_shard_path(store)
    with caplog.at_level(logging.WARNING, logger="llama_index_recency"):
        embed = add_many(store, tmp_path)
    warned = [message for message in caplog.messages if "needed to reopen it" in message]
    assert len(warned) == 1 and warned[0].startswith(f"the disk holding the store at {shard} has ")
    assert warned[0].endswith("later commands read it from a temporary copy and cannot change "
                              "it; free some space (or move the store to a larger disk)")
    before = written(store)
    assert_every_read_works(store, embed, tmp_path, len(MANY))
    assert written(store) == before  # nothing written where the store lives
    code, _, err = run_in_child(["add", MEMORY[0], "--date", MEMORY[1], "--store", store], embed)
    assert code == 1, f"killed by signal {-code}" if code < 0 else err
    line = error_line(err)
    assert line.startswith(f"error: the disk holding the store at {shard} has ")
    assert "it is open read-only, from a temporary copy" in line
    assert written(store) == before
    assert run_in_child(["list", "--store", store])[1].count("The user noted thing number") == 300


@pytest.mark.slow
@pytest.mark.parametrize("small_tmpfs", ["80m"], indirect=True)
def test_the_space_to_open_a_store_is_what_edge_fills_in_not_every_hole(
        small_tmpfs: Path, tmp_path: Path) -> None:
    """On loading, Edge fills in its vectors and payload indexes, not the payload storage
    (kept cold) nor the write-ahead log: 300 memories reopen for writing on 80 MB."""
    store = str(small_tmpfs / "store")
    embed = add_many(store, tmp_path)
    code, _, err = run_in_child(["add", MEMORY[0], "--date", MEMORY[1], "--store", store], embed)
    assert (code, err) == (0, "")
    code, out, err = run_in_child(["list", "--store", store])
    assert (code, err) == (0, "") and f"{len(MANY) + 1} memories in {store}" in out


@pytest.mark.slow
@pytest.mark.parametrize("small_tmpfs", ["64m"], indirect=True)
def test_a_store_on_a_read_only_mount_is_read_and_writes_say_why(
        small_tmpfs: Path, tmp_path: Path) -> None:
    store, embed = str(small_tmpfs / "store"), embedding_for(MEMORY)
    assert main(["add", MEMORY[0], "--date", MEMORY[1], "--store", store], embed_model=embed) == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_tmpfs)], check=True)
    code, out, err = run_in_child(["list", "--store", store])
    assert (code, err) == (0, "") and "1 memory in" in out and MEMORY[0] in out
    code, out, err = run_in_child(["ask", QUESTION, "--store", store, "--today", "2026-09-10"],
                                embed)
    assert (code, err) == (0, "") and MEMORY[0] in out
    exported = tmp_path / "export.jsonl"
    assert run_in_child(["export", str(exported), "--store", store])[0] == 0
    assert MEMORY[0] in exported.read_text("utf-8")
    tea = ("The user likes tea.", "2026-09-02")
    code, _, err = run_in_child(["add", *tea[:1], "--date", tea[1], "--store", store],
                              embedding_for(tea))
    assert code == 1
    assert error_line(err) == (
        f"error: the store at {edge_shard_path(store)} is on a read-only filesystem: it is open "
        "read-only, from a temporary copy, so it cannot be changed; remount it read-write or "
        "copy the store to a writable disk")


@pytest.fixture
def no_space_under(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """``shutil.disk_usage`` reports 0 bytes free under the paths listed (none at first)."""
    full: list[str] = []
    real = shutil.disk_usage

    def usage(path: str | os.PathLike[str]) -> object:
        found = real(path)
        inside = any(os.fspath(path).startswith(prefix) for prefix in full)
        return found._replace(free=0) if inside else found

    monkeypatch.setattr(shutil, "disk_usage", usage)
    yield full


@pytest.mark.slow
def test_a_store_read_from_a_copy_still_refuses_a_second_holder_and_a_write(
        tmp_path: Path, no_space_under: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    store, embed = str(tmp_path / "store"), embedding_for(MEMORY)
    assert main(["add", MEMORY[0], "--date", MEMORY[1], "--store", store], embed_model=embed) == 0
    writer = QdrantEdgeVectorStore(edge_shard_path(store))  # opened in place, for writing
    no_space_under.append(store)
    with pytest.raises(MemoryStoreLockedError):  # no copy of a store being written
        open_memory_store(path=store)
    writer.close()
    copy = open_memory_store(path=store)
    assert isinstance(copy, QdrantEdgeVectorStore) and copy.read_only
    no_space_under.clear()
    with pytest.raises(MemoryStoreLockedError):  # no writer while its copy is read
        QdrantEdgeVectorStore(edge_shard_path(store))
    no_space_under.append(store)
    with pytest.raises(OSError, match="it is open read-only, from a temporary copy"):
        copy.delete_nodes([copy.get_nodes()[0].node_id])
    close_memory_index(copy)
    capsys.readouterr()
    assert main(["list", "--store", store]) == 0
    assert "1 memory in" in capsys.readouterr().out
    assert not [name for name in os.listdir(tempfile.gettempdir())
                if name.startswith("llama-index-recency-copy-")]  # removed on close


# --- item 7: a collection name is a plain name ---------------------------------------------


@pytest.mark.parametrize("name", ["../../trav", "a/b", "", "..", ".", "a\\b", "a\0b"])
def test_a_collection_name_that_is_not_a_plain_name_is_refused_naming_it(
        name: str, tmp_path: Path) -> None:
    store = tmp_path / "deep" / "store"
    with pytest.raises(ValueError, match="collection name") as raised:
        open_memory_index(embedding_for(MEMORY), path=store, collection_name=name)
    assert repr(name) in str(raised.value) and "\n" not in str(raised.value)
    with pytest.raises(ValueError, match="collection name"):
        open_memory_store(path=store, collection_name=name)
    assert sorted(p.name for p in tmp_path.rglob("*")) == []


@pytest.mark.parametrize("name", ["../../trav", "a/b", ""])
def test_the_cli_refuses_a_collection_that_is_not_a_plain_name_in_one_line(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = tmp_path / "deep" / "store"
    argv = ["add", MEMORY[0], "--date", MEMORY[1], "--store", str(store), "--collection", name]
    assert main(argv, embed_model=embedding_for(MEMORY)) == 2
    line = error_line(capsys.readouterr().err)
    assert repr(name) in line and "--collection" in line
    assert list(tmp_path.rglob("*")) == []


def test_a_plain_collection_name_keeps_its_outbox_beside_the_store(tmp_path: Path) -> None:
    index = open_memory_index(embedding_for(MEMORY), path=tmp_path, collection_name="work.2026")
    try:
        assert outbox_path(index) == tmp_path / "outbox" / "work.2026.jsonl"
    finally:
        close_memory_index(index)
