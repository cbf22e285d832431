"""What a store records with its collection: the embedding model that filled it, the policy
saved with it, its own gate fit and when each forgotten user was forgotten; and from those,
the policy to rank it with."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import date, datetime
from typing import Any, Optional

from llama_index_recency.fitting.gate_fit import fitted_origin
from llama_index_recency.models.embeddings import EmbeddingMismatchError
from llama_index_recency.models.factories import CALIBRATED_POLICIES
from llama_index_recency.ranking.policy import RecencyPolicy
from llama_index_recency.storage.access import (
    MemoryStore,
    collection_calls,
    vector_store_of,
)
from llama_index_recency.storage.edge import QdrantEdgeVectorStore

logger = logging.getLogger(__name__)
_UNKNOWN_SAVED: set[tuple[str, ...]] = set()  # saved settings already warned of

EMBEDDING_METADATA_KEY = "llama_index_recency.embedding"
"""Collection-metadata key holding ``{"model": name, "dimensions": n}``."""


POLICY_METADATA_KEY = "llama_index_recency.policy"
"""Collection-metadata key holding the calibrated policy: weight, tau_days, threshold, top_n."""


GATE_METADATA_KEY = "llama_index_recency.querying.gate"
"""Collection-metadata key holding the store's own gate fit: relevance units, thresholds per
language, the memories it was fitted on and the day (``save_gate_fit``)."""


GATE_REFUSED_METADATA_KEY = "llama_index_recency.gate_refused"
"""Collection-metadata key: relevance units and store size of the last refused gate fit."""


USER_GATES_METADATA_KEY = "llama_index_recency.user_gates"
"""Collection-metadata key: per user id, ``{"fit": ..., "refused": ...}``, the gate fitted on
that user's memories alone (records as under :data:`GATE_METADATA_KEY` and
:data:`GATE_REFUSED_METADATA_KEY`): what ranks their questions, which no other user's
memories move."""


FORGOTTEN_METADATA_KEY = "llama_index_recency.forgotten"
"""Collection-metadata key: per user id, the instant (ISO, UTC) all their memories were last
forgotten; nothing said before it is written for them (:func:`save_forgotten`)."""


def save_forgotten(index: MemoryStore, user_id: str, at: datetime) -> None:
    """Record that ``user_id``'s memories were all forgotten at ``at`` (timezone-aware), so
    no path writes back what the user said before it."""
    forgotten = dict(_record(index, FORGOTTEN_METADATA_KEY) or {})
    forgotten[user_id] = at.isoformat()
    _update_metadata(index, {FORGOTTEN_METADATA_KEY: forgotten})


def forgotten_at(index: MemoryStore | Mapping[str, Any], user_id: Optional[str]
                 ) -> Optional[datetime]:
    """When ``user_id``'s memories were last all forgotten (:func:`save_forgotten`), if ever;
    from the store or from its :func:`collection_metadata` already read."""
    if user_id is None:
        return None
    instant = (_record(index, FORGOTTEN_METADATA_KEY) or {}).get(user_id)
    return None if instant is None else datetime.fromisoformat(instant)


def save_policy(index: MemoryStore, policy: RecencyPolicy) -> None:
    """Record ``policy`` (relevance units, weight, tau_days, thresholds, top_n) with the
    collection: an explicit policy, which wins over the store's own gate fit."""
    _update_metadata(index, {POLICY_METADATA_KEY: {
        "relevance": policy.relevance, "weight": policy.weight, "tau_days": policy.tau_days,
        "threshold": policy.threshold, "top_n": policy.top_n,
        "language_thresholds": dict(policy.language_thresholds),
    }})


def save_gate_fit(index: MemoryStore, relevance: str, thresholds: dict[str, float],
                  memories: int, fitted_on: date, user_id: Optional[str] = None) -> None:
    """Record the store's own gate fit (``user_id``'s: fitted on their memories alone):
    per-language ``thresholds`` in ``relevance`` units, fitted on ``memories`` memories on
    ``fitted_on`` (read by :func:`index_policy`)."""
    _save_gate(index, "fit", GATE_METADATA_KEY, user_id, {
        "relevance": relevance, "thresholds": dict(thresholds), "memories": memories,
        "fitted_on": fitted_on.isoformat(),
    })


