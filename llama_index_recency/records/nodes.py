"""Memory records: one dated fact sentence per ``TextNode``: its keys, ids, ``memory_node`` and
the conversation ``Turn``."""

from __future__ import annotations

import logging
import math
import re
import unicodedata
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any, Literal, Optional

import numpy as np
from llama_index.core.schema import BaseNode, TextNode

from llama_index_recency.errors import FutureMemoryDateError, InvalidInputError
from llama_index_recency.records.dates import parse_memory_date

logger = logging.getLogger(__name__)

# A fixed namespace makes memory ids reproducible across processes and machines.
MEMORY_NAMESPACE = uuid.UUID("5b0f7c1e-8f53-4c54-9d0e-3a1f1d2c7e61")

MAX_FACT_CHARS = 1_000
"""Longest fact a memory may hold, in characters (date prefix not counted).

A memory is one fact sentence (the bundled ones are 20-70 characters). 1,000 leaves room
for a long Japanese or English sentence while staying within what the embedding models
read (all-MiniLM-L6-v2 truncates at 256 word pieces, about 1,000 English characters: a
longer tail would be stored but never searched) and far below an LLM's context window,
so a retrieved memory always fits in one prompt.
"""

FLOAT32_MAX = 3.4028234663852886e38
"""The largest number a stored vector (float32) holds."""


def vector_problem(vector: Sequence[float]) -> Optional[str]:
    """What keeps ``vector`` from being stored and compared by cosine (a number float32 cannot
    hold, or a length a float32 store cannot normalize by), or None when it can be."""
    try:
        values = np.asarray(vector, dtype=np.float64)
    except OverflowError:  # an integer beyond any float
        values = np.array([math.inf])
    if not np.all(np.abs(values) <= FLOAT32_MAX):  # NaN and inf fail too
        return "holds a number that is not finite as float32 (stored, it would be NaN)"
    single = values.astype(np.float32)
    with np.errstate(over="ignore", under="ignore"):
        length = float(np.sqrt(np.dot(single, single)))  # in float32, as the store takes it
    if not math.isfinite(length) or length == 0.0:
        return ("has no length float32 can normalize by (all zeros, or numbers too large "
                "or too small): a cosine could not compare it")
    return None


SUBJECT_PLACEHOLDERS = {"en": "The user", "ja": "ユーザー"}
"""The generic subject the writer puts in facts, per language; ``user_name`` replaces it."""

_GENERIC_SUBJECT = re.compile(
    r"\b(?:[Tt]he user|User)\b"  # English: "The user", "the user's", "User"
    r"|(?<![\u30a0-\u30ff])ユーザー(?![\u30a0-\u30ff])"  # Japanese, not inside a longer katakana word
)

_CJK_NAMES = ("CJK UNIFIED IDEOGRAPH", "CJK COMPATIBILITY IDEOGRAPH", "HANGUL SYLLABLE")
"""Unicode name prefixes of the characters that are a word on their own (one kana is not)."""

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Turn:
    """One message of a conversation."""

    role: Role
    text: str


USER_ID_KEY = "user_id"
"""Metadata / payload key scoping a memory to one user."""

SUPERSEDES_KEY = "supersedes"
"""Metadata key: ids of the earlier memories a memory updates or contradicts."""

SUPERSEDED_BY_KEY = "superseded_by"
"""Metadata key of the back links older stores carry (written by 0.2.0; ids of the later
memories): read, never written."""


def check_not_future(memory_date: date | datetime | str, *,
                     reference_date: date | datetime | str | None = None) -> date:
    """The calendar day of ``memory_date``, or :class:`FutureMemoryDateError` when that day
    is more than one day after ``reference_date``'s (default: today, the machine's date).

    Tomorrow is accepted: the user's day can be ahead of the machine's (time zones). A
    later date is almost always a typo (2099 for 2026) and would rank as brand new for years.

    Raises:
        FutureMemoryDateError: The day is more than one day after ``reference_date``'s.
        InvalidInputError: ``memory_date`` or ``reference_date`` is not a readable date.
    """
    day = calendar_day(memory_date)
    today = date.today() if reference_date is None else calendar_day(reference_date)
    if (day - today).days > 1:
        raise FutureMemoryDateError(day, today)
    return day


