"""Retrieval quality on real conversations: recall@k, wins/losses by evidence age, gate rates.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/retrieval_quality.py \
        [--locomo DIR] [--models e5,minilm] [--grid]

Stores (each one user's memories, dated; questions labelled with their target memories):
- ``benchmarks/data/conversations_{en,ja}.json``: dated multi-session conversations
  written for this benchmark, each user once as fact sentences ("facts") and once as the
  user's raw turns ("turns"); single, multi-fact, updated-fact and off-topic questions.
  Users are split "tune" / "heldout"; nothing was chosen on "heldout".
- LoCoMo (``--locomo``: the folder of snap-research's ``locomo10`` JSON files, one per
  conversation; not redistributed here): one memory per dialog turn dated by its session,
  "today" the day after the last session, categories 1-4 (answerable), evidence = the
  turns the dataset names. Conversations 26, 30, 41, 42, 43 are "tune", the rest "heldout".
- The bundled 16 memories (English, Japanese), "tune".

Off-topic bring-up uses the shipped bank (``llama_index_recency/data/offtopic.json``) on
"tune" and a held-out bank (``benchmarks/data/offtopic_heldout.json``) on "heldout".

Policies: plain cosine (a raw threshold fitted to 5% bring-up on the tune stores), 0.2.0's
shipped e5 policy (0.05638 / 14 / 0.853 in cosine), and the shipped default
(``index_policy`` for the model). ``--grid`` adds cohort-unit weights and taus. Every
ranking is :meth:`RecencyPolicy.rank` on the candidates that can reach the top k (exact:
a memory whose relevance plus the largest bonus is under the k-th best cannot).

Prints Markdown tables and writes them to ``benchmarks/results/retrieval_quality.md``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore, TextNode

from llama_index_recency.models.cohort import QueryScale, relevance_cohort
from llama_index_recency.models.factories import (
    CALIBRATED_POLICIES,
    minilm_embedding,
    offline_embedding,
)
from llama_index_recency.querying.gate import MIN_FIT_MEMORIES, fit_gate, noise_margin
from llama_index_recency.ranking.lexical import LexicalQuery, question_terms, terms
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.sentences import QuestionSentences, memory_sentences
from llama_index_recency.ranking.supersession import newer_versions_first
from llama_index_recency.records.examples import (
    EXAMPLE_REFERENCE_DATE,
    example_memories,
    example_questions,
)
from llama_index_recency.records.nodes import memory_node
from llama_index_recency.records.text import is_one_statement

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
LOCOMO_TUNE = {"26", "30", "41", "42", "43"}
AGE_BRACKETS = ((0, 14), (14, 60), (60, 180), (180, math.inf))
MAX_BRING_UP = 0.05
NO_WORDS = {"lexical_weight": 0.0, "language_lexical_weights": {}}
"""The shipped policy without the question's words (cosine alone), to compare against."""

OLD_E5 = RecencyPolicy(weight=0.05638, tau_days=14.0, threshold=0.853)


@dataclass
class Store:
    """One user's memories and labelled questions."""

    name: str
    source: str
    lang: str
    split: str
    reference: date
    memories: list[tuple[str, str, frozenset[str]]]  # (date, text, keys it holds)
    questions: list[tuple[str, frozenset[str], frozenset[str]]]  # (text, targets, stale)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    question_vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    sentences: dict[str, np.ndarray] = field(default_factory=dict)  # memory index -> unit rows

    def ages(self) -> np.ndarray:
        return np.array([(self.reference - date.fromisoformat(d)).days for d, _, _ in self.memories],
                        dtype=float)


def own_stores(lang: str) -> Iterator[Store]:
    data = json.loads((ROOT / "data" / f"conversations_{lang}.json").read_text("utf-8"))
    for user in data["users"]:
        questions = [(q["text"], frozenset(q["targets"]), frozenset(q.get("stale", ())))
                     for q in user["questions"]]
        facts = [(s["date"], f["text"], frozenset({f["key"]}))
                 for s in user["sessions"] for f in s["facts"]]
        turns = [(s["date"], t["text"], frozenset(f["key"] for f in s["facts"] if f["turn"] == i))
                 for s in user["sessions"] for i, t in enumerate(s["turns"]) if t["role"] == "user"]
        reference = date.fromisoformat(user["reference_date"])
        for mode, memories in (("facts", facts), ("turns", turns)):
            yield Store(f"{user['user_id']}/{mode}", f"own-{lang}-{mode}", lang, user["split"],
                        reference, memories, questions)


