"""Detect vague references to the user's own recent doings ("How did that thing go?").

A question such as "How did that thing you were working on go?" or 「あれ、どうなった？」
has no content word, so no embedding scores it high against any memory: it needs its own
path (:class:`~llama_index_recency.QdrantRecencyRetriever` lists the recent memories so the
character can ask back which one is meant), not a lower threshold for every question.

The detector is a fixed rule over fixed word lists, like
:func:`~llama_index_recency.ranking.intent.points_to_past`, so it is predictable and testable.
A question is a vague reference when both hold:

1. **a vague referent** (a *cue*): a general noun after a definite determiner ("that
   thing", "the stuff", "the project", "the upshot"; not "a thing" or "dark matter";
   「例の件」「あのこと」「言ってたやつ」「相談したアレ」「話してたの、」) or a free relative
   about what was said or done ("what I told you", "what you were up to"), which is enough
   on its own; or a pronoun ("it", "that", "everything"; 「あれ」「それ」「あっち」) in a
   question about the past or its outcome ("How did it go?", "Any luck with it?",
   「あれ、どうなった？」); or, in Japanese, which drops pronouns, an outcome predicate or
   noun alone (「うまくいった？」「どうだった？」「結果、出た？」「進展あった？」);
2. **no content word** once time words ("the other day", 「この前」), referents and
   fillers are set aside. English: no proper noun (a capitalised word inside a sentence)
   and no word right after a determiner or possessive ("the game", "my dentist", "that
   café") other than the listed function words, general and outcome nouns. Japanese: no
   katakana word and no kanji word in noun position (followed by a particle, the copula,
   an interrogative, an honorific, punctuation or the end; a kanji stem followed by other
   hiragana is a predicate, such as 「話した」「覚えてる」, and so are the listed
   「間に合った」「仕上がった」).

So predicates never count as content ("did it pan out?" is vague whatever the verb),
nouns do ("Who won the game the other day?", 「この前のワールドカップ…」, "How did my
dentist appointment go?"). Closed classes (pronouns, determiners, auxiliaries,
prepositions, particles, demonstratives, time words) are listed in full; the few
open-class words (general nouns such as "front" in "on that front", outcome words such as
"luck", 「結果」) come from the ``tune`` and ``tune2`` phrasings of
``benchmarks/data/vague_phrasings.json`` only. ``benchmarks/vague_reference.py`` measures
precision and recall on its ``heldout`` phrasings, written before the ``tune2`` rules.

Known limits: a noun the lists lack after a determiner is read as content, so missed
("Any word on that?", "if you don't mind my asking", "what became of that plan"); a
content word outside determiner position is not seen ("the stuff you put on rice"), nor
one written in hiragana (「ごはん、どうだった？」) or a kanji noun with kana ending
(「手作りのやつ」); a pronoun needs a past frame, so dialect endings (「どないなったん？」)
and the present progressive (「どうなってる？」) miss; any past question about "it" or
"that" with no content word reads as vague ("Did you see that?", "Did it rain
yesterday?"); a pronoun referent needs a question mark ("That was fun!" is not a question
about the user's doings), so a transcript without punctuation needs a general noun or an
outcome word.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Optional

from llama_index.core.schema import NodeWithScore
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency.ranking.plan import SCORE_SLACK, MemorySearch, SearchPlan
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.records.dates import parse_memory_date

VAGUE_WINDOW_DAYS = 14.0
"""How recent a memory must be (days before the reference date) to be listed for a vague
reference: two weeks of "what you were up to", the default ``tau_days`` of the bonus."""

VAGUE_REFERENCE_KEY = "vague_reference"
"""Node metadata key (True) on every node a vague-reference ranking returns, so the prompt
can say the reference is vague; excluded from the embedded and the LLM's text."""

RECENT_REASON = "recent (vague reference)"
"""``RankedMemory.reason`` of a recent memory listed for a vague reference."""

# --- English ------------------------------------------------------------------------------

