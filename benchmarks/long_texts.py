"""What four stored texts of 40,000 characters add to a question (same run).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/long_texts.py

Two Edge stores of 200 memories (random unit vectors, e5's model recorded), the second
also holding four pasted texts of 40,000 characters (punctuation runs, the one-sentence
check's worst case) stored with plain ``insert_nodes`` close to the question, so the
newer-versions step reads them. A present-tense question (newer versions first applies),
vector computed beforehand, 20 times through ``QdrantRecencyRetriever.explain``: the median
per question on each store and the difference. Writes ``benchmarks/results/long_texts.md``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

import numpy as np
from llama_index.core.schema import QueryBundle, TextNode

from llama_index_recency import QdrantRecencyRetriever, memory_node, offline_embedding
from llama_index_recency.storage import close_memory_index, index_policy, open_memory_index

RESULTS = Path(__file__).parent / "results" / "long_texts.md"
QUESTION = "What do I drink these days?"


def unit(vector: np.ndarray) -> list[float]:
    return (vector / np.linalg.norm(vector)).tolist()


def median_ms(long_texts: bool, rng: np.random.Generator, question: np.ndarray) -> float:
    today = date(2026, 9, 10)
    with tempfile.TemporaryDirectory() as folder:
        index = open_memory_index(offline_embedding(), path=Path(folder) / "store")
        nodes = []
        for i in range(200):
            node = memory_node(f"The user noted thing number {i}.",
                               today - timedelta(days=i), reference_date=today)
            node.embedding = unit(rng.normal(size=384))
            nodes.append(node)
        for i in range(4 if long_texts else 0):
            text = "Hi" + "! " * 20_000 if i % 2 else "Hi" + ". " * 20_000
            nodes.append(TextNode(text=text, embedding=unit(question + 0.2 * rng.normal(
                size=384)), metadata={"date": (today - timedelta(days=i)).isoformat()}))
        index.insert_nodes(nodes)
        retriever = QdrantRecencyRetriever.from_index(
            index, index_policy(index, reference_date=today, threshold=0.0))
        times = []
        for _ in range(20):
            start = time.perf_counter()
            retriever.explain(QueryBundle(QUESTION, embedding=question.tolist()))
            times.append(time.perf_counter() - start)
        close_memory_index(index)
    return statistics.median(times) * 1e3


def main() -> None:
    rng = np.random.default_rng(3)
    question = np.asarray(unit(rng.normal(size=384)))
    plain, long = median_ms(False, rng, question), median_ms(True, rng, question)
    line = (f"| {plain:.2f} ms | {long:.2f} ms | {long - plain:+.2f} ms |")
    print(line)
    RESULTS.write_text("# Four stored texts of 40,000 characters, a present-tense question\n\n"
                       "| without | with | added |\n|---|---|---|\n" + line + "\n", "utf-8")


if __name__ == "__main__":
    main()
