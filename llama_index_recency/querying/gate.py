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

import logging
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import date
from typing import Any, Optional

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.vector_store import VectorStoreIndex
from llama_index.core.schema import QueryBundle
from llama_index.core.vector_stores.types import BasePydanticVectorStore, MetadataFilters

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.fitting.gate_fit import (
    BANK_LANGUAGES,
    MAX_BRING_UP,
    MIN_FIT_MEMORIES,
    MIN_LANGUAGE_MEMORIES,
    NOISE_MARGIN,
    REFIT_RATIO,
    GateFit,
    fit_gate,
    language_threshold,
    noise_margin,
    offtopic_questions,
    refit_due,
)
from llama_index_recency.models.cohort import cached_embeddings
from llama_index_recency.querying.exact import ExactSearch
from llama_index_recency.ranking.intent import question_intent
from llama_index_recency.ranking.language import nearest_language
from llama_index_recency.ranking.news import asks_about_the_news
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.ranking.small_talk import is_small_talk
from llama_index_recency.ranking.vague import VAGUE_WINDOW_DAYS
from llama_index_recency.storage import (
    MemoryVectorStore,
    QdrantEdgeVectorStore,
    collection_metadata,
    count_memories,
    embedding_identity,
    embedding_of,
    gate_record,
    gate_refusal,
    has_saved_policy,
    index_policy,
    memory_scope,
    save_gate_fit,
    save_gate_refusal,
    shipped_policy,
    vector_store_of,
)
from llama_index_recency.storage.edge_files import metadata_revision
from llama_index_recency.storage.terms import memory_languages

logger = logging.getLogger(__name__)

_OPEN = -1e9  # a threshold every memory passes: the search then returns the best one