_EN_TIME_WORDS: tuple[str, ...] = (
    r"the other (?:day|night|week)",
    r"(?:last|next|this|that) (?:time|night|week|weekend|month|year|morning|evening)",
    r"(?:earlier|later)(?: (?:on|today|this (?:week|month)))?",
    r"(?:a|one|some) (?:little |long )?(?:while|time)(?: ago| back| before)?",
    r"(?:a few|a couple(?: of)?|several|some|two|three|few) (?:days|weeks|hours)(?: ago| back)?",
    r"(?:a|one) (?:day|week|month) (?:ago|back)",
    r"(?:ago|back then|before|recently|lately|yesterday|today|tonight|now|these days|"
    r"so far|yet|then)",
    r"in the end",
    r"from (?:before|earlier)",
)
"""Time phrases (regular expressions) set aside before looking for content words."""

_EN_GENERAL_NOUNS = frozenset(
    # General nouns (Halliday & Hasan's class: a noun that only points back), plus
    # "project", "bit", "situation", "front" ("on that front") and the nouns for how it
    # ended ("the upshot").
    "thing things stuff matter matters business affair affairs front project bit "
    "situation outcome upshot verdict result results".split()
)
_EN_OUTCOME_NOUNS = frozenset(
    # Nouns that ask how something turned out without naming it ("any luck with it?");
    # after "the" only those of the general nouns point back ("the news" is the broadcast).
    "outcome upshot verdict result results luck progress success update updates news".split()
)
_EN_WEAK_REFERENTS = frozenset("it that this those these everything anything all one".split())
_EN_PAST_FRAME = frozenset(
    # Auxiliaries and common irregular pasts that put a question in the past.
    "did was were has have had been d went gone came become became got gotten made done "
    "said told brought thought left took ended".split()
)
_EN_DEFINITE = frozenset("the that this those these my your our his her their".split())
"""A general noun points back only after one of these ("that thing", "the upshot"; not
"a thing", "dark matter", "tell me things")."""
_EN_DETERMINERS = frozenset(
    "the a an my your his her our their its this that these those which whose any some no "
    "every each another".split()
)
_EN_FUNCTION_WORDS = frozenset(
    # pronouns, auxiliaries, prepositions, particles, conjunctions, adverbs, fillers
    "i me you he she we they him us them it its mine yours what whatever who where when why how "
    "is are am was were be been being do does did done have has had d s t ll re ve m don didn "
    "doesn isn wasn weren hasn haven hadn can could will would shall should may might must "
    "to of on in at for with about from by up out off over into onto back away down along "
    "around through and or but so if as than then there here too also just really ever still "
    "yet already all any some every no not one ones other whole same own "
    "okay ok well fine good right alright thoughts "
    "um uh er hmm hey oh so like anyway right well yeah".split()
)
_EN_PREDICATES = frozenset(
    # The verbs of the tune phrasings, which can follow a pronoun "that" ("did that go").
    "go goes going went gone work works working worked turn turns turned happen happened "
    "end ends ended get gets got come comes came finish finished manage managed remember "
    "mention mentioned tell told say said bring brought".split()
)
_EN_FREE_RELATIVE = re.compile(
    r"\bwhat (?:i|you|we) (?:was |were |had |have |'ve |'d )?"
    r"(?:said|say|saying|told|tell|telling|mentioned|mention|brought up|discussed|talked|"
    r"up to|working on|doing|did)\b"
)
_EN_WORD = re.compile(r"[A-Za-z0-9]+")


_EN_QUOTES = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'})
"""Curly quotes (as phones and word processors type them) read as straight ones."""


def _english_is_vague(question: str) -> bool:
    text = question.translate(_EN_QUOTES)
    lowered = text.lower()
    strong = _EN_FREE_RELATIVE.search(lowered) is not None
    blanked = re.sub(r"\b(?:" + "|".join(_EN_TIME_WORDS) + r")\b", _blank, text,
                     flags=re.IGNORECASE)
    words = list(_EN_WORD.finditer(blanked))
    tokens = [w.group().lower() for w in words]
    weak = False
    not_content = _EN_FUNCTION_WORDS | _EN_GENERAL_NOUNS | _EN_OUTCOME_NOUNS | _EN_PREDICATES
    for position, match in enumerate(words):
        word = tokens[position]
        if word in _EN_GENERAL_NOUNS and _after_definite(tokens, position):
            strong = True
        elif word in _EN_WEAK_REFERENTS:
            weak = True
        if _is_proper_noun(blanked, match):
            return False
        if word in _EN_DETERMINERS and position + 1 < len(tokens):
            if tokens[position + 1] not in not_content:
                return False  # "the game", "my dentist", "that café": real content
    if strong:
        return True
    # An outcome noun asks about something already done, as a past tense does ("any luck
    # with it?", "was it a success?").
    past = any(t in _EN_PAST_FRAME | _EN_OUTCOME_NOUNS or (len(t) > 4 and t.endswith("ed"))
               for t in tokens)
    return weak and past and "?" in question


