"""Every code block in README.md and docs/*.md runs as written, page by page.

A page is self-contained: its Python blocks run in order in one fresh namespace, in a
temporary directory of its own. Its bash blocks run line by line, in order: CLI lines
through main(), ``make TARGET`` lines are checked against the Makefile (they are what CI
itself runs), any other line, and a CLI line piped into another command, runs in bash. A
JSON block is the memory file the page's CLI lines name (taro.json), a JSON Lines block holds
the objects its ``list --json`` line prints (as one JSON list), and a text block starting
with ``$ llama-index-recency ...`` is (an excerpt of) what that command prints. A block of
any other language fails the page.

Everything runs offline, with the default store under the temporary directory and the LLM
endpoint (RECENCY_LLM_BASE_URL) pointed at the vLLM-like loopback server.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from llama_index.core.instrumentation import get_dispatcher
from test_cli_maintenance import local_mode_store

from llama_index_recency.cli import main

from conftest import OpenAIServer, ToolCall

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
RUN = {"python", "bash", "json", "jsonl", "text"}  # the languages a test below runs
CLI = ("llama-index-recency ", "python -m llama_index_recency ")
PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
"""The shell's PATH: this interpreter's directory first (its python, llama-index-recency)."""
LINK = re.compile(r"\]\(([^)\s]+)\)")
NUMBER = re.compile(r"\d+\.\d+")
ANSWER = "Lately you take it as a sweet café au lait!"
WRITES = ("remember", '.add([{"role"')  # the calls that send a conversation to the writer
EXTRACTION = ToolCall("record_memories", {"memories": [
    {"turn": 1, "kind": "habit_change", "fact": "The user has switched to green tea.",
     "updates": []}]})


def name(page: Path) -> str:
    return str(page.relative_to(ROOT))


def blocks(page: Path, language: str) -> list[str]:
    return [code for lang, code in FENCE.findall(page.read_text("utf-8")) if lang == language]


def shell_lines(page: Path) -> list[str]:
    """The bash blocks' lines, in order, without their comments."""
    lines = [line.split("  #", 1)[0].strip() for code in blocks(page, "bash")
             for line in code.splitlines()]
    return [line for line in lines if line]


def cli_lines(page: Path) -> list[str]:
    return [line for line in shell_lines(page) if line.startswith(CLI)]


