"""The ``llama-index-recency`` command, in process: real Qdrant (memory and on disk), real HTTP."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from conftest import KnownCosineEmbedding

from llama_index_recency import memory_node
from llama_index_recency.cli import main
from llama_index_recency.store import close_memory_index, open_memory_index

BLACK = ("Taro drinks coffee black, without sugar or milk.", "2026-08-20", 0.471)
CAFE = ("Taro has been drinking sweet café au lait lately.", "2026-09-01", 0.441)


@pytest.fixture(autouse=True)
def wide_terminal_without_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")  # rich wraps nothing, so lines can be matched
    monkeypatch.delenv("RECENCY_LLM_BASE_URL", raising=False)


@pytest.fixture
def coffee_cosines() -> KnownCosineEmbedding:
    """The seed's C1 raw cosines for the two coffee memories, for any question."""
    return KnownCosineEmbedding(
        {memory_node(fact, day).get_content(): raw for fact, day, raw in (BLACK, CAFE)}
    )


def test_demo_prints_every_question_table_and_timings(minilm, capsys) -> None:
    assert main(["demo"], embed_model=minilm) == 0
    out = capsys.readouterr().out
    assert "threshold=0.25" in out and "LLM: off" in out
    for title in ("H1 (hit): What's my favorite food?",
                  "C1 (contradiction): How do I take my coffee again?",
                  "N4 (hit_free): What would you do if you won the lottery?"):
        assert title in out
    assert "→ into the prompt: coffee_black, cafe_au_lait" in out
    assert out.count("→ no memory enters the prompt") == 5  # N1-N4 and H2
    for stage in ("question embedding", "Qdrant search (top 8)", "re-rank (bonus, sort, cutoff)",
                  "embedding 16 memories", "storing 16 memories"):
        assert stage in out
    assert "chat, B format" not in out


def test_demo_sends_b_format_and_compares_with_off(minilm, openai_server, monkeypatch, capsys):
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    openai_server.reply = "Lately you take it as a sweet café au lait!"
    assert main(["demo", "--question-ids", "C1", "--compare"], embed_model=minilm) == 0
    out = capsys.readouterr().out
    assert len(openai_server.requests) == 2
    b_format, off = openai_server.requests
    b_system = next(m["content"] for m in b_format["messages"] if m["role"] == "system")
    assert b_system.startswith("Today is 2026-09-10.")
    block = b_system[b_system.index("<retrieved_memory>"):]
    assert "2026-09-01: Taro has been drinking sweet café au lait lately." in block
    assert "2026-08-20: Taro drinks coffee black" in block
    assert b_format["messages"][-1] == {"role": "user", "content": "How do I take my coffee again?"}
    assert off["messages"][0]["content"] == "Today is 2026-09-10."
    assert "OFF (no memory)" in out and "B format" in out
    assert out.count("Lately you take it as a sweet café au lait!") == 2
    assert "chat, B format" in out and "chat, OFF (no memory)" in out


def test_calibrate_bundled_reports_that_nothing_passes(minilm, capsys) -> None:
    assert main(["calibrate"], embed_model=minilm) == 1
    out = capsys.readouterr().out
    assert "(e) H2 benchmark_article" in out
    assert out.count("fails (c), (d), (e)") == 4
    assert "No candidate passes every condition; none adopted." in out


def test_calibrate_fits_the_threshold_and_adopts(minilm, capsys) -> None:
    ids = "H1,H3,H4,C1,C2,N1,N2,N3,N4"
    assert main(["calibrate", "--fit-threshold", "--question-ids", ids], embed_model=minilm) == 0
    out = capsys.readouterr().out
    assert "0.274 (C1 cafe_au_lait)" in out and "0.230 (N2 fall_anime)" in out
    assert "Candidates at threshold 0.25" in out
    assert "Adopted weight=0.03, tau_days=30: the smallest passing weight; hit-free headroom " \
           "under 0.25 is 0.029." in out


