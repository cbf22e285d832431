"""``--json`` on list, history, export and ask: one JSON document on stdout (never JSON Lines),
and tables that do not wrap when stdout is not a terminal."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from llama_index_recency import memory_node
from llama_index_recency.cli import main

from conftest import KnownCosineEmbedding, OpenAIServer, error_line

BLACK = ("The user drinks coffee black.", "2026-05-20", 0.47)
LATTE = ("The user switched to sweet café au lait.", "2026-09-01", 0.44)
LONG = (
    "The user walks to the old bakery by the river every Saturday morning to buy a "
    "cinnamon roll and a rye loaf for the week.",
    "2026-09-05",
    0.10,
)
QUESTION = "How do I take my coffee again?"
MEMORY_FIELDS = ["id", "text", "date", "user_id", "supersedes", "metadata"]

pytestmark = pytest.mark.usefixtures("cli_environment")


def node_id(memory: tuple[str, str, float], user: str | None = "taro") -> str:
    return memory_node(memory[0], memory[1], user_id=user).node_id


def embedding() -> KnownCosineEmbedding:
    """Every question embeds as e0; each memory at its known cosine."""
    return KnownCosineEmbedding(
        {memory_node(fact, day).get_content(): raw for fact, day, raw in (BLACK, LATTE, LONG)}
    )


@pytest.fixture
def store(tmp_path: Path, capsys) -> str:
    """Taro's BLACK → LATTE (a link) and LONG (over 80 columns), and one memory of no user."""
    path = tmp_path / "memories.json"
    path.write_text(
        json.dumps(
            {
                "memories": [
                    {"fact": BLACK[0], "date": BLACK[1], "key": "coffee"},
                    {"fact": LATTE[0], "date": LATTE[1], "supersedes": [node_id(BLACK)]},
                    {"fact": LONG[0], "date": LONG[1]},
                ]
            },
            ensure_ascii=False,
        ),
        "utf-8",
    )
    where = str(tmp_path / "store")
    assert (
        main(
            ["add", "--file", str(path), "--store", where, "--user", "taro"],
            embed_model=embedding(),
        )
        == 0
    )
    assert (
        main(["add", BLACK[0], "--date", BLACK[1], "--store", where], embed_model=embedding()) == 0
    )
    capsys.readouterr()
    return where


def printed_json(argv: list[str], capsys, **kwargs) -> object:
    """What the command printed, read as one JSON document (stderr empty)."""
    assert main(argv, **kwargs) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


# --- list ---------------------------------------------------------------------------------


def test_list_json_is_one_json_list_of_the_exports_objects(
    store: str, tmp_path: Path, capsys
) -> None:
    listed = printed_json(["list", "--json", "--store", store, "--user", "taro"], capsys)
    assert isinstance(listed, list)
    assert [memory["date"] for memory in listed] == [LONG[1], LATTE[1], BLACK[1]]  # newest first
    assert all(list(memory) == MEMORY_FIELDS for memory in listed)
    assert listed[1] == {
        "id": node_id(LATTE),
        "text": LATTE[0],
        "date": LATTE[1],
        "user_id": "taro",
        "supersedes": [node_id(BLACK)],
        "metadata": {},
    }
    assert main(["export", str(tmp_path / "taro.jsonl"), "--store", store, "--user", "taro"]) == 0
    capsys.readouterr()
    exported = (tmp_path / "taro.jsonl").read_text("utf-8").splitlines()
    assert listed == [json.loads(line) for line in exported]
    assert printed_json(["list", "--json", "--store", store, "--user", "carol"], capsys) == []


@pytest.mark.slow
def test_list_json_piped_into_json_tool_works(store: str) -> None:
    """The issue's check: ``llama-index-recency list --json | python -m json.tool``."""
    command = (
        f"{sys.executable} -m llama_index_recency list --json --store {store} "
        f"| {sys.executable} -m json.tool"
    )
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert len(json.loads(done.stdout)) == 4


# --- history and export -------------------------------------------------------------------


def test_history_json_is_the_facts_versions_oldest_first(store: str, capsys) -> None:
    listed = {
        memory["id"]: memory
        for memory in printed_json(["list", "--json", "--store", store], capsys)
    }
    versions = printed_json(["history", node_id(LATTE), "--store", store, "--json"], capsys)
    assert versions == [listed[node_id(BLACK)], listed[node_id(LATTE)]]
    alone = printed_json(["history", node_id(BLACK, None), "--store", store, "--json"], capsys)
    assert alone == [listed[node_id(BLACK, None)]] and alone[0]["user_id"] is None


