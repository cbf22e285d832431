"""Detect questions that explicitly point to the past ("this is an old story, but…").

For such a question the user wants an old memory, so a recency bonus works against
them; :class:`~llama_index_recency.RecencyBonusPostprocessor` can scale it down
(``past_bonus_scale``). Detection is a fixed phrase list, so it is predictable and
testable; vague recent references ("the other day", "lately") are deliberately absent.
"""

from __future__ import annotations

import re

PAST_POINTING_PATTERNS: tuple[str, ...] = (
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
    r"\b(?:I|we|you) used to\b",
    r"\bdid (?:I|we|you) use to\b",
    r"昔",
    r"ずっと前",
    r"だいぶ前",
    r"去年",
)
"""Regular expressions (case-insensitive) for phrases that point to the past, English and Japanese."""

_PAST_POINTING = re.compile("|".join(PAST_POINTING_PATTERNS), re.IGNORECASE)


def points_to_past(question: str) -> bool:
    """True when ``question`` contains one of :data:`PAST_POINTING_PATTERNS`."""
    return _PAST_POINTING.search(question) is not None