class SeveralUsersWarning:
    """Warns once when a reader without ``user_id`` meets memories of several users: each
    user's memories can then reach another's prompt or extraction (a scoped reader never warns)."""

    def __init__(self, reader: str, *, scoped: bool = False) -> None:
        self._reader = reader
        self._warned = scoped

    def check(self, nodes: Iterable[BaseNode]) -> None:
        """Log the warning (the first time only) when ``nodes`` hold more than one user id."""
        if self._warned:
            return
        users = sorted({str(user) for node in nodes
                        if (user := node.metadata.get(USER_ID_KEY)) is not None})
        if len(users) > 1:
            self._warned = True
            names = ", ".join([repr(user) for user in users[:3]] + ["..."] * (len(users) > 3))
            logger.warning("%s without user_id met memories of several users (%s): one user's "
                           "memories can reach another's; pass user_id= to scope it",
                           self._reader, names)


def check_user_id(user_id: object) -> str:
    """``user_id`` if it can name a user: a non-blank string on one line of printable text.

    Raises:
        InvalidInputError: It cannot, naming it.
    """
    if not isinstance(user_id, str) or not user_id.strip():
        raise InvalidInputError(f"user_id must be a non-blank string, got {user_id!r}")
    _refuse_lone_surrogate(user_id, "user_id")
    bad_character = control_character(user_id)
    if bad_character is not None:
        raise InvalidInputError(f"user_id {user_id!r} contains the control character "
                                f"{bad_character!r}; a user id is one line of printable text")
    return user_id


def memory_id(fact: str, memory_date: str, user_id: Optional[str] = None) -> str:
    """Deterministic id from (user,) date and fact, so storing the same memory twice overwrites it.

    Unscoped ids are computed exactly as in the first stores (qdrant-client local-mode
    stores, written by 0.1.0), so existing stores never get duplicates; a user's id
    includes the user, so two users' identical facts on one day stay two memories.
    """
    key = f"{memory_date}\n{fact}" if user_id is None else f"{user_id}\n{memory_date}\n{fact}"
    return str(uuid.uuid5(MEMORY_NAMESPACE, key))


