"""The relevance gate on the live store: fitted without labels, refitted as memories accumulate.

A threshold fitted on a few memories must be fitted again as the store accumulates
memories, checking the hit-free headroom each time. Here that fit needs no labelled
questions: a shipped bank of off-topic questions (English and
Japanese: general knowledge and small talk no personal memory answers) is asked of the
store itself, and each language's threshold is the lowest at which at most
``max_bring_up`` of its questions bring any memory into the prompt. The more memories a
store holds, the higher an off-topic question's best match, so a store refits its own
gate as it grows (:func:`refit_gate`, run after every write and, for stores written
otherwise, by the retriever) and the same check says when a gate no longer holds
(:func:`check_gate`). The fit itself (no I/O) is in :mod:`llama_index_recency.fitting.gate_fit`.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date
from typing import Optional

from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.vector_stores.types import MetadataFilters

from llama_index_recency.fitting.gate_fit import (
    BANK_LANGUAGES,
    MAX_BRING_UP,
    MIN_FIT_MEMORIES,
    NOISE_MARGIN,
    REFIT_RATIO,
    GateFit,
    fit_gate,
    noise_margin,
    offtopic_questions,
)
from llama_index_recency.integrations.retriever import offtopic_best, refit_store_gate
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.storage.store import index_policy

__all__ = [
    "BANK_LANGUAGES",
    "MAX_BRING_UP",
    "MIN_FIT_MEMORIES",
    "NOISE_MARGIN",
    "REFIT_RATIO",
    "GateFit",
    "calibrate_gate",
    "check_gate",
    "fit_gate",
    "noise_margin",
    "offtopic_questions",
    "refit_gate",
]


def calibrate_gate(
    index: VectorStoreIndex,
    policy: Optional[RecencyPolicy] = None,
    *,
    questions: Optional[dict[str, Sequence[str]]] = None,
    max_bring_up: float = MAX_BRING_UP,
    user_id: Optional[str] = None,
    filters: Optional[MetadataFilters] = None,
) -> GateFit:
    """Fit the thresholds on the live store from off-topic questions (default: the shipped
    bank, per language).

    Each question is ranked with ``policy`` (default: the store's, :func:`index_policy`)
    by the exact retriever, inside the scope, and its best final score recorded (less the
    threshold's rise for a question about the present); no labelled question is needed.
    ``fit.policy(policy)`` is the policy to save.
    """
    policy = policy or index_policy(index)
    best = offtopic_best(index.vector_store, index._embed_model, policy, questions=questions,
                         user_id=user_id, filters=filters)
    return fit_gate(best, max_bring_up, noise_margin(policy))


def refit_gate(
    index: VectorStoreIndex,
    *,
    min_memories: int = MIN_FIT_MEMORIES,
    ratio: float = REFIT_RATIO,
    check: bool = False,
    today: Optional[date] = None,
) -> Optional[GateFit]:
    """Fit the store's own gate when it is due, and save it with the store for
    :func:`index_policy` (see :func:`~llama_index_recency.integrations.retriever.refit_store_gate`):
    never over an explicit policy (``save_policy``, ``calibrate --save``), from
    ``min_memories`` memories, again at ``ratio`` times the last fit's, or (``check``)
    when the current gate lets too many off-topic questions in. Returns the fit, None when
    none was due; a refused one (:attr:`GateFit.refused`) is not saved."""
    return refit_store_gate(index.vector_store, index._embed_model, min_memories=min_memories,
                            ratio=ratio, check=check, today=today)


def check_gate(
    index: VectorStoreIndex,
    policy: Optional[RecencyPolicy] = None,
    *,
    max_bring_up: float = MAX_BRING_UP,
    user_id: Optional[str] = None,
) -> Optional[str]:
    """A one-line warning when the store's threshold lets more than ``max_bring_up`` of the
    off-topic bank in (its headroom is no longer above zero as memories accumulated: at zero
    the question scoring exactly the threshold is let in), else None."""
    policy = policy or index_policy(index)
    fit = calibrate_gate(index, policy, max_bring_up=max_bring_up, user_id=user_id)
    if not fit.lets_too_many_in(policy):
        return None
    return (
        f"the relevance gate no longer holds: threshold {policy.threshold:.3g} lets "
        f"{fit.bring_up(policy.threshold):.1%} of off-topic questions bring a memory "
        f"(at most {fit.max_bring_up:.0%}); rerun calibrate --save (it fits {fit.threshold:.3g})"
    )