def bundled_stores() -> Iterator[Store]:
    for lang in ("en", "ja"):
        # The node's text is "date: fact"; the store embeds memory_node(fact, date) as every
        # other store does.
        memories = [(n.metadata["date"], n.get_content().removeprefix(f"{n.metadata['date']}: "),
                     frozenset({n.metadata["key"]})) for n in example_memories(lang=lang)]
        questions = [(q.text, frozenset(q.targets), frozenset()) for q in example_questions(lang)]
        yield Store(f"bundled-{lang}", f"bundled-{lang}", lang, "tune", EXAMPLE_REFERENCE_DATE,
                    memories, questions)


def locomo_stores(folder: Path) -> Iterator[Store]:
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text("utf-8"))
        memories, by_turn = [], {}
        session = 1
        while f"session_{session}" in data:
            day = _locomo_day(data[f"session_{session}_date_time"])
            for turn in data[f"session_{session}"]:
                text = f"{turn['speaker']}: {turn['text']}"
                if turn.get("blip_caption"):
                    text += f" (shares {turn['blip_caption']})"
                by_turn[turn["dia_id"]] = turn["dia_id"]
                memories.append((day.isoformat(), text[:1000], frozenset({turn["dia_id"]})))
            session += 1
        questions = []
        for qa in data["qa"]:
            evidence = frozenset(part for item in qa.get("evidence", [])
                                 for part in re.split(r"[;,\s]+", item) if part in by_turn)
            if qa.get("category") != 5 and evidence:
                questions.append((qa["question"], evidence, frozenset()))
        reference = max(date.fromisoformat(d) for d, _, _ in memories) + timedelta(days=1)
        yield Store(f"locomo-{path.stem}", "locomo", "en",
                    "tune" if path.stem in LOCOMO_TUNE else "heldout", reference, memories,
                    questions)


def _locomo_day(text: str) -> date:
    text = re.sub(r"(\d+)(st|nd|rd|th)", r"\1", text.strip())
    for pattern in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y", "%I:%M %p on %B %d, %Y"):
        try:
            return datetime.strptime(text, pattern).date()
        except ValueError:
            pass
    raise ValueError(f"unreadable LoCoMo session time {text!r}")


def offtopic(bank: str, lang: str) -> list[str]:
    path = (ROOT.parent / "llama_index_recency" / "data" / "offtopic.json" if bank == "tune"
            else ROOT / "data" / "offtopic_heldout.json")
    return json.loads(path.read_text("utf-8"))[lang]


# --- embedding, cached on disk per model (the slow part) --------------------------------------

class Embedder:
    def __init__(self, name: str, model: BaseEmbedding) -> None:
        self.name, self.model = name, model
        self.path = RESULTS / f"cache-{name}.npz"
        self.cache: dict[str, np.ndarray] = dict(np.load(self.path)) if self.path.exists() else {}

    def texts(self, key: str, texts: Sequence[str], query: bool) -> np.ndarray:
        """``texts`` embedded, cached under ``key``, their count and a hash of them (a
        cache made before the texts changed is not read for them)."""
        digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:12]
        key = f"{'q' if query else 'p'}:{key}:{len(texts)}:{digest}"
        if key not in self.cache:
            if query:
                vectors = [self.model.get_query_embedding(t) for t in texts]
            else:
                vectors = self.model.get_text_embedding_batch(list(texts))
            self.cache[key] = np.asarray(vectors, dtype=np.float32)
            RESULTS.mkdir(exist_ok=True)
            np.savez(self.path, **self.cache)
        return self.cache[key]

    def embed(self, store: Store) -> None:
        store.vectors = self.texts(store.name + store.source, [
            memory_node(text, day, reference_date=store.reference).get_content(
                metadata_mode="embed")  # type: ignore[arg-type]
            for day, text, _ in store.memories], query=False)
        store.question_vectors = self.texts(store.name + store.source,
                                            [q for q, _, _ in store.questions], query=True)
        # The sentence vectors the package stores with each memory of several sentences.
        several = [(str(i), memory_sentences(text)) for i, (_, text, _) in
                   enumerate(store.memories) if not is_one_statement(text)]
        several = [(i, split) for i, split in several if len(split) > 1]
        if several:
            rows = self.texts(store.name + store.source + ":sentences",
                              [t for _, split in several for t in split], query=False)
            start = 0
            for i, split in several:
                matrix = rows[start:start + len(split)].astype(np.float64)
                store.sentences[i] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
                start += len(split)


