"""Engines side by side: the exact recency query on qdrant-client local mode and Qdrant Edge,
against a numpy brute force of the same matrix (the physical reference).

    .venv/bin/python benchmarks/engines.py --sizes 1000,10000,20000,100000 --shapes random,crowded

Memories are 256-dim unit vectors dated over the year before 2026-09-10; the policy is
``RecencyBonusPostprocessor(reference_date="2026-09-10")`` (weight 0.05, tau 14 days,
threshold 0.45, top 3). Two data shapes:

- ``random``: isotropic random vectors; each query has 10 memories at raw cosine 0.35-0.75.
- ``crowded``: half the memories are a cluster of near-identical old ones (raw 0.46-0.48,
  60-365 days old) and three fresh ones (raw 0.447-0.453, 0.5-2.5 days old) rank below
  the whole cluster by raw cosine but are the true top 3 after the bonus.

Engines: ``local`` (QdrantVectorStore over QdrantClient(path=...)) and ``edge``
(QdrantEdgeVectorStore) run QdrantRecencyRetriever; ``numpy`` computes
``raw = M @ q; final = raw + 0.05 * exp(-age / 14)`` per query; ``edge-top8`` is the old way
(top 8 by raw cosine, then RecencyBonusPostprocessor) on the Edge store. Ingest, then
reopen + queries, each run in a fresh process per engine, so reopen time and RSS are the
engine's own. Recall@3 is against a float64 brute force computed here; "searches" counts
the plain searches each query made (the store's ``query`` method, wrapped here).

Local mode commits (fsyncs) every point: its first 200 memories are written that way, as
0.1.0 writes them, and the rest through the same ``QdrantVectorStore.add`` with sqlite's
``synchronous=OFF``. Each searcher stops after ``--budget`` seconds of queries (at least 5),
which only local mode reaches. Writes ``benchmarks/results/engines.csv``.
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import resource
import shutil
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

# Single-threaded BLAS for the brute force: threaded OpenBLAS matvecs slow down ~10x on a
# loaded 2-core machine, which would flatter every engine compared with it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

DIM = 256
REFERENCE = datetime(2026, 9, 10, tzinfo=timezone.utc)
WEIGHT, TAU_DAYS, THRESHOLD, TOP_N = 0.05, 14.0, 0.45, 3
NEAR = 10  # memories close to each query in the random shape
MIN_QUERIES = 5  # timed queries per searcher even past its time budget
DURABLE_SAMPLE = 200  # local mode: memories written as 0.1.0 does (one fsync'd commit each)
BATCH = 2048  # nodes per add(), as VectorStoreIndex.insert_nodes batches them
RESULTS = Path(__file__).resolve().parent / "results"
COLLECTION = "memories"


# --- data -----------------------------------------------------------------------------------


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def _at_cosine(direction: np.ndarray, cosines: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors at exactly these cosines to ``direction``, otherwise random."""
    noise = rng.normal(size=(len(cosines), DIM))
    noise = _unit(noise - np.outer(noise @ direction, direction))
    cosines = np.asarray(cosines, dtype=float)[:, None]
    return cosines * direction + np.sqrt(1 - cosines**2) * noise