__all__ = [
    "BANK_LANGUAGES",
    "MAX_BRING_UP",
    "MIN_FIT_MEMORIES",
    "MIN_LANGUAGE_MEMORIES",
    "NOISE_MARGIN",
    "REFIT_RATIO",
    "STORE_CHECK_SECONDS",
    "StoreReads",
    "GateFit",
    "calibrate_gate",
    "check_gate",
    "fit_gate",
    "language_floors",
    "noise_margin",
    "offtopic_best",
    "offtopic_questions",
    "refit_after_write",
    "refit_gate",
    "refit_store_gate",
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

    Raises:
        InvalidInputError: The store (or the scope's part of it) holds no memory.
    """
    policy = policy or index_policy(index)
    best = offtopic_best(index.vector_store, embedding_of(index), policy, questions=questions,
                         user_id=user_id, filters=filters)
    floors = language_floors(index.vector_store, policy, memory_scope(user_id=user_id,
                                                                      filters=filters))
    return fit_gate(best, max_bring_up, noise_margin(policy), floors)


def refit_gate(
    index: VectorStoreIndex,
    *,
    min_memories: int = MIN_FIT_MEMORIES,
    ratio: float = REFIT_RATIO,
    check: bool = False,
    today: Optional[date] = None,
    user_id: Optional[str] = None,
) -> Optional[GateFit]:
    """Fit the store's own gate when it is due, and save it with the store for
    :func:`index_policy` (see :func:`refit_store_gate`):
    never over an explicit policy (``save_policy``, ``calibrate --save``), from
    ``min_memories`` memories, again at ``ratio`` times the last fit's, or (``check``)
    when the current gate lets too many off-topic questions in. Returns the fit, None when
    none was due; a refused one (:attr:`GateFit.refused`) is not saved.

    Raises:
        MemoryStoreReadOnlyError: The fit is due but an Edge store read from a temporary
            copy cannot save it (its filesystem is read-only).
        MemoryStoreFullError: The fit is due but the Edge store cannot save it (its disk
            too full to load it for writing).
    """
    return refit_store_gate(index.vector_store, embedding_of(index), min_memories=min_memories,
                            ratio=ratio, check=check, today=today, user_id=user_id)


def refit_after_write(index: VectorStoreIndex, *, min_memories: int = MIN_FIT_MEMORIES,
                      writer: str = "", users: Sequence[Optional[str]] = ()) -> None:
    """After a write: :func:`refit_gate` for the store, and for each of ``users`` whose
    memories were written, when they grew enough for one. A failure is one warning line,
    never the writer's: the memories are stored, and the gate can wait."""
    for user_id in (None, *dict.fromkeys(u for u in users if u is not None)):
        try:
            refit_gate(index, min_memories=min_memories, user_id=user_id)
        except Exception as error:  # noqa: BLE001 - the write succeeded
            logger.warning("%sthe gate was not refitted: %s: %s",
                           f"{writer}: " if writer else "", type(error).__name__, error)
            return  # one line per write: the users' fits would fail alike


def check_gate(
    index: VectorStoreIndex,
    policy: Optional[RecencyPolicy] = None,
    *,
    max_bring_up: float = MAX_BRING_UP,
    user_id: Optional[str] = None,
) -> Optional[str]:
    """A one-line warning when the store's threshold lets more than ``max_bring_up`` of the
    off-topic bank in (its headroom is no longer above zero as memories accumulated: at zero
    the question scoring exactly the threshold is let in), else None.

    Raises:
        InvalidInputError: The store (or ``user_id``'s part of it) holds no memory.
    """
    policy = policy or index_policy(index)
    fit = calibrate_gate(index, policy, max_bring_up=max_bring_up, user_id=user_id)
    if not fit.lets_too_many_in(policy):
        return None
    let_in = fit.let_in(policy)
    lang = max(let_in, key=lambda code: let_in[code][1])  # the language it fails worst
    threshold, share = let_in[lang]
    return (
        f"the relevance gate no longer holds: threshold {threshold:.3g} lets {share:.1%} of "
        f"off-topic questions in {lang} bring a memory (at most {fit.max_bring_up:.0%}); rerun "
        f"calibrate --save (it fits {fit.thresholds.get(lang, fit.threshold):.3g})"
    )


def offtopic_best(
    store: BasePydanticVectorStore,
    embed_model: BaseEmbedding,
    policy: RecencyPolicy,
    *,
    questions: Optional[Mapping[str, Sequence[str]]] = None,
    user_id: Optional[str] = None,
    filters: Optional[MetadataFilters] = None,
) -> dict[str, list[float]]:
    """Per language, each off-topic question's best final score on the store (default: the
    shipped bank), ranked with ``policy`` by the exact search inside the scope, less the
    threshold's rise for a question about the present.

    Raises:
        InvalidInputError: the store (or the scope's part of it) holds no memory.
        UnsupportedStoreError: ``store`` is neither Qdrant Edge nor Qdrant.
    """
    search = ExactSearch(
        store, embed_model,
        # Every memory passes and no newer version is moved first; a linked successor may
        # still be, so the best final score is taken over all nodes returned.
        policy.model_copy(update={"threshold": _OPEN, "top_n": 1, "supersede_margin": None}),
        filters=memory_scope(user_id=user_id, filters=filters),
        vague_window_days=VAGUE_WINDOW_DAYS,
    )
    banks = questions or {lang: offtopic_questions(lang) for lang in BANK_LANGUAGES}
    identity = embedding_identity(vector_store_of(store)) or {}
    best: dict[str, list[float]] = {}
    for lang, asked in banks.items():
        texts = [text for text in asked  # these bring nothing
                 if not asks_about_the_news(text) and not is_small_talk(text)]
        vectors = cached_embeddings(embed_model, list(texts), query=True,
                                    dimensions=identity.get("dimensions"))
        for text, vector in zip(texts, vectors, strict=True):
            nodes = search.rank(QueryBundle(query_str=text, embedding=vector.tolist())).nodes
            if not nodes:
                raise InvalidInputError(
                    "the store (or this user's part of it) is empty: there is no "
                    "gate to fit")
            # A question about the present meets a threshold raised by its larger bonus:
            # its score is recorded against the policy's own threshold.
            raised = policy.for_intent(question_intent(text)).threshold - policy.threshold
            best.setdefault(lang, []).append(
                max(float(n.score or 0.0) for n in nodes) - raised)
    return best


def language_floors(store: BasePydanticVectorStore, policy: RecencyPolicy,
                    scope: Optional[MetadataFilters] = None) -> dict[str, float]:
    """Per bank language with fewer than :data:`MIN_LANGUAGE_MEMORIES` memories in the scope,
    the threshold its model ships for it in ``policy``'s units, which its fit may not go
    under: its bank scores far under its own memories, so a threshold fitted without them
    would let most of it in once they come (none for a model that ships no policy, or one
    in other units: a cohort fit, a policy without the question's words).

    Raises:
        InvalidInputError: A Qdrant store with only an async client.
    """
    shipped = shipped_policy(store)
    if shipped is None or shipped.gate_units != policy.gate_units:
        return {}
    written = Counter(nearest_language(lang, BANK_LANGUAGES) for lang in memory_languages(
        vector_store_of(store), scope).elements())
    return {lang: language_threshold(shipped, lang) for lang in BANK_LANGUAGES
            if written[lang] < MIN_LANGUAGE_MEMORIES}


def refit_store_gate(
    store: BasePydanticVectorStore,
    embed_model: BaseEmbedding,
    *,
    min_memories: int = MIN_FIT_MEMORIES,
    ratio: float = REFIT_RATIO,
    check: bool = False,
    today: Optional[date] = None,
    user_id: Optional[str] = None,
) -> Optional[GateFit]:
    """Fit the store's own gate (with ``user_id``, that user's, on their memories alone)
    when it is due and save it (:func:`save_gate_fit`).

    Due: no explicit policy is saved (``save_policy`` wins, always), the store holds
    ``min_memories`` and was never fitted in its policy's units or holds ``ratio`` times the
    memories of its last fit, or (``check``) the current gate lets more than the share of
    the bank in. Returns the fit (None: not due); a fit whose
    :attr:`~llama_index_recency.fitting.gate_fit.GateFit.refused` says why is logged and not
    saved, the previous gate stays. One fit at a time per store; a fit that failed is not tried
    again in this process until the store's size changes.

    Raises:
        MemoryStoreReadOnlyError: The fit is due but an Edge store read from a temporary
            copy cannot save it (its filesystem is read-only).
        MemoryStoreFullError: The fit is due but the Edge store cannot save it (its disk
            too full to load it for writing).
    """
    vectors = vector_store_of(store)
    with _fit_lock(vectors):
        memories = count_memories(vectors, user_id)
        metadata = collection_metadata(vectors)
        if has_saved_policy(metadata) or memories < min_memories:
            return None
        failed = _FAILED_FITS.get(id(vectors), set())
        if (user_id, memories) in failed:
            return None
        try:
            return _fit_and_save(vectors, embed_model, metadata, memories, min_memories, ratio,
                                 check, today, user_id)
        except Exception:
            if id(vectors) not in _FAILED_FITS:  # forgotten with the store object
                weakref.finalize(vectors, _FAILED_FITS.pop, id(vectors), None)
            _FAILED_FITS.setdefault(id(vectors), set()).add((user_id, memories))
            raise


def _fit_and_save(vectors: MemoryVectorStore, embed_model: BaseEmbedding,
                  metadata: Mapping[str, Any], memories: int, min_memories: int, ratio: float,
                  check: bool, today: Optional[date], user_id: Optional[str]
                  ) -> Optional[GateFit]:
    """The body of :func:`refit_store_gate`, under its lock."""
    policy = index_policy(metadata, user_id=user_id)
    best = None
    if not due_by_size(metadata, min_memories, memories, ratio, user_id=user_id):
        if not check:
            return None
        best = offtopic_best(vectors, embed_model, policy, user_id=user_id)
        if not fit_gate(best, margin=noise_margin(policy)).lets_too_many_in(policy):
            return None
    best = best or offtopic_best(vectors, embed_model, policy, user_id=user_id)
    fit = fit_gate(best, margin=noise_margin(policy),
                   floors=language_floors(vectors, policy, memory_scope(user_id=user_id)))
    if fit.refused:
        logger.warning("%s; the gate stays %s", fit.refused, policy.threshold_origin)
        save_gate_refusal(vectors, policy.gate_units, memories, user_id)
        return fit
    save_gate_fit(vectors, policy.gate_units, fit.thresholds, memories, today or date.today(),
                  user_id)
    return fit


def due_by_size(metadata: Mapping[str, Any], min_memories: int, memories: int,
                ratio: float = REFIT_RATIO, user_id: Optional[str] = None) -> bool:
    """Whether a store (or ``user_id``'s part of it) of ``memories`` with this collection
    ``metadata`` is due for a fit by its size (:func:`refit_due`)."""
    if has_saved_policy(metadata):
        return False
    units = index_policy(metadata).gate_units
    tried = [record["memories"] for record in (gate_record(metadata, user_id),
                                               gate_refusal(metadata, user_id))
             if record and record.get("relevance") == units]
    return refit_due(memories, max(tried, default=None), min_memories, ratio)


STORE_CHECK_SECONDS = 60.0
"""How often a reader following a Qdrant server or qdrant-client's local-mode store reads its
saved gate and size (its collection metadata and count); an in-process Edge store is read at
every question."""

clock = time.monotonic
"""The clock :class:`StoreReads` throttles by (one name, for tests to move)."""


class StoreReads:
    """When a reader following a store's gate reads the store: an Edge store at every question
    where its metadata or size changed since the last read (both known in process in
    microseconds), a server or local-mode store every ``every`` seconds, a store with only an
    async client never (its reads would block the event loop)."""

    def __init__(self, store: MemoryVectorStore, every: float = STORE_CHECK_SECONDS) -> None:
        self._store, self._every = store, every
        self._last: Optional[float] = None
        self._seen: Optional[tuple[int, int]] = None

    def due(self) -> bool:
        """Whether to read the store now (then the next read waits ``every`` seconds)."""
        if isinstance(self._store, QdrantEdgeVectorStore):
            seen = (metadata_revision(self._store.path), self._store.count())
            changed, self._seen = seen != self._seen, seen
            return changed
        if self._store.client is None:
            return False
        now = clock()
        if self._last is not None and now - self._last < self._every:
            return False
        self._last = now
        return True


_FAILED_FITS: dict[int, set[tuple[Optional[str], int]]] = {}
"""Per store object alive in this process, the (user, size) pairs at which a due fit failed (a store that
cannot save it, a full disk): not tried again until the store's size changes, so a read-only
store is not fitted at every question."""

_FIT_LOCKS: dict[int, threading.Lock] = {}
_FIT_LOCKS_GUARD = threading.Lock()


def _fit_lock(store: MemoryVectorStore) -> threading.Lock:
    """The lock that lets one gate fit run at a time on ``store``."""
    with _FIT_LOCKS_GUARD:
        return _FIT_LOCKS.setdefault(id(store), threading.Lock())


class Refit:
    """A gate fit on a background thread (or run at once): a failure is one warning line,
    never the caller's. Not a daemon: a process exiting mid-fit waits the few seconds a fit
    takes, instead of cutting the thread inside the engine."""

    def __init__(self, fit: Callable[[], Optional[GateFit]], background: bool = True) -> None:
        self.fit: Optional[GateFit] = None
        self._run = fit
        self._thread: Optional[threading.Thread] = None
        if background:
            self._thread = threading.Thread(target=self._work, name="gate-refit")
            self._thread.start()
        else:
            self._work()

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def _work(self) -> None:
        try:
            self.fit = self._run()
        except Exception as error:  # noqa: BLE001 - a refit never breaks a turn
            # Text, not the error: a handler keeping records would keep its traceback's store.
            logger.warning("the gate was not refitted: %s", f"{type(error).__name__}: {error}")
