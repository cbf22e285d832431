"""The command's failures: one line on stderr naming the problem, a non-zero exit, no traceback.

Also literal printing of user and LLM text, partial-write reports, and store refusals.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from llama_index_recency import memory_node, open_memory_index
from llama_index_recency.cli import main
from llama_index_recency.storage import close_memory_index

from conftest import KnownCosineEmbedding, error_line, spread_cosines

MEMORY = ("The user drinks coffee black.", "2026-09-01")
QUESTION = "How do I take my coffee?"


pytestmark = pytest.mark.usefixtures("cli_environment")


def embedding_for(*memories: tuple[str, str], raw: float = 0.5) -> KnownCosineEmbedding:
    # The texts as embedded, whatever the date (add decides whether to store them).
    return KnownCosineEmbedding({memory_node(fact, day, allow_future=True).get_content(): raw
                                 for fact, day in memories})


@pytest.fixture
def store_with_a_memory(tmp_path: Path) -> Iterator[tuple[str, KnownCosineEmbedding]]:
    store, embed = str(tmp_path / "store"), embedding_for(MEMORY)
    assert main(["add", MEMORY[0], "--date", MEMORY[1], "--store", store], embed_model=embed) == 0
    yield store, embed


# --- item 2: user and LLM text is printed literally ---------------------------------------

MARKUP_FACTS = (
    ("The user wrote [/b] in a regex.", "2026-09-01"),
    ("The user likes [bold]bold[/bold] and [link=https://evil.example]links[/link].", "2026-09-02"),
    ("The user pasted \x1b]8;;https://evil.example\x1b\\this\x1b]8;;\x1b\\ once.", "2026-09-03"),
)


@pytest.mark.slow
def test_markup_in_memories_and_replies_is_shown_verbatim(openai_server, monkeypatch,
                                                          tmp_path: Path, capsys) -> None:
    # memory_node refuses an escape sequence; a store written with nodes made by hand (or
    # before memory_node checked) may still hold one.
    pasted = memory_node("The user pasted a link once.", MARKUP_FACTS[2][1],
                         metadata={"key": "[red]k[/]"})
    pasted.text = f"{MARKUP_FACTS[2][1]}: {MARKUP_FACTS[2][0]}"
    store = str(tmp_path / "store")
    embed = KnownCosineEmbedding({**{memory_node(*fact).get_content(): 0.5
                                     for fact in MARKUP_FACTS[:2]}, pasted.text: 0.5})
    for fact, day in MARKUP_FACTS[:2]:
        assert main(["add", fact, "--date", day, "--key", "[red]k[/]", "--store", store],
                    embed_model=embed) == 0
    index = open_memory_index(embed, path=store)
    index.insert_nodes([pasted])
    close_memory_index(index)
    assert main(["list", "--store", store]) == 0
    listed = capsys.readouterr().out
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    openai_server.reply = "You wrote [/b] and [link=https://evil.example]this[/link]."
    assert main(["ask", "What did I write [/b]?", "--store", store, "--today", "2026-09-10",
                 "--threshold", "0.3"], embed_model=embed) == 0
    asked = capsys.readouterr()
    assert asked.err == ""
    for out in (listed, asked.out):
        assert "2026-09-01: The user wrote [/b] in a regex." in out
        assert "[bold]bold[/bold] and [link=https://evil.example]links[/link]" in out
        assert "\\x1b]8;;https://evil.example\\x1b\\this" in out  # shown, not sent
        assert "\x1b" not in out and "\x1b]8;" not in out
    assert "[red]k[/]" in listed
    assert "What did I write [/b]?" in asked.out
    assert "You wrote [/b] and [link=https://evil.example]this[/link]." in asked.out


def test_markup_in_an_error_message_is_shown_verbatim(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "[bold]x[/] [/b].json"
    assert main(["add", "--file", str(missing), "--store", str(tmp_path / "store")]) == 2
    assert error_line(capsys.readouterr().err) == f"error: memory file {missing} does not exist"


# --- item 7: bad input gives one line ----------------------------------------------------

GOOD_ITEM = {"fact": "The user likes tea.", "date": "2026-09-01"}

BAD_MEMORY_FILES = {
    "malformed JSON": (b'{"memories": [', "is not valid JSON: Expecting value at line 1 column 15"),
    "top-level list": (json.dumps([GOOD_ITEM]).encode(),
                       'expected a JSON object with a "memories" list, got a list'),
    "no memories": (json.dumps({"facts": [GOOD_ITEM]}).encode(),
                    'expected a JSON object with a "memories" list, got an object'),
    "no fact": (json.dumps({"memories": [GOOD_ITEM, {"date": "2026-09-01"}]}).encode(),
                'memory 2: no "fact" (e.g. "fact": "The user likes tea.")'),
    "no date": (json.dumps({"memories": [{"fact": "The user likes tea."}]}).encode(),
                'memory 1: no "date" (e.g. "date": "2026-09-01")'),
    "numeric date": (json.dumps({"memories": [{**GOOD_ITEM, "date": 20260901}]}).encode(),
                     'memory 1: "date" must be a string like "2026-09-01", got 20260901'),
    "impossible date": (json.dumps({"memories": [{**GOOD_ITEM, "date": "2026-02-30"}]}).encode(),
                        "memory 1: not an ISO 8601 date: '2026-02-30'"),
    "Latin-1 bytes": ('{"memories": [{"fact": "The user likes café.", "date": "2026-09-01"}]}'
                      .encode("latin-1"), "is not UTF-8 text (byte 0xe9 at offset 42); save it as UTF-8"),
    "memory not an object": (json.dumps({"memories": ["The user likes tea."]}).encode(),
                             "memory 1: expected an object, got a string"),
    # Dropped, the memory would be stored without its user (or link) and nothing said.
    "misspelled user": (json.dumps({"memories": [GOOD_ITEM, {**GOOD_ITEM, "user": "taro"}]})
                        .encode(), 'memory 2: unknown field "user" (the fields are fact, date, '
                        "key, user_id, supersedes)"),
    # Found by an exploratory user: each was dropped, every memory stored under no user.
    "file-wide user": (json.dumps({"user_id": "carol", "memories": [GOOD_ITEM]}).encode(),
                       'unknown field "user_id" (the fields are memories, user_name, '
                       "reference_date)"),
    "misspelled user name": (json.dumps({"username": "Carol", "memories": [GOOD_ITEM]}).encode(),
                             'unknown field "username" (the fields are memories, '
                             "user_name, reference_date)"),
    # Python's reader gives up on these with a RecursionError or a ValueError.
    "nested too deeply": (b'{"memories": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                          "is JSON this reader refuses: nested too deeply"),
    "a number too long": (b'{"memories": [], "user_name": 1' + b"0" * 5000 + b"}",
                          "is JSON this reader refuses: a number too long to read"),
}


@pytest.mark.parametrize("content, message", BAD_MEMORY_FILES.values(), ids=BAD_MEMORY_FILES)
def test_a_bad_memory_file_is_one_line_and_stores_nothing(content: bytes, message: str,
                                                          tmp_path: Path, capsys) -> None:
    path, store = tmp_path / "memories.json", tmp_path / "store"
    path.write_bytes(content)
    assert main(["add", "--file", str(path), "--store", str(store)]) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"error: memory file {path}") and line.endswith(message)
    assert not store.exists()  # refused before the store was even opened


def test_a_utf8_bom_is_accepted(tmp_path: Path, capsys) -> None:
    path, store = tmp_path / "memories.json", str(tmp_path / "store")
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"memories": [GOOD_ITEM]}).encode())
    embed = embedding_for((GOOD_ITEM["fact"], GOOD_ITEM["date"]))
    assert main(["add", "--file", str(path), "--store", store], embed_model=embed) == 0
    assert capsys.readouterr().out == f"stored 1 new memory (1 in total) in {store}\n"


@pytest.mark.parametrize("argv, message", [
    (["add", ""], "error: llama-index-recency add: argument fact: the fact is empty (see --help)"),
    (["add", " \t"], "error: llama-index-recency add: argument fact: the fact is empty (see --help)"),
    (["ask", ""], "error: llama-index-recency ask: argument question: the question is empty "
                  "(see --help)"),
    (["ask", "  "], "error: llama-index-recency ask: argument question: the question is empty "
                    "(see --help)"),
    (["add", "caf\udce9"], "error: argument 2 is not UTF-8 text: b'caf\\xe9'"),
    (["add", "The user likes tea.", "--date", "2026-02-30"],
     "error: llama-index-recency add: argument --date: expected a date YYYY-MM-DD, got "
     "'2026-02-30' (day is out of range for month) (see --help)"),
])
def test_bad_arguments_are_one_line(argv: list[str], message: str, tmp_path: Path,
                                    capsys) -> None:
    store = tmp_path / "store"
    assert main([*argv, "--store", str(store)]) == 2
    assert error_line(capsys.readouterr().err) == message
    assert not store.exists()


@pytest.mark.slow
def test_non_utf8_bytes_in_the_real_argv(tmp_path: Path) -> None:
    """The installed command as a user runs it, with a Latin-1 byte on the command line."""
    result = subprocess.run(
        [sys.executable, "-m", "llama_index_recency", "add", b"caf\xe9", "--store",
         str(tmp_path / "store")],
        capture_output=True, env={**os.environ, "COLUMNS": "220"}, timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr == b"error: argument 2 is not UTF-8 text: b'caf\\xe9'\n"
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("content, message", [
    (b"Hi there\nuser: I like tea.\n",
     "transcript line 1: expected 'user: \u2026' or 'assistant: \u2026', got 'Hi there'"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is not UTF-8 text (byte 0x89 at offset 0); save it as UTF-8"),
    (b"user: hi\x00\x00\x00", "is a binary file, not text"),
    (b"# notes for later\n\n", "holds no turn: write one per line as 'user: \u2026' or "
     "'assistant: \u2026'"),
    (b"", "holds no turn: write one per line as 'user: \u2026' or 'assistant: \u2026'"),
])
def test_a_bad_transcript_is_one_line(content: bytes, message: str, tmp_path: Path,
                                      capsys) -> None:
    transcript = tmp_path / "talk.txt"
    transcript.write_bytes(content)
    assert main(["remember", str(transcript), "--store", str(tmp_path / "store")]) == 2
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"error: transcript {transcript}") and line.endswith(message)


def test_a_missing_transcript_is_one_line(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "talk.txt"
    assert main(["remember", str(missing), "--store", str(tmp_path / "store")]) == 2
    assert error_line(capsys.readouterr().err) == f"error: transcript {missing} does not exist"


@pytest.mark.slow
def test_an_unavailable_embedding_model_is_one_line(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache: no Qwen3 here
    assert main(["demo", "--model", "qwen3"]) == 1
    assert error_line(capsys.readouterr().err).startswith(
        "error: cannot load the qwen3 embedding model (Qwen/Qwen3-Embedding-0.6B): ")


class QueryFailingEmbedding(KnownCosineEmbedding):
    def _get_query_embedding(self, query: str) -> list[float]:
        raise RuntimeError("the [bold]GPU[/] fell off")


def test_an_unexpected_error_is_one_line_with_the_debug_hint(monkeypatch, capsys) -> None:
    embed = QueryFailingEmbedding({})
    assert main(["demo"], embed_model=embed) == 1
    assert error_line(capsys.readouterr().err) == ("error: unexpected RuntimeError: the [bold]GPU[/] fell off "
                                  "(rerun with RECENCY_DEBUG=1 for the traceback)")
    monkeypatch.setenv("RECENCY_DEBUG", "1")
    with pytest.raises(RuntimeError, match="fell off"):
        main(["demo"], embed_model=embed)


# --- item 7 and 13: LLM failures in ask -------------------------------------------------


class RawLLMServer:
    """A loopback endpoint answering every chat request with one fixed 200 body."""

    def __init__(self, body: bytes) -> None:
        def handle(handler: BaseHTTPRequestHandler) -> None:
            handler.rfile.read(int(handler.headers["Content-Length"]))
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        handler = type("Handler", (BaseHTTPRequestHandler,),
                       {"do_POST": handle, "log_message": lambda *args: None})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


EMPTY_CHOICES = json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                            "choices": []}).encode()


@pytest.mark.slow
@pytest.mark.parametrize("body", [b"{not json", EMPTY_CHOICES], ids=["bad JSON", "no choices"])
def test_an_unreadable_llm_answer_is_one_line_after_the_ranking(
        body: bytes, store_with_a_memory, monkeypatch, capsys) -> None:
    store, embed = store_with_a_memory
    server = RawLLMServer(body)
    try:
        monkeypatch.setenv("RECENCY_LLM_BASE_URL", server.base_url)
        assert main(["ask", QUESTION, "--store", store], embed_model=embed) == 1
    finally:
        server.close()
    out, err = capsys.readouterr()
    assert "2026-09-01: The user drinks coffee black." in out and "kept" in out
    assert error_line(err).startswith(
        f"error: the LLM at {server.base_url} failed: unreadable answer (")


@pytest.mark.parametrize("fault, reason", [
    (500, "HTTP 500 scripted 500 (after 3 attempts)"),
    (429, "HTTP 429 scripted 429 (after 3 attempts)"),
    ("hang", "no answer within 0.2 s (after 3 attempts)"),
])
@pytest.mark.slow
def test_a_failing_llm_is_one_line_after_the_ranking(fault, reason, store_with_a_memory,
                                                     openai_server, monkeypatch, capsys) -> None:
    store, embed = store_with_a_memory
    openai_server.always = fault
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    argv = ["ask", QUESTION, "--store", store, "--llm-timeout", "0.2"]
    assert main(argv, embed_model=embed) == 1
    out, err = capsys.readouterr()
    assert "2026-09-01: The user drinks coffee black." in out and "kept" in out
    assert error_line(err) == f"error: the LLM at {openai_server.base_url} failed: {reason}"
    assert len(openai_server.requests) == 3


# --- item 8: partial writes are reported and a rerun completes them ----------------------

BULK = [(f"The user noted thing number {i}.", "2026-09-01") for i in range(100)]


def bulk_file(tmp_path: Path) -> Path:
    path = tmp_path / "memories.json"
    path.write_text(json.dumps({"memories": [{"fact": f, "date": d} for f, d in BULK]}), "utf-8")
    return path


class WrongDimensionEmbedding(KnownCosineEmbedding):
    """Gives one memory a vector one dimension short, which the store refuses to write."""

    def _get_text_embedding(self, text: str) -> list[float]:
        vector = super()._get_text_embedding(text)
        return vector[:-1] if text.endswith("number 64.") else vector


class BatchFailingEmbedding(KnownCosineEmbedding):
    """Fails on its third batch, as an embedding API that goes down part way would."""

    calls: int = 0

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("embedding service went away")
        return super()._get_text_embeddings(texts)


@pytest.mark.slow
def test_a_write_failing_part_way_says_what_was_stored_and_a_rerun_completes(tmp_path: Path,
                                                                             capsys) -> None:
    """The store refuses the batch holding memory 64 (batches of 64): the first 64 are stored."""
    path, store = bulk_file(tmp_path), str(tmp_path / "store")
    cosines = spread_cosines(memory_node(f, d).get_content() for f, d in BULK)
    argv = ["add", "--file", str(path), "--store", store]
    assert main(argv, embed_model=WrongDimensionEmbedding(cosines)) == 1
    line = error_line(capsys.readouterr().err)
    assert line.startswith("error: stored 64 of 100 memories; 36 not stored: ")
    assert line.endswith("; rerun the same command to store the rest")
    assert main(argv, embed_model=KnownCosineEmbedding(cosines)) == 0
    out = capsys.readouterr().out
    assert out == f"stored 36 new memories, 64 already stored (100 in total) in {store}\n"


@pytest.mark.slow
def test_an_embedding_failure_stores_nothing_and_a_rerun_stores_all(tmp_path: Path,
                                                                    capsys) -> None:
    path, store = bulk_file(tmp_path), str(tmp_path / "store")
    cosines = spread_cosines(memory_node(f, d).get_content() for f, d in BULK)
    argv = ["add", "--file", str(path), "--store", store]
    assert main(argv, embed_model=BatchFailingEmbedding(cosines)) == 1
    assert error_line(capsys.readouterr().err) == (
        "error: stored 0 of 100 memories; 100 not stored: embedding failed: RuntimeError: "
        "embedding service went away; rerun the same command to store the rest")
    assert main(argv, embed_model=KnownCosineEmbedding(cosines)) == 0
    assert capsys.readouterr().out == f"stored 100 new memories (100 in total) in {store}\n"


@pytest.mark.slow
def test_embedding_and_storing_are_separate_timed_stages(e5, tmp_path: Path, capsys) -> None:
    assert main(["demo", "--question-ids", "C1"], embed_model=e5) == 0
    out = capsys.readouterr().out
    assert out.index("embedding 16 memories") < out.index("storing 16 memories")


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "--threshold", "0.3"], "--threshold belongs to the four-candidate pass: add --seed"),
    (["calibrate", "--save"], "--save records the policy with a store: give --store or --url"),
    (["calibrate", "--lang", "ja", "--store", "s", "--questions", "q.json"],
     "--lang picks the bundled memories; a store is calibrated on its own --questions"),
    (["ask", "coffee?", "--user", " "], "argument --user: the user is empty"),
    (["demo", "--lang", "fr"], "argument --lang: invalid choice: 'fr'"),
])
def test_bad_calibration_and_scope_options_are_one_line(argv, message, capsys) -> None:
    assert main(argv) == 2
    assert message in error_line(capsys.readouterr().err)


@pytest.mark.parametrize("argv, message", [
    (["add", "The user likes tea.", "--user", "al\nice"],
     "argument --user: the user 'al\\nice' contains the control character '\\n'; a user id is "
     "one line of printable text"),
    (["list", "--user", "bob\x1b[31m"],
     "argument --user: the user 'bob\\x1b[31m' contains the control character '\\x1b'"),
    (["add", "The user likes\x1b[31m tea.", "--date", "2026-09-01"],
     "error: the memory: the fact contains the control character '\\x1b'; a fact is one line of "
     "printable text"),
    (["add", "The user likes\u2028tea."], "the fact contains the control character '\\u2028'"),
])
def test_control_characters_in_a_user_or_a_fact_are_refused(argv, message, tmp_path: Path,
                                                            capsys) -> None:
    store = tmp_path / "store"
    assert main([*argv, "--store", str(store)]) == 2
    assert message in error_line(capsys.readouterr().err)
    assert not store.exists()


def test_a_fact_with_a_control_character_in_a_memory_file_is_refused(tmp_path: Path,
                                                                     capsys) -> None:
    path, store = tmp_path / "memories.json", tmp_path / "store"
    bell = {**GOOD_ITEM, "fact": "The user\x07 likes tea."}
    path.write_text(json.dumps({"memories": [GOOD_ITEM, bell]}), "utf-8")
    assert main(["add", "--file", str(path), "--store", str(store)]) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: memory file {path}, memory 2: the fact contains the control character '\\x07'; "
        "a fact is one line of printable text")
    assert not store.exists()


@pytest.mark.slow
def test_a_user_id_is_taken_as_typed_and_list_shows_whose_memories(tmp_path: Path,
                                                                    capsys) -> None:
    tea = ("The user likes green tea.", "2026-09-09")
    store, embed = str(tmp_path / "store"), embedding_for(MEMORY, tea)
    assert main(["add", MEMORY[0], "--date", MEMORY[1], "--store", store], embed_model=embed) == 0
    assert main(["list", "--store", store]) == 0
    out = capsys.readouterr().out
    assert f"1 memory in {store}" in out and "User" not in out  # no memory has a user
    for fact, day, user in ((*MEMORY, "alice"), (*tea, " bob")):
        assert main(["add", fact, "--date", day, "--store", store, "--user", user],
                    embed_model=embed) == 0
    assert main(["list", "--store", store, "--user", "alice"]) == 0
    assert f"1 memory of user alice in {store}" in capsys.readouterr().out
    # The library's " alice" is another user than "alice": the CLI never reaches her memories
    # through it (it trimmed the id and listed, handed the LLM and forgot Alice's).
    assert main(["forget", "--store", store, "--user", " alice", "--yes"]) == 0
    assert main(["list", "--store", store, "--user", " bob"]) == 0
    assert f"1 memory of user ' bob' in {store}" in capsys.readouterr().out
    assert main(["list", "--store", store]) == 0
    out = capsys.readouterr().out
    rows = [[cell.strip() for cell in line.split("│")[1:3]] for line in out.splitlines()
            if "2026-09-0" in line]
    assert f"3 memories in {store}" in out
    assert sorted(rows) == [["2026-09-01", ""], ["2026-09-01", "alice"], ["2026-09-09", "' bob'"]]


BAD_QUESTION_FILES = {
    "no questions": ({"questions": []}, ': the "questions" list is empty'),
    "not a list": ({"questions": {"H1": "Tea?"}},
                   ': expected a JSON object with a "questions" list, got an object'),
    "numeric text": ({"questions": [{"id": "N1", "text": 5, "targets": []}]},
                     ', question N1: "text" must be a non-empty string like "What do I drink?", '
                     "got 5"),
    "no id": ({"questions": [{"id": "N1", "text": "Hi?", "targets": []}, {"text": "Hi?"}]},
              ', question 2: "id" must be a non-empty string like "H1", got nothing'),
    "targets a string": ({"questions": [{"id": "H1", "text": "Tea?", "targets": "tea"}]},
                         ', question H1: "targets" must be a list of memory keys or ids ([] for a '
                         'hit-free question), got "tea"'),
    # A misspelled kind or field would drop the question from its criterion, saying nothing.
    "misspelled kind": ({"questions": [{"id": "C1", "kind": "contradictoin", "text": "Tea?",
                                        "targets": ["tea"]}]},
                        ', question C1: "kind" must be one of hit, contradiction, hit_free, '
                        'got "contradictoin"'),
    "unknown field": ({"questions": [{"id": "H1", "text": "Tea?", "targets": [], "kinds": "hit"}]},
                      ', question H1: unknown field "kinds" (the fields are id, kind, text, '
                      "targets)"),
}


@pytest.mark.parametrize("questions, message", BAD_QUESTION_FILES.values(),
                         ids=BAD_QUESTION_FILES)
def test_a_bad_questions_file_is_one_line_naming_the_question(questions, message,
                                                              tmp_path: Path, capsys) -> None:
    path = tmp_path / "q.json"
    path.write_text(json.dumps(questions), "utf-8")
    assert main(["calibrate", "--questions", str(path)]) == 2  # before any model loads
    assert error_line(capsys.readouterr().err) == f"error: questions file {path}{message}"


def test_a_target_naming_no_memory_is_named(store_with_a_memory, tmp_path: Path,
                                            capsys) -> None:
    store, embed = store_with_a_memory
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"questions": [
        {"id": "H1", "text": QUESTION, "targets": ["coffee_black"]},
        {"id": "N1", "text": "Any plans?", "targets": []}]}), "utf-8")
    assert main(["calibrate", "--store", store, "--questions", str(path)], embed_model=embed) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: questions file {path}, question H1: target 'coffee_black' names no memory in "
        f"{store}")


def test_a_non_finite_ranking_option_is_one_line(store_with_a_memory, capsys) -> None:
    store, embed = store_with_a_memory
    assert main(["ask", QUESTION, "--store", store, "--weight", "nan"], embed_model=embed) == 2
    assert error_line(capsys.readouterr().err).startswith("error: bad ranking option: --weight nan")


# --- item 14: which store, created only by writing commands, duplicates and keys ---------


def test_a_readding_says_how_many_were_new_and_which_key_was_replaced(tmp_path: Path,
                                                                      capsys) -> None:
    store, tea = str(tmp_path / "store"), ("The user likes green tea.", "2026-09-09")
    embed = embedding_for(tea, MEMORY)
    add = ["add", tea[0], "--date", tea[1], "--store", store]
    assert main([*add, "--key", "tea"], embed_model=embed) == 0
    assert main([*add, "--key", "green_tea"], embed_model=embed) == 0
    assert main([*add, "--key", "green_tea"], embed_model=embed) == 0
    assert main(add, embed_model=embed) == 0  # no --key: the stored key stays
    assert main(["add", MEMORY[0], "--date", MEMORY[1], "--store", store], embed_model=embed) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"stored 1 new memory (1 in total) in {store}",
        "replaced the key of '2026-09-09: The user likes green tea.': tea → green_tea",
        f"stored 0 new memories, 1 already stored (1 in total) in {store}",
        f"stored 0 new memories, 1 already stored (1 in total) in {store}",
        f"stored 0 new memories, 1 already stored (1 in total) in {store}",
        f"stored 1 new memory (2 in total) in {store}",
    ]


@pytest.mark.parametrize("argv", [
    ["list"],
    ["ask", QUESTION, "--model", "qwen3"],  # refused before the (unavailable) model loads
    ["calibrate", "--questions", "q.json", "--model", "qwen3"],
])
def test_reading_commands_refuse_a_path_without_a_store(argv: list[str], tmp_path: Path,
                                                        monkeypatch, capsys) -> None:
    missing = tmp_path / "mistyped"
    (tmp_path / "q.json").write_text(json.dumps({"questions": [
        {"id": "N1", "text": "Hello?", "targets": []}]}), "utf-8")
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--store", str(missing)]) == 1
    assert error_line(capsys.readouterr().err).startswith(f"error: no memory store at {missing}")
    assert not missing.exists()


@pytest.mark.parametrize("argv", [["list"], ["ask", QUESTION, "--model", "qwen3"],
                                  ["add", "The user likes tea.", "--model", "qwen3"]])
def test_a_store_path_that_is_a_file_is_one_line(argv: list[str], tmp_path: Path,
                                                 capsys) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a store", "utf-8")
    assert main([*argv, "--store", str(a_file)]) == 1
    assert error_line(capsys.readouterr().err) == (
        f"error: the memory store path {a_file} is a file, not a directory")


def test_a_collection_is_a_store_of_its_own(tmp_path: Path, capsys) -> None:
    store, embed = str(tmp_path / "store"), embedding_for(MEMORY)
    assert main(["add", MEMORY[0], "--date", MEMORY[1], "--store", store, "--collection", "work"],
                embed_model=embed) == 0
    assert capsys.readouterr().out == f"stored 1 new memory (1 in total) in {store} (work)\n"
    assert main(["ask", QUESTION, "--store", store, "--collection", "work"],
                embed_model=embed) == 0
    assert "2026-09-01: The user drinks coffee black." in capsys.readouterr().out
    assert main(["ask", QUESTION, "--store", store], embed_model=embed) == 1
    assert error_line(capsys.readouterr().err).startswith(
        f"error: no memory store at {store} (collection 'memories')")


def test_store_and_url_together_are_refused(tmp_path: Path, capsys) -> None:
    argv = ["list", "--store", str(tmp_path), "--url", "http://127.0.0.1:6333"]
    assert main(argv) == 2
    assert error_line(capsys.readouterr().err) == "error: give --store or --url, not both"


@pytest.mark.parametrize("argv", [["list"], ["add", MEMORY[0]], ["ask", QUESTION],
                                  ["forget", "--user", "taro", "--yes"]])
def test_a_server_that_does_not_answer_is_one_line_naming_it(argv: list[str], closed_port_url,
                                                             capsys) -> None:
    url = closed_port_url.removesuffix("/v1")  # nothing listens there
    assert main([*argv, "--url", url], embed_model=embedding_for(MEMORY)) == 1
    assert error_line(capsys.readouterr().err) == (
        f"error: cannot reach the Qdrant server at {url}: connection refused")


@pytest.mark.slow
def test_a_server_that_does_not_answer_is_the_only_line_on_stderr(closed_port_url) -> None:
    """The real command: qdrant-client's version check (a thread) would warn on stderr too."""
    url = closed_port_url.removesuffix("/v1")
    result = subprocess.run([sys.executable, "-m", "llama_index_recency", "list", "--url", url],
                            capture_output=True, env={**os.environ, "COLUMNS": "220"}, timeout=120)
    assert result.returncode == 1
    assert result.stderr.decode() == (
        f"error: cannot reach the Qdrant server at {url}: connection refused\n")


