"""The lexical signal's study: cosine plus ``beta`` times the question's term weight a memory
holds (:meth:`LexicalQuery.share`, its rule for a lone term included), exact over every
memory (numpy), against plain cosine, by split; ``beta`` may differ by question language.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/lexical.py --locomo DIR [--betas 0,0.1,0.2]

Per store set and split: recall@1/3/5 (threshold off), and through a gate fitted per store
to let ``rate`` of the shipped bank in (``fit_gate``'s rule: the cut under which that share
of the bank's best scores falls, 0.001 over it), the evidence that reaches the prompt (a
target among the kept top 3) and the held-out bank's bring-up. The rate sweep is the
trade-off curve; choices are read on "tune" and reported on "heldout".
Writes ``benchmarks/results/lexical.md``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval_quality import (  # noqa: E402
    RESULTS,
    Embedder,
    Store,
    bundled_stores,
    locomo_stores,
    offtopic,
    own_stores,
)

from llama_index_recency.models.factories import offline_embedding  # noqa: E402
from llama_index_recency.ranking.language import question_language  # noqa: E402
from llama_index_recency.ranking.lexical import LexicalQuery, question_terms, terms  # noqa: E402

MARGIN = 0.001

Betas = dict[str, float]
"""The lexical weight by question language; "*" for every other language."""


def parse_betas(text: str) -> Betas:
    """"0.1" (every language) or "en=0.15:ja=0" (the rest: 0)."""
    if "=" not in text:
        return {"*": float(text)}
    return {"*": 0.0, **{lang: float(value) for lang, value in
                         (part.split("=") for part in text.split(":"))}}


def label(betas: Betas) -> str:
    return ", ".join(f"{lang} {value:g}" if lang != "*" else f"{value:g}"
                     for lang, value in betas.items() if lang != "*" or len(betas) == 1)


@dataclass
class Scored:
    """One store's fused relevance for its questions and both banks' best scores."""

    store: Store
    memory_terms: list[frozenset[str]]
    df: Counter[str]

    def relevance(self, question: str, vector: np.ndarray, betas: Betas) -> np.ndarray:
        cosines = self.store.vectors @ vector
        beta = betas.get(question_language(question), betas["*"])
        if beta == 0.0:
            return cosines
        asked = question_terms(question)
        lexical = LexicalQuery.from_counts(len(self.memory_terms),
                                           {t: self.df[t] for t in asked})
        shares = np.array([lexical.share(m & set(asked)) for m in self.memory_terms])
        return cosines + beta * shares


def scored(store: Store) -> Scored:
    memory_terms = [terms(text) for _, text, _ in store.memories]
    df: Counter[str] = Counter()
    for held in memory_terms:
        df.update(held)
    return Scored(store, memory_terms, df)


def gate(bests: Sequence[float], rate: float) -> float:
    """The cut that lets at most ``rate`` of the bank's best scores through, with a margin."""
    ordered = sorted(bests, reverse=True)
    allowed = int(rate * len(ordered))
    return ordered[allowed] + MARGIN if allowed < len(ordered) else -1e9


def measure(sets: Sequence[Scored], banks: dict[str, dict[str, list[tuple[str, np.ndarray]]]],
            beta: Betas, rates: Sequence[float]) -> dict[str, float]:
    hits = {1: 0, 3: 0, 5: 0}
    questions = 0
    evidence = {rate: 0 for rate in rates}
    brought = {rate: 0 for rate in rates}
    asked = 0
    for entry in sets:
        store = entry.store
        tune_bests = [float(entry.relevance(q, v, beta).max())
                      for q, v in banks["tune"][store.lang]]
        held_bests = [float(entry.relevance(q, v, beta).max())
                      for q, v in banks["heldout"][store.lang]]
        cuts = {rate: gate(tune_bests, rate) for rate in rates}
        for rate in rates:
            brought[rate] += sum(best >= cuts[rate] for best in held_bests)
        asked += len(held_bests)
        for (question, targets, _), vector in zip(store.questions, store.question_vectors,
                                                  strict=True):
            if not targets:
                continue
            questions += 1
            relevance = entry.relevance(question, vector, beta)
            order = np.argsort(-relevance, kind="stable")
            holds = [bool(store.memories[i][2] & targets) for i in order[:5]]
            for k in hits:
                hits[k] += any(holds[:k])
            for rate in rates:
                evidence[rate] += any(h and relevance[i] >= cuts[rate]
                                      for h, i in zip(holds[:3], order[:3], strict=True))
    row = {f"r@{k}": hits[k] / max(questions, 1) for k in hits}
    for rate in rates:
        row[f"ev@{rate:g}"] = evidence[rate] / max(questions, 1)
        row[f"up@{rate:g}"] = brought[rate] / max(asked, 1)
    row["n"] = questions
    return row


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--locomo", type=Path, help="folder of LoCoMo conversation JSON files")
    parser.add_argument("--betas", default="0,0.1,0.15,en=0.15:ja=0",
                        help="comma-separated: a weight, or per language as en=0.15:ja=0")
    parser.add_argument("--rates", default="0.02,0.05,0.1,0.2")
    args = parser.parse_args(argv)
    betas = [parse_betas(b) for b in args.betas.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    embedder = Embedder("e5", offline_embedding())
    stores = [*bundled_stores(), *own_stores("en"), *own_stores("ja")]
    if args.locomo:
        stores += list(locomo_stores(args.locomo))
    for store in stores:
        embedder.embed(store)
    banks = {split: {lang: list(zip(offtopic(split, lang), embedder.texts(
        f"offtopic-{split}-{lang}", offtopic(split, lang), True), strict=True))
        for lang in ("en", "ja")} for split in ("tune", "heldout")}
    entries = [scored(store) for store in stores]
    out = ["# Lexical signal: cosine + beta x term-weight share (exact, numpy)", "",
           "ev@r: evidence in the prompt through a per-store gate letting r of the shipped "
           "bank in; up@r: held-out bank brought up at that gate.", ""]
    for split in ("tune", "heldout"):
        for source in sorted({s.source for s in stores}):
            chosen = [e for e in entries if e.store.split == split and e.store.source == source]
            if not chosen:
                continue
            rows = [(beta, measure(chosen, banks, beta, rates)) for beta in betas]
            keys = [k for k in rows[0][1] if k != "n"]
            out += [f"## {source} · {split} ({len(chosen)} stores, {rows[0][1]['n']} questions)",
                    "", "| beta | " + " | ".join(keys) + " |",
                    "|---|" + "---|" * len(keys)]
            out += [f"| {label(beta)} | " + " | ".join(f"{row[k]:.3f}" for k in keys) + " |"
                    for beta, row in rows]
            out.append("")
            print("\n".join(out[-len(rows) - 5:]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lexical.md").write_text("\n".join(out) + "\n", "utf-8")


if __name__ == "__main__":
    main()