def _after_definite(tokens: list[str], position: int) -> bool:
    """Whether the word at ``position`` follows a definite determiner, perhaps through
    "whole", "other" or "same" ("that other business")."""
    before = position - 1
    if before >= 0 and tokens[before] in ("whole", "other", "same"):
        before -= 1
    return before >= 0 and tokens[before] in _EN_DEFINITE


def _blank(match: re.Match[str]) -> str:
    return " " * len(match.group())


def _is_proper_noun(text: str, match: re.Match[str]) -> bool:
    """A capitalised word that does not start a sentence ("Nagano"; "I" aside)."""
    word = match.group()
    if not word[0].isupper() or word == "I":
        return False
    before = text[: match.start()].rstrip(" \t\"'(")
    return bool(before) and before[-1] not in ".!?…\n"


# --- Japanese -----------------------------------------------------------------------------

_JA_TIME_WORDS: tuple[str, ...] = (
    r"(?:数|[0-9一二三四五六七八九十]+)(?:日|週間|ヶ月|か月|カ月)前",
    r"(?:ちょっと|少し|だいぶ|この|その)前",
    "この間", "こないだ", "このあいだ", "先日", "先週", "先月", "昨日", "一昨日", "今日",
    "最近", "この頃", "このごろ", "近頃", "さっき", "前から", "以前", "前",
    "あのとき", "あの時", "その後", "あれから", "結局", "最終的に", "今",
)
"""Time words (regular expressions) set aside before looking for content words."""

_JA_STRONG_REFERENT = (
    r"例の|(?:あの|その|た|の)(?:件|話|こと|事|やつ|もの)"
    r"|た(?:あれ|アレ|それ|の(?=[、,は]|って))"  # 「相談したアレ」「話してたの、」: what was done
)
_JA_WEAK_REFERENT = r"あれ|アレ|それ|ソレ|あっち|そっち|あちら|そちら"
_JA_OUTCOME_WORDS = r"結果|結末|進展|首尾|具合|順調|無事|(?:どんな|いい)感じ"
"""Nouns for how something turned out (「結果、出た？」「進展あった？」「いい感じ？」): no
content of their own, and, like an outcome predicate, enough alone."""
_JA_OUTCOME = (
    r"どうなった|どうだった|うまくいった|うまくいってる|終わった|進んでる|覚えてる|"
    + _JA_OUTCOME_WORDS
)
_JA_GENERAL_NOUNS = r"件|話|事|例|何|方|辺"
"""Kanji nouns that carry no content of their own (「例の件」「あの話」「何だっけ」「あの辺」)."""
_JA_KANJI_PREDICATES = r"間に合|仕上が"
"""Verbs whose kanji a particle follows (「間に合った」「仕上がった」), which would read as
nouns."""
_JA_PAST_FRAME = re.compile(r"(?:た|だ)(?:の|んだ|っけ|かな|か)?[？?!！。…]*$|っけ|覚え|続き")
_JA_NOUN_FOLLOWERS = re.compile(
    r"[のはがをにでともへやかだじな]|いつ|どこ|どう|どれ|どっち|どんな|なに|なん|だれ|いくつ"
    r"|さん|ちゃん|くん"
)
"""What follows a noun: particles, the copula, an interrogative (「誕生日いつ」: particle
dropped), an honorific (「大家さん」)."""
_KANJI = r"[\u3400-\u4dbf\u4e00-\u9fff々〆ヶ]"
_KATAKANA = r"[\u30a1-\u30fa][\u30a1-\u30fa\u30fc]*"  # ー alone lengthens kana: 「んー」
_JA_CONTENT = re.compile(rf"({_KANJI}+|{_KATAKANA})(?=(.{{0,3}}))")
_JA_PUNCTUATION = re.compile(r"[\s、。，．,.!！?？…・「」『』（）()〜~]+")


