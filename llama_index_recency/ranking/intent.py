"""What a question asks of time: the present state, a past one, an event, or neither.

A question about the present ("What do I drink these days?") wants the newest version of
a fact, one about the past ("What did I use to drink?") an old one, one about an event
("When did I go to Kyoto?") the memory of that event, and most questions ("How do I take
my coffee?") say neither. :class:`~llama_index_recency.RecencyPolicy` sets the recency
bonus and whether newer versions go first per intent. The rule is a fixed phrase list in
English and Japanese, so it is predictable and testable; extend it by adding patterns to
:data:`PRESENT_PATTERNS` / :data:`PAST_POINTING_PATTERNS` / :data:`EVENT_PATTERNS` before
the first question (they are compiled on first use). A past marker wins over a present
one ("This is an old story, but I still…"), and a present one over an event's tense.
:data:`TIME_PHRASES`, the phrases that say only when, are no terms of a question's words.
Vague recent references ("the other day", 「この前」) are in no list.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Literal

Intent = Literal["present", "past", "event", "neutral"]

PRESENT_PATTERNS: list[str] = [
    r"\bnow\b",
    r"\bnowadays\b",
    r"\bthese days\b",
    r"\blately\b",
    r"\brecently\b",
    r"\bcurrently\b",
    r"\bcurrent\b",
    r"\bstill\b",
    r"\bany ?more\b",
    r"\bat the moment\b",
    r"\bat present\b",
    r"\bthis (?:week|month|year)\b",
    r"\bthe latest\b",
    r"\bend(?:ed|s)? up\b",  # "What did I end up buying?" asks for the outcome, as 結局 does
    r"\bin the end\b",
    r"最近",
    r"今(?!度|後|朝|晩|夜|日|週|月|年|回|更)",  # 今 (now), not 今度 (next time), 今日 (today), …
    r"(?<![てでい])いま(?![すせし])",  # not the verb ending 〜ています
    r"現在",
    r"まだ",
    r"結局",
    r"近頃|このごろ|この頃",
    r"現時点",
]
"""Regular expressions (case-insensitive) for phrases that ask about the present state."""

PAST_POINTING_PATTERNS: list[str] = [
    r"\bold story\b",
    r"\b(?:a )?long time ago\b",
    r"\blong ago\b",
    r"\bages ago\b",
    r"\b(?:years|months) ago\b",
    r"\ba (?:while|long while) (?:ago|back)\b",
    r"\bway back\b",
    r"\bback (?:in|when|then)\b",  # "back in the summer", "back in 2024", "back when I…"
    r"\blast (?:year|summer|winter|spring|autumn|fall)\b",
    r"\bin the old days\b",
    r"\bin the past\b",
    r"\b(?:I|we|you) used to\b",
    r"\bdid (?:I|we|you) use to\b",
    r"\bpreviously\b",
    r"\bformerly\b",
    r"\bat first\b",
    r"\boriginally\b",
    r"\bat the (?:start|beginning)\b",
    # "before" that stands for an earlier time ("What did I drink before?", "before that",
    # "before I switched"), not "before bed" nor "what I told you before".
    r"(?<!told you )(?<!told me )(?<!said )(?<!mentioned )(?<!asked )"
    r"\bbefore(?= *(?:[?.!,]|$|that\b|then\b|I\b|we\b|the (?:move|switch|change)\b))",
    r"昔",
    r"ずっと前",
    r"だいぶ前",
    r"去年",
    r"(?<!名)(?<!この)前(?:は|まで)",  # not 名前は (the name is), nor この前 (the other day)
    r"以前",
    r"最初は|最初の頃",
    r"もともと|元々",
    r"当初",
    r"かつて",
]
"""Regular expressions (case-insensitive) for phrases that point to the past, English and
Japanese."""


EVENT_PATTERNS: list[str] = [
    # Not a recall of something the user said or has ("What did I say I drink?", "What was
    # my coffee order?", "What was my dog's name again?"), nor "I was wondering…".
    r"^(?!.*\bagain\b).*(?:\bdid\b(?! (?:I|you|we) (?:say|tell|mention|ask)\b)"
    r"|\b(?:was|were)\b(?! (?:my|our|wondering|thinking|hoping)\b))",
]
"""Regular expressions (case-insensitive) for a question in the English simple past ("When
did…", "What was…"): it asks about something that happened, and a newer memory on the same
topic is not a newer version of it. A recall of what the user said or has ("What did I say
I drink?", "What was my coffee order?", "…again?") is not an event. Japanese has no list:
its past form also marks recall of a present fact (「何だったっけ？」)."""


@lru_cache(maxsize=16)
def compiled_patterns(patterns: tuple[str, ...]) -> re.Pattern[str]:
    """One case-insensitive expression matching any of ``patterns`` (none: nothing).

    Raises:
        re.error: One of ``patterns`` is not a valid regular expression (say, one added to
            :data:`PRESENT_PATTERNS`).
    """
    return re.compile("|".join(patterns) or "(?!)", re.IGNORECASE)


def points_to_past(question: str) -> bool:
    """True when ``question`` contains one of :data:`PAST_POINTING_PATTERNS`."""
    return compiled_patterns(tuple(PAST_POINTING_PATTERNS)).search(question) is not None


def asks_about_present(question: str) -> bool:
    """True when ``question`` contains one of :data:`PRESENT_PATTERNS`."""
    return compiled_patterns(tuple(PRESENT_PATTERNS)).search(question) is not None


TIME_PHRASES: list[str] = [
    r"\b(?:these|those) days\b", r"\bnowadays\b", r"\blately\b", r"\brecently\b",
    r"\bcurrent(?:ly)?\b", r"\bpresently\b", r"\bat (?:the|this) moment\b",
    r"\bat present\b", r"\bright now\b", r"\bany ?more\b", r"\bused to\b", r"\buse to\b",
    r"\bpreviously\b", r"\bformerly\b", r"\boriginally\b", r"\bat first\b",
    r"\bin the past\b", r"\bin the old days\b",
    r"\b(?:a )?(?:long )?(?:time|while) ago\b", r"\b(?:long|ages|years|months) ago\b",
    r"最近", r"近頃|このごろ|この頃", r"現時点", r"現在(?!地)", r"(?:今|いま)(?=[はもで])", r"以前",
    r"当初", r"かつて", r"もともと|元々",
]
"""Regular expressions (case-insensitive) for phrases that only say when a question is about
(its intent reads them): none of their words is what it asks about. Narrower than the intent's
lists, whose "back in", "last summer" or 前は hold words a question may be asking about."""


def without_time_phrases(question: str) -> str:
    """``question`` with :data:`TIME_PHRASES` blanked out: what is left says what it asks
    about, not when."""
    return compiled_patterns(tuple(TIME_PHRASES)).sub(" ", question)


def asks_about_event(question: str) -> bool:
    """True when ``question`` contains one of :data:`EVENT_PATTERNS`."""
    return compiled_patterns(tuple(EVENT_PATTERNS)).search(question) is not None


def question_intent(question: str) -> Intent:
    """``"present"``, ``"past"``, ``"event"`` or ``"neutral"``: which versions of a fact
    ``question`` wants.

    A past marker wins ("This is an old story, but I still…" asks about the past), then a
    present one ("What did I say I drink these days?" asks about the present).
    """
    return _intent(question, tuple(PAST_POINTING_PATTERNS), tuple(PRESENT_PATTERNS),
                   tuple(EVENT_PATTERNS))


@lru_cache(maxsize=1024)
def _intent(question: str, past: tuple[str, ...], present: tuple[str, ...],
            event: tuple[str, ...]) -> Intent:
    """:func:`question_intent` under these patterns, remembered: every step that ranks a
    question asks for its intent."""
    if compiled_patterns(past).search(question):
        return "past"
    if compiled_patterns(present).search(question):
        return "present"
    return "event" if compiled_patterns(event).search(question) else "neutral"
