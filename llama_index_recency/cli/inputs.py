"""Input files (memories, transcripts, labelled questions), each problem a one-line
:class:`~llama_index_recency.cli.session.CommandError` naming the file and the item."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Any, cast, get_args

from llama_index.core.schema import TextNode

from llama_index_recency.cli.session import CommandError
from llama_index_recency.fitting.calibration import DEFAULT_KEY, RetrievedCandidates
from llama_index_recency.records.examples import ExampleQuestion, QuestionKind
from llama_index_recency.records.nodes import FutureMemoryDateError, control_character, memory_node
from llama_index_recency.storage import MemoryStore
from llama_index_recency.writing.backup import link_problem
from llama_index_recency.writing.memory_file import json_refusal
from llama_index_recency.writing.writer import Turn, parse_transcript

# --- input files ------------------------------------------------------------------------


def _read_text(path: Path, what: str) -> str:
    """A UTF-8 text file (a leading BOM is skipped), or a one-line error naming the problem."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CommandError(f"{what} {path} does not exist") from None
    except OSError as error:
        raise CommandError(f"cannot read {what} {path}: {error.strerror}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise CommandError(f"{what} {path} is not UTF-8 text (byte 0x{data[error.start]:02x} at "
                           f"offset {error.start}); save it as UTF-8") from None
    if "\x00" in text:
        raise CommandError(f"{what} {path} is a binary file, not text")
    return text


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(_read_text(path, what))
    except json.JSONDecodeError as error:
        reason = error.msg.removesuffix(" at")  # "Unterminated string starting at"
        raise CommandError(f"{what} {path} is not valid JSON: {reason} at line {error.lineno} "
                           f"column {error.colno}") from None
    except (RecursionError, ValueError) as error:  # nested too deep; an integer too long
        raise CommandError(f"{what} {path} is JSON this reader refuses: "
                           f"{json_refusal(error)}") from None


def file_memories(path: Path, user_name: str | None, user_id: str | None,
                  allow_future: bool = False) -> tuple[list[TextNode], list[str]]:
    """Every memory of an ``add --file`` JSON file, all validated before anything is stored,
    and for each the words naming it in an error ("memory file F, memory 3").

    Raises:
        CommandError: The file is missing, unreadable, not UTF-8 or not JSON of that shape;
            an entry cannot be made a memory; two entries are the same memory.
    """
    data = _read_json(path, "memory file")
    if not isinstance(data, dict) or not isinstance(data.get("memories"), list):
        raise CommandError(f'memory file {path}: expected a JSON object with a "memories" list, '
                           f"got {_json_kind(data)}")
    # A file-wide "user_id" left out would store every memory under no user.
    _refuse_unknown(data, FILE_FIELDS, f"memory file {path}")
    user_name = user_name or data.get("user_name")
    if user_name is not None and not isinstance(user_name, str):
        raise CommandError(f'memory file {path}: "user_name" must be a string, got '
                           f"{json.dumps(user_name)}")
    labels = [f"memory file {path}, memory {number}"
              for number in range(1, len(data["memories"]) + 1)]
    nodes = [_file_memory(item, where, user_name, user_id, allow_future)
             for item, where in zip(data["memories"], labels, strict=True)]
    _check_repeats(nodes, labels)
    return nodes, labels


def _check_repeats(nodes: Sequence[TextNode], labels: Sequence[str]) -> None:
    """Each memory once: two entries with the same fact, date and user are one memory, and
    only one entry's key and links would be kept."""
    first: dict[str, int] = {}
    for number, node in enumerate(nodes, start=1):
        earlier = first.setdefault(node.node_id, number)
        if earlier == number:
            continue
        keys = [nodes[i - 1].metadata.get(DEFAULT_KEY) for i in (number, earlier)]
        shown = [repr(key) if key is not None else "none" for key in keys]
        differ = f" (key {shown[0]} here, {shown[1]} there)" if keys[0] != keys[1] else ""
        raise CommandError(f"{labels[number - 1]}: the same fact, date and user as memory "
                           f"{earlier}{differ}; keep one of them")


FILE_FIELDS = ("memories", "user_name", "reference_date")
"""An ``add --file`` file's own fields (each entry names its user; ``reference_date``, the
bundled files' "today", is not read)."""

ENTRY_FIELDS = ("fact", "date", "key", "user_id", "supersedes")
"""An ``add --file`` entry's fields; another (``"user"``, ``"superseeds"``) is refused, since
leaving it out would store the memory without that user or link."""


def _file_memory(item: Any, where: str, user_name: str | None, user_id: str | None,
                 allow_future: bool) -> TextNode:
    if not isinstance(item, dict):
        raise CommandError(f"{where}: expected an object, got {_json_kind(item)}")
    _refuse_unknown(item, ENTRY_FIELDS, where)
    for name, example in (("fact", "The user likes tea."), ("date", "2026-09-01")):
        if name not in item:
            raise CommandError(f'{where}: no "{name}" (e.g. "{name}": "{example}")')
        if not isinstance(item[name], str):
            raise CommandError(f'{where}: "{name}" must be a string like "{example}", got '
                               f"{json.dumps(item[name])}")
    key = item.get("key")
    if key is not None and not isinstance(key, str):
        raise CommandError(f'{where}: "key" must be a string, got {json.dumps(key)}')
    if item.get("user_id") is not None:  # the entry's own user wins over --user
        user_id = _entry_user(item["user_id"], where)
    links = item.get("supersedes")
    if links is not None and (not isinstance(links, list)
                              or not all(isinstance(link, str) for link in links)):
        raise CommandError(f'{where}: "supersedes" must be a list of memory ids (see `list`), '
                           f"got {json.dumps(links, ensure_ascii=False)}")
    return memory(item["fact"], item["date"], key, user_name, user_id, where, allow_future,
                  links)


def _entry_user(value: Any, where: str) -> str:
    """An entry's ``user_id``, checked as ``--user`` is: one printable line, as written."""
    if not isinstance(value, str) or not value.strip():
        raise CommandError(f'{where}: "user_id" must be a non-blank string, got '
                           f"{json.dumps(value, ensure_ascii=False)}")
    bad = control_character(value)
    if bad is not None:
        raise CommandError(f"{where}: the user {value!r} contains the control character "
                           f"{bad!r}; a user id is one line of printable text")
    return value


def check_file_links(index: MemoryStore, nodes: Sequence[TextNode], labels: Sequence[str]
                     ) -> None:
    """Each entry's ``supersedes`` names a memory of its own user, in the store or the file
    (an unknown id is most likely mistyped); else a one-line error naming the entry.

    Raises:
        CommandError: A link to no memory, to another user's, or in a cycle.
    """
    problem = link_problem(index, nodes, must_exist=True)
    if problem is not None:
        raise CommandError(f"{labels[problem[0]]}: {problem[1]}")


def memory(fact: str, day: date | str, key: str | None, user_name: str | None,
           user_id: str | None, where: str, allow_future: bool = False,
           supersedes: Sequence[str] | None = None) -> TextNode:
    """One memory's node through :func:`~llama_index_recency.records.nodes.memory_node`, its
    refusal a one-line error starting with ``where`` (the words naming the entry).

    Raises:
        CommandError: A fact, date, user or link the node cannot be made of, or a date after
            tomorrow without ``allow_future``.
    """
    bad = control_character(fact)
    if bad is not None:
        raise CommandError(f"{where}: the fact contains the control character {bad!r}; a fact "
                           "is one line of printable text")
    try:
        return memory_node(fact, day, user_name=user_name, user_id=user_id,
                           supersedes=supersedes or None,
                           metadata={DEFAULT_KEY: key} if key else None,
                           allow_future=allow_future)
    except FutureMemoryDateError as error:
        raise CommandError(f"{where}: {future_date(error)}") from None
    except (ValueError, OverflowError) as error:
        raise CommandError(f"{where}: {error}") from None


def future_date(error: FutureMemoryDateError) -> str:
    """The refusal of a memory dated after tomorrow, with the CLI's way to insist."""
    return str(FutureMemoryDateError(error.day, error.today, "pass --allow-future"))


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def transcript(path: Path) -> list[Turn]:
    """The turns of a transcript file, or a one-line error naming the file and the line.

    Raises:
        CommandError: The file is missing, unreadable or not UTF-8 text, a line is not a
            turn, or it holds no turn (a wrong file, most likely).
    """
    try:
        turns = parse_transcript(_read_text(path, "transcript"))
    except ValueError as error:
        raise CommandError(f"transcript {path}: {error}") from None
    if not turns:
        raise CommandError(f"transcript {path} holds no turn: write one per line as "
                           "'user: …' or 'assistant: …'")
    return turns


def select(
    questions: list[ExampleQuestion], ids: tuple[str, ...] | None
) -> list[ExampleQuestion]:
    """The questions of ``ids`` (all for None), in their own order.

    Raises:
        CommandError: An id that names no question.
    """
    if ids is None:
        return questions
    unknown = sorted(set(ids) - {q.id for q in questions})
    if unknown:
        raise CommandError(f"unknown question ids: {', '.join(unknown)}")
    return [q for q in questions if q.id in ids]


QUESTION_FIELDS = ("id", "kind", "text", "targets")
"""A questions file's fields per question; another is refused (a typo would drop it)."""


def load_questions(path: Path) -> list[ExampleQuestion]:
    """Labelled questions from JSON: ``{"questions": [{"id", "text", "targets"}]}``, all
    checked before any model loads, each problem naming the file and the question.

    Raises:
        CommandError: The file is missing, unreadable, not UTF-8 or not JSON of that shape,
            its list is empty, or a question lacks an id, a text or its targets.
    """
    data = _read_json(path, "questions file")
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise CommandError(f'questions file {path}: expected a JSON object with a "questions" '
                           f"list, got {_json_kind(data)}")
    if not data["questions"]:
        raise CommandError(f'questions file {path}: the "questions" list is empty')
    return [_question(item, path, number) for number, item in enumerate(data["questions"], 1)]


def _question(item: Any, path: Path, number: int) -> ExampleQuestion:
    """One question of a questions file, or a one-line error naming its id (else its number)."""
    where = f"questions file {path}, question {number}"
    if not isinstance(item, dict):
        raise CommandError(f"{where}: expected an object, got {_json_kind(item)}")
    for name, example in (("id", "H1"), ("text", "What do I drink?")):
        if not isinstance(item.get(name), str) or not item[name].strip():
            raise CommandError(f'{where}: "{name}" must be a non-empty string like '
                               f'"{example}", got {_given(item, name)}')
        where = f"questions file {path}, question {item['id']}"  # from now on, by its id
    targets = item.get("targets")
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise CommandError(f'{where}: "targets" must be a list of memory keys or ids ([] for a '
                           f"hit-free question), got {_given(item, 'targets')}")
    _refuse_unknown(item, QUESTION_FIELDS, where)
    kind = item.get("kind") or ("hit" if targets else "hit_free")
    if kind not in get_args(QuestionKind):  # a misspelled one would leave its criterion
        raise CommandError(f'{where}: "kind" must be one of {", ".join(get_args(QuestionKind))}, '
                           f"got {_given(item, 'kind')}")
    return ExampleQuestion(item["id"], cast(QuestionKind, kind), item["text"], tuple(targets))


def _refuse_unknown(item: dict[str, Any], fields: Sequence[str], where: str) -> None:
    """Refuse a field of ``item`` not among ``fields``: left out, a typo would go unseen."""
    if unknown := [name for name in item if name not in fields]:
        raise CommandError(f"{where}: unknown field {json.dumps(unknown[0], ensure_ascii=False)} "
                           f"(the fields are {', '.join(fields)})")


def _given(item: dict[str, Any], name: str) -> str:
    """``item[name]`` as JSON for an error message, or "nothing" when it is absent."""
    return json.dumps(item[name], ensure_ascii=False) if name in item else "nothing"


def check_targets(path: Path, sets: list[list[RetrievedCandidates]], source: str) -> None:
    """Every target names a memory (by key, else id; each question's candidates are every
    memory): a misspelt key would only fail its question, without ever being named.

    Raises:
        CommandError: A memory whose key is not a string (the fit could not name it), or a
            target that names no memory in ``source``.
    """
    for retrieved in sets:
        for item in retrieved:
            for candidate in item.candidates:
                key = candidate.node.metadata.get(DEFAULT_KEY)
                if key is not None and not isinstance(key, str):
                    raise CommandError(
                        f"memory {candidate.node.node_id} in {source} has the key {key!r}, not "
                        "a string: questions name memories by a string key; import it again "
                        "with a string key and --replace", 1)
            names = {n.node.metadata.get(DEFAULT_KEY, n.node.node_id) for n in item.candidates}
            for target in item.question.targets:
                if target not in names:
                    raise CommandError(f"questions file {path}, question {item.question.id}: "
                                       f"target {target!r} names no memory in {source}")
