"""Issue #39, round 5: where export writes, the CLI's ordinary errors as one line with the
right exit code and advice, NaN in imported metadata, and collection names with control
characters."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llama_index_recency import RecencyMemory, memory_node, open_memory_index
from llama_index_recency.cli import main
from llama_index_recency.cli.session import describe
from llama_index_recency.errors import (
    EmbeddingAPIError,
    InvalidInputError,
    InvalidSettingError,
    MemoryFileError,
    MemoryStoreDamagedError,
    MigrationIncompleteError,
    RecencyError,
)
from llama_index_recency.storage import check_collection_name, close_memory_index
from llama_index_recency.writing.backup import read_memory_file, write_memory_file

from conftest import KnownCosineEmbedding, error_line

COFFEE = ("The user drinks coffee black.", "2026-09-01")
TEA = ("The user likes tea.", "2026-09-02")

pytestmark = pytest.mark.usefixtures("cli_environment")


def embedding() -> KnownCosineEmbedding:
    return KnownCosineEmbedding({memory_node(*COFFEE).get_content(): 0.5,
                                 memory_node(*TEA).get_content(): 0.4})


@pytest.fixture
def store(tmp_path: Path, capsys) -> str:
    """A store holding COFFEE."""
    path = str(tmp_path / "store")
    assert main(["add", *COFFEE[:1], "--date", COFFEE[1], "--store", path],
                embed_model=embedding()) == 0
    capsys.readouterr()
    return path


def shard(store: str) -> Path:
    return Path(store) / "edge" / "memories"


def line(fact: tuple[str, str], **fields: object) -> str:
    return json.dumps({"text": fact[0], "date": fact[1], **fields})


# --- A: export writes a symlink's target; a path that is no regular file is refused ------


def test_export_through_a_symlink_writes_the_file_it_points_to(store: str, tmp_path: Path,
                                                               capsys) -> None:
    disk = tmp_path / "backup-disk"
    disk.mkdir()
    target = disk / "memories.jsonl"
    target.write_text("the old backup\n", "utf-8")
    link = tmp_path / "memories.jsonl"
    link.symlink_to(target)
    assert main(["export", str(link), "--store", store]) == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text("utf-8"))["text"] == COFFEE[0]
    assert [name for name in os.listdir(disk)] == ["memories.jsonl"]  # no temporary left
    assert "exported 1 memory" in capsys.readouterr().out


def test_export_to_a_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    target, link = tmp_path / "new.jsonl", tmp_path / "link.jsonl"
    link.symlink_to(target)
    assert write_memory_file(link, ["{}"]) == 1
    assert link.is_symlink() and target.read_text("utf-8") == "{}\n"


@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
def test_export_to_a_path_that_is_no_regular_file_is_refused_naming_it(
        kind: str, store: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "not-a-file"
    if kind == "a FIFO":
        os.mkfifo(path)
    else:
        path.mkdir()
    assert main(["export", str(path), "--store", store]) == 2
    assert error_line(capsys.readouterr().err) == (
        f"error: {path} is {kind}, not a regular file: give the path of a file to write")
    assert path.is_fifo() if kind == "a FIFO" else path.is_dir()  # left as it was
    with pytest.raises(InvalidInputError, match=f"is {kind}, not a regular file"):
        write_memory_file(path, ["{}"])
    # Through a symlink, the target is what is named and kept.
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(InvalidInputError, match=f"^{path} is {kind}"):
        write_memory_file(link, ["{}"])
    assert link.is_symlink()


# --- B: the CLI's ordinary errors: one line, the right exit code, advice that works -------


def test_a_server_url_that_cannot_be_parsed_is_a_bad_url_naming_it(capsys) -> None:
    assert main(["list", "--url", "http://[::1"]) == 2
    line_ = error_line(capsys.readouterr().err)
    assert line_.startswith("error: the Qdrant server url 'http://[::1' is not a valid URL: ")
    assert "unexpected" not in line_


@pytest.mark.parametrize("argv", [["demo", "--top-k", "-5"], ["demo", "--top-k", "0"],
                                  ["calibrate", "--top-k", "0"],
                                  ["demo", "--top-k", "99999999999999999999"],
                                  ["demo", "--top-k", "10001"]],
                         ids=["-5", "0", "calibrate", "overflow", "above-the-cap"])
def test_top_k_outside_one_to_the_cap_is_refused_at_parse_time(argv: list[str], capsys) -> None:
    assert main(argv, embed_model=KnownCosineEmbedding({})) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # nothing ran
    assert error_line(captured.err) == (
        f"error: llama-index-recency {argv[0]}: argument --top-k: expected a whole number "
        f"from 1 to 10000, got {argv[2]!r} (see --help)")


@pytest.mark.parametrize("option, value, reason", [
    ("--tau-days", "0", "Input should be greater than 0"),
    ("--weight", "-1", "Input should be greater than or equal to 0"),
    ("--threshold", "inf", "Input should be a finite number"),
])
def test_calibrate_refuses_a_ranking_option_the_policy_refuses_before_anything_runs(
        option: str, value: str, reason: str, capsys) -> None:
    argv = ["calibrate", "--seed", "--fit-threshold", option, value]
    assert main(argv, embed_model=KnownCosineEmbedding({})) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert error_line(captured.err) == (
        f"error: bad ranking option: {option} {float(value)!r}: {reason}")


DAMAGED_METADATA = {
    "empty": ("", "is not valid JSON"),
    "garbage": ("garbage{", "is not valid JSON"),
    "a list": ("[1]", "is not a JSON object"),
    "wrong-typed records": (json.dumps({"llama_index_recency.embedding": 5,
                                        "llama_index_recency.shard": 3}),
                            "holds 'llama_index_recency.embedding' as 5, not an object"),
}


@pytest.mark.parametrize("content, problem", DAMAGED_METADATA.values(), ids=DAMAGED_METADATA)
@pytest.mark.parametrize("command", ["list", "add"])
def test_damaged_collection_metadata_is_a_damaged_store_in_one_line(
        command: str, content: str, problem: str, store: str, capsys) -> None:
    (shard(store) / "collection_metadata.json").write_text(content, "utf-8")
    argv = ["list"] if command == "list" else ["add", TEA[0], "--date", TEA[1]]
    assert main([*argv, "--store", store], embed_model=embedding()) == 1
    line_ = error_line(capsys.readouterr().err)
    assert line_.startswith(f"error: the store at {shard(store)} is damaged: its collection "
                            f"metadata {shard(store) / 'collection_metadata.json'} {problem}")
    assert line_.endswith("; restore that file from a backup, or move it away: the memories "
                          "stay, the saved policy is lost and the next command that opens the "
                          "store with a model records that model")


def test_a_store_whose_metadata_file_is_moved_away_opens_again(store: str, capsys) -> None:
    """The advice above works."""
    metadata = shard(store) / "collection_metadata.json"
    metadata.write_text("garbage{", "utf-8")
    metadata.rename(metadata.with_suffix(".damaged"))
    assert main(["add", TEA[0], "--date", TEA[1], "--store", store],
                embed_model=embedding()) == 0
    assert "(2 in total)" in capsys.readouterr().out


def test_a_truncated_vector_file_is_a_damaged_store_and_add_does_not_advise_a_rerun(
        store: str, capsys) -> None:
    vectors = next(shard(store).glob("segments/*/vector_storage/vectors/chunk_0.mmap"))
    vectors.write_bytes(b"")
    assert main(["list", "--store", store]) == 1
    line_ = error_line(capsys.readouterr().err)
    assert line_.startswith(f"error: the store at {shard(store)} is damaged: ")
    assert line_.endswith("; restore it from an export or backup")
    assert main(["add", TEA[0], "--date", TEA[1], "--store", store],
                embed_model=embedding()) == 1
    line_ = error_line(capsys.readouterr().err)
    assert f"the store at {shard(store)} is damaged: " in line_
    assert line_.endswith("; restore it from an export or backup")
    assert "rerun" not in line_ and "unexpected" not in line_


@pytest.mark.parametrize("status", ["vectors", "deleted"])
def test_a_truncated_status_file_is_a_damaged_store_not_a_panic(store: str, status: str,
                                                                capsys) -> None:
    """Edge panics on it (pyo3's PanicException, which no ``except Exception`` catches): an
    app and the CLI got a traceback (found by an exploratory user)."""
    next(shard(store).glob(f"segments/*/vector_storage/{status}/status.dat")).write_bytes(b"")
    assert main(["list", "--store", store]) == 1
    line_ = error_line(capsys.readouterr().err)
    assert line_.startswith(f"error: the store at {shard(store)} is damaged: ")
    assert line_.endswith("; restore it from an export or backup")
    with pytest.raises(MemoryStoreDamagedError):
        RecencyMemory(path=store, embed_model=embedding())


def test_a_lost_edge_config_is_a_damaged_store_not_a_foreign_directory(store: str,
                                                                      capsys) -> None:
    (shard(store) / "edge_config.json").unlink()
    for argv in (["list"], ["add", TEA[0], "--date", TEA[1]]):
        assert main([*argv, "--store", store], embed_model=embedding()) == 1
        assert error_line(capsys.readouterr().err) == (
            f"error: the store at {shard(store)} is damaged: edge_config.json is missing "
            "(it holds segments, wal); restore it from an export or backup")


def test_a_key_that_is_not_a_string_is_refused_in_a_memory_file_and_named_in_a_store(
        store: str, tmp_path: Path, capsys) -> None:
    backup = tmp_path / "b.jsonl"
    backup.write_text(line(TEA, metadata={"key": ["tea"]}) + "\n", "utf-8")
    assert main(["import", str(backup), "--store", store], embed_model=embedding()) == 2
    assert error_line(capsys.readouterr().err) == (
        f'error: memory file {backup}, line 1: "metadata" "key" must be a string, got ["tea"]')
    # A store written otherwise (the Python API takes any metadata) is named, not a TypeError.
    index = open_memory_index(embedding(), path=store)
    tea = memory_node(*TEA, metadata={"key": ["tea"]})
    index.insert_nodes([tea])
    close_memory_index(index)
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps({"questions": [
        {"id": "H1", "text": "What do I drink?", "targets": ["tea"]}]}), "utf-8")
    argv = ["calibrate", "--store", store, "--questions", str(questions)]
    assert main(argv, embed_model=embedding()) == 1
    assert error_line(capsys.readouterr().err) == (
        f"error: memory {tea.node_id} in {store} has the key ['tea'], not a string: questions "
        "name memories by a string key; import it again with a string key and --replace")


@pytest.mark.parametrize("content", ["", "\n \n"], ids=["empty", "blank lines"])
def test_importing_a_file_without_memories_is_refused_naming_it(
        content: str, store: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content, "utf-8")
    for given in (path, Path(os.devnull)):
        if given == Path(os.devnull) and content:
            continue
        assert main(["import", str(given), "--store", store], embed_model=embedding()) == 2
        assert error_line(capsys.readouterr().err) == (
            f"error: memory file {given}, line 1: the file holds no memory (one JSON object a "
            "line, as export writes them)")
    with pytest.raises(MemoryFileError, match="holds no memory"):
        read_memory_file(path)


def test_history_of_something_that_is_no_memory_id_says_so(store: str, capsys) -> None:
    assert main(["history", "m1", "--store", store]) == 2
    assert error_line(capsys.readouterr().err) == (
        "error: llama-index-recency history: argument ID: expected a memory id (a UUID, see "
        "`list`), got 'm1' (see --help)")


@pytest.mark.parametrize("error, code", [
    (InvalidInputError("collection name 'a' is refused"), 2),
    (InvalidSettingError("RecencyPolicy", [("weight", -1, "too small")]), 2),
    (MemoryFileError("f.jsonl", 3, "not valid JSON"), 2),
    (MigrationIncompleteError("copied 3 of 4 memories"), 1),
    (EmbeddingAPIError("the embedding API refused the request: HTTP 400"), 1),
])
def test_every_recency_error_is_described_as_itself(error: RecencyError, code: int) -> None:
    assert describe(error) == (str(error), code)


# --- C: NaN or Infinity in a line is refused at import, naming the line --------------------


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_in_an_imported_line_is_refused_naming_it(
        constant: str, store: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "nan.jsonl"
    path.write_text(line(COFFEE) + "\n" + line(TEA)[:-1]
                    + f', "metadata": {{"x": [1, {{"y": {constant}}}]}}}}' + "\n", "utf-8")
    for _ in range(2):  # refused the same way each time, nothing stored
        assert main(["import", str(path), "--store", store], embed_model=embedding()) == 2
        assert error_line(capsys.readouterr().err) == (
            f'error: memory file {path}, line 2: "metadata" holds {constant}: JSON has no '
            "NaN or Infinity")
    with pytest.raises(MemoryFileError, match=f'line 2: "metadata" holds {constant}'):
        read_memory_file(path)


# --- D: collection names with control characters or only blanks --------------------------


@pytest.mark.parametrize("name", ["a\tb", "a\x1b[31mb", " ", "\t", "a\nb"])
def test_a_collection_name_with_a_control_character_or_only_blanks_is_refused(
        name: str, store: str, tmp_path: Path, capsys) -> None:
    with pytest.raises(InvalidInputError, match="collection name"):
        check_collection_name(name)
    assert main(["list", "--store", store, "--collection", name]) == 2
    assert error_line(capsys.readouterr().err).startswith(
        f"error: llama-index-recency list: argument --collection: collection name {name!r} ")
    with pytest.raises(InvalidInputError, match="collection name"):
        open_memory_index(embedding(), path=tmp_path / "other", collection_name=name)
    assert not (tmp_path / "other").exists()
    assert sorted(os.listdir(Path(store) / "edge")) == ["memories"]