@pytest.mark.slow
def test_a_read_only_store_is_one_line(capsys) -> None:
    """``list`` on a store the user may read but not write, in a forked child run as an
    unprivileged user when the tests run as root (root ignores file modes)."""
    with tempfile.TemporaryDirectory() as public:
        os.chmod(public, 0o755)  # pytest's tmp_path is private to its owner
        store, embed = os.path.join(public, "store"), embedding_for(MEMORY)
        assert main(["add", MEMORY[0], "--date", MEMORY[1], "--store", store],
                    embed_model=embed) == 0
        capsys.readouterr()
        for directory, _, files in os.walk(store):
            os.chmod(directory, 0o555)
            for name in files:
                os.chmod(os.path.join(directory, name), 0o444)
        code, _, err = run_in_child(["list", "--store", store], unprivileged=True)
        for directory, _, _ in os.walk(store):
            os.chmod(directory, 0o755)
    assert code == 1
    line = error_line(err)
    assert store in line and "Permission denied" in line


def run_in_child(argv: list[str], embed_model: object = None, *,
                 unprivileged: bool = False) -> tuple[int, str, str]:
    """``main(argv)`` in a forked child (as user nobody if ``unprivileged`` and root), so that
    a SIGBUS kills the child only: (exit code or minus the signal, stdout, stderr)."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - reported through the pipe
        os.close(read)
        sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
        if unprivileged and os.geteuid() == 0:
            os.setgid(65534)
            os.setuid(65534)
        code = main(argv, embed_model=embed_model)  # type: ignore[arg-type]
        os.write(write, json.dumps([code, sys.stdout.getvalue(), sys.stderr.getvalue()]).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        reported = pipe.read()
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status), "", ""
    code, out, err = json.loads(reported)
    return code, out, err


@pytest.mark.slow
def test_waiting_on_the_llm_shows_a_spinner_with_the_elapsed_time(store_with_a_memory,
                                                                   openai_server, monkeypatch,
                                                                   capsys) -> None:
    store, embed = store_with_a_memory
    openai_server.always = "hang"
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich draws live displays as on a terminal
    assert main(["ask", QUESTION, "--store", store, "--llm-timeout", "0.2"],
                embed_model=embed) == 1
    out = capsys.readouterr().out
    assert "waiting for the LLM (B format)" in out and "0:00:0" in out


# --- issue 16, item 3: a full disk is one line with the count, never a SIGBUS ---------------


@pytest.mark.slow
def test_a_full_disk_stops_before_edge_writes_says_what_was_stored_and_a_rerun_completes(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """Edge writes through mmap'd files, where a disk that cannot back a page is SIGBUS:
    free space is checked before each batch. Here the disk fills after the first 64."""
    from llama_index_recency.storage import QdrantEdgeVectorStore

    path, store = bulk_file(tmp_path), str(tmp_path / "store")
    cosines = spread_cosines(memory_node(f, d).get_content() for f, d in BULK)
    real_usage, free = shutil.disk_usage, [1 << 40]
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda p: real_usage(p)._replace(free=free[0]))
    real_add = QdrantEdgeVectorStore.add

    def add_then_fill(self, nodes, **kwargs):  # type: ignore[no-untyped-def]
        ids = real_add(self, nodes, **kwargs)
        free[0] = 0
        return ids

    monkeypatch.setattr(QdrantEdgeVectorStore, "add", add_then_fill)
    argv = ["add", "--file", str(path), "--store", store]
    assert main(argv, embed_model=KnownCosineEmbedding(cosines)) == 1
    line = error_line(capsys.readouterr().err)
    shard = os.path.join(store, "edge", "memories")
    assert line.startswith("error: stored 64 of 100 memories; 36 not stored: the disk holding "
                           f"the store at {shard} is full: 0.0 MB free, about ")
    assert line.endswith(" needed to write 36 more; free some space (or move the store to a "
                         "larger disk); rerun the same command to store the rest")
    assert main(["list", "--store", store]) == 1  # reading maps the files too, or a copy's
    line = error_line(capsys.readouterr().err)
    assert f"the disk holding the store at {shard} has 0.0 MB free" in line
    assert "needed to open it for writing" in line and "no read-only copy can be made" in line
    monkeypatch.setattr(QdrantEdgeVectorStore, "add", real_add)
    free[0] = 1 << 40
    assert main(argv, embed_model=KnownCosineEmbedding(cosines)) == 0
    assert capsys.readouterr().out == (
        f"stored 36 new memories, 64 already stored (100 in total) in {store}\n")


@pytest.fixture
def small_tmpfs(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """An 8 MB tmpfs (or the size given as the parameter) when this process may mount one
    (root, and a kernel that lets it); skipped otherwise."""
    disk, size = tmp_path / "disk", getattr(request, "param", "8m")
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)],
                             capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.mark.slow
@pytest.mark.parametrize("small_tmpfs", ["24m"], indirect=True)
def test_filling_a_real_tmpfs_is_one_line_with_the_count_and_list_is_no_sigbus(
        small_tmpfs: Path, tmp_path: Path) -> None:
    memories = [(f"The user noted thing number {i}.", "2026-09-01") for i in range(1000)]
    path = tmp_path / "many.json"
    path.write_text(json.dumps({"memories": [{"fact": f, "date": d} for f, d in memories]}),
                    "utf-8")
    embed = KnownCosineEmbedding(spread_cosines(memory_node(f, d).get_content()
                                                for f, d in memories))
    store = str(small_tmpfs / "store")
    code, _, err = run_in_child(["add", "--file", str(path), "--store", store], embed)
    assert code == 1, f"killed by signal {-code}" if code < 0 else err
    line = error_line(err)
    assert line.startswith("error: stored ") and " of 1000 memories; " in line
    assert f"the disk holding the store at {store}" in line and " is full: " in line
    code, _, err = run_in_child(["list", "--store", store])
    assert code in (0, 1), f"killed by signal {-code}"
    if code == 1:
        assert "is full" in error_line(err)


@pytest.mark.slow
def test_a_tmpfs_too_small_for_the_payload_indexes_is_one_line_not_sigbus(
        small_tmpfs: Path) -> None:
    """A new shard's four payload indexes take about 2 MB each on tmpfs: 8 MB cannot hold them."""
    store = str(small_tmpfs / "store")
    code, _, err = run_in_child(["add", MEMORY[0], "--date", MEMORY[1],
                              "--store", store], embedding_for(MEMORY))
    assert code == 1, f"killed by signal {-code}" if code < 0 else err
    line = error_line(err)
    assert " is full: " in line and "needed to create its payload indexes" in line


