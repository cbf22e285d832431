"""Memory text as the LLM sees it: one line per memory, unable to break out of its block."""

from __future__ import annotations

import html
import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

from llama_index.core.schema import BaseNode

from llama_index_recency.records.nodes import calendar_day

MEMORY_DATE_PREFIX = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}: ")
"""The recorded date that starts each memory line (``memory_node`` writes it)."""

# Where a sentence may end: a run of .!?… (then closing quotes or brackets) before white space,
# a run of 。！？!?．｡ (Japanese), or a line break.
_SENTENCE_END = re.compile(r"([^\s]*?)([.!?…]+)[\"'”’)\]]*\s+|[。！？!?．｡]+|\n")
_QUOTE_CLOSERS = "」』）)”’】》〉\"'"
_NEXT_NON_SPACE = re.compile(r"\S")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr mt gen capt sgt rev lt col gov sen rep ave rd blvd apt vol "
    "approx etc vs jan feb mar apr jun jul aug sep sept oct nov dec e.g i.e a.m p.m".split()
)
"""Words that a period follows without ending the sentence ("Dr. Tanaka", "7 a.m. daily");
so does a single letter (an initial: "J. K. Rowling", "U.S. Army"; not a digit: "I scored 3.")
and "No." before a number."""

_MONTHS = frozenset(
    "jan january feb february mar march apr april jun june jul july aug august sep sept "
    "september oct october nov november dec december januar februar märz mai juni juli "
    "oktober dez dezember".split()
)
"""Month names that follow an ordinal number ("am 3. Mai", "the 3. June"): no sentence end
("May" is left out: "I got 3. May I ask?")."""

_DASHES = "-‐‒–—―−˗⁃ー"
"""The hyphen and what reads as one between digits after NFKC (which folds ‑, －, ﹣, ﹘ and ｰ
into these): dashes, the minus sign and the katakana long vowel mark."""

_AS_HYPHEN = str.maketrans(dict.fromkeys(_DASHES[1:], "-"))

# A date (2099-01-01 and its look-alikes: 2099‐1‐1, 2099/01/01, 2099.01.01, 2099年1月1日),
# optionally with a time and offset, followed by a colon or a look-alike (∶ ꞉ ˸), with NFKC
# applied first (full-width digits and colons).
_DATE_COLON = re.compile(
    rf"(?<!\d)((?:\d{{4}}([{_DASHES}/.])\d{{1,2}}\2\d{{1,2}}|\d{{4}}年\d{{1,2}}月\d{{1,2}}日)"
    rf"(?:[T ]\d{{2}}:\d{{2}}(?::\d{{2}}(?:[.,]\d+)?)?"
    rf"(?:Z|[{_DASHES}+]\d{{2}}(?::?\d{{2}})?)?)?)\s*[:∶꞉˸]"
)

LEFT_ANGLE_LOOKALIKES = "‹〈⟨❬❮❰⧼˂˱⦑⋖ᐸ"
RIGHT_ANGLE_LOOKALIKES = "›〉⟩❭❯❱⧽˃˲⦒⋗ᐳ"
"""Angle-bracket look-alikes that NFKC leaves alone; folded to < and > so they get escaped
(here in memory text, and in the writer's conversation text)."""

_ANGLE_LOOKALIKES = str.maketrans(
    {**dict.fromkeys(LEFT_ANGLE_LOOKALIKES, "<"), **dict.fromkeys(RIGHT_ANGLE_LOOKALIKES, ">")}
)


def _neutralised(text: str) -> str:
    """``text`` NFKC-normalised ("…" kept) with every ``<date>:`` turned into ``<date> -``
    (its hyphens shown as ``-``), so that no date in it reads as a memory's recorded date."""
    text = "…".join(unicodedata.normalize("NFKC", part) for part in text.split("…"))
    return _DATE_COLON.sub(lambda date: f"{date[1].translate(_AS_HYPHEN)} -", text)


def escape_memory_text(text: str) -> str:
    """Make memory text unable to close or reopen the block or to fake a memory's date.

    Each line's leading ``YYYY-MM-DD: `` as ``memory_node`` writes it (ASCII, one space) is
    kept as the memory's date. The rest is NFKC-normalised (so full-width ``＜`` and
    ``２０９９-０１-０１：`` read as what they look like; "…" is kept), its dates followed by
    a colon (ISO, also with look-alike hyphens, slashes or dots, or ``2099年01月01日``)
    neutralised, other angle-bracket look-alikes folded to ``<``/``>``, then HTML-escaped
    with quotes left alone, so "Taro's" stays "Taro's". The writer's
    ``<existing_memories>`` use it too.
    """
    lines = []
    for line in text.split("\n"):
        prefix = MEMORY_DATE_PREFIX.match(line)
        start = prefix.end() if prefix else 0
        lines.append(line[:start] + _neutralised(line[start:]))
    return html.escape("\n".join(lines).translate(_ANGLE_LOOKALIKES), quote=False)