# --- ranking through RecencyPolicy.rank ----------------------------------------------------------

class Ranker:
    """Rank a store for a question with a policy, exactly, through ``RecencyPolicy.rank``: the
    policy for the question's intent, then newer versions first (as the retriever does)."""

    def __init__(self, store: Store, scale_of: Callable[[np.ndarray], QueryScale]) -> None:
        self.store, self.scale_of = store, scale_of
        self.nodes = [TextNode(id_=str(i), text=text, metadata={"date": day},
                               embedding=store.vectors[i].tolist())
                      for i, (day, text, _) in enumerate(store.memories)]
        self.terms = [terms(text) for _, text, _ in store.memories]
        self.holding = Counter(term for held in self.terms for term in held)

    def relevance(self, vector: np.ndarray, policy: RecencyPolicy,
                  question: str = "") -> np.ndarray:
        """Every memory's relevance: cosine (or cohort units) plus, with the policy's
        lexical weight, that weight times the share of the question's terms it holds."""
        return self._scores(vector, policy, question)[0]

    def _scores(self, vector: np.ndarray, policy: RecencyPolicy,
                question: str) -> tuple[np.ndarray, Optional[np.ndarray]]:
        """Every memory's relevance and its lexical part (None without the signal)."""
        cosines = self.store.vectors @ vector
        if policy.relevance != "cosine":
            scale = self.scale_of(vector)
            cosines = (cosines - scale.mean) / scale.sd
        parts = self.lexical_parts(policy, question)
        return (cosines if parts is None else cosines + parts), parts

    def lexical_parts(self, policy: RecencyPolicy, question: str) -> Optional[np.ndarray]:
        """Every memory's lexical part for the question (None without the signal)."""
        if policy.lexical_weight == 0.0 or not question:
            return None
        query = LexicalQuery.from_counts(len(self.terms), {
            t: self.holding[t] for t in question_terms(question)})
        return policy.lexical_weight * np.array([query.share(h) for h in self.terms])

    def top(self, vector: np.ndarray, policy: RecencyPolicy, k: int,
            question: str = "") -> list[tuple[int, float]]:
        """The top ``k`` memories by final score (threshold off): (index, final)."""
        policy = policy.for_question(question)
        relevance, parts = self._scores(vector, policy, question)
        kth = np.sort(relevance)[-min(k, len(relevance))]
        return self._rank(relevance, kth - policy.weight, policy, k, -1e9, parts,
                          self._asked(question, vector))

    def kept(self, vector: np.ndarray, policy: RecencyPolicy,
             question: str = "") -> list[tuple[int, float]]:
        """What reaches the prompt: at most top_n with final >= threshold."""
        policy = policy.for_question(question)
        relevance, parts = self._scores(vector, policy, question)
        return self._rank(relevance, policy.threshold - policy.weight, policy, policy.top_n,
                          policy.threshold, parts, self._asked(question, vector))

    def _asked(self, question: str, vector: np.ndarray) -> Optional[QuestionSentences]:
        """What the sentence pairing reads, as the retriever gives it (None without a question)."""
        if not question or not self.store.sentences:
            return None
        return QuestionSentences(question, vector.tolist(), self.store.sentences)

    def brings_up(self, vector: np.ndarray, policy: RecencyPolicy, question: str) -> bool:
        """Whether any memory reaches the prompt for this (off-topic) question."""
        return bool(self.kept(vector, policy, question))

    def best_final(self, vector: np.ndarray, policy: RecencyPolicy, question: str) -> float:
        """The highest final score any memory reaches for the question (bring-up happens when
        it is >= threshold), as the store's own gate fit asks it."""
        top = self.top(vector, policy, 1, question)
        return top[0][1] if top else -math.inf

    def _rank(self, relevance: np.ndarray, floor: float, policy: RecencyPolicy, n: int,
              threshold: float, parts: Optional[np.ndarray] = None,
              asked: Optional[QuestionSentences] = None) -> list[tuple[int, float]]:
        """The policy's ranking of the memories over ``floor``, newer versions first; with the
        lexical ``parts``, rows carry theirs and versions are compared without them, as the
        retriever compares them."""
        chosen = relevance >= floor - 1e-9
        window = [NodeWithScore(node=self.nodes[i], score=float(relevance[i]))
                  for i in np.flatnonzero(chosen)]
        ranked = policy.model_copy(update={"top_n": n, "threshold": threshold})
        reference = datetime.combine(self.store.reference, datetime.min.time(), timezone.utc)
        ranking = ranked.rank(window, reference)
        part = None if parts is None else (lambda node_id: float(parts[int(node_id)]))
        if part is not None:
            ranking = replace(ranking, rows=tuple(replace(row, lexical=part(row.node_id))
                                                  for row in ranking.rows))
        if policy.supersede_margin is not None:
            nearest = np.argsort(-relevance)[:policy.supersede_window]
            window += [NodeWithScore(node=self.nodes[i], score=float(relevance[i]))
                       for i in nearest if not chosen[i]]
            ranking = newer_versions_first(ranking, window, ranked, reference,
                                           lexical_part=part, sentences=asked)
        return [(int(node.node.node_id), float(node.score or 0.0)) for node in ranking.nodes]


