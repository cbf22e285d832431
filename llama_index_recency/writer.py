"""Memory writer: turn a conversation into dated fact memories stored in the index.

The seed's pipeline: conversation → pick memory candidates → summarize each into a fact
sentence → fill in the explicit subject → attach the date → embed → store in Qdrant.
One structured LLM call does the first two steps; everything it returns is validated
and turned into nodes before anything is written, so a failure stores nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Literal, Optional

from llama_index.core import VectorStoreIndex
from llama_index.core.bridge.pydantic import BaseModel, Field
from llama_index.core.llms import LLM
from llama_index.core.prompts import PromptTemplate
from llama_index.core.schema import TextNode

from llama_index_recency.memory import memory_node, with_subject

Role = Literal["user", "assistant"]

MemoryDate = date | datetime | str | None


class MemoryWriteError(RuntimeError):
    """Memories could not be made from a conversation; nothing was stored."""


@dataclass(frozen=True)
class Turn:
    """One message of a conversation."""

    role: Role
    text: str


class MemoryCandidate(BaseModel):
    """One durable fact about the user, as the LLM proposes it."""

    turn: int = Field(description="Number of the user turn the fact comes from.")
    kind: Literal["preference", "plan", "event", "habit_change"] = Field(
        description="What sort of fact it is."
    )
    fact: str = Field(
        description=(
            "One self-contained English sentence about the user with the subject "
            "'The user', without a date, e.g. 'The user has been drinking sweet café au "
            "lait lately.'"
        )
    )


class ExtractedMemories(BaseModel):
    """The LLM's answer: the facts worth remembering (often none)."""

    memories: list[MemoryCandidate] = Field(
        default_factory=list,
        description="Durable facts about the user; empty when nothing is worth remembering.",
    )


MEMORY_EXTRACTION_PROMPT = PromptTemplate(
    """\
You keep a conversational character's long-term memory about its user. Read the \
conversation below and list the durable facts about the user worth remembering in later \
conversations: preferences (likes, dislikes, how they take things), plans, events in \
their life, and changes of habit. Nothing else: no small talk, no passing moods, no \
questions, no facts about the assistant, no general knowledge, nothing the user did not \
say. Only the user's own turns count as evidence.

For each fact give the number of the user turn it comes from, its kind (preference, \
plan, event or habit_change), and one self-contained English sentence with the subject \
"The user" (for example "The user has been drinking sweet café au lait lately."). Do not \
put dates in the sentence; the date is attached separately. If nothing is worth \
remembering, return an empty list.

Conversation (numbered turns):
{conversation}
"""
)
"""The extraction prompt; its only variable is ``conversation``."""

_TURN_LINE = re.compile(r"^(user|assistant)\s*:\s?(.*)$", re.IGNORECASE)


def parse_transcript(text: str) -> list[Turn]:
    """Read a transcript: one ``user: …`` or ``assistant: …`` line per turn.

    Blank lines and lines starting with ``#`` are ignored; any other line is an error
    naming its line number, so a malformed file never half-parses.
    """
    turns = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _TURN_LINE.match(stripped)
        if match is None or not match.group(2).strip():
            raise ValueError(
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
    prompt: PromptTemplate = MEMORY_EXTRACTION_PROMPT,
) -> list[TextNode]:
    """Ask ``llm`` for the facts worth remembering and build validated memory nodes (not stored).

    Raises :class:`MemoryWriteError` when the LLM call fails or any proposed fact is
    invalid (a non-user turn, no explicit subject, more than one line).
    """
    day = _day(memory_date)  # a bad date fails before the LLM is called
    if not _has_user_turn(turns):
        return []
    try:
        answer = llm.structured_predict(
            ExtractedMemories, prompt, conversation=_numbered(turns)
        )
    except Exception as error:
        raise _llm_failed(error) from error
    return _memory_nodes(answer, turns, day, user_name)


async def aextract_memories(
    turns: Sequence[Turn],
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    prompt: PromptTemplate = MEMORY_EXTRACTION_PROMPT,
) -> list[TextNode]:
    """Async :func:`extract_memories`."""
    day = _day(memory_date)  # a bad date fails before the LLM is called
    if not _has_user_turn(turns):
        return []
    try:
        answer = await llm.astructured_predict(
            ExtractedMemories, prompt, conversation=_numbered(turns)
        )
    except Exception as error:
        raise _llm_failed(error) from error
    return _memory_nodes(answer, turns, day, user_name)


