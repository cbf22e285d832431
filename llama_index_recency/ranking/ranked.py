"""What a ranking gives back: a row per candidate saying how its score came about and what
happened to it, and the nodes that enter the prompt."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional

from llama_index.core.schema import NodeWithScore

from llama_index_recency.ranking.intent import Intent

Relevance = Literal["cosine", "cohort"]
"""The units of a ranking's scores: raw cosine, or the question's cohort sd."""


@dataclass(frozen=True)
class RankedMemory:
    """One candidate's explanation: how its final score came about and what happened to it."""

    node_id: str
    text: str
    date: Optional[str]
    raw: float
    age_days: Optional[float]
    bonus: float
    final: float
    kept: bool
    reason: str
    """The verdict ("kept", "below 0.45", …), then any note a ranking step left after "; "."""
    lexical: float = 0.0
    """The part of ``raw`` that the question's words give (``lexical_weight`` times the share
    of the question's term weight the memory holds); 0 without the lexical signal."""

    def judged(self, verdict: str) -> "RankedMemory":
        """The row with ``verdict``, keeping the note a ranking step left on it."""
        note = self.reason.partition("; ")[2]
        return self._with(kept=verdict == "kept", reason=f"{verdict}; {note}" if note else verdict)

    def noted(self, note: str) -> "RankedMemory":
        """The row with ``note`` after its verdict ("kept; newer version of …")."""
        return self._with(reason=f"{self.reason.partition('; ')[0]}; {note}")

    def _with(self, **changes: Any) -> "RankedMemory":
        """``dataclasses.replace`` without running ``__init__`` again (6x faster): every row
        of every question is judged once or twice."""
        row = object.__new__(RankedMemory)
        row.__dict__.update(self.__dict__, **changes)
        return row


@dataclass(frozen=True)
class RecencyRanking:
    """The re-ranked candidates (best first) and the nodes that made it into the prompt."""

    rows: tuple[RankedMemory, ...]
    nodes: tuple[NodeWithScore, ...]
    relevance: Relevance = "cosine"
    """The units of ``raw``, ``bonus`` and ``final``: cosine, or the question's cohort sd."""
    vague: bool = False
    """The question was a vague reference (:func:`~llama_index_recency.ranking.vague.is_vague_reference`):
    recent memories were listed so the character can ask back which one is meant."""
    news: bool = False
    """The question asked about the news (:func:`~llama_index_recency.ranking.news.asks_about_the_news`):
    no memory enters the prompt."""
    intent: Intent = "neutral"
    """What the question asked of time (:func:`~llama_index_recency.ranking.intent.question_intent`),
    which chose the bonus (:meth:`RecencyPolicy.for_intent`)."""
    language: str = "en"
    """The question's language (:func:`~llama_index_recency.ranking.language.question_language`)."""
    threshold_language: Optional[str] = None
    """The language whose threshold ranked it (:meth:`RecencyPolicy.for_question`); None: the
    policy has one threshold for every language."""
    threshold: Optional[float] = None
    """The threshold the question met (its language's, raised for a question about the present)."""
    threshold_origin: str = "shipped"
    """Where the threshold came from (:attr:`RecencyPolicy.threshold_origin`)."""

    def gate_line(self) -> str:
        """Which threshold ranked the question and where it came from, e.g. "threshold 0.842
        (ja, fitted on 240 memories on 2026-12-03); zh: using ja's threshold"."""
        if self.threshold is None:
            return ""
        source = (self.threshold_origin if self.threshold_language is None
                  else f"{self.threshold_language}, {self.threshold_origin}")
        line = f"threshold {self.threshold:.3f} ({source})"
        if self.threshold_language not in (None, self.language):
            line += f"; {self.language}: using {self.threshold_language}'s threshold"
        return line

    def to_table(self) -> str:
        """Render the rows as a Markdown table (memory, raw, bonus, final, verdict; with the
        lexical signal, raw as its cosine and the words' part)."""
        raw = "Raw cosine" if self.relevance == "cosine" else "Relevance (sd)"
        if not any(row.lexical for row in self.rows):
            lines = [f"| Memory | {raw} | Bonus | Final | Verdict |", "|---|---|---|---|---|"]
            lines += [f"| {_one_line(row.text)} | {row.raw:.3f} | +{row.bonus:.3f} "
                      f"| {row.final:.3f} | {row.reason} |" for row in self.rows]
            return "\n".join(lines)
        # With the lexical signal, raw is split into the cosine and the words' part.
        lines = [f"| Memory | {raw} | Words | Bonus | Final | Verdict |",
                 "|---|---|---|---|---|---|"]
        lines += [f"| {_one_line(row.text)} | {row.raw - row.lexical:.3f} | +{row.lexical:.3f} "
                  f"| +{row.bonus:.3f} | {row.final:.3f} | {row.reason} |" for row in self.rows]
        return "\n".join(lines)

    def __str__(self) -> str:
        """The table, then which threshold ranked the question (:meth:`gate_line`)."""
        line = self.gate_line()
        return f"{self.to_table()}\n\n{line}" if line else self.to_table()


def _one_line(text: str, width: int = 72) -> str:
    """``text`` on one line, cut to ``width`` shown characters ("…" last), ``|`` escaped.

    Cut before escaping, so a cut never strands a backslash and escapes cost no text.
    """
    flat = " ".join(text.split())
    if len(flat) > width:
        flat = flat[: width - 1] + "…"
    return flat.replace("|", "\\|")
