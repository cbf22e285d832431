"""Every snippet in README.md runs as written: Python blocks in order, CLI lines through main().

The JSON block is the memory file the CLI lines name (taro.json), and the JSON Lines block
is what its ``list --json`` line prints.

They run offline in a temporary directory, with the default store under it and the LLM
endpoint (RECENCY_LLM_BASE_URL) pointed at the vLLM-like loopback server. The two setup
commands (make demo, make test) are what CI itself runs, so they are not repeated here.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import resources
from pathlib import Path

import pytest

from llama_index.core.instrumentation import get_dispatcher

from llama_index_recency.cli import main

from conftest import OpenAIServer, ToolCall
from test_cli_maintenance import local_mode_store

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCK = re.compile(r"```(python|bash|json|jsonl)\n(.*?)```", re.DOTALL)
ANSWER = "Lately you take it as a sweet café au lait!"
EXTRACTION = ToolCall("record_memories", {"memories": [
    {"turn": 1, "kind": "habit_change", "fact": "The user has switched to green tea.",
     "updates": []}]})


def blocks(language: str) -> list[str]:
    return [code for lang, code in BLOCK.findall(README.read_text("utf-8")) if lang == language]


def cli_lines() -> list[str]:
    lines = []
    for code in blocks("bash"):
        for line in code.splitlines():
            line = line.split("  #", 1)[0].strip()
            if line.startswith(("llama-index-recency ", "python -m llama_index_recency ")):
                lines.append(line)
    return lines


@pytest.fixture
def readme_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openai_server: OpenAIServer):
    """A working directory with the files the snippets name, and the LLM on loopback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the CLI's default store
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("COLUMNS", "200")
    (tmp_path / "talk.txt").write_text("user: I've switched to green tea.\nassistant: Nice!\n")
    bundled = resources.files("llama_index_recency.data").joinpath("memories.json")
    (tmp_path / "memories.json").write_text(bundled.read_text("utf-8"), "utf-8")
    local_mode_store(tmp_path / "old-store", n=20)  # a store as 0.1.0 wrote it
    (memory_file,) = blocks("json")
    (tmp_path / "taro.json").write_text(memory_file, "utf-8")
    return openai_server


def test_the_readme_has_snippets() -> None:
    assert len(blocks("python")) >= 6 and len(cli_lines()) >= 8
    assert len(blocks("json")) == len(blocks("jsonl")) == 1
    assert any(line.startswith("llama-index-recency list --json") for line in cli_lines())


def test_the_quick_start_and_the_agent_example_use_recency_memory() -> None:
    quick_start = blocks("python")[0]
    agent = next(code for code in blocks("python") if "FunctionAgent" in code)
    assert "memory = RecencyMemory(" in quick_start and "memory.add(" in quick_start
    assert "memory.as_memory_block(" in agent


def test_python_snippets_run_in_order(readme_env: OpenAIServer) -> None:
    namespace: dict[str, object] = {"__name__": "__readme__"}
    root = get_dispatcher()
    handlers = list(root.event_handlers)  # the Tracing snippet adds one: not for other tests
    for number, code in enumerate(blocks("python"), start=1):
        # An agent's turn gets a text answer; a writer's request gets a record_memories call.
        readme_env.replies = [ANSWER] if "FunctionAgent" in code else []
        readme_env.reply = EXTRACTION if "remember" in code else ANSWER
        try:
            exec(compile(code, f"README.md python block {number}", "exec"), namespace)
        except Exception as error:  # name the block that broke
            raise AssertionError(f"README python block {number} failed: {error!r}\n{code}") from error
        finally:
            traced = [h for h in root.event_handlers if h not in handlers]
            root.event_handlers[:] = handlers
        if "MemoryTrace" in code:
            assert traced, "the Tracing snippet registers its handler"
    assert readme_env.rejected == []
    # The agent example's turn carries the memory block (its policy fixes "today").
    agent_turns = [json.dumps(r, ensure_ascii=False) for r in readme_env.requests
                   if "Taro's desk companion" in json.dumps(r, ensure_ascii=False)]
    assert agent_turns and all("<retrieved_memory>" in turn for turn in agent_turns)


def test_cli_lines_run(readme_env: OpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    for line in cli_lines():
        readme_env.reply = EXTRACTION if " remember " in line else "Trains, right?"
        argv = shlex.split(line)
        argv = argv[1:] if argv[0] == "llama-index-recency" else argv[3:]
        code = main(argv)
        out = capsys.readouterr()
        assert code == 0, f"{line!r} exited {code}: {out.err.strip()}"
        if argv[:2] == ["list", "--json"]:
            assert out.out == blocks("jsonl")[0], "the README's JSON Lines are what it prints"
