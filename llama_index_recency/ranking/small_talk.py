"""Small talk carries no question a personal memory answers: no memory enters the prompt for it.

A greeting, thanks or a goodbye (「こんにちは」, "Thanks!") and a question about the day itself
("What's the weather today?", 「今何時？」) name nothing the user did or said, yet on a store of
everyday memories they score like a question about it: the bundled Japanese store let three
memories into the prompt for 「こんにちは」 at its fitted gate. The rule is a fixed phrase list in
English and Japanese, like :mod:`llama_index_recency.ranking.news`, matched against the whole
message (punctuation, emoji and a name after a greeting aside): "Thanks! How do I take my
coffee?" and "What was the weather in Hakone?" are not small talk. Extend
:data:`SMALL_TALK_PATTERNS` before the first question.
"""

from __future__ import annotations

import re
from dataclasses import replace

from llama_index_recency.ranking.intent import compiled_patterns
from llama_index_recency.ranking.ranked import RecencyRanking

SMALL_TALK_PATTERNS: list[str] = [
    # greetings, thanks, goodbyes, acknowledgements; a name may follow a greeting
    r"(?:hi|hello|hey|hiya|yo|good (?:morning|afternoon|evening|night)|morning|evening"
    r"|thanks|thank you(?: (?:so|very) much)?|thx|bye|goodbye|good ?bye|see you(?: later"
    r"| tomorrow| soon)?|ok|okay|cool|nice|great|sure|got it|i see)(?: [a-z][\w'-]*)?",
    r"how are you(?: doing)?(?: today)?|how's it going|what's up",
    r"こんにちは|こんばんは|おはよう(?:ございます)?|ありがとう(?:ございます)?|どうも"
    r"|おやすみ(?:なさい)?|またね|じゃあね|よろしく(?:お願いします)?|了解|なるほど"
    r"|元気(?:ですか|？|\?)?|はい|うん",
    # the day itself: its weather, date, day of the week, time
    r"what(?:'s| is) the weather(?: like)?(?: (?:today|now|tonight))?"
    r"|what(?:'s| is) (?:the date|today's date)(?: today)?|what day is (?:it|today)(?: today)?"
    r"|what time is it(?: now)?",
    r"(?:今日|明日)の天気(?:は|って)?(?:どう)?|今日は何日|今日は何曜日|今何時",
]
"""Regular expressions (case-insensitive) for a whole message of small talk; a message is
small talk when it is one or more of them, separated by punctuation or spaces."""

SMALL_TALK_VERDICT = "not given: small talk"
"""The verdict on every candidate of a message of small talk."""

_SEPARATORS = re.compile(r"[\s,.!?~…、。！？～・\-]+|[^\w\s']+")


def is_small_talk(message: str) -> bool:
    """True when all of ``message`` (punctuation and emoji aside) is :data:`SMALL_TALK_PATTERNS`."""
    text = _SEPARATORS.sub(" ", message.lower()).strip()
    if not text:
        return False
    one = "(?:" + compiled_patterns(tuple(SMALL_TALK_PATTERNS)).pattern + ")"
    return re.fullmatch(f"{one}(?: {one})*", text, re.IGNORECASE) is not None


def about_small_talk(ranking: RecencyRanking, message: str) -> RecencyRanking:
    """``ranking`` with no memory for the prompt when ``message`` is small talk (every row says
    so); otherwise ``ranking`` itself."""
    if not is_small_talk(message):
        return ranking
    return replace(ranking, nodes=(), vague=False,
                   rows=tuple(row.judged(SMALL_TALK_VERDICT) for row in ranking.rows))