def make_data(shape: str, size: int, n_queries: int, seed: int) -> dict[str, np.ndarray]:
    """Vectors (float32, unit), ages in days (whole seconds) and query vectors."""
    rng = np.random.default_rng(seed)
    vectors = _unit(rng.normal(size=(size, DIM)))
    ages = rng.uniform(0, 365, size)
    if shape == "random":
        if size < n_queries * NEAR:
            raise ValueError(f"random shape needs size >= {n_queries * NEAR}, got {size}")
        queries = _unit(rng.normal(size=(n_queries, DIM)))
        near = rng.choice(size, (n_queries, NEAR), replace=False)
        for query, rows in zip(queries, near, strict=True):
            vectors[rows] = _at_cosine(query, rng.uniform(0.35, 0.75, NEAR), rng)
    elif shape == "crowded":
        center = _unit(rng.normal(size=DIM))
        cluster = rng.choice(size, size // 2 + 3, replace=False)
        fresh, old = cluster[:3], cluster[3:]
        vectors[old] = _at_cosine(center, rng.uniform(0.46, 0.48, len(old)), rng)
        ages[old] = rng.uniform(60, 365, len(old))
        vectors[fresh] = _at_cosine(center, np.array([0.447, 0.450, 0.453]), rng)
        ages[fresh] = [2.5, 1.5, 0.5]
        queries = _at_cosine(center, np.full(n_queries, np.sqrt(1 - 0.01**2)), rng)
    else:
        raise ValueError(f"unknown shape {shape!r}: use random or crowded")
    vectors = _unit(vectors.astype(np.float32))
    ages = np.round(ages * 86_400) / 86_400
    return {"vectors": vectors, "ages": ages, "queries": queries.astype(np.float32)}


def truth(data: dict[str, np.ndarray]) -> list[list[int]]:
    """Rows of the true top 3 per query: float64, every memory gets its bonus."""
    vectors = data["vectors"].astype(np.float64)
    bonus = WEIGHT * np.exp(-data["ages"] / TAU_DAYS)
    tops = []
    for query in data["queries"].astype(np.float64):
        final = vectors @ query + bonus
        order = np.argsort(-final)[:TOP_N]
        tops.append([int(i) for i in order if final[i] >= THRESHOLD])
    return tops


def fresh_raw_rank(data: dict[str, np.ndarray]) -> int:
    """Crowded shape: the best raw-cosine rank (1 = first) a fresh memory reaches in any query."""
    fresh = np.flatnonzero(data["ages"] < 3)
    best = len(data["ages"])
    for query in data["queries"]:
        raw = data["vectors"] @ query
        best = min(best, int((raw > raw[fresh].max()).sum()) + 1)
    return best


# --- engines, each phase in a fresh process ---------------------------------------------------


def _rss_mib(field: str = "VmRSS") -> float:
    """This process's resident memory; ``RssFile`` is the part that maps files (the kernel
    can drop it, unlike ``RssAnon``)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(f"{field}:"))
    return int(line.split()[1]) / 1024


def _nodes(vectors: np.ndarray, ages: np.ndarray) -> list:
    from llama_index_recency import memory_node

    nodes = []
    for row, (vector, age) in enumerate(zip(vectors, ages, strict=True)):
        when = REFERENCE - timedelta(seconds=round(float(age) * 86_400))
        node = memory_node(f"Memory number {row}.", when, metadata={"row": row},
                           reference_date=REFERENCE)
        node.embedding = vector.tolist()
        nodes.append(node)
    return nodes


def ingest(engine: str, data_file: str, path: str) -> dict[str, float]:
    """Write every memory into a new store at ``path``; rates in memories per second."""
    warnings.filterwarnings("ignore", message=".*(Payload indexes|Local mode is not)")
    data = np.load(data_file)
    if engine == "numpy":
        os.makedirs(path)
        started = time.perf_counter()
        np.save(os.path.join(path, "vectors.npy"), data["vectors"])
        np.save(os.path.join(path, "ages.npy"), data["ages"])
        return {"ingest_per_s": len(data["ages"]) / (time.perf_counter() - started)}
    nodes = _nodes(data["vectors"], data["ages"])
    result: dict[str, float] = {}
    if engine == "edge":
        from llama_index_recency.storage import QdrantEdgeVectorStore

        store = QdrantEdgeVectorStore(path, dimensions=DIM)
        started = time.perf_counter()
        for start in range(0, len(nodes), BATCH):
            store.add(nodes[start : start + BATCH])
        store.flush()
        result["ingest_per_s"] = len(nodes) / (time.perf_counter() - started)
        store.close()
        return result
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    client = QdrantClient(path=path)
    store = QdrantVectorStore(collection_name=COLLECTION, client=client)
    sample = nodes[:DURABLE_SAMPLE]
    started = time.perf_counter()
    store.add(sample)  # as 0.1.0 writes: local mode commits (fsync) every point
    result["durable_ingest_per_s"] = len(sample) / (time.perf_counter() - started)
    # The rest through the same client calls, without an fsync per point (as Edge's WAL
    # does not fsync per write either): fsync'd, 100k memories would take ~45 minutes.
    client._client.collections[COLLECTION].storage.storage.execute("PRAGMA synchronous=OFF")
    rest = nodes[DURABLE_SAMPLE:]
    started = time.perf_counter()
    for start in range(0, len(rest), BATCH):
        store.add(rest[start : start + BATCH])
    result["ingest_per_s"] = len(rest) / (time.perf_counter() - started) if rest else float("nan")
    client.close()
    return result


def query(engine: str, data_file: str, path: str, budget_s: float) -> dict[str, Any]:
    """Reopen the store, then time every searcher of this engine over the queries (each
    stops early, after at least MIN_QUERIES, once it has spent ``budget_s``)."""
    warnings.filterwarnings("ignore", message=".*(Payload indexes|Local mode is not)")
    from llama_index.core import MockEmbedding, VectorStoreIndex
    from llama_index.core.schema import QueryBundle
    from llama_index.vector_stores.qdrant import QdrantVectorStore
    from qdrant_client import QdrantClient

    from llama_index_recency import RecencyBonusPostprocessor
    from llama_index_recency.integrations.retriever import QdrantRecencyRetriever
    from llama_index_recency.storage import QdrantEdgeVectorStore

    queries = np.load(data_file)["queries"]
    policy = RecencyBonusPostprocessor(reference_date=REFERENCE.date().isoformat())
    embed = MockEmbedding(embed_dim=1)  # unused: every query carries its embedding
    rss_before = _rss_mib()
    started = time.perf_counter()
    if engine == "numpy":
        matrix = np.load(os.path.join(path, "vectors.npy"))
        ages = np.load(os.path.join(path, "ages.npy"))
    elif engine == "edge":
        store = QdrantEdgeVectorStore(path)
    else:
        client = QdrantClient(path=path)
        store = QdrantVectorStore(collection_name=COLLECTION, client=client)
    reopen_s = time.perf_counter() - started
    rss_open = _rss_mib()

    searches = [0]
    if engine != "numpy":  # count the plain searches the plan makes (benchmark only)
        original = type(store).query

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            searches[0] += 1
            return original(self, *args, **kwargs)

        type(store).query = counted  # type: ignore[method-assign]

    def brute(q: np.ndarray) -> list[int]:
        final = matrix @ q + WEIGHT * np.exp(-ages / TAU_DAYS)
        top = np.argpartition(-final, TOP_N)[:TOP_N]
        return [int(i) for i in top[np.argsort(-final[top])] if final[i] >= THRESHOLD]

    def rows(nodes: list) -> list[int]:
        return [n.node.metadata["row"] for n in nodes]

    searchers: dict[str, Callable[[np.ndarray], list[int]]] = {}
    if engine == "numpy":
        searchers["numpy"] = brute
    else:
        exact = QdrantRecencyRetriever(store, embed, policy)
        searchers[engine] = lambda q: rows(exact.retrieve(QueryBundle("q", embedding=q.tolist())))
    if engine == "edge":
        top8 = VectorStoreIndex.from_vector_store(store, embed_model=embed).as_retriever(
            similarity_top_k=8
        )
        searchers["edge-top8"] = lambda q: rows(
            policy.postprocess_nodes(top8.retrieve(QueryBundle("q", embedding=q.tolist())))
        )

    runs = {}
    for name, search in searchers.items():
        search(queries[0])  # warm-up: first-call checks (counts) and caches
        latencies, found, counts = [], [], []
        for q in queries:
            if len(latencies) >= MIN_QUERIES and sum(latencies) > budget_s * 1000:
                break
            searches[0] = 0
            started = time.perf_counter()
            found.append(search(q))
            latencies.append((time.perf_counter() - started) * 1000)
            counts.append(searches[0])
        runs[name] = {"latencies_ms": latencies, "found": found, "searches": counts}
    return {
        "reopen_s": reopen_s,
        "rss_before_mib": rss_before,
        "rss_open_mib": rss_open,
        "rss_peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss_end_mib": _rss_mib(),
        "rss_end_file_mib": _rss_mib("RssFile"),
        "runs": runs,
    }


def isolated(function: Callable[..., Any], *args: Any) -> Any:
    """``function(*args)`` in a fresh interpreter, so time and memory are its own."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(function, *args).result()


def disk_mib(path: str) -> float:
    """Allocated bytes under ``path`` (as du counts them), in MiB."""
    total = sum(
        os.lstat(os.path.join(root, name)).st_blocks * 512
        for root, _, names in os.walk(path)
        for name in names
    )
    return total / 2**20


# --- one size and shape, all engines ----------------------------------------------------------


def bench(
    shape: str, size: int, engines: list[str], n_queries: int, seed: int, budget_s: float
) -> list[dict]:
    """One CSV row per searcher: every engine ingests the same data, then reopens and queries."""
    data = make_data(shape, size, n_queries, seed)
    expected = truth(data)
    rank = fresh_raw_rank(data) if shape == "crowded" else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="recency-bench-") as tmp:
        data_file = os.path.join(tmp, "data.npz")
        np.savez(data_file, **data)
        for engine in engines:
            path = os.path.join(tmp, engine)
            print(f"  {shape} {size:,} {engine}: ingest ...", end="", flush=True)
            written = isolated(ingest, engine, data_file, path)
            print(" queries ...", flush=True)
            measured = isolated(query, engine, data_file, path, budget_s)
            disk = disk_mib(path)
            shutil.rmtree(path)
            for name, run in measured["runs"].items():
                pairs = list(zip(run["found"], expected[: len(run["found"])], strict=True))
                hits = [len(set(f) & set(t)) / len(t) for f, t in pairs if t]
                shared = name == "edge-top8"  # same store and process as "edge"
                rows.append({
                    "shape": shape, "size": size, "engine": name, "queries": len(run["found"]),
                    "median_ms": float(np.median(run["latencies_ms"])),
                    "p95_ms": float(np.percentile(run["latencies_ms"], 95)),
                    "recall_at_3": float(np.mean(hits)) if hits else float("nan"),
                    "exact": float(np.mean([f == t for f, t in pairs])),
                    "searches_mean": float(np.mean(run["searches"])),
                    "searches_max": int(np.max(run["searches"])),
                    "ingest_per_s": None if shared else written["ingest_per_s"],
                    "durable_ingest_per_s": written.get("durable_ingest_per_s"),
                    "reopen_s": None if shared else measured["reopen_s"],
                    "rss_before_mib": None if shared else measured["rss_before_mib"],
                    "rss_open_mib": None if shared else measured["rss_open_mib"],
                    "rss_peak_mib": None if shared else measured["rss_peak_mib"],
                    "rss_end_mib": None if shared else measured["rss_end_mib"],
                    "rss_end_file_mib": None if shared else measured["rss_end_file_mib"],
                    "disk_mib": None if shared else disk,
                    "raw_vector_mib": size * DIM * 4 / 2**20,
                    "fresh_raw_rank": rank,
                    "truth_is_fresh": None if rank is None else float(np.mean(
                        [sorted(t) == sorted(np.flatnonzero(data["ages"] < 3)) for t in expected]
                    )),
                })
    return rows


