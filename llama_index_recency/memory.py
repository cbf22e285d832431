"""Memory records: one dated fact sentence per ``TextNode``."""

from __future__ import annotations

import re
import uuid
from datetime import date, datetime, timezone
from typing import Any, Optional

from llama_index.core.schema import TextNode

from llama_index_recency.scoring import parse_memory_date

# A fixed namespace makes memory ids reproducible across processes and machines.
MEMORY_NAMESPACE = uuid.UUID("5b0f7c1e-8f53-4c54-9d0e-3a1f1d2c7e61")

_GENERIC_SUBJECT = re.compile(r"\b(?:[Tt]he user|User)\b")


def memory_id(fact: str, memory_date: str) -> str:
    """Deterministic id from date and fact, so storing the same memory twice overwrites it."""
    return str(uuid.uuid5(MEMORY_NAMESPACE, f"{memory_date}\n{fact}"))


def with_subject(fact: str, user_name: str) -> str:
    """Replace the generic subject ("the user", "User") with the user's real name."""
    return _GENERIC_SUBJECT.sub(user_name, fact)


def memory_node(
    fact: str,
    memory_date: date | datetime | str,
    *,
    user_name: Optional[str] = None,
    date_key: str = "date",
    metadata: Optional[dict[str, Any]] = None,
) -> TextNode:
    """Build the node for one memory: text ``"YYYY-MM-DD: <fact>"``, ISO date in metadata.

    The date stays in the embedded text (dropping it changed cosines in the seed's
    measurements) and is also stored under ``date_key`` for the bonus. Metadata is
    excluded from the embedding and the LLM prompt, so the date is never shown twice.
    """
    fact = " ".join(fact.split())
    if not fact:
        raise ValueError("a memory needs a non-empty fact sentence")
    if user_name:
        fact = with_subject(fact, user_name)
    iso_date = _iso(memory_date)
    extra = dict(metadata or {})
    if date_key in extra:
        raise ValueError(f"metadata already has {date_key!r}; pass the date as memory_date")
    node_metadata = {date_key: iso_date, **extra}
    return TextNode(
        id_=memory_id(fact, iso_date),
        text=f"{iso_date[:10]}: {fact}",
        metadata=node_metadata,
        excluded_embed_metadata_keys=list(node_metadata),
        excluded_llm_metadata_keys=list(node_metadata),
    )


def _iso(value: date | datetime | str) -> str:
    """ISO form of a memory date: ``YYYY-MM-DD`` for a day, RFC 3339 for an instant.

    An instant keeps its own UTC offset (naive means UTC), so the text's day is the
    user's day, not UTC's.
    """
    parse_memory_date(value)  # validates; raises ValueError naming the value
    if isinstance(value, str):
        text = value.strip()
        value = date.fromisoformat(text) if len(text) == 10 else datetime.fromisoformat(text)
    if isinstance(value, datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    return value.isoformat()
