"""What the CLI prints: rich tables and lines, user and LLM text always through
:func:`literal`."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from llama_index.core.llms import LLM
from llama_index.core.schema import BaseNode, NodeWithScore
from rich.console import Console
from rich.table import Table
from rich.text import Text

from llama_index_recency.cli.session import Location, Written
from llama_index_recency.fitting.calibration import (
    DEFAULT_KEY,
    Calibration,
    ThresholdFit,
    format_score,
)
from llama_index_recency.fitting.policy_fit import PolicyFit
from llama_index_recency.models.factories import LLM_BASE_URL_ENV
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.ranked import RecencyRanking
from llama_index_recency.records.nodes import USER_ID_KEY

_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

UNWRAPPED_WIDTH = 100_000
"""stdout's width in columns when it is not a terminal and ``COLUMNS`` is unset: wide enough
that nothing wraps (a memory is at most 1,000 characters), so a piped table keeps each
memory's text on one line."""


def stdout_console() -> Console:
    """The console for stdout: on a terminal or in Jupyter, or with ``COLUMNS`` set, as wide as
    rich makes it; otherwise (a pipe, a file) :data:`UNWRAPPED_WIDTH` wide. Rich would take a
    terminal's width from stdin or stderr, or 80 columns, and fold a table's text to fit."""
    console = _Stdout()
    if console.is_terminal or console.is_jupyter or os.environ.get("COLUMNS", "").isdigit():
        return console
    return _Stdout(width=UNWRAPPED_WIDTH)