def save_gate_refusal(index: MemoryStore, relevance: str, memories: int,
                      user_id: Optional[str] = None) -> None:
    """Record that a fit on ``memories`` memories (``user_id``'s) was refused, so it is not
    tried again before they grow as much as after a fit (:func:`gate_record` keeps the last
    fit)."""
    _save_gate(index, "refused", GATE_REFUSED_METADATA_KEY, user_id,
               {"relevance": relevance, "memories": memories})


def gate_refusal(index: MemoryStore | Mapping[str, Any],
                 user_id: Optional[str] = None) -> Optional[dict[str, Any]]:
    """The store's (or ``user_id``'s) last refused gate fit (:func:`save_gate_refusal`), if
    any; from the store or from its :func:`collection_metadata` already read."""
    if user_id is None:
        return _record(index, GATE_REFUSED_METADATA_KEY)
    return _user_gate(_metadata_of(index), user_id, "refused")


def gate_record(index: MemoryStore | Mapping[str, Any],
                user_id: Optional[str] = None) -> Optional[dict[str, Any]]:
    """The store's (or ``user_id``'s) own gate fit (:func:`save_gate_fit`), if any; from the
    store or from its :func:`collection_metadata` already read."""
    if user_id is None:
        return _record(index, GATE_METADATA_KEY)
    return _user_gate(_metadata_of(index), user_id, "fit")


def _save_gate(index: MemoryStore, part: str, key: str, user_id: Optional[str],
               record: dict[str, Any]) -> None:
    if user_id is None:
        _update_metadata(index, {key: record})
        return
    gates = dict(_record(index, USER_GATES_METADATA_KEY) or {})
    gates[user_id] = {**(gates.get(user_id) or {}), part: record}
    _update_metadata(index, {USER_GATES_METADATA_KEY: gates})


def _user_gate(metadata: Mapping[str, Any], user_id: str, part: str) -> Optional[dict[str, Any]]:
    record = ((metadata.get(USER_GATES_METADATA_KEY) or {}).get(user_id) or {}).get(part)
    return dict(record) if isinstance(record, dict) else None


def _record(index: MemoryStore | Mapping[str, Any], key: str) -> Optional[dict[str, Any]]:
    record = _metadata_of(index).get(key)
    return dict(record) if isinstance(record, dict) else None


def _metadata_of(index: MemoryStore | Mapping[str, Any]) -> Mapping[str, Any]:
    """The store's :func:`collection_metadata`, read now unless ``index`` is that already."""
    return index if isinstance(index, Mapping) else collection_metadata(index)


def _update_metadata(index: MemoryStore, record: dict[str, Any]) -> None:
    store = vector_store_of(index)
    if isinstance(store, QdrantEdgeVectorStore):
        store.update_metadata(record)
        return
    call = collection_calls(store.client, store._aclient)
    metadata = dict(call("get_collection", store.collection_name).config.metadata or {})
    call("update_collection", store.collection_name, metadata={**metadata, **record})


def embedding_identity(index: MemoryStore) -> Optional[dict[str, Any]]:
    """The embedding model (name and dimensions) the store records, if any."""
    identity = collection_metadata(index).get(EMBEDDING_METADATA_KEY)
    return dict(identity) if isinstance(identity, dict) else None


def made_here(index: MemoryStore, metadata: Optional[Mapping[str, Any]] = None) -> bool:
    """Whether ``open_memory_index`` made (or adopted) the store: it records the embedding
    model there (``metadata``: its :func:`collection_metadata` already read). Only such a
    store is written to by a reader: its gate fitted and saved, its memories' terms filled in."""
    if isinstance(vector_store_of(index), QdrantEdgeVectorStore):
        return True
    return EMBEDDING_METADATA_KEY in (collection_metadata(index) if metadata is None else metadata)


def shipped_policy(index: MemoryStore | Mapping[str, Any]) -> Optional[RecencyPolicy]:
    """The policy the store's embedding model ships with (``models.CALIBRATED_POLICIES``),
    whatever was fitted or saved since; None for a model that ships none."""
    model = (_metadata_of(index).get(EMBEDDING_METADATA_KEY) or {}).get("model")
    shipped = CALIBRATED_POLICIES.get(model or "")
    return None if shipped is None else RecencyPolicy(**shipped)


