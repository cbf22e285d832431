"""Runtime hardening: forget --user with conversations still waiting in the outbox, questions
cut to what the embedding model reads, ordinary input errors as one line naming the value."""

from __future__ import annotations

import re
import threading
import time
from datetime import date
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage

from llama_index_recency import (
    RecencyMemoryBlock,
    memory_node,
    open_memory_index,
    openai_like_llm,
)
from llama_index_recency.cli import main
from llama_index_recency.models.embeddings import MAX_QUERY_CHARS, FallbackEmbedding
from llama_index_recency.storage import Conversation, Outbox, close_memory_index
from llama_index_recency.writing.writer import Turn

from conftest import KnownCosineEmbedding, OpenAIServer, _handler, error_line

pytestmark = pytest.mark.usefixtures("cli_environment")

TEA = ("The user likes green tea.", "2026-09-01")
PASTED = "coffee " * 15_000  # a pasted log of 105,000 characters


def store_of(path: Path, user: str) -> KnownCosineEmbedding:
    """A store at ``path`` holding one memory of ``user``; the embedding that knows it."""
    node = memory_node(*TEA, user_id=user)
    embed = KnownCosineEmbedding({node.get_content(): 0.5})
    index = open_memory_index(embed, path=path)
    index.insert_nodes([node])
    close_memory_index(index)
    return embed


def waiting_for(outbox: Path, *users: str) -> None:
    """One conversation per user waiting in ``outbox``, as a killed writing block leaves them."""
    waiting = Outbox(outbox)
    for user in users:
        waiting.add(Conversation(turns=(Turn("user", f"I am {user}."),), day=date(2026, 9, 1),
                                 user_id=user))


# --- forget --user clears the outbox even when the user has no memory yet --------------------

def test_forget_a_user_with_no_memory_yet_drops_their_waiting_conversations(tmp_path: Path,
                                                                            capsys) -> None:
    store_of(tmp_path, "hanako")
    outbox = tmp_path / "outbox" / "memories.jsonl"
    waiting_for(outbox, "taro", "taro", "hanako")
    assert main(["forget", "--store", str(tmp_path), "--user", "taro", "--yes"]) == 0
    out = capsys.readouterr().out
    assert "dropped 2 conversations of user taro waiting in the outbox" in out
    assert "deleted 0 memories" in out
    left = [Conversation.from_json(line) for line in outbox.read_text("utf-8").splitlines()]
    assert [entry.user_id for entry in left] == ["hanako"]


def test_forget_a_user_with_nothing_anywhere_still_says_nothing_was_deleted(tmp_path: Path,
                                                                           capsys) -> None:
    store_of(tmp_path, "hanako")
    waiting_for(tmp_path / "outbox" / "memories.jsonl", "hanako")
    assert main(["forget", "--store", str(tmp_path), "--user", "taro", "--yes"]) == 0
    assert "no memory in" in capsys.readouterr().out


# --- questions are cut to what the model reads ------------------------------------------------

def test_a_pasted_log_is_embedded_as_its_first_characters_only(e5) -> None:
    start = time.perf_counter()
    vector = e5.get_query_embedding(PASTED)
    assert time.perf_counter() - start < 5  # uncut, e5 embeds every window: minutes
    assert vector == e5.get_query_embedding(PASTED[:MAX_QUERY_CHARS])


@pytest.mark.slow
async def test_a_turn_of_100k_characters_is_recalled_in_seconds(e5) -> None:
    index = open_memory_index(e5)
    index.insert_nodes([memory_node("The user drinks coffee black.", "2026-09-01")])
    block = RecencyMemoryBlock(index=index)
    await block.aget([ChatMessage(role="user", content="hello")])  # warm up
    start = time.perf_counter()
    await block.aget([ChatMessage(role="user", content=PASTED)])
    assert time.perf_counter() - start < 5