def control_character(text: str) -> Optional[str]:
    """The first control or line/paragraph separator character in ``text``; None for one
    line of printable text."""
    return next((c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)


def says_something(fact: str) -> bool:
    """Whether ``fact`` holds a word: two letters in a row (in any script; combining marks
    may stand between them, as in "किताब") or one CJK ideograph or Hangul syllable ("猫").

    "猫が好き。", "OK" and "Taro is 8." do; ".", "…", "a", "42" and "☕" do not.
    """
    letters = 0
    for character in fact:
        category = unicodedata.category(character)
        if category.startswith("L"):
            letters += 1
            if letters == 2 or unicodedata.name(character, "").startswith(_CJK_NAMES):
                return True
        elif not category.startswith("M"):
            letters = 0
    return False


def quoted(text: str, limit: int = 100) -> str:
    """``text`` quoted for a one-line message, cut after ``limit`` characters (the cut shown
    outside the quotes)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


def check_user_name(user_name: str) -> str:
    """Return ``user_name`` if it can stand in a memory: non-blank, no control characters.

    Raises:
        InvalidInputError: ``user_name`` is blank or holds a control character.
    """
    if not user_name.strip():
        raise InvalidInputError(f"user_name {user_name!r} is blank")
    bad = control_character(user_name)
    if bad is not None:
        raise InvalidInputError(
            f"user_name {user_name!r} contains the control character {bad!r}; "
            "a name is one line of printable text"
        )
    _refuse_lone_surrogate(user_name, "user_name")
    return user_name


def _shown(value: object, limit: int = 100) -> str:
    """``repr(value)`` for a one-line message, cut after ``limit`` characters."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _refuse_lone_surrogate(text: str, what: str) -> None:
    """Refuse half of a UTF-16 pair (as JSON's ``"\\ud83c"`` decodes): no store can write it.

    Raises:
        InvalidInputError: ``text`` holds one, naming ``what``.
    """
    if any("\ud800" <= character <= "\udfff" for character in text):
        raise InvalidInputError(f"{what} {quoted(text)} holds a lone surrogate (half of an "
                                "emoji's code); it cannot be stored")


def checked_metadata(metadata: object) -> dict[str, Any]:
    """``metadata`` as a memory stores it: text keys and JSON values, a date, datetime or UUID
    as its text (as Qdrant Edge stores one); a NaN, bytes, a set or a number key would be
    stored as something else, or not at all.

    Raises:
        InvalidInputError: Not a dict, or a key or value (at any depth) that is neither,
            naming it.
    """
    if not isinstance(metadata, dict):
        raise InvalidInputError(f"metadata must be a dict, got {_shown(metadata)}")
    stored: dict[str, Any] = _stored_value(metadata, "metadata", ())
    return stored


_MAX_METADATA_DEPTH = 32
"""Containers within containers a memory's metadata may hold below its top-level dict (JSON
itself sets no limit)."""


def _stored_value(value: Any, where: str, within: tuple[int, ...]) -> Any:
    """``value`` (at ``where`` in the metadata, inside the containers ``within``) as stored.

    Raises:
        InvalidInputError: A key or value JSON has no form for, naming it; a container that
            holds itself, or containers nested too deep.
    """
    if isinstance(value, (dict, list, tuple)):
        if id(value) in within:
            raise InvalidInputError(f"{where} holds itself; metadata must be JSON (a tree)")
        if len(within) > _MAX_METADATA_DEPTH:
            raise InvalidInputError(f"{where} is nested more than {_MAX_METADATA_DEPTH} deep")
        within = (*within, id(value))
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                raise InvalidInputError(f"{where} has the key {key!r}, which is not text")
            _refuse_lone_surrogate(key, f"the key of {where}")
        return {key: _stored_value(item, f"{where}[{key!r}]", within)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stored_value(item, f"{where}[{index}]", within)
                for index, item in enumerate(value)]
    if isinstance(value, (date, datetime)):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        _refuse_lone_surrogate(value, where)
        return value
    if isinstance(value, int) and not isinstance(value, bool) \
            and not -(2 ** 63) <= value < 2 ** 64:
        raise InvalidInputError(f"{where} is an integer beyond 64 bits, which the store cannot "
                                "hold: give it as text")
    if value is None or isinstance(value, (bool, int)) or (
            isinstance(value, float) and math.isfinite(value)):
        return value
    raise InvalidInputError(f"{where} is {_shown(value)}, which is not JSON: give text, a "
                            "finite number, true/false, None, a date, or lists and dicts of them")


def with_subject(fact: str, user_name: str) -> str:
    """Replace the generic subject ("The user", "User", 「ユーザー」) with ``user_name``,
    literally.

    Raises:
        InvalidInputError: ``user_name`` is blank or holds a control character.
    """
    name = check_user_name(user_name)
    return _GENERIC_SUBJECT.sub(lambda _: name, fact)


def has_subject(fact: str, user_name: Optional[str] = None) -> bool:
    """Whether ``fact`` names its subject: a generic placeholder or ``user_name`` itself."""
    return bool(_GENERIC_SUBJECT.search(fact)) or bool(user_name and user_name in fact)


def memory_node(
    fact: str,
    memory_date: date | datetime | str,
    *,
    user_name: Optional[str] = None,
    user_id: Optional[str] = None,
    supersedes: Optional[Sequence[str]] = None,
    date_key: str = "date",
    metadata: Optional[dict[str, Any]] = None,
    reference_date: date | datetime | str | None = None,
    allow_future: bool = False,
) -> TextNode:
    """Build the node for one memory: text ``"YYYY-MM-DD: <fact>"``, ISO date in metadata.

    Spacing is normalised to single spaces; a fact that is still not one line of printable
    text (a control character such as ESC or NUL), says nothing (no word: ".", "…", "a";
    see :func:`says_something`) or is longer than :data:`MAX_FACT_CHARS` is refused.
    ``user_name`` replaces the generic subject (:func:`with_subject`). ``user_id`` scopes
    the memory to one user (stored under :data:`USER_ID_KEY` and part of the id; one
    line of printable text); ``supersedes`` names the ids (UUID strings, stored as
    :func:`canonical_id` spells them) of earlier memories this one updates: any insert path
    links them, since successors are found by searching ``supersedes`` (see
    :mod:`llama_index_recency.records.links`).

    A memory dated more than one day after today (``reference_date``, default the
    machine's date; a datetime counts by its calendar day) is refused with
    :class:`FutureMemoryDateError` unless ``allow_future=True``: it would keep the full
    recency bonus until that day. Tomorrow is accepted (the user's time zone may be ahead).

    The date stays in the embedded text (the shipped policies were calibrated on cosines of
    dated text) and is also stored under ``date_key`` for the bonus. Metadata is
    excluded from the embedding and the LLM prompt, so the date is never shown twice.

    Raises:
        InvalidInputError: A fact that is not a string, is empty, has a control character,
            no word or more than :data:`MAX_FACT_CHARS` characters; a ``user_name`` or
            ``user_id`` that is blank or not one line; an unreadable date; ``date_key``,
            ``user_id`` or ``supersedes`` given twice (argument and ``metadata``); a link that
            is not a UUID or names the memory itself.
        FutureMemoryDateError: A date more than one day after ``reference_date``'s, without
            ``allow_future``.
    """
    if not isinstance(fact, str):
        raise InvalidInputError(f"a fact is a sentence (a string), got {fact!r}")
    fact = " ".join(fact.split())
    if not fact:
        raise InvalidInputError("a memory needs a non-empty fact sentence")
    bad_character = control_character(fact)
    if bad_character is not None:
        raise InvalidInputError(
            f"the fact contains the control character {bad_character!r}; a fact "
            "is one line of printable text")
    _refuse_lone_surrogate(fact, "the fact")
    if not says_something(fact):
        raise InvalidInputError(
            f"the fact {quoted(fact)} holds no word; a fact says something in at least one "
            "word of two or more letters (or one CJK character)")
    if user_name is not None:
        fact = with_subject(fact, user_name)
    if len(fact) > MAX_FACT_CHARS:
        raise InvalidInputError(
            f"a memory is one fact of at most {MAX_FACT_CHARS} characters; this one has "
            f"{len(fact)} ({fact[:40]!r}...)"
        )
    iso_date = _iso(memory_date)
    if not allow_future:
        check_not_future(memory_date, reference_date=reference_date)
    extra = {} if metadata is None else checked_metadata(metadata)
    if date_key in extra:
        raise InvalidInputError(f"metadata already has {date_key!r}; pass the date as memory_date")
    for key, value in ((USER_ID_KEY, user_id), (SUPERSEDES_KEY, supersedes)):
        if value is not None and key in extra:
            raise InvalidInputError(f"pass {key} as the {key}= argument or in metadata, not both")
    if user_id is not None:
        extra[USER_ID_KEY] = check_user_id(user_id)
    if supersedes:
        extra[SUPERSEDES_KEY] = supersedes
    # Checked here: a bad link would be stored and only fail when followed or forgotten.
    links = [str(link) for link in extra.get(SUPERSEDES_KEY) or []]
    bad = [link for link in links if not is_memory_id(link)]
    if bad:
        raise InvalidInputError(
            f"supersedes names {bad[0]!r}, which is not a memory id (a UUID string)")
    if links:
        extra[SUPERSEDES_KEY] = sorted(set(map(canonical_id, links)))
    node_metadata = {date_key: iso_date, **extra}
    node_id = memory_id(fact, iso_date, extra.get(USER_ID_KEY))
    if node_id in (extra.get(SUPERSEDES_KEY) or []):
        raise InvalidInputError(f"memory {node_id} ({fact[:40]!r}) cannot supersede itself")
    return TextNode(
        id_=node_id,
        text=f"{iso_date[:10]}: {fact}",
        metadata=node_metadata,
        excluded_embed_metadata_keys=list(node_metadata),
        excluded_llm_metadata_keys=list(node_metadata),
    )


_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
"""A UUID spelled as the store spells it: one that need not be parsed again."""


def is_memory_id(value: object) -> bool:
    """Whether ``value`` is a UUID string, the only id a memory (a Qdrant point) can have."""
    if not isinstance(value, str):
        return False
    if _CANONICAL_ID.match(value):
        return True
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def canonical_id(memory_id: str) -> str:
    """A memory id as stored and looked up: ``str(uuid.UUID(memory_id))``, lower case with
    hyphens, whatever the spelling given (upper case, braces, no hyphens, ``urn:uuid:``).

    The store finds a point under any spelling but keeps the node's id as written, so an
    id written otherwise than canonically would never equal the one found by another.

    Raises:
        ValueError: ``memory_id`` is not a UUID in any spelling (from :class:`uuid.UUID`).
    """
    return memory_id if _CANONICAL_ID.match(memory_id) else str(uuid.UUID(memory_id))


def calendar_day(value: date | datetime | str) -> date:
    """The calendar day a memory date names: a date itself, an instant's day in its own UTC
    offset (the user's day, not UTC's).

    Raises:
        InvalidInputError: ``value`` is not a readable memory date (named).
    """
    day_or_instant = _checked(value)
    return day_or_instant.date() if isinstance(day_or_instant, datetime) else day_or_instant


def _iso(value: date | datetime | str) -> str:
    """ISO form of a memory date: ``YYYY-MM-DD`` for a day, RFC 3339 for an instant.

    An instant keeps its own UTC offset (naive means UTC), so the text's day is the
    user's day, not UTC's.
    """
    value = _checked(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.isoformat()


def _checked(value: date | datetime | str) -> date | datetime:
    """A valid memory date as a ``date`` (a day) or a ``datetime`` (an instant), as given."""
    parse_memory_date(value)  # validates; raises ValueError naming the value
    if isinstance(value, str):
        text = value.strip()
        return date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
    return value
