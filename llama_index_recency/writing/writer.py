"""Memory writer: turn a conversation into dated fact memories stored in the index.

The pipeline: conversation → pick memory candidates → summarize each into a fact
sentence → fill in the explicit subject → attach the date → embed → store in Qdrant.
One structured LLM call per bounded part of the conversation does the first two steps;
every answer is validated and turned into nodes before anything is written, so a failure
(of the LLM, of its answer, of the embedding) stores nothing. An invalid proposed fact is
not a failure of the conversation: it is left out, named in one warning, and the valid
facts are stored; only when no proposed fact is valid does the write fail.
"""

from __future__ import annotations

import logging
import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from pathlib import Path
from typing import Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.schema import BaseNode, TextNode

from llama_index_recency.errors import FinalWriteError, InvalidInputError
from llama_index_recency.errors import MemoryWriteError as MemoryWriteError  # their common base
from llama_index_recency.records.links import check_link
from llama_index_recency.records.nodes import (
    SUBJECT_PLACEHOLDERS,
    SeveralUsersWarning,
    calendar_day,
    check_not_future,
    check_user_id,
    check_user_name,
    has_subject,
    memory_node,
    quoted,
)
from llama_index_recency.records.nodes import Turn as Turn  # a writer's input
from llama_index_recency.records.text import (
    LEFT_ANGLE_LOOKALIKES,
    RIGHT_ANGLE_LOOKALIKES,
    escape_memory_text,
    memory_text,
)
from llama_index_recency.storage import memory_scope
from llama_index_recency.writing.extraction import EXTRACTION_TOOL as EXTRACTION_TOOL
from llama_index_recency.writing.extraction import (
    MEMORY_EXTRACTION_PROMPT,
    ExtractedMemories,
    MemoryCandidate,
    aask,
    ask,
)
from llama_index_recency.writing.updates import (
    StoredMemories,
    ainsert_memories,
    insert_memories,
)

logger = logging.getLogger(__name__)

MemoryDate = date | datetime | str | None

MAX_CHUNK_CHARS = 8_000
"""Most conversation characters (numbered, escaped turns) sent in one extraction request.

A longer conversation is cut between turns (a longer turn is cut inside, its parts keeping
its number) into parts of at most this size, one request each; the instructions and the
answer schema (about 3,000 characters) come on top. 8,000 characters are about 2,000
English or 6,000-8,000 Japanese tokens, well inside a 32k-token Qwen3 context with room
for the answer. All parts are answered and validated before anything is stored.
"""


RELATED_MEMORIES = 5
"""Existing memories shown with each part of a conversation, most similar first, so the LLM
can say which ones a new fact updates."""

_TURN_LINE = re.compile(r"^(user|assistant)\s*:\s?(.*)$", re.IGNORECASE)


def parse_transcript(text: str) -> list[Turn]:
    """Read a transcript: one ``user: …`` or ``assistant: …`` line per turn.

    Blank lines and lines starting with ``#`` are ignored; any other line is an error
    naming its line number, so a malformed file never half-parses.

    Raises:
        InvalidInputError: A line that is not blank, a ``#`` comment, or a ``user:`` or
            ``assistant:`` turn with text.
    """
    turns = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _TURN_LINE.match(stripped)
        if match is None or not match.group(2).strip():
            raise InvalidInputError(
                f"transcript line {number}: expected 'user: …' or 'assistant: …', got {line!r}"
            )
        turns.append(Turn(role=match.group(1).lower(), text=match.group(2).strip()))  # type: ignore[arg-type]
    return turns