# --- report -----------------------------------------------------------------------------------


def _fmt(value: Any, spec: str) -> str:
    return "—" if value is None or value != value else format(value, spec)


def markdown(rows: list[dict]) -> str:
    head = ("| shape | N | engine | queries | median ms | p95 ms | recall@3 | exact "
            "| searches mean/max | ingest/s | reopen s | RSS open MiB (Δ) | RSS end MiB (file) "
            "| disk MiB |")
    lines = [head, "|" + "---|" * 14]
    for r in rows:
        delta = None if r["rss_open_mib"] is None else r["rss_open_mib"] - r["rss_before_mib"]
        ingest = _fmt(r["ingest_per_s"], ",.0f")
        if r["durable_ingest_per_s"] is not None:
            ingest += f" ({r['durable_ingest_per_s']:,.0f} fsync'd)"
        rss = "—" if delta is None else f"{r['rss_open_mib']:,.0f} ({delta:+,.0f})"
        end = "—" if delta is None else f"{r['rss_end_mib']:,.0f} ({r['rss_end_file_mib']:,.0f})"
        searches = f"{r['searches_mean']:.1f}/{r['searches_max']}"
        if r["engine"] == "numpy":
            searches = "—"
        lines.append(
            f"| {r['shape']} | {r['size']:,} | {r['engine']} | {r['queries']} "
            f"| {r['median_ms']:.2f} | {r['p95_ms']:.2f} | {r['recall_at_3']:.3f} "
            f"| {r['exact']:.3f} | {searches} "
            f"| {ingest} | {_fmt(r['reopen_s'], '.2f')} | {rss} "
            f"| {end} | {_fmt(r['disk_mib'], ',.1f')} |"
        )
    return "\n".join(lines)