# --- measurements ----------------------------------------------------------------------------------

@dataclass
class Tally:
    hits: dict[int, int] = field(default_factory=lambda: {1: 0, 3: 0, 5: 0})
    questions: int = 0
    newer_first: int = 0
    updates: int = 0
    by_age: dict[tuple[float, float], list[int]] = field(
        default_factory=lambda: {b: [0, 0, 0] for b in AGE_BRACKETS})  # n, wins, losses @5
    evidence_in: int = 0
    offtopic_in: int = 0
    offtopic: int = 0


def measure(stores: Sequence[Store], rankers: dict[str, Ranker], policy: RecencyPolicy,
            bank: dict[str, list[tuple[str, np.ndarray]]]) -> Tally:
    tally = Tally()
    cosine = RecencyPolicy(weight=0.0, threshold=-1e9)
    for store in stores:
        ranker, ages = rankers[store.name + store.source], store.ages()
        for (question, targets, stale), vector in zip(store.questions, store.question_vectors,
                                                      strict=True):
            if not targets:
                tally.offtopic += 1
                tally.offtopic_in += ranker.brings_up(vector, policy, question)
                continue
            holds = [store.memories[i][2] & targets for i in range(len(store.memories))]
            top = [i for i, _ in ranker.top(vector, policy, 5, question)]
            tally.questions += 1
            for k in tally.hits:
                tally.hits[k] += any(holds[i] for i in top[:k])
            base = any(holds[i] for i, _ in ranker.top(vector, cosine, 5))
            age = min(ages[i] for i in range(len(ages)) if holds[i])
            bracket = next(b for b in AGE_BRACKETS if b[0] <= age < b[1])
            row = tally.by_age[bracket]
            now = any(holds[i] for i in top)
            row[0] += 1
            row[1] += now and not base
            row[2] += base and not now
            if stale:
                tally.updates += 1
                order = ranker.top(vector, policy, len(store.memories), question)
                first = next(i for i, _ in order if store.memories[i][2] & (targets | stale))
                tally.newer_first += bool(store.memories[first][2] & targets)
            kept = ranker.kept(vector, policy, question)
            tally.evidence_in += any(holds[i] for i, _ in kept)
        for question, vector in bank.get(store.lang, ()):
            tally.offtopic += 1
            tally.offtopic_in += ranker.brings_up(vector, policy, question)
    return tally


def fitted_threshold(stores: Sequence[Store], rankers: dict[str, Ranker], policy: RecencyPolicy,
                     bank: dict[str, list[tuple[str, np.ndarray]]], share: float = MAX_BRING_UP) -> float:
    """The lowest threshold at which at most ``share`` of the bank's questions bring a memory."""
    best = sorted((rankers[s.name + s.source].best_final(v, policy, q) for s in stores
                   for q, v in bank[s.lang]), reverse=True)
    allowed = int(share * len(best))
    return best[allowed] + 1e-6