def pages_with(language: str) -> list[Path]:
    return [page for page in PAGES if blocks(page, language)]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text("utf-8"))
    return {slug(heading) for heading in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


@pytest.fixture
def docs_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, openai_server: OpenAIServer):
    """A working directory with the files the snippets name, and the LLM on loopback."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the CLI's default store
    monkeypatch.setenv("RECENCY_LLM_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("COLUMNS", "200")
    (tmp_path / "talk.txt").write_text("user: I've switched to green tea.\nassistant: Nice!\n")
    bundled = resources.files("llama_index_recency.data").joinpath("memories.json")
    (tmp_path / "memories.json").write_text(bundled.read_text("utf-8"), "utf-8")
    local_mode_store(tmp_path / "old-store", n=20)  # a store as 0.1.0 wrote it
    return openai_server


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_code_block_is_run_by_a_test(page: Path) -> None:
    text = page.read_text("utf-8")
    languages = [lang for lang, _ in FENCE.findall(text)]
    assert set(languages) <= RUN, f"{name(page)}: no test runs {set(languages) - RUN}"
    fences = re.findall(r"^ *```", text, re.MULTILINE)
    assert len(fences) == 2 * len(languages), f"{name(page)}: a fence not at column 0, or open"
    assert len(blocks(page, "json")) <= 1 and len(blocks(page, "jsonl")) <= 1, name(page)
    if blocks(page, "jsonl"):
        assert any(line.split()[1:3] == ["list", "--json"] for line in cli_lines(page))


def test_the_pages_have_snippets() -> None:
    assert len(PAGES) >= 9  # the README, the index and a page a topic
    assert sum(len(blocks(page, "python")) for page in PAGES) >= 12
    assert sum(len(cli_lines(page)) for page in PAGES) >= 15
    assert len(pages_with("json")) == len(pages_with("jsonl")) == len(pages_with("text")) == 1


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_relative_links_reach_a_file_and_its_heading(page: Path) -> None:
    for target in LINK.findall(FENCE.sub("", page.read_text("utf-8"))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{name(page)}: {target} names no file"
        assert not anchor or anchor in anchors(linked), f"{name(page)}: {target} names no heading"


def test_the_quick_start_and_the_agent_example_use_recency_memory() -> None:
    readme = PAGES[0]
    quick_start = blocks(readme, "python")[0]
    agent = next(code for code in blocks(readme, "python") if "FunctionAgent" in code)
    assert "memory = RecencyMemory(" in quick_start and "memory.add(" in quick_start
    assert "memory.as_memory_block(" in agent
    assert len(readme.read_text("utf-8").splitlines()) <= 250  # a screen or two


@pytest.mark.parametrize("page", pages_with("python"), ids=name)
@pytest.mark.slow
def test_python_snippets_run_in_order(page: Path, docs_env: OpenAIServer) -> None:
    namespace: dict[str, object] = {"__name__": "__docs__"}
    root = get_dispatcher()
    handlers = list(root.event_handlers)  # the Tracing snippet adds one: not for other tests
    codes = blocks(page, "python")
    for number, code in enumerate(codes, start=1):
        # An agent's turn gets a text answer; a writer's request gets a record_memories call.
        docs_env.replies = [ANSWER] if "FunctionAgent" in code else []
        docs_env.reply = EXTRACTION if any(call in code for call in WRITES) else ANSWER
        where = f"{name(page)} python block {number}"
        try:
            exec(compile(code, where, "exec"), namespace)
        except Exception as error:  # name the block that broke
            raise AssertionError(f"{where} failed: {error!r}\n{code}") from error
        finally:
            traced = [h for h in root.event_handlers if h not in handlers]
            root.event_handlers[:] = handlers
        if "MemoryTrace" in code:
            assert traced, "the Tracing snippet registers its handler"
    assert docs_env.rejected == []
    if any("FunctionAgent" in code for code in codes):
        # The agent example's turn carries the memory block (its policy fixes "today").
        agent_turns = [json.dumps(r, ensure_ascii=False) for r in docs_env.requests
                       if "Taro's desk companion" in json.dumps(r, ensure_ascii=False)]
        assert agent_turns and all("<retrieved_memory>" in turn for turn in agent_turns)


@pytest.mark.parametrize("page", pages_with("bash"), ids=name)
@pytest.mark.slow
def test_shell_lines_run(page: Path, docs_env: OpenAIServer,
                         capsys: pytest.CaptureFixture[str]) -> None:
    for memory_file in blocks(page, "json"):
        Path("taro.json").write_text(memory_file, "utf-8")
    targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text("utf-8"), re.MULTILINE)
    for line in shell_lines(page):
        argv = shlex.split(line)
        if argv[0] == "make":
            assert argv[1:] and set(argv[1:]) <= set(targets), f"{line!r}: no such target"
            continue
        if not line.startswith(CLI) or " | " in line:  # a pipe: the installed command's
            done = subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True,
                                  text=True, env={**os.environ, "PATH": PATH})
            assert done.returncode == 0, f"{line!r} exited {done.returncode}: {done.stderr}"
            continue
        docs_env.reply = EXTRACTION if " remember " in line else "Trains, right?"
        argv = argv[1:] if argv[0] == "llama-index-recency" else argv[3:]
        code = main(argv)
        out = capsys.readouterr()
        assert code == 0, f"{line!r} exited {code}: {out.err.strip()}"
        if argv[:2] == ["list", "--json"]:  # one JSON list of the JSON Lines block's objects
            shown = [json.loads(line) for line in blocks(page, "jsonl")[0].splitlines()]
            assert json.loads(out.out) == shown, "the JSON Lines are the objects it prints"


def same_but_noise(shown: str, printed: str) -> bool:
    """Equal lines, but for numbers 0.001 apart (another CPU's cosines move ~1e-4)."""
    pairs = zip(NUMBER.findall(shown), NUMBER.findall(printed))
    return (NUMBER.sub("#", shown) == NUMBER.sub("#", printed.rstrip())
            and all(abs(float(a) - float(b)) < 0.0011 for a, b in pairs))


@pytest.mark.parametrize("page", pages_with("text"), ids=name)
def test_command_output_is_what_the_command_prints(
        page: Path, e5, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for text in blocks(page, "text"):
        command, *shown = text.splitlines()
        assert command.startswith("$ llama-index-recency "), command
        monkeypatch.setenv("COLUMNS", str(max(len(line) for line in shown)))
        monkeypatch.delenv("RECENCY_LLM_BASE_URL", raising=False)  # the ranking only
        assert main(shlex.split(command)[2:], embed_model=e5) == 0
        printed = iter(capsys.readouterr().out.splitlines())
        for line in shown:  # in order, "…" standing for lines left out
            if line != "…":
                assert any(same_but_noise(line, out) for out in printed), f"not printed: {line}"
