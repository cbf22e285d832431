"""``migrate`` and ``forget``: store maintenance from the command line, with no embedding model."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.vector_stores.qdrant import QdrantVectorStore
from qdrant_client import QdrantClient, models

from llama_index_recency import memory_node
from llama_index_recency.cli import main
from llama_index_recency.storage import EMBEDDING_METADATA_KEY, get_memories, open_memory_store


def local_mode_store(path: Path, n: int = 300) -> list[str]:
    """A store as 0.1.0 wrote it (qdrant-client local mode), with ``n`` memories."""
    client = QdrantClient(path=str(path))
    client.create_collection(
        "memories", vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE),
        metadata={EMBEDDING_METADATA_KEY: {"model": "m", "dimensions": 4}},
    )
    nodes = []
    for i in range(n):
        node = memory_node(f"Taro noted fact {i}.", f"2026-{1 + i % 9:02d}-{1 + i % 28:02d}",
                           metadata={"user_id": "taro" if i % 2 else "hanako"})
        node.embedding = [1.0, float(i % 7), 0.5, float(i % 3)]
        nodes.append(node)
    QdrantVectorStore(collection_name="memories", client=client).add(nodes)
    client.close()
    return [node.node_id for node in nodes]


@pytest.mark.slow
@pytest.mark.usefixtures("cli_environment")  # rich wraps nothing: a long tmp path stays on a line
def test_migrate_moves_a_0_1_0_store_to_edge_and_list_reads_it(tmp_path: Path, capsys) -> None:
    ids = local_mode_store(tmp_path / "old")
    assert main(["migrate", str(tmp_path / "old"), str(tmp_path / "new")]) == 0
    out = capsys.readouterr().out
    assert "migrated 300 memories from" in out and "is unchanged" in out
    assert main(["migrate", str(tmp_path / "old"), str(tmp_path / "new")]) == 0  # again: harmless
    store = open_memory_store(path=tmp_path / "new")
    assert sorted(n.node_id for n in get_memories(store)) == sorted(ids)
    store.close()
    assert main(["list", "--store", str(tmp_path / "new")]) == 0
    assert "300 memories in" in capsys.readouterr().out


def test_migrate_refuses_a_source_that_is_not_a_0_1_0_store(tmp_path: Path, capsys) -> None:
    assert main(["migrate", str(tmp_path / "nothing"), str(tmp_path / "new")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a llama-index-recency 0.1.0 store" in err


def test_forget_by_user_and_date_shows_what_it_deletes_with_yes(tmp_path: Path, capsys) -> None:
    local_mode_store(tmp_path / "old", n=20)
    main(["migrate", str(tmp_path / "old"), str(tmp_path / "store")])
    capsys.readouterr()
    argv = ["forget", "--store", str(tmp_path / "store"), "--user", "taro", "--before", "2026-03-01"]
    assert main([*argv, "--yes"]) == 0
    out = capsys.readouterr().out
    # taro's (odd i) memories dated in January or February: i = 1, 9, 19
    assert "3 memories to forget" in out and "deleted 3 memories" in out
    store = open_memory_store(path=tmp_path / "store")
    left = get_memories(store)
    store.close()
    assert len(left) == 17
    assert not [n for n in left if n.metadata["user_id"] == "taro" and n.metadata["date"] < "2026-03"]


def test_forget_by_match_and_by_id(tmp_path: Path, capsys) -> None:
    ids = local_mode_store(tmp_path / "old", n=12)
    main(["migrate", str(tmp_path / "old"), str(tmp_path / "store")])
    store_option = ["--store", str(tmp_path / "store")]
    assert main(["forget", *store_option, "--match", "FACT 1", "--yes"]) == 0  # 1, 10, 11
    assert "deleted 3 memories" in capsys.readouterr().out
    assert main(["forget", *store_option, ids[2], "--yes"]) == 0
    assert "deleted 1 memory" in capsys.readouterr().out
    assert main(["forget", *store_option, ids[2], "--yes"]) == 0
    assert "nothing deleted" in capsys.readouterr().out


def test_forget_asks_and_refuses_without_a_terminal(tmp_path: Path, capsys, monkeypatch) -> None:
    local_mode_store(tmp_path / "old", n=4)
    main(["migrate", str(tmp_path / "old"), str(tmp_path / "store")])
    capsys.readouterr()
    argv = ["forget", "--store", str(tmp_path / "store"), "--user", "taro"]
    assert main(argv) == 2  # pytest's stdin is no terminal
    assert "pass --yes" in capsys.readouterr().err

    class Terminal:
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Terminal())
    monkeypatch.setattr("builtins.input", lambda question: "n")
    assert main(argv) == 1
    assert "nothing deleted" in capsys.readouterr().out
    monkeypatch.setattr("builtins.input", lambda question: "y")
    assert main(argv) == 0
    assert "deleted 2 memories" in capsys.readouterr().out


def test_forget_needs_a_selection(tmp_path: Path, capsys) -> None:
    assert main(["forget", "--store", str(tmp_path)]) == 2
    assert "forget needs memory ids, --user, --before or --match" in capsys.readouterr().err


def test_forget_a_whole_user_drops_their_conversations_waiting_in_the_outbox(
        tmp_path: Path, capsys) -> None:
    from datetime import date

    from llama_index_recency.storage import Conversation, Outbox
    from llama_index_recency.writing.writer import Turn

    local_mode_store(tmp_path / "old", n=6)
    main(["migrate", str(tmp_path / "old"), str(tmp_path / "store")])
    outbox = tmp_path / "store" / "outbox" / "memories.jsonl"
    waiting = Outbox(outbox)
    for user in ("taro", "hanako"):
        waiting.add(Conversation(turns=(Turn("user", f"I am {user}."),), day=date(2026, 9, 1),
                                 user_id=user))
    del waiting
    assert main(["forget", "--store", str(tmp_path / "store"), "--user", "taro", "--yes"]) == 0
    assert "deleted 3 memories" in capsys.readouterr().out
    left = [Conversation.from_json(line) for line in outbox.read_text("utf-8").splitlines()]
    assert [entry.user_id for entry in left] == ["hanako"]