# --- issue 16, item 14: read-only, damaged and incomplete stores ---------------------------


class ReadOnlyStatvfs:
    """``os.statvfs`` as a read-only mount reports it."""

    def __init__(self, real: os.statvfs_result) -> None:
        self._real = real
        self.f_flag = real.f_flag | os.ST_RDONLY

    def __getattr__(self, name: str) -> object:
        return getattr(self._real, name)


@pytest.mark.parametrize("argv", [["list"], ["ask", QUESTION]], ids=["list", "ask"])
def test_a_store_on_a_read_only_filesystem_is_one_line_naming_it(
        argv: list[str], store_with_a_memory, monkeypatch, capsys) -> None:
    """qdrant-edge-py has no read-only load: Edge opens a shard for writing even to read;
    with every filesystem read-only, not even a temporary copy can be opened."""
    store, embed = store_with_a_memory
    capsys.readouterr()
    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnlyStatvfs(real(path)))
    assert main([*argv, "--store", store], embed_model=embed) == 1
    shard = os.path.join(store, "edge", "memories")
    assert error_line(capsys.readouterr().err) == (
        f"error: the store at {shard} is on a read-only filesystem, and no read-only copy can "
        f"be made in {tempfile.gettempdir()} (read-only too); remount it read-write or copy the "
        "store to a writable disk")