def has_saved_policy(index: MemoryStore | Mapping[str, Any]) -> bool:
    """Whether a policy was calibrated and saved with this store (``save_policy``); from the
    store or from its :func:`collection_metadata` already read."""
    return POLICY_METADATA_KEY in _metadata_of(index)


def index_policy(index: MemoryStore | Mapping[str, Any], *, user_id: Optional[str] = None,
                 model: Optional[str] = None, **overrides: Any) -> RecencyPolicy:
    """The policy to rank this store (or ``user_id``'s memories in it) with: the one
    calibrated and saved with it (:func:`save_policy`, origin "explicit"), else the shipped
    one for its embedding model (the one it records, else ``model``, the name of the model
    that embeds its questions; ``models.CALIBRATED_POLICIES``; else
    :class:`RecencyPolicy`'s defaults) with the store's own gate fit in the same units
    (:func:`save_gate_fit`, origin "fitted on N memories on DATE"; for ``user_id``, the fit
    on their memories alone, which no other user's memories move) or as shipped.

    ``overrides`` (e.g. ``reference_date=...``) are applied on top; a ``threshold`` among
    them is the one for every language (origin "explicit"). ``index`` may also be the
    store's :func:`collection_metadata` already read.

    Raises:
        InvalidSettingError: An override (or a value saved with the store) that
            :class:`RecencyPolicy` refuses.
    """
    metadata = _metadata_of(index)
    model = (metadata.get(EMBEDDING_METADATA_KEY) or {}).get("model") or model
    shipped = CALIBRATED_POLICIES.get(model or "", {})
    saved = metadata.get(POLICY_METADATA_KEY)
    gate = gate_record(metadata, user_id)
    if saved is not None:
        if unknown := tuple(sorted(set(saved).difference(RecencyPolicy.model_fields))):
            if unknown not in _UNKNOWN_SAVED:  # a newer version's setting, or a hand edit
                _UNKNOWN_SAVED.add(unknown)
                logger.warning("the policy saved with the store has settings this version does "
                               "not know (%s): it ranks without them", ", ".join(unknown))
            saved = {name: value for name, value in saved.items() if name not in unknown}
        # A saved calibration fits the gate and the bonus; the intent and version rules
        # the model ships with (in the same units) still apply.
        same_units = saved.get("relevance", "cosine") == shipped.get("relevance", "cosine")
        values = {**(shipped if same_units else {}), "language_thresholds": {}, **saved,
                  "threshold_origin": "explicit"}
    elif isinstance(gate, dict) and gate.get("relevance") == RecencyPolicy(**shipped).gate_units:
        thresholds = dict(gate["thresholds"])
        values = {**shipped, "threshold": max(thresholds.values()),
                  "language_thresholds": thresholds,
                  "threshold_origin": fitted_origin(gate["memories"],
                                                    date.fromisoformat(gate["fitted_on"]))}
    else:
        values = {**shipped, "threshold_origin": "shipped"}
    if "threshold" in overrides:  # a threshold given is the one for every language
        values = {**values, "language_thresholds": {}, "threshold_origin": "explicit"}
    return RecencyPolicy(**{**values, **overrides})


def policy_records(metadata: Mapping[str, Any], user_id: Optional[str] = None
                   ) -> tuple[Any, Any]:
    """The saved explicit policy and gate fit (``user_id``'s) in a store's
    :func:`collection_metadata`: a change in either means :func:`index_policy` has changed."""
    return metadata.get(POLICY_METADATA_KEY), gate_record(metadata, user_id)


def collection_metadata(index: MemoryStore) -> dict[str, Any]:
    """Everything the store records with its collection (one read; empty before it exists)."""
    store = vector_store_of(index)
    if isinstance(store, QdrantEdgeVectorStore):
        return store.metadata
    call = collection_calls(store.client, store._aclient)  # an async-only store too
    if not call("collection_exists", store.collection_name):
        return {}
    return dict(call("get_collection", store.collection_name).config.metadata or {})


def embedding_mismatch(
    collection_name: str, recorded: dict[str, Any], identity: dict[str, Any]
) -> EmbeddingMismatchError:
    return EmbeddingMismatchError(
        f"collection {collection_name!r} was written with {recorded['model']!r} "
        f"({recorded['dimensions']} dims); refusing to use it with "
        f"{identity['model']!r} ({identity['dimensions']} dims): vectors of different "
        "models are not comparable. Use the same model, or another collection."
    )
