"""Vague references: precision and recall of ``is_vague_reference`` per split and language.

    .venv/bin/python benchmarks/vague_reference.py [--show-errors]

Data, ``benchmarks/data/vague_phrasings.json``: the splits ``tune``, ``tune2`` and
``heldout``, each with ``en`` and ``ja`` lists of ``vague`` phrasings (a vague reference to
the user's recent doings) and ``not_vague`` ones (deixis with real content, ordinary
personal questions, near misses). The detector's open-class words come from ``tune`` and
``tune2`` only; ``heldout`` was written before the rules that read it were, in other
registers (polite, fillers, dialect-ish), so its rows are the fair measure.

Precision: of the phrasings detected as vague, the share that are; recall: of the vague
phrasings, the share detected; false positives: the ``not_vague`` phrasings detected as
vague. No model, no store: the detector is a fixed rule.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

from llama_index_recency.ranking.vague import is_vague_reference

DATA = Path(__file__).parent / "data" / "vague_phrasings.json"
SPLITS = ("tune", "tune2", "heldout")
"""The data file's splits, in the order they are reported: what the rules came from first."""


@dataclass(frozen=True)
class Score:
    """Counts for one split and language."""

    split: str
    language: str
    true_positives: int
    false_positives: int
    false_negatives: int
    vague: int
    not_vague: int
    missed: tuple[str, ...]
    false_alarms: tuple[str, ...]

    @property
    def precision(self) -> float:
        detected = self.true_positives + self.false_positives
        return self.true_positives / detected if detected else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.vague if self.vague else 1.0


def score(split: str, language: str, phrasings: dict[str, list[str]]) -> Score:
    """The detector on one split and language's ``vague`` and ``not_vague`` lists."""
    missed = tuple(q for q in phrasings["vague"] if not is_vague_reference(q))
    false_alarms = tuple(q for q in phrasings["not_vague"] if is_vague_reference(q))
    return Score(
        split=split,
        language=language,
        true_positives=len(phrasings["vague"]) - len(missed),
        false_positives=len(false_alarms),
        false_negatives=len(missed),
        vague=len(phrasings["vague"]),
        not_vague=len(phrasings["not_vague"]),
        missed=missed,
        false_alarms=false_alarms,
    )


def scores(path: Path = DATA) -> list[Score]:
    """Every split × language of the data file, in :data:`SPLITS` order."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [
        score(split, language, data[split][language])
        for split in SPLITS
        for language in ("en", "ja")
    ]


def table(rows: list[Score]) -> str:
    """The Markdown table: split, language, counts, precision, recall."""
    lines = [
        "| Split | Language | Vague | Not vague | Detected (TP/FP) | Precision | Recall |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.split} | {row.language} | {row.vague} | {row.not_vague} "
            f"| {row.true_positives}/{row.false_positives} | {row.precision:.2f} "
            f"| {row.recall:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-errors", action="store_true",
                        help="list the missed vague phrasings and the false alarms")
    args = parser.parse_args()
    rows = scores()
    print(table(rows))
    if args.show_errors:
        for row in rows:
            for label, questions in (("missed", row.missed), ("false alarm", row.false_alarms)):
                for question in questions:
                    print(f"{row.split}/{row.language} {label}: {question}")


if __name__ == "__main__":
    main()