def extract_memories(
    turns: Sequence[Turn],
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    user_id: Optional[str] = None,
    index: Optional[VectorStoreIndex] = None,
    prompt: BasePromptTemplate = MEMORY_EXTRACTION_PROMPT,
    allow_future: bool = False,
) -> list[TextNode]:
    """Ask ``llm`` for the facts worth remembering and build validated memory nodes (not stored).

    A function-calling LLM is asked to call :data:`EXTRACTION_TOOL`; any other LLM, or one
    that answers in text anyway, is read as a JSON object. A conversation longer than
    :data:`MAX_CHUNK_CHARS` takes one request per part. With ``index``, each request also
    shows the user's :data:`RELATED_MEMORIES` most similar existing memories, and a fact
    that updates some of them gets their ids in ``supersedes``. An invalid proposed fact (a
    non-user turn, no explicit subject, more than one line, an instruction to the
    assistant, too long, an update of a memory not shown or of another user's) is left out
    and named, with its turn and the reason, in one warning on this module's logger; the
    valid ones are returned.

    Raises:
        RetryableWriteError: An LLM call failed (the failure is the ``__cause__``).
        FinalWriteError: An answer is not :class:`ExtractedMemories`, or facts were proposed
            and none is valid.
        FutureMemoryDateError: ``memory_date`` is more than one day after today (unless
            ``allow_future=True``); raised before any LLM call.
        InvalidInputError: ``memory_date`` cannot be read, or ``user_name`` or ``user_id``
            is blank or holds a control character; raised before any LLM call.
    """
    job = _Job.start(turns, memory_date, user_name, user_id, prompt, allow_future)
    related = [_related(index, job, part) for part in job.parts]
    answers = [ask(llm, job.messages(part, shown)) for part, shown in zip(job.parts, related)]
    return job.nodes(answers, related)


async def aextract_memories(
    turns: Sequence[Turn],
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    user_id: Optional[str] = None,
    index: Optional[VectorStoreIndex] = None,
    prompt: BasePromptTemplate = MEMORY_EXTRACTION_PROMPT,
    allow_future: bool = False,
) -> list[TextNode]:
    """Async :func:`extract_memories`.

    Raises:
        RetryableWriteError: An LLM call failed (the failure is the ``__cause__``).
        FinalWriteError: An answer is not :class:`ExtractedMemories`, or facts were proposed
            and none is valid.
        FutureMemoryDateError: ``memory_date`` is more than one day after today (unless
            ``allow_future=True``); raised before any LLM call.
        InvalidInputError: ``memory_date`` cannot be read, or ``user_name`` is blank or
            holds a control character; raised before any LLM call.
    """
    job = _Job.start(turns, memory_date, user_name, user_id, prompt, allow_future)
    related = [await _arelated(index, job, part) for part in job.parts]
    answers = [await aask(llm, job.messages(part, shown))
               for part, shown in zip(job.parts, related)]
    return job.nodes(answers, related)


def remember(
    turns: Sequence[Turn],
    index: VectorStoreIndex,
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    user_id: Optional[str] = None,
    prompt: BasePromptTemplate = MEMORY_EXTRACTION_PROMPT,
    allow_future: bool = False,
) -> list[TextNode]:
    """Extract memories from ``turns`` and store them in ``index``; returns what was stored.

    ``memory_date`` (default: today) is the conversation's day; a datetime counts by
    its own calendar day. A day more than one day after today is refused with
    :class:`~llama_index_recency.errors.FutureMemoryDateError` (a ``ValueError``) before
    any LLM call, unless ``allow_future=True``. ``user_id`` scopes the memories (and the
    existing ones the LLM is shown) to one user. Ids come from (user,) date and fact, so
    remembering the same conversation twice stores each memory once. Every part of a long
    conversation is extracted and validated before anything is stored (through
    :func:`~llama_index_recency.writing.updates.insert_memories`), so an LLM failure
    stores nothing; invalid proposed facts are left out (one warning) and the valid ones
    stored (see :func:`extract_memories`). A fact that updates existing memories is stored
    with ``supersedes`` naming them (they are kept). A forget of the user while the LLM
    answers (:func:`~llama_index_recency.writing.updates.forget`) covers this conversation:
    nothing is stored.

    Raises:
        RetryableWriteError: An LLM call failed; nothing was stored.
        FinalWriteError: An answer is not :class:`ExtractedMemories`, or facts were proposed
            and none is valid; nothing was stored.
        FutureMemoryDateError: ``memory_date`` is more than one day after today (unless
            ``allow_future=True``); raised before any LLM call.
        InvalidInputError: ``memory_date`` cannot be read, or ``user_name`` is blank or
            holds a control character; raised before any LLM call.
        PartialWriteError: A store batch failed; it says how many memories were stored.
    """
    heard = datetime.now(timezone.utc)
    nodes = extract_memories(turns, llm, memory_date=memory_date, user_name=user_name,
                             user_id=user_id, index=index, prompt=prompt,
                             allow_future=allow_future)
    if not nodes:
        return nodes
    return _kept(nodes, insert_memories(index, nodes, said_at=heard))