@pytest.mark.parametrize("damage, reason", [
    (lambda shard: next(shard.glob("segments/*/segment.json")).write_text("garbage"),
     "Failed to deserialize segments/"),
    (lambda shard: (shard / "edge_config.json").write_text("{"),
     "Failed to deserialize edge_config.json: EOF while parsing an object"),
], ids=["segment state", "edge config"])
def test_a_damaged_store_is_one_line_naming_it_and_what_is_wrong(
        damage, reason: str, store_with_a_memory, capsys) -> None:
    store, _ = store_with_a_memory
    shard = Path(store) / "edge" / "memories"
    damage(shard)
    capsys.readouterr()
    assert main(["list", "--store", store]) == 1
    line = error_line(capsys.readouterr().err)
    assert line.startswith(f"error: the store at {shard} is damaged: ")
    assert reason in line and "Service runtime error" not in line
    assert line.endswith("; restore it from an export or backup")


def test_a_store_missing_its_segments_warns_in_one_line(tmp_path: Path, capsys,
                                                        caplog) -> None:
    """Edge loads what the WAL still holds without a word; the count at the last close tells."""
    store = str(tmp_path / "store")
    tea = ("The user likes tea.", "2026-09-01")
    embed = embedding_for(MEMORY, tea)
    for fact, day in (MEMORY, tea):
        assert main(["add", fact, "--date", day, "--store", store], embed_model=embed) == 0
    shutil.rmtree(Path(store) / "edge" / "memories" / "segments")
    capsys.readouterr()
    assert main(["list", "--store", store]) == 0
    assert "1 memory in" in capsys.readouterr().out
    assert caplog.messages == [  # once, though list opens the store twice
        f"the store at {store}/edge/memories holds 1 of the 2 memories it held when last "
        "closed: segment files are missing; restore it from an export or backup"]


