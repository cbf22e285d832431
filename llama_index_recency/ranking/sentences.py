"""Newer versions inside conversation logs: memories of several sentences paired by one sentence.

A chat turn or a session says several things, so its vector blurs the one fact a question is
about. Each such memory keeps its sentences' vectors (:data:`SENTENCES_KEY`); for a question,
each memory of the window is represented by its anchor, the sentence nearest the question
that is not itself a question (a memory of one sentence by its own vector), and two memories
are versions of one fact when their anchors are mutual nearest (the window's mean taken out,
``supersede_z`` sd above the mean of its pairs, as between one-sentence memories), both among
the :data:`NEAR_ANCHORS` nearest the question, not the same sentence, said
:data:`DAYS_APART` or more apart, and, for a question naming someone other than the user,
both mention that name. Chosen on the tune split of ``benchmarks/conversation_updates.py``.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Optional

import numpy as np
from llama_index.core.schema import NodeWithScore

from llama_index_recency.ranking.language import question_language
from llama_index_recency.records.text import sentences

SENTENCES_KEY = "recency_sentences"
"""Payload key of a memory's sentence vectors: ``{"of": <digest of the text and rule>, "rule":
SPLIT_RULES, "rows": [...]}``, each row float16 in base64, so vectors of a text since changed
are never read for it."""

SPLIT_RULES = 1
"""Moves when the sentence rule changes: vectors split by another rule are not read, and a
store's are embedded again when it is next filled in."""

MOST_SENTENCES = 24
"""Sentences kept per memory (the last one holds the rest of a longer text)..."""

LONGEST_SENTENCE = 400
"""...each at most this many characters (the rest of a longer one is left out): together
they bound the work a stored text costs, however long; a session of a few turns fits."""

NEAR_ANCHORS = 7
"""Two memories pair only when both anchors are among this many nearest the question..."""

SAME_ANCHOR = 0.99
"""...never two whose anchors say the same (cosine at least this: small talk repeated)..."""

DAYS_APART = 21.0
"""...and only two said this many days apart or more (a restatement within a session or the
next weeks continues a topic)."""

_FIRST_SECOND = re.compile(r"\b(?:I|I'm|I've|I'd|I'll|me|my|mine|myself|we|we're|us|our|ours"
                           r"|you|your|yours)\b", re.IGNORECASE)
_NAME = re.compile(r"\b[A-Z][a-z]+\b")
_SPEAKER = re.compile(r"^[A-Z][\w .'-]{0,40}:\s")


@dataclass(frozen=True)
class QuestionSentences:
    """What the sentence pairing reads: the question, its vector and each memory's sentence
    vectors (a row per sentence of :func:`memory_sentences`) by memory id."""

    question: str
    vector: Sequence[float]
    matrices: Mapping[str, np.ndarray]


def memory_sentences(text: str) -> tuple[str, ...]:
    """The sentences of a memory whose vectors are stored (at most :data:`MOST_SENTENCES`),
    remembered for the short texts a store's questions meet again and again."""
    return _cached_sentences(text) if len(text) <= 2000 else _bounded(text)


@lru_cache(maxsize=4096)
def _cached_sentences(text: str) -> tuple[str, ...]:
    return _bounded(text)


def _bounded(text: str) -> tuple[str, ...]:
    return tuple(sentence[:LONGEST_SENTENCE] for sentence in sentences(text, MOST_SENTENCES))


def encoded(vectors: Sequence[Sequence[float]], text: str) -> dict[str, Any]:
    """The sentence vectors of the memory ``text`` as stored (float16, base64, one string each)."""
    return {"of": _digest(text), "rule": SPLIT_RULES, "rows": [
        base64.b64encode(np.asarray(v, dtype="<f2").tobytes()).decode("ascii") for v in vectors]}


def decoded(stored: object, size: int, text: str) -> Optional[np.ndarray]:
    """The stored sentence vectors of the memory ``text`` as a matrix of ``size``-long unit
    rows, one per sentence; None for anything else (vectors of another text, another
    program's value, vectors of another size)."""
    if not isinstance(stored, dict) or stored.get("of") != _digest(text):
        return None
    rows = stored.get("rows")
    if not isinstance(rows, list) or len(rows) != len(memory_sentences(text)):
        return None
    try:
        matrix = [np.frombuffer(base64.b64decode(row, validate=True), dtype="<f2")
                  for row in rows if isinstance(row, str)]
    except ValueError:
        return None
    if len(matrix) != len(rows) or any(row.shape != (size,) for row in matrix):
        return None
    unit = np.vstack(matrix).astype(np.float32)  # float16 stored: float32 loses nothing
    return unit / np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)


