"""Reading a memory file (JSON Lines, as :mod:`llama_index_recency.writing.backup` writes it) and
checking it, line by line and against the store it goes into, before anything is stored."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from llama_index.core.schema import BaseNode, TextNode

from llama_index_recency.errors import MemoryFileError
from llama_index_recency.fitting.calibration import DEFAULT_KEY
from llama_index_recency.records.links import LINK_KEYS, check_link, linked_ids
from llama_index_recency.records.nodes import (
    SUPERSEDED_BY_KEY,
    SUPERSEDES_KEY,
    USER_ID_KEY,
    canonical_id,
    control_character,
    is_memory_id,
    memory_node,
    vector_problem,
)
from llama_index_recency.storage import MemoryStore, embedding_identity, get_memories

DATE_KEY = "date"
FIELDS = ("id", "text", "date", "user_id", "supersedes", "metadata", "embedding_model",
          "embedding", "sentences")
"""The fields of a line, in the order they are written."""
OWN_FIELDS = (DATE_KEY, USER_ID_KEY, SUPERSEDES_KEY, SUPERSEDED_BY_KEY)
"""Metadata keys that are fields of their own, never inside ``metadata``."""


@dataclass(frozen=True)
class MemoryFile:
    """A memory file whose every line was read and checked: the nodes to store, and for
    each the number of the line it came from and the embedding model its vector is from."""

    path: Path
    nodes: tuple[TextNode, ...]
    lines: tuple[int, ...]
    models: tuple[Optional[dict[str, Any]], ...]
    sentences: tuple[Optional[dict[str, Any]], ...]
    """Each line's stored sentence vectors (``sentences``), None for a line without."""

    def given_sentences(self) -> dict[str, dict[str, Any]]:
        """The lines' stored sentence vectors by memory id (an export with embeddings)."""
        return {node.node_id: held for node, held in zip(self.nodes, self.sentences,
                                                         strict=True) if held}

    def checked_for(self, index: MemoryStore, *, replace: bool = False) -> list[TextNode]:
        """The nodes (not copies), once checked against the store they go into: vectors of
        its recorded embedding model only, links to memories of the same user without a
        cycle, and a memory it holds only as it holds it (another text, date, user or
        metadata under a stored id would change it; links are united). With ``replace``,
        a line's user and metadata values are taken for a stored id (keys it leaves out
        stay; the text and date never change: the id is made from them). A problem raises
        :class:`MemoryFileError` naming the line.

        Raises:
            MemoryFileError: A line whose vector is of another embedding model than the
                store records (or the store records none), whose ``supersedes`` names
                another user's memory or makes a cycle, or that would change a stored
                memory: its text or date, or (without ``replace``) its user or metadata.
        """
        identity = embedding_identity(index)
        for line, model in zip(self.lines, self.models, strict=True):
            if model is None or model == identity:
                continue
            if identity is None:
                raise MemoryFileError(self.path, line, "the store records no embedding model "
                                      "to check this line's vector against; remove the "
                                      "embeddings to embed the memories again")
            raise MemoryFileError(
                self.path, line, f"its embedding is from {_describe(model)} but the store "
                f"holds vectors of {_describe(identity)}: vectors of different models are "
                "not comparable; remove the embeddings to embed the memories again")
        problem = link_problem(index, self.nodes, must_exist=False)
        if problem is not None:
            raise MemoryFileError(self.path, self.lines[problem[0]], problem[1])
        stored = {canonical_id(node.node_id): node
                  for node in get_memories(index, [node.node_id for node in self.nodes])}
        for line, node in zip(self.lines, self.nodes, strict=True):
            change = _change(stored[node.node_id], node) if node.node_id in stored else None
            if change is None:
                continue
            key, difference = change
            if key in (DATE_KEY, "text"):
                raise MemoryFileError(self.path, line, f"memory {node.node_id} {difference}; "
                                      "a memory's text and date never change (its id is made "
                                      "from them): forget it first to store this line instead")
            if not replace:
                raise MemoryFileError(self.path, line, f"memory {node.node_id} {difference}; "
                                      "an import never changes a stored memory: forget it "
                                      "first, or import with replace (--replace) to take this "
                                      "line's user and metadata")
        return list(self.nodes)


    def replacing(self, index: MemoryStore) -> list[str]:
        """The ids of stored memories whose user or metadata this file gives otherwise (what
        an import with ``replace`` changes; links aside)."""
        stored = {canonical_id(node.node_id): node
                  for node in get_memories(index, [node.node_id for node in self.nodes])}
        return [node.node_id for node in self.nodes
                if node.node_id in stored and _change(stored[node.node_id], node) is not None]