# --- issue 18, item 9: memories dated after tomorrow ----------------------------------------

FUTURE_TEA = ("The user likes tea.", "2099-01-01")


def future_refusal(where: str | None) -> str:
    return (f"error: {f'{where}: ' if where else ''}the memory's date 2099-01-01 is after tomorrow (today is "
            f"{date.today().isoformat()}); pass --allow-future if that is meant")


def test_a_memory_dated_after_tomorrow_is_refused_unless_allow_future(tmp_path: Path,
                                                                      capsys) -> None:
    store = tmp_path / "store"
    add = ["add", FUTURE_TEA[0], "--date", FUTURE_TEA[1], "--store", str(store)]
    assert main(add, embed_model=embedding_for(FUTURE_TEA)) == 2
    assert error_line(capsys.readouterr().err) == future_refusal("the memory")
    assert not store.exists()
    assert main([*add, "--allow-future"], embed_model=embedding_for(FUTURE_TEA)) == 0
    assert "stored 1 new memory (1 in total)" in capsys.readouterr().out


def test_tomorrow_is_accepted_by_add(tmp_path: Path, capsys) -> None:
    tomorrow = (FUTURE_TEA[0], (date.today() + timedelta(days=1)).isoformat())
    argv = ["add", tomorrow[0], "--date", tomorrow[1], "--store", str(tmp_path / "store")]
    assert main(argv, embed_model=embedding_for(tomorrow)) == 0
    assert capsys.readouterr().err == ""