def _japanese_is_vague(question: str) -> bool:
    text = unicodedata.normalize("NFKC", question).strip()
    strong = re.search(_JA_STRONG_REFERENT, text) is not None
    weak = re.search(_JA_WEAK_REFERENT, text) is not None
    outcome = re.search(_JA_OUTCOME, text) is not None
    rest = re.sub("|".join(_JA_TIME_WORDS), "、", text)
    rest = re.sub(
        rf"{_JA_WEAK_REFERENT}|{_JA_OUTCOME_WORDS}|{_JA_KANJI_PREDICATES}|{_JA_GENERAL_NOUNS}",
        "、", rest)
    for match in _JA_CONTENT.finditer(rest):
        word, following = match.groups()
        if re.fullmatch(_KATAKANA, word):
            return False  # a loanword or a name: ワールドカップ, ライブ
        if (not following or _JA_NOUN_FOLLOWERS.match(following)
                or _JA_PUNCTUATION.match(following)):
            return False  # a kanji noun: 歯医者の, 面接、
    if strong or outcome:
        return True
    questioned = re.search(r"[？?]|(?:の|か|っけ)$", text) is not None
    topic = re.search(r"んだけど", text) is not None  # 「あれなんだけど」: bringing it up
    return weak and (topic or questioned and _JA_PAST_FRAME.search(text) is not None)


# --- both ---------------------------------------------------------------------------------

VAGUE_REFERENCE_PATTERNS: tuple[str, ...] = (
    _EN_FREE_RELATIVE.pattern,
    r"\b(?:" + "|".join(sorted(_EN_DEFINITE)) + r")(?: (?:whole|other|same))? (?:"
    + "|".join(sorted(_EN_GENERAL_NOUNS)) + r")\b",
    r"\b(?:" + "|".join(sorted(_EN_WEAK_REFERENTS)) + r")\b",
    _JA_STRONG_REFERENT,
    _JA_WEAK_REFERENT,
    _JA_OUTCOME,
)
"""The referent cues (regular expressions, case-insensitive), English then Japanese; a cue
alone is not enough (see the module docstring)."""

_JAPANESE_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff]")


def is_vague_reference(question: str) -> bool:
    """True when ``question`` refers vaguely to the user's recent doings (module docstring).

    Japanese rules apply when the question has any kana or kanji, English ones otherwise.
    """
    if _JAPANESE_SCRIPT.search(question):
        return _japanese_is_vague(question)
    return _english_is_vague(question)


# --- the vague-reference path: a plan step after the exact search ---------------------------


def window_start(reference: datetime, window_days: float = VAGUE_WINDOW_DAYS) -> datetime:
    """The earliest date a memory may have to be listed for a vague reference."""
    return reference - timedelta(days=window_days)


def with_recent(
    ranking: RecencyRanking,
    policy: RecencyPolicy,
    reference: datetime,
    filters: Optional[MetadataFilters] = None,
    window_days: float = VAGUE_WINDOW_DAYS,
) -> SearchPlan:
    """Fill the ranking up to ``top_n`` with the recent memories, for a vague reference.

    A plan step like :func:`~llama_index_recency.ranking.successors.with_successors`: the memories
    already kept stay first; the free places go to the memories dated within
    ``window_days`` before ``reference`` (inside ``filters``: the same user and scope),
    best cosine + bonus first (:meth:`RecencyPolicy.rank`, no threshold: a date window is
    this path's floor, so a store with nothing recent brings nothing new). The searches
    are plain cosine searches restricted to the window and widen until the free places
    are proven: no unseen window memory (raw cosine at most the last one returned, bonus
    at most ``weight``) could beat the last one taken. Returns the ranking with
    ``vague=True``, the recent rows' reason :data:`RECENT_REASON` and every node marked
    with :data:`VAGUE_REFERENCE_KEY`.
    """
    room = policy.top_n - len(ranking.nodes)
    taken = {n.node.node_id for n in ranking.nodes}
    recent: list[NodeWithScore] = []
    if room > 0:
        since = window_start(reference, window_days)
        limit = room + len(taken)
        while True:
            results = yield MemorySearch(limit=limit, filters=filters, since=since)
            recent = [r for r in results if r.node.node_id not in taken]
            if len(results) < limit:
                break  # every memory in the window has been seen
            finals = sorted(
                (f for r in recent if (f := policy.final_score(
                    r.score or 0.0, r.node.metadata.get(policy.date_key), reference)) is not None),
                reverse=True,
            )
            unseen = (results[-1].score or 0.0) + policy.bonus(0.0) + SCORE_SLACK
            if len(finals) >= room and finals[room - 1] > unseen:
                break
            limit *= 4
    return fill_with_recent(ranking, recent, policy, reference)