def _change(old: BaseNode, new: BaseNode) -> Optional[tuple[str, str]]:
    """The first field in which a line's memory differs from the stored one with its id,
    links aside (they are united, see :func:`~llama_index_recency.writing.updates.insert_memories`),
    and how; or None."""
    prefix = new.get_content()[:len("YYYY-MM-DD: ")]
    before, after = _fields(old, prefix), _fields(new, prefix)
    first = (DATE_KEY, "text", USER_ID_KEY)
    for key in (*first, *sorted((before.keys() | after.keys()) - set(first))):
        if before.get(key) != after.get(key):
            return key, (f"is stored with {_field(key, before)}, this line has "
                         f"{_field(key, after)}")
    return None


def _fields(node: BaseNode, prefix: str) -> dict[str, Any]:
    """A memory's text (without the date prefix) and metadata other than links."""
    fields = {key: value for key, value in node.metadata.items() if key not in LINK_KEYS}
    fields["text"] = node.get_content().removeprefix(prefix)
    return fields


def _field(key: str, fields: dict[str, Any]) -> str:
    return f"no {key}" if fields.get(key) is None else f"{key} {_shown(fields[key])}"


def _describe(identity: dict[str, Any]) -> str:
    return f"{identity['model']!r} ({identity['dimensions']} dims)"


