"""Memory dates: the ISO 8601 forms both this package and Qdrant's datetime index read."""

from __future__ import annotations

import re
from datetime import date, datetime, time, timezone
from functools import lru_cache
from typing import Any

from llama_index_recency.errors import InvalidInputError

# The ISO forms Qdrant's datetime payload index reads too (checked on Edge and qdrant-client):
# Python's fromisoformat also takes "20260909", "2026-W37-3" or "2026-09-09T10", which Qdrant's
# date filters would never match, so the two sides would disagree on a memory's bonus.
_QDRANT_DATETIME = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?)?\Z"
)


def parse_memory_date(value: Any) -> datetime:
    """Read a date, a datetime or an ISO 8601 string as an aware UTC datetime.

    Dates mean midnight UTC and naive datetimes are taken as UTC, which is also how
    Qdrant reads datetime payloads, so both sides compute the same age.
    Anything else is refused with a ``ValueError``, instants outside years 1-9999 in UTC
    included, so callers' missing-date policies apply to them instead of an
    ``OverflowError``.

    Raises:
        InvalidInputError: ``value`` is not a date, a datetime or an ISO 8601 string Qdrant
            reads (numbers, empty strings, garbage, ``20260909``), or names an instant
            outside years 1-9999 in UTC (``0001-01-01T00:00:00+01:00``).
    """
    return _parsed_text(value) if isinstance(value, str) else _parsed(value)


@lru_cache(maxsize=8192)
def _parsed_text(value: str) -> datetime:
    """A stored date string read once: a store's questions meet the same dates again."""
    return _parsed(value)


def _parsed(value: Any) -> datetime:
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, date):
        parsed = datetime.combine(value, time.min)
    elif isinstance(value, str) and _QDRANT_DATETIME.match(value.strip()):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInputError(f"not an ISO 8601 date: {value!r}") from None
    elif isinstance(value, str) and value.strip():
        raise InvalidInputError(
            f"not an ISO 8601 date Qdrant can read: {value!r} (use YYYY-MM-DD or "
            "YYYY-MM-DDTHH:MM[:SS[.f][Z|±HH:MM]])"
        )
    else:
        raise InvalidInputError(f"not a date: {value!r}")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    try:
        return parsed.astimezone(timezone.utc)
    except OverflowError:
        raise InvalidInputError(f"date out of range (years 1-9999 in UTC): {value!r}") from None