async def aremember(
    turns: Sequence[Turn],
    index: VectorStoreIndex,
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    user_id: Optional[str] = None,
    prompt: BasePromptTemplate = MEMORY_EXTRACTION_PROMPT,
    allow_future: bool = False,
) -> list[TextNode]:
    """Async :func:`remember`; embedding and storing run in a worker thread.

    Raises:
        RetryableWriteError: An LLM call failed; nothing was stored.
        FinalWriteError: An answer is not :class:`ExtractedMemories`, or facts were proposed
            and none is valid; nothing was stored.
        FutureMemoryDateError: ``memory_date`` is more than one day after today (unless
            ``allow_future=True``); raised before any LLM call.
        InvalidInputError: ``memory_date`` cannot be read, or ``user_name`` is blank or
            holds a control character; raised before any LLM call.
        PartialWriteError: A store batch failed; it says how many memories were stored.
    """
    heard = datetime.now(timezone.utc)
    nodes = await aextract_memories(turns, llm, memory_date=memory_date, user_name=user_name,
                                    user_id=user_id, index=index, prompt=prompt,
                                    allow_future=allow_future)
    if not nodes:
        return nodes
    # Embedding and the (sync) Edge write, off the event loop.
    return _kept(nodes, await ainsert_memories(index, nodes, said_at=heard))


def _kept(nodes: list[TextNode], stored: StoredMemories) -> list[TextNode]:
    """``nodes`` but those left out because their user was forgotten while they were made."""
    return [node for node in nodes if node.node_id not in stored.forgotten]


def remember_transcript(
    path: str | Path,
    index: VectorStoreIndex,
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    user_id: Optional[str] = None,
    allow_future: bool = False,
) -> list[TextNode]:
    """:func:`remember` on a transcript file (format: :func:`parse_transcript`, UTF-8).

    Raises:
        OSError: The file cannot be read.
        UnicodeDecodeError: The file is not UTF-8 text.
        InvalidInputError: A line :func:`parse_transcript` refuses, an unreadable
            ``memory_date`` or a bad ``user_name``; raised before any LLM call.
        FutureMemoryDateError: ``memory_date`` is more than one day after today (unless
            ``allow_future=True``); raised before any LLM call.
        RetryableWriteError: An LLM call failed; nothing was stored.
        FinalWriteError: No valid fact came of an answer; nothing was stored.
        PartialWriteError: A store batch failed; it says how many memories were stored.
    """
    turns = parse_transcript(Path(path).read_text(encoding="utf-8"))
    return remember(turns, index, llm, memory_date=memory_date, user_name=user_name,
                    user_id=user_id, allow_future=allow_future)


_UNSCOPED_WRITES: "weakref.WeakKeyDictionary[VectorStoreIndex, SeveralUsersWarning]" = (
    weakref.WeakKeyDictionary())
"""Per index, the warning for writes without ``user_id`` that show the LLM several users'
memories: logged once per store, not once per conversation (a memory block writes often)."""


def _related(index: Optional[VectorStoreIndex], job: "_Job", part: "_Part") -> list[BaseNode]:
    """The user's existing memories most similar to a part, for the LLM to mark updates."""
    if index is None:
        return []
    retriever = index.as_retriever(similarity_top_k=RELATED_MEMORIES, filters=memory_scope(user_id=job.user_id))
    found = retriever.retrieve(job.related_query(part))
    return _shown(index, job, [node.node for node in found])


async def _arelated(
    index: Optional[VectorStoreIndex], job: "_Job", part: "_Part"
) -> list[BaseNode]:
    if index is None:
        return []
    retriever = index.as_retriever(similarity_top_k=RELATED_MEMORIES, filters=memory_scope(user_id=job.user_id))
    found = await retriever.aretrieve(job.related_query(part))
    return _shown(index, job, [node.node for node in found])