def ratios(rows: list[dict]) -> str:
    """Query latency of each engine over numpy's, per shape and size, from the same run."""
    by = {(r["shape"], r["size"], r["engine"]): r for r in rows}
    lines = ["| shape | N | edge / numpy | local / numpy | edge-top8 / numpy "
             "| fresh memories' best raw rank |", "|---|---|---|---|---|---|"]
    for shape, size in dict.fromkeys((r["shape"], r["size"]) for r in rows):
        base = by.get((shape, size, "numpy"))
        cells = []
        for engine in ("edge", "local", "edge-top8"):
            r = by.get((shape, size, engine))
            ratio = None if r is None or base is None else r["median_ms"] / base["median_ms"]
            cells.append(_fmt(ratio, ".2f") + ("x" if ratio else ""))
        rank = by[next(k for k in by if k[:2] == (shape, size))]["fresh_raw_rank"]
        lines.append(f"| {shape} | {size:,} | {' | '.join(cells)} | {_fmt(rank, ',d')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,20000,100000",
                        help="comma-separated numbers of memories")
    parser.add_argument("--shapes", default="random,crowded", help="random, crowded or both")
    parser.add_argument("--engines", default="numpy,edge,local",
                        help="numpy, edge (also runs edge-top8), local")
    parser.add_argument("--queries", type=int, default=50, help="timed queries per engine")
    parser.add_argument("--budget", type=float, default=45.0,
                        help="seconds of queries per searcher before it stops early (local mode)")
    parser.add_argument("--seed", type=int, default=20260910)
    parser.add_argument("--out", type=Path, default=RESULTS / "engines.csv")
    args = parser.parse_args(argv)

    engines = args.engines.split(",")
    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for shape in args.shapes.split(","):
            rows.extend(bench(shape, size, engines, args.queries, args.seed, args.budget))
    print(markdown(rows), "", ratios(rows), sep="\n")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