def test_a_memory_file_with_a_date_after_tomorrow_stores_nothing_unless_allow_future(
    tmp_path: Path, capsys
) -> None:
    path, store = tmp_path / "memories.json", tmp_path / "store"
    future = {"fact": FUTURE_TEA[0], "date": FUTURE_TEA[1]}
    path.write_text(json.dumps({"memories": [GOOD_ITEM, future]}), "utf-8")
    embed = embedding_for((GOOD_ITEM["fact"], GOOD_ITEM["date"]), FUTURE_TEA)
    add = ["add", "--file", str(path), "--store", str(store)]
    assert main(add, embed_model=embed) == 2
    assert error_line(capsys.readouterr().err) == future_refusal(f"memory file {path}, memory 2")
    assert not store.exists()
    assert main([*add, "--allow-future"], embed_model=embed) == 0
    assert "stored 2 new memories (2 in total)" in capsys.readouterr().out


def test_remember_refuses_a_date_after_tomorrow_before_the_llm(tmp_path: Path, capsys) -> None:
    transcript = tmp_path / "talk.txt"
    transcript.write_text("user: I like tea.\n", "utf-8")
    store = tmp_path / "store"
    assert main(["remember", str(transcript), "--date", "2099-01-01", "--store", str(store)]) == 2
    assert error_line(capsys.readouterr().err) == future_refusal(None)
    assert not store.exists()