def _shown(index: VectorStoreIndex, job: "_Job", related: list[BaseNode]) -> list[BaseNode]:
    """``related``, after the once-per-store warning when an unscoped write shows several users'."""
    if job.user_id is None:
        _UNSCOPED_WRITES.setdefault(index, SeveralUsersWarning("remember")).check(related)
    return related


# -- the steps shared by the sync and async paths ----------------------------------------


@dataclass(frozen=True)
class _Part:
    """One request's worth of the conversation: its numbered lines and their turn numbers."""

    text: str
    turn_numbers: frozenset[int]


@dataclass(frozen=True)
class _Job:
    """One extraction: the conversation cut into bounded parts, and how answers become nodes."""

    turns: Sequence[Turn]
    day: date
    user_name: Optional[str]
    user_id: Optional[str]
    prompt: BasePromptTemplate
    parts: list[_Part]

    @classmethod
    def start(cls, turns: Sequence[Turn], memory_date: MemoryDate, user_name: Optional[str],
              user_id: Optional[str], prompt: BasePromptTemplate,
              allow_future: bool = False) -> "_Job":
        """Check date and name (before any LLM call) and cut the conversation into parts."""
        day = _day(memory_date)
        if not allow_future:
            check_not_future(day)  # a FutureMemoryDateError (ValueError), before any LLM call
        if user_name is not None:
            check_user_name(user_name)
        if user_id is not None:
            check_user_id(user_id)  # after the LLM call, a refusal would lose the conversation
        parts = [part for part in _parts(turns)
                 if any(turns[n - 1].role == "user" for n in part.turn_numbers)]
        return cls(turns, day, user_name, user_id, prompt, parts)

    def related_query(self, part: _Part) -> str:
        """What a part's related memories are searched with: its user turns."""
        return "\n".join(self.turns[n - 1].text for n in sorted(part.turn_numbers)
                         if self.turns[n - 1].role == "user")


    def messages(self, part: _Part, related: Sequence[BaseNode] = ()) -> list[ChatMessage]:
        existing = ""
        if related:
            # Read and escaped as in the memory block (dated, NFKC, look-alikes), on one line.
            lines = "\n".join(f"E{i}. {escape_memory_text(' '.join(memory_text(node).split()))}"
                              for i, node in enumerate(related, start=1))
            existing = f"\n<existing_memories>\n{lines}\n</existing_memories>"
        return self.prompt.format_messages(conversation=part.text, existing_memories=existing)

    def nodes(self, answers: Sequence[ExtractedMemories],
              related: Sequence[Sequence[BaseNode]]) -> list[TextNode]:
        """Validate every candidate of every part and build the valid ones' nodes.

        Invalid candidates are left out and named (turn, fact, reason) in one warning; when
        candidates were proposed and none is valid, :class:`FinalWriteError` names them all.
        """
        problems = []
        nodes: dict[str, TextNode] = {}
        for part, answer, shown in zip(self.parts, answers, related, strict=True):
            labels = {f"E{i}": node for i, node in enumerate(shown, start=1)}
            for candidate in answer.memories:
                try:
                    _check(candidate, part, self.turns, self.user_name)
                    unknown = sorted(set(candidate.updates) - set(labels))
                    if unknown:
                        raise InvalidInputError(f"updates {unknown} name no existing memory shown")
                    # allow_future: the day was checked in start, before any LLM call.
                    node = memory_node(candidate.fact, self.day, user_name=self.user_name,
                                       user_id=self.user_id, allow_future=True,
                                       supersedes=[labels[label].node_id
                                                   for label in candidate.updates],
                                       metadata={"kind": candidate.kind})
                    for label in candidate.updates:
                        check_link(node, labels[label])
                except ValueError as problem:
                    problems.append(f"turn {candidate.turn}, {quoted(candidate.fact)}: {problem}")
                    continue
                nodes.setdefault(node.node_id, node)  # the same fact twice is one memory
        if problems and not nodes:
            raise FinalWriteError(
                "the LLM proposed no valid memory, so nothing was stored: " + "; ".join(problems)
            )
        if problems:
            logger.warning("the LLM proposed %d invalid memor%s, left out (the %d valid kept): %s",
                           len(problems), "y" if len(problems) == 1 else "ies", len(nodes),
                           "; ".join(problems))
        return list(nodes.values())