def self_calibrated(stores: Sequence[Store], rankers: dict[str, Ranker], policy: RecencyPolicy,
                    tune_bank: dict[str, list[tuple[str, np.ndarray]]],
                    bank: dict[str, list[tuple[str, np.ndarray]]], min_memories: int = 1) -> Tally:
    """Each store with its own threshold from ``gate.fit_gate`` on the tune bank (what
    ``calibrate --save`` does on a live store), measured on ``bank``; a store of fewer than
    ``min_memories`` memories keeps ``policy`` (the package fits from ``MIN_FIT_MEMORIES``)."""
    total = Tally()
    for store in stores:
        ranker = rankers[store.name + store.source]
        own = policy
        if len(store.memories) >= min_memories:
            best = {lang: [ranker.best_final(v, policy, q) for q, v in questions]
                    for lang, questions in tune_bank.items()}
            fitted = fit_gate(best, margin=noise_margin(policy))
            own = policy.model_copy(update={"threshold": fitted.threshold,
                                            "language_thresholds": fitted.thresholds})
        tally = measure([store], rankers, own, bank)
        for k in total.hits:
            total.hits[k] += tally.hits[k]
        for bracket, row in tally.by_age.items():
            total.by_age[bracket] = [a + b for a, b in zip(total.by_age[bracket], row, strict=True)]
        total.questions += tally.questions
        total.newer_first += tally.newer_first
        total.updates += tally.updates
        total.evidence_in += tally.evidence_in
        total.offtopic_in += tally.offtopic_in
        total.offtopic += tally.offtopic
    return total


def spread(stores: Sequence[Store], rankers: dict[str, Ranker], policy: RecencyPolicy,
           bank: dict[str, list[tuple[str, np.ndarray]]]) -> list[tuple[str, float, float, float]]:
    """Per store: its own threshold (5% of the bank), and the evidence pass rate there and at
    the policy's own threshold."""
    rows = []
    for store in stores:
        own = fitted_threshold([store], rankers, policy, bank)
        at_own = measure([store], rankers, policy.model_copy(
            update={"threshold": own, "language_thresholds": {}}), {})
        at_shipped = measure([store], rankers, policy, {})
        n = max(at_own.questions, 1)
        rows.append((store.source, own, at_own.evidence_in / n, at_shipped.evidence_in / n))
    return rows


def spread_table(title: str, rows: list[tuple[str, float, float, float]]) -> str:
    """Per source: the spread of per-store thresholds and the evidence lost or won by the
    shipped threshold against each store's own."""
    lines = [f"### {title}", "", "| stores | own 5% thresholds (min–max) | evidence in prompt, own "
             "threshold | at the shipped one | largest gap (points) |", "|---|---|---|---|---|"]
    for source in sorted({r[0] for r in rows}):
        mine = [r for r in rows if r[0] == source]
        own = sum(r[2] for r in mine) / len(mine)
        shipped = sum(r[3] for r in mine) / len(mine)
        gap = max(abs(r[2] - r[3]) for r in mine)
        lines.append(f"| {source} ({len(mine)}) | {min(r[1] for r in mine):.3f}–"
                     f"{max(r[1] for r in mine):.3f} | {own:.3f} | {shipped:.3f} | {100 * gap:.1f} |")
    return "\n".join(lines)


