"""Scale benchmark: top-8 + RecencyBonusPostprocessor vs QdrantRecencyRetriever as the store grows.

    .venv/bin/python benchmarks/scale.py --sizes 16,1000,10000,100000

Synthetic memories (256-dim, dated uniformly over the year before the reference date)
sit on topic directions with raw cosines spread over 0.1-0.5, so every query has many
candidates just under the 0.45 threshold and the recency bonus decides the top 3.
Each (size, storage) runs in a fresh process, embedded Qdrant on disk and in memory.
Per run: recall@3 against a brute-force numpy re-rank of the whole collection, median
and p95 latency per query, ingest throughput, peak RSS of the process and peak Python
allocation per query (tracemalloc, a separate pass so it does not skew latency).
Writes ``benchmarks/results/scale.csv`` and ``scale.png``.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)
DIM = 256
MAX_TOPICS = 64
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Run:
    """One benchmark configuration, executed in its own process."""

    size: int
    storage: str  # "disk" or "memory"
    queries: int
    candidate_limit: int
    seed: int


@dataclass(frozen=True)
class Result:
    """Measurements of one run; latencies in milliseconds, memory in MiB."""

    size: int
    storage: str
    ingest_per_s: float
    peak_rss_mib: float
    queries_with_truth: int
    top8_recall_at_3: float
    top8_median_ms: float
    top8_p95_ms: float
    top8_query_peak_mib: float
    qdrant_recall_at_3: float
    qdrant_median_ms: float
    qdrant_p95_ms: float
    qdrant_query_peak_mib: float

    @property
    def latency_ratio(self) -> float:
        """Median latency of the Qdrant retriever over top-8 + postprocessor."""
        return self.qdrant_median_ms / self.top8_median_ms


def synthetic_memories(size: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Unit vectors (float32), topic directions, each memory's topic and age in seconds."""
    rng = np.random.default_rng(seed)
    n_topics = max(1, min(MAX_TOPICS, size // 16))
    directions = rng.normal(size=(n_topics, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    topics = rng.integers(0, n_topics, size)
    raw = rng.uniform(0.1, 0.5, size)
    noise = rng.normal(size=(size, DIM))
    along = directions[topics]
    noise -= (noise * along).sum(axis=1, keepdims=True) * along  # orthogonal to the topic
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    vectors = raw[:, None] * along + np.sqrt(1.0 - raw**2)[:, None] * noise
    ages = rng.uniform(0.0, 365 * 86_400.0, size).round()
    return vectors.astype(np.float32), directions, topics, ages


def brute_force_top(vectors: np.ndarray, ages_days: np.ndarray, query: np.ndarray, policy) -> set[int]:
    """Rows of the true top n: bonus added to every memory, threshold applied."""
    final = vectors.astype(np.float64) @ query + policy.weight * np.exp(-ages_days / policy.tau_days)
    order = np.argsort(-final)[: policy.top_n]
    return {int(i) for i in order if final[i] >= policy.threshold}


def measure(run: Run) -> Result:
    """Build the collection, then time and score both retrieval paths on the same queries."""
    from llama_index.core import MockEmbedding, VectorStoreIndex
    from llama_index.core.schema import QueryBundle
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient
    from rich.progress import Progress

    from llama_index_recency import RecencyBonusPostprocessor, memory_node
    from llama_index_recency.retriever import QdrantRecencyRetriever

    # QdrantVectorStore indexes doc_id on creation, which embedded Qdrant ignores with a warning.
    warnings.filterwarnings("ignore", message="Payload indexes have no effect in the local Qdrant")
    vectors, directions, topics, ages = synthetic_memories(run.size, run.seed)
    nodes = []
    for i in range(run.size):
        when = REFERENCE - timedelta(seconds=float(ages[i]))
        node = memory_node(f"Memory {i} on topic {topics[i]}.", when, metadata={"row": i})
        node.embedding = vectors[i].tolist()
        nodes.append(node)

    with tempfile.TemporaryDirectory() as tmp:
        client = QdrantClient(path=tmp) if run.storage == "disk" else QdrantClient(location=":memory:")
        store = QdrantVectorStore(collection_name="memories", client=client)
        batch = 1000
        with Progress(transient=True) as progress:
            task = progress.add_task(f"ingest {run.size:,} ({run.storage})", total=run.size)
            started = time.perf_counter()
            for start in range(0, run.size, batch):
                store.add(nodes[start : start + batch])
                progress.advance(task, len(nodes[start : start + batch]))
            ingest_seconds = time.perf_counter() - started
        del nodes

        policy = RecencyBonusPostprocessor(reference_date=REFERENCE)
        embed_model = MockEmbedding(embed_dim=DIM)  # unused: queries carry their embedding
        top8 = VectorStoreIndex.from_vector_store(store, embed_model=embed_model).as_retriever(
            similarity_top_k=8
        )
        qdrant = QdrantRecencyRetriever(
            store, embed_model, policy=policy, candidate_limit=run.candidate_limit
        )

        def top8_then_bonus(bundle: QueryBundle) -> list:
            return policy.postprocess_nodes(top8.retrieve(bundle))

        queries = [directions[q % len(directions)] for q in range(run.queries)]
        bundles = [QueryBundle("q", embedding=q.tolist()) for q in queries]
        truths = [brute_force_top(vectors, ages / 86_400, q, policy) for q in queries]
        paths: dict[str, Callable[[QueryBundle], list]] = {
            "top8": top8_then_bonus,
            "qdrant": qdrant.retrieve,
        }
        stats: dict[str, float] = {}
        for name, retrieve in paths.items():
            retrieve(bundles[0])  # warm-up: first-call checks and caches
            latencies, recalls = [], []
            for bundle, truth in zip(bundles, truths, strict=True):
                started = time.perf_counter()
                found = retrieve(bundle)
                latencies.append((time.perf_counter() - started) * 1000)
                if truth:
                    rows = {n.node.metadata["row"] for n in found}
                    recalls.append(len(rows & truth) / len(truth))
            tracemalloc.start()
            for bundle in bundles[:5]:
                retrieve(bundle)
            stats[f"{name}_query_peak_mib"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            stats[f"{name}_recall_at_3"] = statistics.fmean(recalls) if recalls else float("nan")
            stats[f"{name}_median_ms"] = statistics.median(latencies)
            stats[f"{name}_p95_ms"] = float(np.percentile(latencies, 95))
        client.close()

    return Result(
        size=run.size,
        storage=run.storage,
        ingest_per_s=run.size / ingest_seconds,
        peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        queries_with_truth=sum(bool(t) for t in truths),
        **stats,  # type: ignore[arg-type]
    )


def run_isolated(run: Run) -> Result:
    """Measure in a fresh interpreter, so peak RSS belongs to this run alone."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(measure, run).result()


def print_table(results: Sequence[Result]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="top-8 + postprocessor (a) vs QdrantRecencyRetriever (b)")
    for column in ("N", "storage", "ingest/s", "peak RSS MiB", "recall@3 a", "recall@3 b",
                   "median ms a", "median ms b", "p95 ms a", "p95 ms b", "b/a median",
                   "query MiB a", "query MiB b"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(
            f"{r.size:,}", r.storage, f"{r.ingest_per_s:,.0f}", f"{r.peak_rss_mib:,.0f}",
            f"{r.top8_recall_at_3:.3f}", f"{r.qdrant_recall_at_3:.3f}",
            f"{r.top8_median_ms:.2f}", f"{r.qdrant_median_ms:.2f}",
            f"{r.top8_p95_ms:.2f}", f"{r.qdrant_p95_ms:.2f}", f"{r.latency_ratio:.2f}",
            f"{r.top8_query_peak_mib:.2f}", f"{r.qdrant_query_peak_mib:.2f}",
        )
    Console(width=170).print(table)


def write_outputs(results: Sequence[Result], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    with open(out / "scale.csv", "w", newline="") as handle:
        fields = [*asdict(results[0]), "latency_ratio"]
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for r in results:
            writer.writerow({**asdict(r), "latency_ratio": r.latency_ratio})

    figure, (latency, recall) = plt.subplots(1, 2, figsize=(11, 4.2))
    for storage, style in (("memory", "-"), ("disk", "--")):
        rows = [r for r in results if r.storage == storage]
        if not rows:
            continue
        sizes = [r.size for r in rows]
        latency.plot(sizes, [r.top8_median_ms for r in rows], "o" + style, color="tab:blue",
                     label=f"(a) top-8 + postprocessor, {storage}")
        latency.plot(sizes, [r.qdrant_median_ms for r in rows], "s" + style, color="tab:orange",
                     label=f"(b) QdrantRecencyRetriever, {storage}")
        recall.plot(sizes, [r.top8_recall_at_3 for r in rows], "o" + style, color="tab:blue",
                    label=f"(a) {storage}")
        recall.plot(sizes, [r.qdrant_recall_at_3 for r in rows], "s" + style, color="tab:orange",
                    label=f"(b) {storage}")
    latency.set(xscale="log", yscale="log", xlabel="memories", ylabel="median latency per query (ms)",
                title="Latency (embedded Qdrant)")
    recall.set(xscale="log", xlabel="memories", ylabel="recall@3 vs brute force", ylim=(0, 1.05),
               title="Recall@3")
    latency.legend(fontsize=7)
    recall.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(out / "scale.png", dpi=120)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="16,1000,10000",
                        help="comma-separated collection sizes (default: 16,1000,10000)")
    parser.add_argument("--storage", default="memory,disk",
                        help="embedded Qdrant storage kinds to run: memory, disk or both")
    parser.add_argument("--queries", type=int, default=50, help="queries per run")
    parser.add_argument("--candidate-limit", type=int, default=1000,
                        help="QdrantRecencyRetriever's prefetch cap")
    parser.add_argument("--seed", type=int, default=20260910)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the CSV and PNG go")
    args = parser.parse_args(argv)

    sizes = [int(s) for s in args.sizes.split(",")]
    storages = [s.strip() for s in args.storage.split(",")]
    results = []
    for size in sizes:
        for storage in storages:
            print(f"N={size:,} {storage} ...", flush=True)
            results.append(run_isolated(Run(size, storage, args.queries, args.candidate_limit, args.seed)))
    print_table(results)
    write_outputs(results, args.out)
    print(f"wrote {args.out / 'scale.csv'} and {args.out / 'scale.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