@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_store_path_is_refused_not_the_working_directory(
        empty: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """``--store "$STORE"`` with the variable unset, or ``path=""``: the store would land in the
    working directory; it is refused, naming the value, and nothing is written."""
    from llama_index_recency import RecencyMemory
    from llama_index_recency.errors import InvalidInputError
    from llama_index_recency.storage.migration import migrate_store

    monkeypatch.chdir(tmp_path)
    (tmp_path / "old").mkdir()
    for argv, argument in [(["add", "The user likes tea.", "--date", "2026-09-01", "--store",
                             empty], "--store"), (["list", "--store", empty], "--store"),
                           (["migrate", str(tmp_path / "old"), empty], "target")]:
        assert main(argv) == 2
        line = error_line(capsys.readouterr().err)
        assert line.startswith(f"error: llama-index-recency {argv[0]}: argument {argument}: the "
                               "store path '") and line.endswith(
            "' is empty: name the store's directory (see --help)")
    with pytest.raises(InvalidInputError, match=f"the store path {empty!r} is empty"):
        RecencyMemory(KnownCosineEmbedding({}), path=empty)
    with pytest.raises(InvalidInputError, match=f"the store path {empty!r} is empty"):
        open_memory_index(KnownCosineEmbedding({}), path=empty)
    with pytest.raises(InvalidInputError, match=f"the store path {empty!r} is empty"):
        migrate_store(tmp_path / "old", empty)
    assert list(tmp_path.iterdir()) == [tmp_path / "old"]