def remember(
    turns: Sequence[Turn],
    index: VectorStoreIndex,
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    prompt: PromptTemplate = MEMORY_EXTRACTION_PROMPT,
) -> list[TextNode]:
    """Extract memories from ``turns`` and store them in ``index``; returns what was stored.

    ``memory_date`` (default: today) is the conversation's day; a datetime counts by
    its own calendar day. Ids come from date and fact, so remembering the same
    conversation twice stores each memory once. All nodes are embedded in one batch
    before the single write, so an LLM or embedding failure stores nothing.
    """
    nodes = extract_memories(
        turns, llm, memory_date=memory_date, user_name=user_name, prompt=prompt
    )
    if nodes:
        index.insert_nodes(nodes)
    return nodes


async def aremember(
    turns: Sequence[Turn],
    index: VectorStoreIndex,
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
    prompt: PromptTemplate = MEMORY_EXTRACTION_PROMPT,
) -> list[TextNode]:
    """Async :func:`remember` (the index needs an async Qdrant client)."""
    nodes = await aextract_memories(
        turns, llm, memory_date=memory_date, user_name=user_name, prompt=prompt
    )
    if nodes:
        await index.ainsert_nodes(nodes)
    return nodes


def remember_transcript(
    path: str | Path,
    index: VectorStoreIndex,
    llm: LLM,
    *,
    memory_date: MemoryDate = None,
    user_name: Optional[str] = None,
) -> list[TextNode]:
    """:func:`remember` on a transcript file (format: :func:`parse_transcript`, UTF-8)."""
    turns = parse_transcript(Path(path).read_text(encoding="utf-8"))
    return remember(turns, index, llm, memory_date=memory_date, user_name=user_name)


def _has_user_turn(turns: Sequence[Turn]) -> bool:
    return any(turn.role == "user" for turn in turns)


def _numbered(turns: Sequence[Turn]) -> str:
    return "\n".join(f"{i}. {turn.role}: {turn.text}" for i, turn in enumerate(turns, start=1))


def _llm_failed(error: Exception) -> MemoryWriteError:
    return MemoryWriteError(
        f"the LLM could not extract memories ({type(error).__name__}: {error}); "
        "nothing was stored"
    )


def _memory_nodes(
    answer: ExtractedMemories,
    turns: Sequence[Turn],
    day: date,
    user_name: Optional[str],
) -> list[TextNode]:
    """Validate every candidate, then build the nodes; any problem rejects them all."""
    problems = []
    for candidate in answer.memories:
        problem = _problem(candidate, turns, user_name)
        if problem:
            problems.append(f"{candidate.fact!r}: {problem}")
    if problems:
        raise MemoryWriteError(
            "the LLM proposed invalid memories, so nothing was stored: " + "; ".join(problems)
        )
    nodes: dict[str, TextNode] = {}
    for candidate in answer.memories:
        node = memory_node(
            candidate.fact, day, user_name=user_name, metadata={"kind": candidate.kind}
        )
        nodes.setdefault(node.node_id, node)  # the same fact twice is one memory
    return list(nodes.values())


def _problem(candidate: MemoryCandidate, turns: Sequence[Turn], user_name: Optional[str]) -> str:
    if not 1 <= candidate.turn <= len(turns) or turns[candidate.turn - 1].role != "user":
        return f"turn {candidate.turn} is not a user turn"
    fact = candidate.fact.strip()
    if not fact or "\n" in fact:
        return "a memory is one non-empty line"
    subject = user_name or "the user"
    if subject.lower() not in with_subject(fact, subject).lower():
        return f"no explicit subject ({subject!r})"
    return ""


def _day(value: MemoryDate) -> date:
    """The conversation's calendar day: today by default, a datetime's own day."""
    if value is None:
        return date.today()
    if isinstance(value, str):
        text = value.strip()
        value = date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
    return value.date() if isinstance(value, datetime) else value