def table(title: str, rows: list[tuple[str, Tally]]) -> str:
    lines = [f"### {title}", "",
             "| policy | recall@1 | @3 | @5 | newer first | evidence in prompt | off-topic bring-up "
             "| @5 wins/losses vs cosine by evidence age (0-14, 14-60, 60-180, 180+ days) |",
             "|---|---|---|---|---|---|---|---|"]
    for label, t in rows:
        n = max(t.questions, 1)
        ages = " · ".join(f"+{w}/−{lo} (n={c})" for c, w, lo in t.by_age.values() if c)
        lines.append(
            f"| {label} | {t.hits[1] / n:.3f} | {t.hits[3] / n:.3f} | {t.hits[5] / n:.3f} | "
            f"{t.newer_first}/{t.updates} | {t.evidence_in / n:.3f} | "
            f"{t.offtopic_in / max(t.offtopic, 1):.3f} ({t.offtopic_in}/{t.offtopic}) | {ages} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, help="folder of LoCoMo conversation JSON files")
    parser.add_argument("--models", default="e5", help="comma-separated: e5, minilm")
    parser.add_argument("--langs", default="en,ja", help="conversation sets: en, ja")
    parser.add_argument("--grid", action="store_true", help="also cohort-unit weights and taus")
    args = parser.parse_args(argv)
    out: list[str] = []
    for model_name in args.models.split(","):
        model = offline_embedding() if model_name == "e5" else minilm_embedding()
        embedder = Embedder(model_name, model)
        cohort = relevance_cohort(model)
        stores = [*bundled_stores()]
        for lang in args.langs.split(","):
            stores += list(own_stores(lang))
        if args.locomo:
            stores += list(locomo_stores(args.locomo))
        if model_name == "minilm":
            stores = [s for s in stores if s.lang == "en"]
        for store in stores:
            embedder.embed(store)
        rankers = {s.name + s.source: Ranker(s, cohort.scale) for s in stores}
        banks = {split: {lang: list(zip(offtopic(split, lang), embedder.texts(
            f"offtopic-{split}-{lang}", offtopic(split, lang), True), strict=True))
            for lang in ("en", "ja")} for split in ("tune", "heldout")}
        # Thresholds are fitted on the tune stores of the kind this package writes: fact
        # sentences (a raw-turn store is calibrated on itself, the "self-calibrated" rows).
        tune = [s for s in stores if s.split == "tune" and not s.source.endswith("turns")
                and s.source != "locomo"]
        default = RecencyPolicy(**CALIBRATED_POLICIES[model.model_name],
                                threshold_origin="shipped")
        cosine = RecencyPolicy(weight=0.0, threshold=0.0)
        cosine = cosine.model_copy(update={"threshold": fitted_threshold(
            tune, rankers, cosine, banks["tune"])})
        policies = [(f"cosine, threshold {cosine.threshold:.3f} (5% on the tune fact stores)",
                     cosine),
                    (f"default {default.relevance} {default.weight:g}/{default.tau_days:g}, "
                     f"{default.gate_description()}", default)]
        if model_name == "e5":
            policies.insert(1, ("0.2.0 shipped 0.05638/14/0.853", OLD_E5))
            plain = default.model_copy(update=NO_WORDS)
            policies.append((f"default-words {plain.relevance} {plain.weight:g}/"
                             f"{plain.tau_days:g}, without the words, "
                             f"{plain.gate_description()}", plain))
        flat = {k: v for k, v in CALIBRATED_POLICIES[model.model_name].items()
                if k in ("weight", "tau_days", "threshold")}
        policies.insert(-1, (f"one bonus for every question {flat['weight']:g}/"
                             f"{flat['tau_days']:g}/{flat['threshold']:g}", RecencyPolicy(**flat)))
        if args.grid:
            for relevance, weight in (("cosine", 0.004), ("cosine", 0.008), ("cosine", 0.016),
                                      ("cohort", 0.0), ("cohort", 0.25), ("cohort", 0.5)):
                grid = RecencyPolicy(relevance=relevance, weight=weight, tau_days=14.0,
                                     threshold=0.0)
                grid = grid.model_copy(update={"threshold": fitted_threshold(
                    tune, rankers, grid, banks["tune"])})
                policies.append((f"{relevance} {weight:g}/14/{grid.threshold:.3g}", grid))
        sources = sorted({s.source for s in stores})
        for split in ("tune", "heldout"):
            for source in sources:
                chosen = [s for s in stores if s.split == split and s.source == source]
                if not chosen:
                    continue
                rows = [(label, measure(chosen, rankers, policy, banks[split]))
                        for label, policy in policies]
                for label, policy in policies:
                    if label.startswith("0.2.0") or (label.startswith("cohort")
                                                     and policy.weight > 0):
                        continue
                    rows.append((f"{label.split(',')[0].split(' ')[0]} "
                                 f"{policy.weight:g}/{policy.tau_days:g}, self-calibrated",
                                 self_calibrated(chosen, rankers, policy, banks["tune"],
                                                 banks[split])))
                # What the package does with no policy given: the store's own gate from
                # MIN_FIT_MEMORIES memories, the shipped one below.
                rows.append((f"default {default.weight:g}/{default.tau_days:g}, the store's own "
                             f"gate (fitted from {MIN_FIT_MEMORIES} memories, shipped below)",
                             self_calibrated(chosen, rankers, default, banks["tune"],
                                             banks[split], MIN_FIT_MEMORIES)))
                out.append(table(f"{model_name} · {source} · {split} ({len(chosen)} stores)", rows))
                print(out[-1], "\n", flush=True)
        out.append(spread_table(
            f"{model_name} · per-store threshold spread (default policy, held-out stores and bank)",
            spread([s for s in stores if s.split == "heldout"], rankers, default,
                   banks["heldout"])))
        print(out[-1], "\n", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "retrieval_quality.md").write_text("\n\n".join(out) + "\n", "utf-8")


if __name__ == "__main__":
    main()
