"""Detect vague references to the user's own recent doings ("How did that thing go?").

A question such as "How did that thing you were working on go?" or 「あれ、どうなった？」
has no content word, so no embedding scores it high against any memory: it needs its own
path (:class:`~llama_index_recency.QdrantRecencyRetriever` lists the recent memories so the
character can ask back which one is meant), not a lower threshold for every question.

The detector is a fixed rule over fixed word lists, like
:func:`~llama_index_recency.past.points_to_past`, so it is predictable and testable.
A question is a vague reference when both hold:

1. **a vague referent** (a *cue*): a general noun ("thing", "stuff", "the project",
   "that matter"; 「例の件」「あのこと」「言ってたやつ」) or a free relative about what was
   said or done ("what I told you", "what you were up to"), which is enough on its own; or a
   pronoun ("it", "that", "everything"; 「あれ」「それ」「あっち」) in a question about the past
   ("How did it go?", 「あれ、どうなった？」); or, in Japanese, which drops pronouns, an
   outcome predicate alone (「うまくいった？」「どうだった？」);
2. **no content word** once time words ("the other day", 「この前」), referents and
   fillers are set aside. English: no proper noun (a capitalised word inside a sentence)
   and no word right after a determiner or possessive ("the game", "my dentist", "that
   café") other than the listed function words and general nouns. Japanese: no katakana
   word and no kanji word in noun position (followed by a particle, the copula,
   punctuation or the end; a kanji stem followed by other hiragana is a predicate, such
   as 「話した」「覚えてる」).

So predicates never count as content ("did it pan out?" is vague whatever the verb),
nouns do ("Who won the game the other day?", 「この前のワールドカップ…」, "How did my
dentist appointment go?"). Closed classes (pronouns, determiners, auxiliaries,
prepositions, particles, demonstratives, time words) are listed in full; the few
open-class words (general nouns such as "front" in "on that front", outcome words such as
"news") come from the ``tune`` phrasings of ``benchmarks/data/vague_phrasings.json``
only. ``benchmarks/vague_reference.py`` measures precision and recall on its ``heldout``
phrasings.

Known limits: outcome nouns the lists lack ("What was the upshot?", 「結果、出た？」) are
read as content, so missed; a content word written in hiragana (「ごはん、どうだった？」)
is not seen; a pronoun referent needs a question mark ("That was fun!" is not a question
about the user's doings), so a transcript without punctuation needs a general noun or an
outcome predicate.
"""

from __future__ import annotations

import re
import unicodedata

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
    # "project" and "front" ("on that front").
    "thing things stuff matter matters business affair affairs front project".split()
)
_EN_WEAK_REFERENTS = frozenset("it that this those these everything anything all one".split())
_EN_PAST_FRAME = frozenset(
    # Auxiliaries and common irregular pasts that put a question in the past.
    "did was were has have had been d went gone came become became got gotten made done "
    "said told brought thought left took ended".split()
)
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
    "yet already all any some every no not one ones other whole same own little "
    "okay ok well fine good right alright new news thoughts update "
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


def _english_is_vague(question: str) -> bool:
    text = question.replace("’", "'").replace("‘", "'")
    lowered = text.lower()
    strong = _EN_FREE_RELATIVE.search(lowered) is not None
    blanked = re.sub(r"\b(?:" + "|".join(_EN_TIME_WORDS) + r")\b", _blank, text,
                     flags=re.IGNORECASE)
    words = list(_EN_WORD.finditer(blanked))
    tokens = [w.group().lower() for w in words]
    weak = False
    for position, match in enumerate(words):
        word = tokens[position]
        if word in _EN_GENERAL_NOUNS:
            strong = True
        elif word in _EN_WEAK_REFERENTS:
            weak = True
        if _is_proper_noun(blanked, match):
            return False
        if word in _EN_DETERMINERS and position + 1 < len(tokens):
            following = tokens[position + 1]
            if following not in _EN_FUNCTION_WORDS | _EN_GENERAL_NOUNS | _EN_PREDICATES:
                return False  # "the game", "my dentist", "that café": real content
    if strong:
        return True
    past = any(t in _EN_PAST_FRAME or (len(t) > 4 and t.endswith("ed")) for t in tokens)
    return weak and past and "?" in question


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
    "あのとき", "あの時", "その後", "あれから", "結局", "今",
)
"""Time words (regular expressions) set aside before looking for content words."""

_JA_STRONG_REFERENT = r"例の|(?:あの|その|た|の)(?:件|話|こと|事|やつ|もの)"
_JA_WEAK_REFERENT = r"あれ|アレ|それ|ソレ|あっち|そっち|あちら|そちら"
_JA_OUTCOME = r"どうなった|どうだった|うまくいった|うまくいってる|終わった|進んでる|覚えてる"
_JA_GENERAL_NOUNS = r"件|話|事|例|何|方"
"""Kanji nouns that carry no content of their own (「例の件」「あの話」「何だっけ」)."""
_JA_PAST_FRAME = re.compile(r"(?:た|だ)(?:の|んだ|っけ|かな|か)?[？?!！。…]*$|っけ|覚え|続き")
_JA_NOUN_FOLLOWERS = re.compile(
    r"[のはがをにでともへやかだじな]|いつ|どこ|どう|どれ|どっち|どんな|なに|なん|だれ|いくつ"
)
"""What follows a noun: particles, the copula, an interrogative (「誕生日いつ」: particle dropped)."""
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
    rest = re.sub(rf"{_JA_WEAK_REFERENT}|{_JA_GENERAL_NOUNS}", "、", rest)
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
    r"\b(?:" + "|".join(sorted(_EN_GENERAL_NOUNS)) + r")\b",
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
