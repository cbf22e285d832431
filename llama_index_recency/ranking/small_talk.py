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
    # greetings, thanks, goodbyes, acknowledgements
    r"hi|hello|hey|hiya|yo|good (?:morning|afternoon|evening|night)|morning|evening"
    r"|thanks(?: (?:a lot|so much))?|thank you(?: (?:so|very) much)?|thx|bye|goodbye|good ?bye"
    r"|see you(?: later| tomorrow| soon)?|take care|ok|okay|cool|nice|great|sure|got it|i see",
    r"how are you(?: doing)?(?: (?:today|these days|lately|recently|nowadays))?"
    r"|how have you been(?: (?:lately|recently))?|how's it going|what's up",
    r"こんにちは|こんばんは|おはよう?(?:ございます)?|ありがと(?:う)?(?:ございます|ね)?|どうも"
    r"|おやすみ(?:なさい)?|またね|じゃあね|バイバイ|お疲れ(?:様)?|よろしく(?:お願いします)?|了解"
    r"|なるほど|元気(?:ですか)?|はい|うん",
    # the day itself: its weather, date, day of the week, time
    r"(?:what's|what is|how's|how is) the weather(?: like)?(?: (?:today|now|tonight))?"
    r"|what(?:'s| is) (?:the date|today's date|the time)(?: today| now)?"
    r"|what day is (?:it|today)(?: today)?|what time is it(?: now)?",
    r"(?:今日|明日)の天気(?:は|って)?(?:どう)?|今日は何日|今日は何曜日|今 ?何時",
]
"""Regular expressions (case-insensitive) for a whole message of small talk; a message is
small talk when it is one or more of them, separated by punctuation or spaces."""

_ADDRESSED = r"(?:hi|hello|hey|good (?:morning|afternoon|evening|night)|thanks|thank you|bye)"
"""The greetings a name or a form of address may follow ("Hi Taro!", "thanks mom")."""

_ADDRESS = re.compile(
    rf"\b({_ADDRESSED})[ ,]+(?:[A-Z][\w'-]*|mom|dad|mum|there|guys|everyone|all|buddy|dear)\b",
    re.IGNORECASE)

SMALL_TALK_VERDICT = "not given: small talk"
"""The verdict on every candidate of a message of small talk."""

_SEPARATORS = re.compile(r"[\s,.!?~…、。！？～〜ー・\-]+|[^\w\s']+")


def is_small_talk(message: str) -> bool:
    """True when all of ``message`` (punctuation and emoji aside, and a name or form of address
    after a greeting) is :data:`SMALL_TALK_PATTERNS`."""
    named = _ADDRESS.sub(_greeting_alone, message.replace("\u2019", "'"))
    text = " ".join(_SEPARATORS.sub(" ", named.lower()).split())
    if not text:
        return False
    one = "(?:" + compiled_patterns(tuple(SMALL_TALK_PATTERNS)).pattern + ")"
    return re.fullmatch(f"{one}(?: {one})*", text, re.IGNORECASE) is not None


def _greeting_alone(match: re.Match[str]) -> str:
    """The greeting of a greeting and a name; the name only when it is capitalised or a
    form of address ("ok coffee" and "great trip" keep their words)."""
    whole, greeting = match.group(0), match.group(1)
    name = whole[len(greeting):].lstrip(" ,")
    addressed = name[:1].isupper() or name.lower() in _FORMS_OF_ADDRESS
    return greeting if addressed else whole


_FORMS_OF_ADDRESS = {"mom", "dad", "mum", "there", "guys", "everyone", "all", "buddy", "dear"}


def about_small_talk(ranking: RecencyRanking, message: str) -> RecencyRanking:
    """``ranking`` with no memory for the prompt when ``message`` is small talk (every row says
    so); otherwise ``ranking`` itself."""
    if not is_small_talk(message):
        return ranking
    return replace(ranking, nodes=(), vague=False,
                   rows=tuple(row.judged(SMALL_TALK_VERDICT) for row in ranking.rows))