def test_the_embedding_api_gets_the_same_cut_question_as_the_local_model(e5) -> None:
    sent: list[str] = []

    def embed(texts: list[str]) -> list[list[float]]:
        sent.extend(texts)
        return [e5.get_query_embedding(text.removeprefix("query: ")) for text in texts]

    state = OpenAIServer(embed=embed)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        api = FallbackEmbedding(e5.model_name, e5, api_base=f"http://127.0.0.1:"
                                f"{httpd.server_address[1]}/v1")
        vector = api.get_query_embedding(PASTED)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert sent == ["query: " + PASTED[:MAX_QUERY_CHARS]]
    assert vector == e5.get_query_embedding(PASTED)


# --- ordinary input errors are one line naming the value --------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["forget", "not-a-uuid", "--yes"],
     "argument ID: expected a memory id (a UUID, see `list`), got 'not-a-uuid'"),
    (["ask", "tea?", "--llm-timeout", "-1"],
     "argument --llm-timeout: expected a positive number of seconds, got '-1'"),
    (["ask", "tea?", "--llm-timeout", "0"],
     "argument --llm-timeout: expected a positive number of seconds, got '0'"),
    (["remember", "talk.txt", "--llm-timeout", "nan"],
     "argument --llm-timeout: expected a positive number of seconds, got 'nan'"),
])
@pytest.mark.slow
def test_bad_ids_and_timeouts_are_refused_when_parsed(argv: list[str], message: str,
                                                      tmp_path: Path, capsys) -> None:
    store_of(tmp_path, "taro")
    assert main([*argv, "--store", str(tmp_path)]) == 2
    assert message in error_line(capsys.readouterr().err)


@pytest.mark.parametrize("command", [["ask", "tea?"], ["remember", "talk.txt"], ["demo"]])
@pytest.mark.parametrize("url", ["notaurl", "ftp://example.com/v1", "http://"])
@pytest.mark.slow
def test_an_llm_url_that_is_no_http_url_is_refused_once(command: list[str], url: str,
                                                        tmp_path: Path, monkeypatch,
                                                        capsys) -> None:
    (tmp_path / "talk.txt").write_text("user: I like tea.\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", url)
    embed = store_of(tmp_path / "store", "taro")
    store = [] if command == ["demo"] else ["--store", str(tmp_path / "store")]
    assert main([*command, *store], embed_model=embed) == 2
    captured = capsys.readouterr()
    assert error_line(captured.err) == (f"error: RECENCY_LLM_BASE_URL {url!r} is not an http(s) "
                                        "URL such as http://localhost:8000/v1")
    assert captured.out == ""  # refused before anything ran


@pytest.mark.parametrize("kwargs, message", [
    ({"api_base": "notaurl"}, "api_base 'notaurl' is not an http(s) URL"),
    ({"api_base": "http://127.0.0.1:9/v1", "timeout": 0},
     "timeout must be a positive number of seconds, got 0"),
    ({"api_base": "http://127.0.0.1:9/v1", "timeout": -1.0},
     "timeout must be a positive number of seconds, got -1.0"),
    ({"api_base": "http://127.0.0.1:9/v1", "timeout": float("inf")},
     "timeout must be a positive number of seconds, got inf"),
])
def test_openai_like_llm_refuses_a_bad_url_or_timeout(kwargs, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        openai_like_llm(**kwargs)


@pytest.mark.slow
def test_calibrating_the_gate_of_an_emptied_store_is_one_line(tmp_path: Path, capsys) -> None:
    embed = store_of(tmp_path, "taro")
    assert main(["forget", "--store", str(tmp_path), "--user", "taro", "--yes"]) == 0
    capsys.readouterr()
    assert main(["calibrate", "--store", str(tmp_path)], embed_model=embed) == 1
    assert error_line(capsys.readouterr().err) == (
        f"error: no memories stored in {tmp_path}; there is no gate to fit")


@pytest.mark.slow
def test_calibrating_the_gate_of_a_user_without_memories_is_one_line(tmp_path: Path,
                                                                     capsys) -> None:
    embed = store_of(tmp_path, "taro")
    assert main(["calibrate", "--store", str(tmp_path), "--user", "nobody"],
                embed_model=embed) == 1
    assert error_line(capsys.readouterr().err) == (
        f"error: cannot fit the gate on {tmp_path} for user 'nobody': the store (or this user's "
        "part of it) is empty: there is no gate to fit")
