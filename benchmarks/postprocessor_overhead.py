"""Per-call cost of RecencyBonusPostprocessor on 8 candidates (the seed's top-8 window).

Run: .venv/bin/python benchmarks/postprocessor_overhead.py
"""

from __future__ import annotations

import statistics
import timeit
from datetime import date, timedelta

from llama_index.core.schema import NodeWithScore

from llama_index_recency import RecencyBonusPostprocessor, memory_node

CANDIDATES = 8
REPEATS = 7
CALLS = 2_000


def main() -> None:
    today = date(2026, 9, 10)
    nodes = [
        NodeWithScore(
            node=memory_node(f"Taro did thing number {i}.", today - timedelta(days=3 * i),
                             reference_date=today),
            score=0.5 - 0.01 * i,
        )
        for i in range(CANDIDATES)
    ]
    for label, reference in (("fixed reference_date", today), ("reference_date=None (now)", None)):
        postprocessor = RecencyBonusPostprocessor(reference_date=reference)
        runs = timeit.repeat(
            lambda p=postprocessor: p.postprocess_nodes(nodes), number=CALLS, repeat=REPEATS
        )
        per_call = [run / CALLS * 1e6 for run in runs]
        print(
            f"{label:28s} {CANDIDATES} candidates: median {statistics.median(per_call):6.1f} µs/call, "
            f"best {min(per_call):6.1f} µs/call ({REPEATS}×{CALLS} calls)"
        )


if __name__ == "__main__":
    main()