def read_memory_file(path: str | os.PathLike[str]) -> MemoryFile:
    """Read and check every line of a JSON Lines memory file (its fields: see
    :mod:`llama_index_recency.writing.backup`) before
    anything is stored: the first bad line raises :class:`MemoryFileError` naming its
    number. Blank lines are skipped, but a file of none but them is refused; a file that
    cannot be read raises ``OSError``.

    Each line becomes the node :func:`~llama_index_recency.records.nodes.memory_node` makes for it
    (same text layout, same metadata, the same keys excluded from embedding and prompt),
    with the line's ``id`` and ``date`` kept exactly; dates after tomorrow are accepted
    (a backup restores what was stored).

    Raises:
        MemoryFileError: A file without a memory line; the first line that cannot be
            imported: not UTF-8, not a JSON object with the fields of a memory (NaN and
            Infinity in ``metadata`` are no JSON; its ``key`` is a string), a memory
            :func:`memory_node` refuses, a
            memory id already on an earlier line, or a ``supersedes`` that names another
            user's memory in the file or makes a cycle.
        OSError: The file cannot be read.
    """
    path = Path(path)
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise MemoryFileError(path, data[:error.start].count(b"\n") + 1,
                              f"not UTF-8 text (byte 0x{data[error.start]:02x})") from None
    nodes: list[TextNode] = []
    lines: list[int] = []
    models: list[Optional[dict[str, Any]]] = []
    sentences: list[Optional[dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        if not raw.strip():
            continue
        node, model, held = _node(path, number, raw)
        if node.node_id in seen:
            raise MemoryFileError(path, number, f"memory {node.node_id} is also on line "
                                  f"{seen[node.node_id]}")
        seen[node.node_id] = number
        nodes.append(node)
        lines.append(number)
        models.append(model)
        sentences.append(held)
    if not nodes:  # most likely the wrong file, or one cut short: 0 stored would hide it
        raise MemoryFileError(path, 1, "the file holds no memory (one JSON object a line, as "
                              "export writes them)")
    problem = link_problem(None, nodes, must_exist=False)  # within the file, before the store
    if problem is not None:
        raise MemoryFileError(path, lines[problem[0]], problem[1])
    return MemoryFile(path, tuple(nodes), tuple(lines), tuple(models), tuple(sentences))


def _node(path: Path, number: int, raw: str
          ) -> tuple[TextNode, Optional[dict[str, Any]], Optional[dict[str, Any]]]:
    """The node for one line, the embedding model of its vector and its stored sentence
    vectors (None without them)."""
    def bad(problem: str) -> MemoryFileError:
        return MemoryFileError(path, number, problem)

    try:
        item = json.loads(raw)
    except json.JSONDecodeError as error:
        reason = error.msg.removesuffix(" at")  # "Unterminated string starting at"
        raise bad(f"not valid JSON: {reason} at column {error.colno}") from None
    except (RecursionError, ValueError) as error:  # nested too deep; an integer too long
        raise bad(f"JSON this reader refuses: {json_refusal(error)}") from None
    if not isinstance(item, dict):
        raise bad(f"expected a JSON object, got {_kind(item)}")
    unknown = sorted(set(item) - set(FIELDS))
    if unknown:
        raise bad(f"unknown field {unknown[0]!r} (the fields are {', '.join(FIELDS)})")
    for name in ("text", "date"):
        if not isinstance(item.get(name), str):
            raise bad(f'"{name}" must be a string, got {_given(item, name)}')
    if "id" in item and not is_memory_id(item["id"]):
        raise bad(f'"id" must be a memory id (a UUID string), got {_given(item, "id")}')
    character = control_character(item["text"])
    if character is not None:  # memory_node would make it one line; the line's text is kept
        raise bad(f"the text contains the control character {character!r}; a fact is one "
                  "line of printable text")
    user = item.get("user_id")
    if user is not None and not isinstance(user, str):
        raise bad(f'"user_id" must be a string or null, got {_given(item, "user_id")}')
    links = item.get("supersedes", [])
    if not isinstance(links, list) or not all(isinstance(link, str) for link in links):
        raise bad(f'"supersedes" must be a list of memory ids, got {_given(item, "supersedes")}')
    metadata = item.get("metadata", {})
    if not isinstance(metadata, dict):
        raise bad(f'"metadata" must be an object, got {_given(item, "metadata")}')
    own = [key for key in OWN_FIELDS if key in metadata]
    if own:
        raise bad(f'"metadata" may not hold {own[0]!r}: it is a field of its own')
    constant = _non_finite(metadata)
    if constant is not None:  # the store keeps null: the line would no longer match it
        raise bad(f'"metadata" holds {json.dumps(constant)}: JSON has no NaN or Infinity')
    key = metadata.get(DEFAULT_KEY)
    if key is not None and not isinstance(key, str):  # questions name memories by it
        raise bad(f'"metadata" "{DEFAULT_KEY}" must be a string, got {_shown(key)}')
    vector = _vector(item, bad)
    held = item.get("sentences")
    if held is not None and (vector is None or not isinstance(held, dict)):
        raise bad('"sentences" must be an object, and comes with its "embedding", got '
                  f'{_given(item, "sentences")}')
    try:
        built = memory_node(item["text"], item["date"], user_id=user,
                            supersedes=links or None, metadata=metadata or None,
                            allow_future=True)
    except (ValueError, OverflowError) as error:
        raise bad(str(error)) from None
    day = item["date"] if item["date"] == item["date"].strip() else built.metadata[DATE_KEY]
    text = f"{built.text[:10]}: {item['text']}"
    node_id = canonical_id(item["id"]) if "id" in item else built.node_id
    if node_id == built.node_id and text == built.text and day == built.metadata[DATE_KEY]:
        node = built  # the usual case: the line is exactly what memory_node makes
        node.embedding = vector
    else:  # another id, a date written otherwise, spacing memory_node would change
        node = TextNode(
            id_=node_id,
            text=text,
            metadata={**built.metadata, DATE_KEY: day},
            excluded_embed_metadata_keys=list(built.excluded_embed_metadata_keys),
            excluded_llm_metadata_keys=list(built.excluded_llm_metadata_keys),
            embedding=vector,
        )
    return node, None if vector is None else item["embedding_model"], held


def _non_finite(value: Any) -> Optional[float]:
    """The first NaN or infinity in ``value`` (a JSON value: objects and lists searched, without
    recursion: a line nested hundreds deep is refused by its depth later, in one line)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return item
        inner = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend(reversed(list(inner)))
    return None


def _vector(item: dict[str, Any], bad: Any) -> Optional[list[float]]:
    if "embedding" not in item:
        return None
    vector, model = item["embedding"], item.get("embedding_model")
    kinds = set(map(type, vector)) if isinstance(vector, list) else {type(vector)}
    if not isinstance(vector, list) or not vector or not kinds <= {float, int}:
        raise bad('"embedding" must be a non-empty list of finite numbers')
    if (problem := vector_problem(vector)) is not None:
        raise bad(f'the "embedding" {problem}')
    if not (isinstance(model, dict) and set(model) == {"model", "dimensions"}
            and isinstance(model["model"], str) and isinstance(model["dimensions"], int)):
        raise bad('an "embedding" needs its "embedding_model": {"model": name, '
                  f'"dimensions": n}}, got {_given(item, "embedding_model")}')
    if len(vector) != model["dimensions"]:
        raise bad(f'the embedding has {len(vector)} numbers but "embedding_model" says '
                  f'{model["dimensions"]} dimensions')
    return vector if kinds == {float} else [float(x) for x in vector]


def json_refusal(error: Exception) -> str:
    """Why Python's JSON reader gave up on a line it could parse no further."""
    if isinstance(error, RecursionError):
        return "nested too deeply"
    return "a number too long to read" if "digits" in str(error) else str(error)


def _kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def _given(item: dict[str, Any], name: str) -> str:
    return _shown(item[name]) if name in item else "nothing"


def _shown(value: Any) -> str:
    """A value as JSON for an error message, cut to 60 characters."""
    shown = json.dumps(value, ensure_ascii=False, default=str)
    return shown if len(shown) <= 60 else shown[:59] + "…"


def link_problem(
    index: Optional[MemoryStore], nodes: Sequence[BaseNode], *, must_exist: bool
) -> Optional[tuple[int, str]]:
    """The first of ``nodes`` whose ``supersedes`` is wrong, as (its position, why), or None.

    Wrong: naming a memory of another user (in ``nodes`` or, given ``index``, in the store),
    or, with ``must_exist``, naming an id that is neither (a link to a deleted memory is
    harmless and kept, but one typed by hand is likely a typo), or making a cycle: the
    memory supersedes itself, directly or through others (of ``nodes`` and the store's).
    """
    known: dict[str, BaseNode] = {node.node_id: node for node in nodes}
    wanted = _named(nodes) - known.keys()
    asked: set[str] = set()
    while wanted and index is not None:  # the memories named, and those they name (cycles)
        asked |= wanted
        found = get_memories(index, sorted(wanted))
        known.update((node.node_id, node) for node in found)
        wanted = _named(found) - known.keys() - asked
    for position, node in enumerate(nodes):
        for link in linked_ids(node, SUPERSEDES_KEY):
            if link not in known:
                if must_exist:
                    return position, (f"supersedes names {link}, which is no memory in the "
                                      "store or the file")
                continue
            try:
                check_link(node, known[link])
            except ValueError as error:
                return position, str(error)
    return _cycle(nodes, {node_id: linked_ids(node, SUPERSEDES_KEY)
                          for node_id, node in known.items()})


def _named(nodes: Iterable[BaseNode]) -> set[str]:
    return {link for node in nodes for link in linked_ids(node, SUPERSEDES_KEY)}


def _cycle(nodes: Sequence[BaseNode], links: dict[str, list[str]]
           ) -> Optional[tuple[int, str]]:
    """The first of ``nodes`` on a cycle of ``links`` (id -> the ids it supersedes), as
    (its position, the cycle from it), or None. A cycle of other memories only (the
    store's, written before links were checked) is not the nodes' doing and is passed."""
    positions = {node.node_id: position for position, node in enumerate(nodes)}
    done: set[str] = set()
    for node in nodes:
        if node.node_id in done:
            continue
        path = {node.node_id: 0}  # the ids followed from node, each with its place on the path
        branches = [iter(links.get(node.node_id, []))]
        while branches:
            following = next(branches[-1], None)
            if following is None:
                done.add(path.popitem()[0])
                branches.pop()
            elif following in path:
                cycle = list(path)[path[following]:]
                ours = [i for i in cycle if i in positions]
                if ours:
                    start = cycle.index(min(ours, key=positions.__getitem__))
                    return positions[cycle[start]], _cycle_problem(cycle[start:] + cycle[:start])
            elif following not in done:
                path[following] = len(path)
                branches.append(iter(links.get(following, [])))
    return None


def _cycle_problem(cycle: list[str]) -> str:
    if len(cycle) == 1:
        return f"memory {cycle[0]} cannot supersede itself"
    return (f"supersedes makes a cycle: {' → '.join([*cycle, cycle[0]])}; a memory can only "
            "update earlier ones")