def _digest(text: str) -> str:
    """The text and the rule that split it, as stored with its vectors."""
    return hashlib.blake2b(f"{SPLIT_RULES}\n{text}".encode("utf-8", "surrogatepass"),
                           digest_size=8).hexdigest()


def sentence_versions(
    window: Sequence[NodeWithScore],
    several: set[str],
    asked: QuestionSentences,
    ages: Mapping[str, Optional[float]],
    z: float,
) -> dict[str, str]:
    """Each memory's version partner by anchors, for pairs with a memory of ``several``
    sentences in them (pairs of one-sentence memories are the vectors' own step).

    ``window``: the candidates with their embeddings; a memory of ``several`` without its
    matrix in ``asked`` takes no part."""
    anchors: dict[str, tuple[np.ndarray, str, float]] = {}
    question = np.asarray(asked.vector, dtype=np.float64)
    question /= max(float(np.linalg.norm(question)), 1e-12)
    for candidate in window:
        node = candidate.node
        if node.node_id in several:
            matrix, texts = asked.matrices.get(node.node_id), memory_sentences(node.get_content())
            if matrix is None or len(matrix) != len(texts):
                continue  # not embedded, or not this text's
        else:
            own = np.asarray(node.embedding, dtype=np.float64)
            matrix, texts = own[None, :] / max(float(np.linalg.norm(own)), 1e-12), ("",)
        cosines = matrix @ question
        stated = [i for i, text in enumerate(texts) if not text.rstrip().endswith(("?", "？"))]
        best = max(stated or range(len(texts)), key=lambda i: cosines[i])
        anchors[node.node_id] = (matrix[best], texts[best], float(cosines[best]))
    ids = list(anchors)
    if len(ids) < 3:
        return {}
    near = set(sorted(ids, key=lambda i: -anchors[i][2])[:NEAR_ANCHORS])
    matrix = np.vstack([anchors[i][0] for i in ids])
    same = matrix @ matrix.T >= SAME_ANCHOR
    centred = matrix - matrix.mean(axis=0)
    centred /= np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-12)
    similarity = centred @ centred.T
    upper = np.triu_indices(len(ids), 1)
    pairs = similarity[upper][~same[upper]]
    if len(pairs) < 2 or pairs.std() <= 0.0:
        return {}
    cut = float(pairs.mean()) + z * float(pairs.std())
    similarity[same] = -np.inf  # the diagonal too
    names = _names_asked(asked.question)
    found = {}
    for a, b in mutual_nearest(similarity, cut):
        memory, other = ids[a], ids[b]
        age, other_age = ages.get(memory), ages.get(other)
        if (memory in near and other in near
                and (memory in several or other in several)
                and age is not None and other_age is not None
                and abs(age - other_age) >= DAYS_APART
                and (names is None or (_mentions(anchors[memory][1], names)
                                       and _mentions(anchors[other][1], names)))):
            found[memory] = other
    return found


def mutual_nearest(similarity: np.ndarray, cut: float) -> list[tuple[int, int]]:
    """Each row ``a`` with its most similar row ``b``, when ``a`` is among ``b``'s two most
    similar in turn and their similarity is at least ``cut`` (pairs never to be made, the
    diagonal included, at ``-inf``)."""
    rows = np.arange(len(similarity))
    nearest_two = np.argsort(-similarity, axis=1)[:, :2]
    nearest = nearest_two[:, 0]
    mutual = (nearest_two[nearest] == rows[:, None]).any(axis=1)
    kept = np.flatnonzero(mutual & (similarity[rows, nearest] >= cut)).tolist()
    return [(a, int(nearest[a])) for a in kept]


def _names_asked(question: str) -> Optional[set[str]]:
    """The names an English question about someone other than the user asks about (its
    capitalised words but the first); None for a question about the user, naming nobody, or
    in another language (Japanese drops the subject: not told apart)."""
    if question_language(question) != "en" or _FIRST_SECOND.search(question):
        return None
    names = {m.group() for m in _NAME.finditer(question) if m.start() > 0}
    return names or None


def _mentions(sentence: str, names: set[str]) -> bool:
    """Whether ``sentence`` speaks of one of ``names``: outside a speaker label ("Caroline: ...")
    and not addressing them ("Thanks, John.", "Hey Nate!")."""
    text = _SPEAKER.sub("", sentence)
    for name in names:
        for m in re.finditer(rf"\b{re.escape(name)}\b", text):
            after, before = text[m.end():m.end() + 1], text[:m.start()].rstrip()
            if not (after in (",", "!", "?") or (before.endswith(",") and after in (".", ""))):
                return True
    return False
