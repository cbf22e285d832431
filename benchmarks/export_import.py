"""Export and import speed against a plain insert_memories of the same memories.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/export_import.py [--count 10000]

Memories: ``--count`` synthetic dated facts (a year of them, ``--users`` users, every 10th
superseding its user's previous one), embedded with the offline multilingual-e5-small
(``offline_embedding()``, one thread). Embedding 10,000 of them takes about 4 minutes
here, so the vectors are computed once and cached (``benchmarks/results/``) for the stores
that are built with vectors; only "import without vectors" embeds, as a user's import does.

Measured, each into (or from) an on-disk Qdrant Edge store in a temporary directory:

- baseline: ``insert_memories`` of the nodes with their vectors into a new store (this is
  also the store exported below);
- export without vectors, export with vectors (``export_memories``);
- import with vectors (no embedding), import without vectors (embedding every memory),
  each into a new store (``import_memories``).

Printed: seconds, memories/s, and each one's time as a multiple of the baseline's (the
same run, so load on this shared 2-core machine affects all alike). One run each.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from llama_index.core.schema import MetadataMode, TextNode

from llama_index_recency import memory_node, offline_embedding, open_memory_index
from llama_index_recency.storage import close_memory_index, count_memories
from llama_index_recency.writing.backup import export_memories, import_memories
from llama_index_recency.writing.updates import insert_memories

RESULTS = Path(__file__).resolve().parent / "results"
THINGS = ("green tea", "trains", "jazz", "ramen", "hiking", "chess", "sourdough", "cats",
          "the violin", "typescript", "gardening", "ski trips", "old films", "curry")
VERBS = ("likes", "is learning", "stopped", "talked about", "bought a book on",
         "wants to try", "went back to")


def synthetic_memories(count: int, users: int) -> list[TextNode]:
    """``count`` dated facts over 2025-09 to 2026-08, round robin over ``users`` users; every
    10th of a user's memories supersedes that user's previous one."""
    start = np.datetime64("2025-09-01")
    nodes: list[TextNode] = []
    previous: dict[str, str] = {}
    for i in range(count):
        user = f"user{i % users}"
        day = str(start + np.timedelta64(i * 365 // count, "D"))
        fact = (f"The user {VERBS[i % len(VERBS)]} {THINGS[(i // len(VERBS)) % len(THINGS)]} "
                f"(note {i}).")
        own = i // users
        links = [previous[user]] if own % 10 == 9 and user in previous else None
        node = memory_node(fact, day, user_id=user, supersedes=links)
        previous[user] = node.node_id
        nodes.append(node)
    return nodes


def vectors_for(nodes: list[TextNode], cache: Path) -> np.ndarray:
    """The e5 vectors of the nodes' texts, computed once and cached by count."""
    if cache.exists():
        vectors = np.load(cache)
        if len(vectors) == len(nodes):
            return vectors
    embed = offline_embedding()
    texts = [node.get_content(metadata_mode=MetadataMode.EMBED) for node in nodes]
    began = time.perf_counter()
    vectors = np.asarray(embed.get_text_embedding_batch(texts), dtype=np.float32)
    print(f"embedded {len(texts)} memories once in {time.perf_counter() - began:.0f} s "
          f"(cached in {cache})")
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors


def timed(what: Callable[[], object]) -> float:
    began = time.perf_counter()
    what()
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=4)
    args = parser.parse_args()
    nodes = synthetic_memories(args.count, args.users)
    vectors = vectors_for(nodes, RESULTS / f"export_import_vectors_{args.count}.npy")
    embed = offline_embedding()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="export-import-") as work:
        root = Path(work)
        source = open_memory_index(embed, path=root / "source")
        with_vectors = [node.model_copy(deep=True) for node in nodes]
        for node, vector in zip(with_vectors, vectors, strict=True):
            node.embedding = vector.tolist()
        rows.append(("insert_memories with vectors (baseline)",
                     timed(lambda: insert_memories(source, with_vectors))))
        assert count_memories(source) == args.count
        plain, full = root / "plain.jsonl", root / "full.jsonl"
        rows.append(("export without vectors", timed(lambda: export_memories(source, plain))))
        rows.append(("export with vectors",
                     timed(lambda: export_memories(source, full, with_embeddings=True))))
        close_memory_index(source)
        for name, path in (("import with vectors (no embedding)", full),
                           ("import without vectors (embedding)", plain)):
            target = open_memory_index(embed, path=root / name.split()[1])
            rows.append((name, timed(lambda: import_memories(target, path))))
            assert count_memories(target) == args.count
            close_memory_index(target)
        sizes = {path.name: path.stat().st_size / 1e6 for path in (plain, full)}
    baseline = rows[0][1]
    print(f"{args.count} memories, {args.users} users, on-disk Qdrant Edge, e5-small; "
          f"files: {sizes['plain.jsonl']:.1f} MB without vectors, {sizes['full.jsonl']:.1f} MB "
          "with")
    print(f"| {'step':<40} | {'seconds':>8} | {'memories/s':>10} | {'x baseline time':>15} |")
    print(f"|{'-' * 42}|{'-' * 10}|{'-' * 12}|{'-' * 17}|")
    for name, seconds in rows:
        print(f"| {name:<40} | {seconds:8.2f} | {args.count / seconds:10.0f} | "
              f"{seconds / baseline:15.2f} |")


if __name__ == "__main__":
    main()