def is_one_statement(text: str) -> bool:
    """True when a memory's text, its date prefix aside, is one sentence, as the writer stores a
    fact; a turn of conversation or a document chunk usually says several things. Linear in
    the text's length (a long pasted text costs one pass); remembered for the short texts a
    store's questions meet again and again."""
    return _one_statement(text) if len(text) <= 1000 else _uncached_one_statement(text)


def _uncached_one_statement(text: str) -> bool:
    body = _body(text)
    return bool(body) and next(_sentence_ends(body), None) is None


_one_statement = lru_cache(maxsize=4096)(_uncached_one_statement)


def sentences(text: str, most: int) -> list[str]:
    """A memory's sentences, its date prefix aside, as :func:`is_one_statement` tells them
    apart (abbreviations, initials and Japanese quotes kept inside); at most ``most``: the
    last one holds the rest. Linear in the text's length."""
    body = _body(text)
    found: list[str] = []
    start = 0
    for end in _sentence_ends(body):
        if len(found) == most - 1:
            break
        found.append(body[start:end].strip())
        start = end
    found.append(body[start:].strip())
    return [sentence for sentence in found if sentence]


def _body(text: str) -> str:
    body = text.lstrip()
    prefix = MEMORY_DATE_PREFIX.match(body)
    return (body[prefix.end():] if prefix else body).strip()


def _sentence_ends(body: str) -> Iterator[int]:
    """Where each sentence of ``body`` but the last ends (an offset into it)."""
    last_alnum = next((i for i in range(len(body) - 1, -1, -1) if body[i].isalnum()), -1)
    for end in _SENTENCE_END.finditer(body):
        if end.end() > last_alnum:
            return  # nothing but punctuation or an emoji follows, here and after
        following = _NEXT_NON_SPACE.search(body, end.end())
        assert following is not None  # an alphanumeric character follows
        first = following.group()
        if end.group(2) is not None:  # . ! ? …: the next word must not go on in lower case
            if first.islower():
                continue
            word = end.group(1).lower().lstrip("\"'“‘(")
            if end.group(2) == "." and (_abbreviated(word, first) or _ordinal(
                    word, body[:end.start(1)], body[following.start():following.start() + 12])):
                continue
        elif first in _QUOTE_CLOSERS:
            continue  # 「最高だ！」と言った: the quote closes and the sentence goes on
        yield end.end()


def _abbreviated(word: str, following: str) -> bool:
    """Whether the period after ``word`` marks an abbreviation rather than a sentence end
    (``following``: the first character after it that is not a space)."""
    if word == "no":  # "No. 5", not "No. I haven't"
        return following.isdigit()
    last = word.rsplit(".", 1)[-1]
    return (len(last) == 1 and last.isalpha()) or word in _ABBREVIATIONS


def _ordinal(word: str, before: str, after: str) -> bool:
    """Whether the number ``word`` with its period is a list item's number ("1. Buy milk", the
    line's first word) or an ordinal date ("am 3. Mai"): no sentence ends there."""
    if not word.isdigit():
        return False
    month = after.split(maxsplit=1)[0].rstrip(".,").lower() if after.strip() else ""
    return not before.strip() or before.endswith("\n") or month in _MONTHS


def memory_text(node: BaseNode, date_key: str = "date") -> str:
    """A node as one memory of the block: ``YYYY-MM-DD: <content>``, the date its recorded one.

    The date is the node's ``date_key`` metadata (a plain ``TextNode`` too), never its text:
    content starting with that day as ``memory_node`` writes it keeps one prefix, and every
    other date in the content, leading or not, is neutralised as :func:`escape_memory_text`
    neutralises an inner one (``2099-12-31 -``). A node without a usable date is its
    neutralised content alone, so a planted leading date never reads as its date. Metadata
    never leaks into the text.
    """
    content = node.get_content()
    value = node.metadata.get(date_key)
    try:
        prefix = "" if value is None else f"{calendar_day(value).isoformat()}: "
    except ValueError:
        prefix = ""
    body = content[len(prefix):] if content.startswith(prefix) else content
    return prefix + _neutralised(body)