def test_add_list_ask_on_a_local_store(coffee_cosines, tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    for fact, day, _ in (BLACK, CAFE, BLACK):  # the repeat keeps one copy
        assert main(["add", fact, "--date", day, "--store", store], embed_model=coffee_cosines) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"stored 1 new memory (1 in total) in {store}",
        f"stored 1 new memory (2 in total) in {store}",
        f"stored 0 new memories, 1 already stored (2 in total) in {store}",
    ]

    assert main(["list", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "2 memories in" in out
    assert out.index("2026-08-20: Taro drinks") < out.index("2026-09-01: Taro has been")

    assert main(["ask", "How do I take my coffee again?", "--store", store, "--threshold", "0.45",
                 "--today", "2026-09-10"], embed_model=coffee_cosines) == 0
    out = capsys.readouterr().out
    assert "0.471 │ +0.011 │ 0.482 │ kept" in out
    assert "0.441 │ +0.026 │ 0.467 │ kept" in out
    assert "Qdrant search (top 8)" in out


def test_add_file_then_calibrate_the_store(minilm, tmp_path: Path, capsys) -> None:
    """The bundled data stored with ``add --file`` calibrates like ``calibrate`` without --store."""
    data = resources.files("llama_index_recency.data")
    memories, questions = tmp_path / "memories.json", tmp_path / "questions.json"
    memories.write_text(data.joinpath("memories.json").read_text("utf-8"), "utf-8")
    questions.write_text(data.joinpath("questions.json").read_text("utf-8"), "utf-8")
    store = str(tmp_path / "store")
    assert main(["add", "--file", str(memories), "--store", store], embed_model=minilm) == 0
    assert f"stored 16 new memories (16 in total) in {store}" in capsys.readouterr().out
    argv = ["calibrate", "--store", store, "--questions", str(questions), "--today", "2026-09-10"]
    assert main([*argv, "--question-ids", "H1,H3,H4,C1,C2,N1,N2,N3,N4"], embed_model=minilm) == 0
    assert "Adopted weight=0.03, tau_days=30" in capsys.readouterr().out
    assert main([*argv, "--question-ids", "C1,H2"], embed_model=minilm) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "needs at least one hit-free question" in err


def test_ask_sends_the_kept_memories_to_the_llm(coffee_cosines, openai_server, monkeypatch,
                                                tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    for fact, day, _ in (BLACK, CAFE):
        main(["add", fact, "--date", day, "--store", store], embed_model=coffee_cosines)
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    argv = ["ask", "How do I take my coffee again?", "--store", store, "--today", "2026-09-10",
            "--threshold", "0.47"]
    assert main(argv, embed_model=coffee_cosines) == 0
    out = capsys.readouterr().out
    block = openai_server.system_text()
    assert "<retrieved_memory>\n2026-08-20: Taro drinks coffee black" in block
    assert "café au lait" not in block  # 0.467 < 0.47
    assert "Reply (B format)" in out and openai_server.reply in out


def test_ask_on_an_empty_store_says_so(coffee_cosines, tmp_path: Path, capsys) -> None:
    store = str(tmp_path / "store")
    close_memory_index(open_memory_index(coffee_cosines, path=store))  # a store, no memory
    assert main(["ask", "coffee?", "--store", store], embed_model=coffee_cosines) == 1
    assert capsys.readouterr().err == f"error: no memories stored in {store}; add some first\n"
    assert main(["list", "--store", store]) == 0
    assert capsys.readouterr().out == f"no memories stored in {store}\n"


def test_remember_stores_the_extracted_facts(openai_server, monkeypatch, tmp_path: Path,
                                             capsys) -> None:
    transcript = tmp_path / "talk.txt"
    transcript.write_text("user: I drink sweet café au lait these days.\nassistant: Nice!\n",
                          "utf-8")
    openai_server.reply = json.dumps({"memories": [
        {"turn": 1, "kind": "habit_change",
         "fact": "The user has been drinking sweet café au lait lately."}]})
    embed = KnownCosineEmbedding({f"{CAFE[1]}: {CAFE[0]}": CAFE[2]})
    store = str(tmp_path / "store")
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    argv = ["remember", str(transcript), "--store", store, "--date", CAFE[1], "--user-name", "Taro"]
    assert main(argv, embed_model=embed) == 0
    assert main(argv, embed_model=embed) == 0  # the same conversation again stores no copy
    assert capsys.readouterr().out.splitlines() == [
        f"{CAFE[1]}: {CAFE[0]}", f"stored 1 new memory (1 in total) in {store}",
        f"{CAFE[1]}: {CAFE[0]}", f"stored 0 new memories, 1 already stored (1 in total) in {store}",
    ]
    assert main(["list", "--store", store]) == 0
    assert "1 memories in" in capsys.readouterr().out


def test_remember_without_an_llm_endpoint_is_refused(tmp_path: Path, capsys) -> None:
    transcript = tmp_path / "talk.txt"
    transcript.write_text("user: I like tea.\n", "utf-8")
    assert main(["remember", str(transcript), "--store", str(tmp_path / "store")]) == 2
    assert capsys.readouterr().err == "error: remember needs an LLM: set RECENCY_LLM_BASE_URL\n"
    assert not (tmp_path / "store").exists()


def test_a_store_open_elsewhere_is_refused_before_the_model_loads(coffee_cosines, tmp_path: Path,
                                                                 capsys) -> None:
    """``--model qwen3`` is not available here: had it been loaded first, that would be the error."""
    store = str(tmp_path / "store")
    holder = open_memory_index(coffee_cosines, path=store)
    try:
        assert main(["list", "--store", store]) == 1
        assert main(["ask", "coffee?", "--store", store, "--model", "qwen3"]) == 1
        assert main(["add", "The user likes tea.", "--store", store, "--model", "qwen3"]) == 1
    finally:
        close_memory_index(holder)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3
    for line in lines:
        assert line.startswith("error: ") and store in line and "qwen3" not in line