def fill_with_recent(
    ranking: RecencyRanking,
    recent: Sequence[NodeWithScore],
    policy: RecencyPolicy,
    reference: Optional[datetime] = None,
) -> RecencyRanking:
    """``ranking`` with its free places (up to ``top_n``) given to the best of ``recent``.

    ``recent`` are candidates dated within the window (raw scores); those already kept are
    skipped. Calibration uses it on retrieved candidates; :func:`with_recent` on the
    window's search results.
    """
    reference = reference or policy.reference()
    taken = {n.node.node_id for n in ranking.nodes}
    room = policy.top_n - len(ranking.nodes)
    fresh = [r for r in recent if r.node.node_id not in taken]
    listed = policy.rank(fresh, reference, threshold=-math.inf) if room > 0 and fresh else None
    picked_rows = [] if listed is None else [
        replace(row, kept=True, reason=RECENT_REASON) for row in listed.rows if row.kept
    ][:room]
    picked = [] if listed is None else list(listed.nodes[: len(picked_rows)])
    picked_ids = {row.node_id for row in picked_rows}
    rows = (
        [row for row in ranking.rows if row.kept]
        + picked_rows
        + [row for row in ranking.rows if not row.kept and row.node_id not in picked_ids]
    )
    nodes = [_marked(n) for n in (*ranking.nodes, *picked)]
    return replace(ranking, rows=tuple(rows), nodes=tuple(nodes), vague=True)


def recent_candidates(
    candidates: Sequence[NodeWithScore],
    policy: RecencyPolicy,
    reference: Optional[datetime] = None,
    window_days: float = VAGUE_WINDOW_DAYS,
) -> list[NodeWithScore]:
    """The candidates dated within ``window_days`` before ``reference`` (what the window
    search of :func:`with_recent` would find among them)."""
    since = window_start(reference or policy.reference(), window_days)
    recent = []
    for candidate in candidates:
        try:
            when = parse_memory_date(candidate.node.metadata.get(policy.date_key))
        except ValueError:
            continue
        if when >= since:
            recent.append(candidate)
    return recent


def is_vague_ranking(nodes: Sequence[NodeWithScore]) -> bool:
    """Whether ``nodes`` came from a vague-reference ranking (:data:`VAGUE_REFERENCE_KEY`)."""
    return any(n.node.metadata.get(VAGUE_REFERENCE_KEY) for n in nodes)


def _marked(candidate: NodeWithScore) -> NodeWithScore:
    """A copy of ``candidate`` whose node carries :data:`VAGUE_REFERENCE_KEY`, hidden from
    the embedded and the LLM's text; the stored node is left untouched."""
    node = candidate.node
    if node.metadata.get(VAGUE_REFERENCE_KEY):
        return candidate
    hidden = {
        name: [*keys, VAGUE_REFERENCE_KEY] if VAGUE_REFERENCE_KEY not in keys else list(keys)
        for name, keys in (("excluded_embed_metadata_keys", node.excluded_embed_metadata_keys),
                           ("excluded_llm_metadata_keys", node.excluded_llm_metadata_keys))
    }
    marked = node.model_copy(
        update={"metadata": {**node.metadata, VAGUE_REFERENCE_KEY: True}, **hidden}
    )
    return NodeWithScore(node=marked, score=candidate.score)