_AS_DATA = str.maketrans({"&": "&amp;", "＆": "&amp;", "﹠": "&amp;",
                          **dict.fromkeys("<＜﹤" + LEFT_ANGLE_LOOKALIKES, "&lt;"),
                          **dict.fromkeys(">＞﹥" + RIGHT_ANGLE_LOOKALIKES, "&gt;")})
"""Escapes for turn text: no tag (not even a look-alike: ＜, 〈, ‹ …) can close <conversation>."""


def _parts(turns: Sequence[Turn]) -> list[_Part]:
    """Numbered, escaped turn lines packed into parts of at most :data:`MAX_CHUNK_CHARS`."""
    lines: list[tuple[int, str]] = []
    for number, turn in enumerate(turns, start=1):
        head, more = f"{number}. {turn.role}: ", f"{number}. {turn.role} (continued): "
        pieces = _cut(turn.text.translate(_AS_DATA), MAX_CHUNK_CHARS - len(more))
        lines += [(number, (more if i else head) + piece) for i, piece in enumerate(pieces)]
    parts: list[_Part] = []
    text, numbers = "", set[int]()
    for number, line in lines:
        if text and len(text) + 1 + len(line) > MAX_CHUNK_CHARS:
            parts.append(_Part(text, frozenset(numbers)))
            text, numbers = "", set()
        text = f"{text}\n{line}" if text else line
        numbers.add(number)
    if text:
        parts.append(_Part(text, frozenset(numbers)))
    return parts


def _cut(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` characters, never splitting an ``&…;`` escape."""
    pieces = []
    while len(text) > size:
        cut = size
        amp = text.rfind("&", cut - 4, cut)
        if amp != -1 and ";" not in text[amp:cut]:
            cut = amp
        pieces.append(text[:cut])
        text = text[cut:]
    return pieces + [text]


_INSTRUCTION = re.compile(
    r"\b(?:the\s+)?(?:assistant|AI|bot|chatbot|model|system)\s+"
    r"(?:should|must|shall|has to|needs to|is to|always|never)\b"
    r"|\b(?:wants?|asks?|asked|tells?|told|instructs?|instructed|expects?|requires?|orders?"
    r"|would like|needs?)\s+(?:the\s+)?(?:assistant|AI|bot|chatbot|model|you)\s+to\b"
    r"|\bignore\s+(?:all\s+|any\s+|the\s+)?(?:previous\s+|prior\s+|above\s+|earlier\s+)?"
    r"(?:instructions|rules)\b"
    r"|(?:アシスタント|AI|ボット|あなた)(?:に|へ|は|が)[^。]*?"
    r"(?:ほしい|欲しい|ください|下さい|しろ|せよ|すること|べき|なさい|もらいたい)"
    r"|(?:指示|命令|ルール)を(?:無視|忘れ)",
    re.IGNORECASE,
)
"""Requests aimed at the assistant, not facts about the user (a backstop to the prompt's rule)."""


def _check(candidate: MemoryCandidate, part: _Part, turns: Sequence[Turn],
           user_name: Optional[str]) -> None:
    """Raise ValueError naming what is wrong with a proposed fact (memory_node checks the rest)."""
    if candidate.turn not in part.turn_numbers or turns[candidate.turn - 1].role != "user":
        raise InvalidInputError(f"turn {candidate.turn} is not a user turn")
    fact = candidate.fact.strip()
    if not fact or "\n" in fact:
        raise InvalidInputError("a memory is one non-empty line")
    if _INSTRUCTION.search(fact):
        raise InvalidInputError("an instruction to the assistant, not a fact about the user")
    if not has_subject(fact, user_name):
        subjects = " or ".join(repr(s) for s in [*SUBJECT_PLACEHOLDERS.values(), user_name] if s)
        raise InvalidInputError(f"no explicit subject ({subjects})")


def _day(value: MemoryDate) -> date:
    """The conversation's calendar day: today by default, a datetime's own day."""
    return date.today() if value is None else calendar_day(value)