def test_history_json_of_no_such_memory_prints_no_json(store: str, capsys) -> None:
    assert main(["history", node_id(LATTE), "--store", store, "--user", "hanako", "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert error_line(err) == f"error: no memory {node_id(LATTE)} of user hanako in {store}"


def test_export_json_is_a_summary_of_the_file_written(store: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "all.jsonl"
    summary = printed_json(["export", str(path), "--store", store, "--json"], capsys)
    assert summary == {
        "path": str(path),
        "store": store,
        "count": 4,
        "users": ["taro", None],
        "with_embeddings": False,
    }
    assert len(path.read_text("utf-8").splitlines()) == 4
    taro = printed_json(
        ["export", str(path), "--store", store, "--user", "taro", "--with-embeddings", "--json"],
        capsys,
    )
    assert (taro["count"], taro["users"], taro["with_embeddings"]) == (3, ["taro"], True)


# --- ask ----------------------------------------------------------------------------------


ASK = ["ask", QUESTION, "--today", "2026-09-10", "--threshold", "0.45", "--user", "taro", "--json"]


def test_ask_json_holds_the_ranking_and_the_memories_for_the_prompt(store: str, capsys) -> None:
    asked = printed_json([*ASK, "--store", store], capsys, embed_model=embedding())
    assert isinstance(asked, dict)
    assert (asked["question"], asked["user_id"], asked["today"]) == (QUESTION, "taro", "2026-09-10")
    assert asked["policy"]["threshold"] == 0.45
    assert asked["threshold"] == {"value": 0.45, "language": None, "origin": "explicit"}
    assert (asked["reply"], asked["reply_without_memory"]) == (None, None)  # no LLM
    rows = {row["id"]: row for row in asked["candidates"]}
    assert set(rows) == {node_id(BLACK), node_id(LATTE)}  # taro's: not the same fact of no user
    black = rows[node_id(BLACK)]
    assert black["raw"] == pytest.approx(BLACK[2], abs=1e-6) and black["kept"]
    assert black["final"] == pytest.approx(black["raw"] + black["bonus"])
    assert black["text"] == f"{BLACK[1]}: {BLACK[0]}" and black["age_days"] == 113
    # LATTE (0.44 + its bonus) updates BLACK: it enters the prompt first, as the table says.
    assert rows[node_id(LATTE)]["verdict"] == f"successor of {node_id(BLACK)}"
    assert [memory["id"] for memory in asked["memories"]] == [node_id(LATTE), node_id(BLACK)]
    assert all(memory["score"] == rows[memory["id"]]["final"] for memory in asked["memories"])


@pytest.mark.slow
def test_ask_json_holds_the_llms_replies(
    store: str, openai_server: OpenAIServer, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    openai_server.replies = ["Sweet café au lait!", "Black, I think."]
    asked = printed_json([*ASK, "--store", store, "--compare"], capsys, embed_model=embedding())
    assert asked["reply"] == "Sweet café au lait!"
    assert asked["reply_without_memory"] == "Black, I think."
    assert "<retrieved_memory>" in json.dumps(openai_server.requests[0], ensure_ascii=False)


def test_ask_json_prints_nothing_when_the_llm_fails(
    store: str, closed_port_url: str, monkeypatch, capsys
) -> None:
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", closed_port_url)
    argv = [*ASK, "--store", store, "--llm-timeout", "5"]
    assert main(argv, embed_model=embedding()) == 1
    out, err = capsys.readouterr()
    assert out == "" and error_line(err).startswith(f"error: the LLM at {closed_port_url}")


# --- no wrapping when stdout is not a terminal ----------------------------------------------


def run_with_a_terminal(
    argv: list[str], *, stdout_on_terminal: bool, env: dict[str, str] | None = None
) -> str:
    """The real command, stdin (and with ``stdout_on_terminal`` stdout) on a 60-column
    terminal, COLUMNS unset unless in ``env``: what it wrote to stdout, escapes removed."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    clean = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "FORCE_COLOR", "TTY_COMPATIBLE", "NO_COLOR")
    }
    command = [sys.executable, "-m", "llama_index_recency", *argv]
    try:
        if not stdout_on_terminal:
            done = subprocess.run(
                command,
                stdin=slave,
                capture_output=True,
                text=True,
                env={**clean, **(env or {})},
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout
        process = subprocess.Popen(
            command, stdin=slave, stdout=slave, stderr=subprocess.PIPE, env={**clean, **(env or {})}
        )
        os.close(slave)
        slave = -1
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=120) == 0
        text = b"".join(chunks).decode("utf-8").replace("\r\n", "\n")
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def has_line_with(text: str, out: str) -> bool:
    return any(text in line for line in out.splitlines())


@pytest.mark.slow
def test_a_piped_table_keeps_each_memorys_text_on_one_line(store: str) -> None:
    """Rich would take the terminal's 60 columns from stdin and fold the text; piped, it does
    not (list and history alike), and the JSON stays JSON."""
    assert len(f"{LONG[1]}: {LONG[0]}") > 80
    out = run_with_a_terminal(["list", "--store", store], stdout_on_terminal=False)
    assert has_line_with(f"{LONG[1]}: {LONG[0]}", out)
    assert has_line_with(f"{LATTE[1]}: {LATTE[0]}", out)
    out = run_with_a_terminal(
        ["history", node_id(LONG), "--store", store], stdout_on_terminal=False
    )
    assert has_line_with(f"{LONG[1]}: {LONG[0]}", out)


@pytest.mark.slow
def test_a_terminal_or_columns_still_wraps_the_table(store: str) -> None:
    on_terminal = run_with_a_terminal(["list", "--store", store], stdout_on_terminal=True)
    assert "walks" in on_terminal and "cinnamon" in on_terminal
    assert not has_line_with(LONG[0], on_terminal)
    assert max(len(line) for line in on_terminal.splitlines()) <= 60
    narrow = run_with_a_terminal(
        ["list", "--store", store], stdout_on_terminal=False, env={"COLUMNS": "70"}
    )
    assert not has_line_with(LONG[0], narrow)
    assert max(len(line) for line in narrow.splitlines()) <= 70