class _Stdout(Console):
    """Rich's console, but the broken pipe of a reader that stops early (``| head``) goes to
    :func:`~llama_index_recency.cli.main`: a command that only shows what it read ends
    quietly with 0 (rich would exit with 1), one that writes with 1."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def wraps(console: Console) -> bool:
    """Whether ``console`` has a width to fill and wrap at (not :data:`UNWRAPPED_WIDTH`'s)."""
    return console.width < UNWRAPPED_WIDTH


def shown_user(user: str) -> str:
    """A user id as a line shows it: quoted when spaces around it would hide them
    (" alice" is another user than "alice")."""
    return user if user == user.strip() else repr(user)


def literal(text: str, style: str = "") -> Text:
    """User or LLM text shown exactly as written.

    No markup is parsed (``[/b]``, ``[link=…]`` stay as typed) and control characters
    (terminal escape sequences) are shown as ``\\x1b``-style escapes instead of being sent.
    """
    visible = _CONTROL_CHARACTERS.sub(lambda match: match.group().encode("unicode_escape")
                                      .decode("ascii"), text)
    return Text(visible, style=style)


def policy_line(policy: RecencyPolicy) -> Text:
    units = "" if policy.relevance == "cosine" else "relevance in cohort sd, "
    thresholds = " / ".join(f"{lang} {value:.3f}"
                            for lang, value in sorted(policy.language_thresholds.items()))
    words = [f"{lang} {weight:g}" for lang, weight in
             sorted(policy.language_lexical_weights.items()) if weight]
    if policy.lexical_weight:
        words.insert(0, f"{policy.lexical_weight:g}")
    lexical = f"words={' / '.join(words)}, " if words else ""
    return literal(f"policy: {units}bonus={policy.weight:g}·exp(−days/{policy.tau_days:g}), "
                   f"{lexical}threshold={thresholds or f'{policy.threshold:g}'}, "
                   f"at most {policy.top_n}")


def _memory_label(node: NodeWithScore) -> str:
    key = node.node.metadata.get(DEFAULT_KEY)
    return str(key) if key else _shorten(node.node.get_content(), 48)


def _shorten(text: str, width: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def ranking_table(title: Text, ranking: RecencyRanking) -> Table:
    table = Table(title=title, title_justify="left", caption_justify="left")
    table.add_column("Memory", overflow="fold")
    relevance = "Raw cosine" if ranking.relevance == "cosine" else "Relevance (sd)"
    words = any(row.lexical for row in ranking.rows)  # raw split into cosine and words' part
    for column in (relevance, *(("Words",) if words else ()), "Bonus", "Final"):
        table.add_column(column, justify="right")
    table.add_column("Verdict")
    names = {row.node_id: f"“{_shorten(row.text, 40)}”" for row in ranking.rows}
    for row in ranking.rows:
        style = "bold green" if row.kept else "dim"
        reason = row.reason
        for node_id, name in names.items():
            reason = reason.replace(node_id, name)
        scores = ([f"{row.raw - row.lexical:.3f}", f"+{row.lexical:.3f}"] if words
                  else [f"{row.raw:.3f}"])
        table.add_row(literal(row.text), *scores, f"+{row.bonus:.3f}",
                      f"{row.final:.3f}", literal(reason), style=style)
    if ranking.nodes:
        table.caption = literal("→ into the prompt: "
                                + ", ".join(_memory_label(n) for n in ranking.nodes))
    else:
        table.caption = Text("→ no memory enters the prompt")
    if ranking.threshold is not None:
        table.caption.append(f"\n{ranking.gate_line()}", style="italic")
    if ranking.intent != "neutral":
        table.caption.append(f"\n{INTENT_CAPTIONS[ranking.intent]}", style="italic")
    if ranking.vague:
        table.caption.append(f"\n{VAGUE_CAPTION}", style="italic")
    if ranking.news:
        table.caption.append(f"\n{NEWS_CAPTION}", style="italic")
    return table


INTENT_CAPTIONS = {
    "present": "question about the present: the present bonus, newer versions first",
    "past": "question about the past: no newer-version reordering, the past bonus",
    "event": "question about an event: no newer-version reordering",
}


VAGUE_CAPTION = "vague reference: recent memories listed to ask back"

NEWS_CAPTION = "question about the news: no personal memory answers it"


def llm_line(llm: LLM | None) -> Text:
    if llm is None:
        return Text(f"LLM: off (set {LLM_BASE_URL_ENV} to send the B-format prompt)")
    return literal(f"LLM: {getattr(llm, 'model', '?')} at {getattr(llm, 'api_base', '?')}")


def summary(written: Written, location: Location, total: int) -> Text:
    """``stored 1 new memory, 2 already stored (3 in total) in DIR``."""
    line = f"stored {written.new} new memor{'y' if written.new == 1 else 'ies'}"
    if written.already:
        line += f", {written.already} already stored"
    return literal(f"{line} ({total} in total) in {location}")


def memory_table(title: str, nodes: Sequence[BaseNode], *, ordered: bool = False) -> Table:
    """Memories oldest first (``ordered``: as given): date, user (when any has one), key,
    text and id, all shown literally."""
    table = Table(title=literal(title), title_justify="left")
    users = any(node.metadata.get(USER_ID_KEY) is not None for node in nodes)
    table.add_column("Date")
    if users:
        table.add_column("User")
    table.add_column("Key")
    table.add_column("Memory", overflow="fold")
    table.add_column("Id", overflow="fold")
    rows = nodes if ordered else sorted(nodes, key=lambda n: str(n.metadata.get("date", "")))
    for node in rows:
        user = [literal(shown_user(str(node.metadata.get(USER_ID_KEY) or "")))] if users else []
        table.add_row(literal(str(node.metadata.get("date", ""))), *user,
                      literal(str(node.metadata.get(DEFAULT_KEY, ""))),
                      literal(node.get_content()), node.node_id)
    return table


def calibration_table(result: Calibration) -> Table:
    """The four-candidate table turned sideways (a column per candidate) so many targets still fit."""
    table = Table(title=f"Candidates at threshold {result.threshold:g} (red: condition failed)",
                  title_justify="left")
    table.add_column("Condition", overflow="fold")
    for row in result.results:
        table.add_column(f"w={row.weight:g}\nτ={row.tau_days:g} d", justify="right")
    letter = result.conditions[0][0]
    table.add_row(f"({letter}) hit-free max", *(
        _cell(f"{row.hit_free.final:.3f}", letter in row.failed) for row in result.results
    ))
    table.add_row("    where", *(literal(f"{row.hit_free.question_id} {row.hit_free.key}")
                               for row in result.results), style="dim")
    table.add_row("    headroom", *(f"{row.headroom:.3f}" for row in result.results), style="dim")
    vague = {check.letter: index for index, check in enumerate(result.results[0].vague)}
    index = 0
    for letter, _ in result.conditions[1:]:
        if letter in vague:  # a vague reference: how many targets its path listed
            table.add_row(literal(f"({letter}) {result.results[0].vague[vague[letter]].label}"),
                          *(_cell(row.vague[vague[letter]].cell, letter in row.failed)
                            for row in result.results))
            continue
        label = result.results[0].targets[index].label
        table.add_row(literal(f"({letter}) {label}"), *(
            _cell(format_score(row.targets[index].final, result.top_k), letter in row.failed)
            for row in result.results
        ))
        index += 1
    table.add_row("Verdict", *(
        _cell(result.verdict(row), not row.passed, "bold green" if row is result.adopted else "")
        for row in result.results
    ), end_section=True)
    return table


def policy_fit_table(fit: PolicyFit) -> Table:
    """One row per spread-scaled candidate: its fitted threshold, headroom and recency effect."""
    table = Table(title=f"Candidates scaled to the raw-cosine sd {fit.sd:.4f}, each with its "
                  "fitted threshold (red: fails)", title_justify="left")
    for column in ("k (sd)", "Weight", "τ (d)", "Threshold", "Hit-free max", "Lowest target",
                   "Headroom (sd)", "Newer first", "Verdict"):
        table.add_column(column, justify="left" if column in ("Hit-free max", "Lowest target",
                                                               "Verdict") else "right")
    for candidate in fit.candidates:
        lowest, hit_free = candidate.fit.lowest_target, candidate.fit.hit_free
        style = "bold green" if candidate is fit.adopted else ("" if candidate.passed else "red")
        table.add_row(
            f"{candidate.k:.1f}", f"{candidate.weight:g}", f"{candidate.tau_days:g}",
            "–" if candidate.threshold is None else f"{candidate.threshold:.4g}",
            literal(f"{hit_free.final:.3f} ({hit_free.question_id} {hit_free.key})"),
            "–" if lowest is None else literal(f"{format_score(lowest.final)} ({lowest.label})"),
            "–" if candidate.headroom_sd is None else f"{candidate.headroom_sd:.2f}",
            f"{len(candidate.newer_first)}/{candidate.contradictions}",
            fit.verdict(candidate), style=style,
        )
    return table


def _cell(text: str, failed: bool, style: str = "") -> Text:
    return literal(text, "red" if failed else style)


def fit_table(fit: ThresholdFit) -> Table:
    table = Table(title="Threshold fit", title_justify="left", show_header=False)
    table.add_column("Item")
    table.add_column("Value", overflow="fold")
    for item, value in fit.rows():
        table.add_row(item, literal(value))
    return table


def ask_document(question: str, user: str | None, today: str, policy: RecencyPolicy,
                 ranking: RecencyRanking, reply: str | None, without: str | None
                 ) -> dict[str, Any]:
    """``ask --json``: what ``ask`` prints, as one JSON object (docs/backup-and-cli.md lists
    its fields)."""
    return {
        "question": question,
        "user_id": user,
        "today": today,
        "policy": {"relevance": policy.relevance, "weight": policy.weight,
                   "tau_days": policy.tau_days, "threshold": policy.threshold,
                   "language_thresholds": dict(sorted(policy.language_thresholds.items())),
                   "top_n": policy.top_n},
        "language": ranking.language,
        "intent": ranking.intent,
        "vague": ranking.vague,
        "news": ranking.news,
        "threshold": None if ranking.threshold is None else {
            "value": ranking.threshold, "language": ranking.threshold_language,
            "origin": ranking.threshold_origin},
        "memories": [{"id": node.node.node_id, "text": node.node.get_content(),
                      "score": None if node.score is None else float(node.score)}
                     for node in ranking.nodes],
        "candidates": [{"id": row.node_id, "text": row.text, "date": row.date,
                        "age_days": None if row.age_days is None else float(row.age_days),
                        "raw": float(row.raw), "bonus": float(row.bonus),
                        "final": float(row.final), "kept": row.kept, "verdict": row.reason}
                       for row in ranking.rows],
        "reply": reply,
        "reply_without_memory": without,
    }


def reader_gone() -> None:
    """Stdout's reader stopped early (``| head``): point stdout at /dev/null, since Python
    would report the same broken pipe again when it flushes stdout at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
