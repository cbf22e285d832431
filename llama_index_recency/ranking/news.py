"""Questions about what was on the news ask about the world, not about the user.

"What was that earthquake on the news recently?" or 「最近ニュースでやってた地震って何だっけ？」
points back in time like a question about the user's own doings, and a memory of a storm
that delayed the user's train scores as high as the user's own hot-spring trip does: no
threshold keeps it out and the trip in. The question is about a broadcast, which no personal
memory answers, so no memory enters the prompt for it (:func:`about_the_news`). The rule is
a fixed phrase list in English and Japanese, like :mod:`llama_index_recency.ranking.intent`; extend
:data:`NEWS_PATTERNS` before the first question. "Any news on that?" (a vague reference to
the user's own doings), "good news" (「いいニュースです」) and someone who "was on the news"
are not in it.
"""

from __future__ import annotations

from dataclasses import replace

from llama_index_recency.ranking.intent import compiled_patterns
from llama_index_recency.ranking.ranked import RecencyRanking

NEWS_PATTERNS: list[str] = [
    # not someone who "was on the news" (the user's own news), nor "the news desk"
    r"(?<!\bwas )(?<!\bwere )(?<!\bbeen )(?<!\bbe )(?<!\bis )(?<!\bam )(?<!\bare )"
    r"\b(?:on|in) the news\b(?! ?(?:desk|team|room|station|channel|anchor))",
    r"\bthe news (?:say|says|said|report|reported|show|showed)\b",
    r"\bnews (?:report|broadcast|headline)s?\b",
    r"ニュースで(?!す|し|取り上げ|紹介)",  # not 「いいニュースです」 nor the user featured on it
    r"ニュースになって",
    r"報道(?:され|で|によると)",
]
"""Regular expressions (case-insensitive) for phrases that ask about a news broadcast."""

NEWS_VERDICT = "not given: a question about the news"
"""The verdict on every candidate of a question about the news."""


def asks_about_the_news(question: str) -> bool:
    """True when ``question`` contains one of :data:`NEWS_PATTERNS`."""
    return compiled_patterns(tuple(NEWS_PATTERNS)).search(question) is not None


def about_the_news(ranking: RecencyRanking, question: str) -> RecencyRanking:
    """``ranking`` with no memory for the prompt when ``question`` asks about the news (every
    row says so); otherwise ``ranking`` itself."""
    if not asks_about_the_news(question):
        return ranking
    return replace(ranking, nodes=(), news=True, vague=False,
                   rows=tuple(row.judged(NEWS_VERDICT) for row in ranking.rows))
