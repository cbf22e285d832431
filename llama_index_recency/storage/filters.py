"""LlamaIndex ``MetadataFilters`` as Qdrant filters, for qdrant-client and Qdrant Edge alike.

One recursive walker holds the translation; each engine only supplies its constructors
(a :class:`_Vocabulary`), so a filter means the same thing on a server, in qdrant-client's
local mode and on an Edge shard.

Semantics (Qdrant's, on both engines): a condition on a list field holds when one element
satisfies it, and a condition on a missing or null field does not hold, except ``IS_EMPTY``.

- ``EQ`` / ``CONTAINS``: the field equals (or, for a list, contains) the value.
- ``NE`` / ``NIN``: the field has a value outside the given ones (a missing field does not).
- ``GT`` / ``GTE`` / ``LT`` / ``LTE``: numbers compare as floats; an ISO 8601 date or
  datetime string compares as an instant (a date is midnight UTC, a naive time is UTC).
- ``IN`` / ``ANY``: the field has one of the values; ``ALL``: it has every one of them.
- ``TEXT_MATCH`` / ``TEXT_MATCH_INSENSITIVE``: Qdrant full-text match, every word of the
  value is a word of the field, case-insensitive (not a substring match: "pple" does not
  match "apple").
- ``IS_EMPTY``: the field is missing, null or ``[]``.
- ``AND`` / ``OR`` / ``NOT`` map to ``must`` / ``should`` / ``must_not``; nested
  ``MetadataFilters`` nest, ones without a condition (empty, or only such groups) are
  skipped: they select everything (see :func:`has_condition`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any, Optional

import qdrant_edge
from llama_index.core.vector_stores.types import (
    FilterCondition,
    FilterOperator,
    MetadataFilter,
    MetadataFilters,
)
from qdrant_client import models

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.dates import parse_memory_date
from llama_index_recency.records.nodes import USER_ID_KEY, check_user_id

__all__ = ["memory_scope", "to_edge_filter", "to_qdrant_filter"]


@dataclass(frozen=True)
class _Vocabulary:
    """One engine's constructors for the few condition shapes the walker emits."""

    filter: Callable[[list[Any], list[Any], list[Any]], Any]
    """``(must, should, must_not)`` -> Filter; an empty list means "no such clause"."""
    match_value: Callable[[str, str | int], Any]
    match_any: Callable[[str, list[Any]], Any]
    match_except: Callable[[str, list[Any]], Any]
    match_text: Callable[[str, str], Any]
    number_range: Callable[..., Any]
    """``(key, gt=, gte=, lt=, lte=)`` with float bounds."""
    datetime_range: Callable[..., Any]
    """``(key, gt=, gte=, lt=, lte=)`` with RFC 3339 string bounds."""
    is_empty: Callable[[str], Any]


def _qdrant_filter(must: list[Any], should: list[Any], must_not: list[Any]) -> models.Filter:
    return models.Filter(must=must or None, should=should or None, must_not=must_not or None)


_QDRANT = _Vocabulary(
    filter=_qdrant_filter,
    match_value=lambda key, value: models.FieldCondition(
        key=key, match=models.MatchValue(value=value)
    ),
    match_any=lambda key, values: models.FieldCondition(key=key, match=models.MatchAny(any=values)),
    match_except=lambda key, values: models.FieldCondition(
        key=key, match=models.MatchExcept(**{"except": values})
    ),
    match_text=lambda key, text: models.FieldCondition(key=key, match=models.MatchText(text=text)),
    number_range=lambda key, **bounds: models.FieldCondition(key=key, range=models.Range(**bounds)),
    datetime_range=lambda key, **bounds: models.FieldCondition(
        key=key, range=models.DatetimeRange(**bounds)
    ),
    is_empty=lambda key: models.IsEmptyCondition(is_empty=models.PayloadField(key=key)),
)

_EDGE = _Vocabulary(
    filter=lambda must, should, must_not: qdrant_edge.Filter(
        must=must or None, should=should or None, must_not=must_not or None
    ),
    match_value=lambda key, value: qdrant_edge.FieldCondition(
        key=key, match=qdrant_edge.MatchValue(value)
    ),
    match_any=lambda key, values: qdrant_edge.FieldCondition(
        key=key, match=qdrant_edge.MatchAny(values)
    ),
    match_except=lambda key, values: qdrant_edge.FieldCondition(
        key=key, match=qdrant_edge.MatchExcept(values)
    ),
    match_text=lambda key, text: qdrant_edge.FieldCondition(
        key=key, match=qdrant_edge.MatchText(text)
    ),
    number_range=lambda key, **bounds: qdrant_edge.FieldCondition(
        key=key, range=qdrant_edge.RangeFloat(**bounds)
    ),
    datetime_range=lambda key, **bounds: qdrant_edge.FieldCondition(
        key=key, range=qdrant_edge.RangeDateTime(**bounds)
    ),
    is_empty=lambda key: qdrant_edge.IsEmptyCondition(key),
)


def to_qdrant_filter(filters: MetadataFilters) -> models.Filter:
    """``filters`` as a qdrant-client ``Filter`` (pass it as ``qdrant_filters=`` to
    ``QdrantVectorStore.query``, which itself translates ranges only for numbers).

    Raises:
        InvalidInputError: A filter it cannot translate: an unsupported operator or
            condition, or a value of the wrong kind for its operator (a range bound that is
            neither a number nor an ISO date, a list where one value is needed, no values).
    """
    return _translate(filters, _QDRANT)


def to_edge_filter(filters: MetadataFilters) -> qdrant_edge.Filter:
    """``filters`` as a Qdrant Edge ``Filter``, meaning what :func:`to_qdrant_filter` means.

    Raises:
        InvalidInputError: A filter it cannot translate (see :func:`to_qdrant_filter`).
    """
    return _translate(filters, _EDGE)


def memory_scope(
    *,
    user_id: Optional[str] = None,
    before: Optional[date | datetime | str] = None,
    filters: Optional[MetadataFilters] = None,
    date_key: str = "date",
) -> Optional[MetadataFilters]:
    """``filters`` AND ``user_id == user_id`` AND ``date < before``, or None for no condition.

    Raises:
        InvalidInputError: ``before`` is not a readable date, or ``user_id`` not a non-blank
            line of text (``""`` would select no memory, not every user's).
    """
    conditions: list[MetadataFilter | MetadataFilters] = []
    if filters is not None and has_condition(filters):
        conditions.append(filters)
    if user_id is not None:
        conditions.append(MetadataFilter(key=USER_ID_KEY, operator=FilterOperator.EQ,
                                         value=check_user_id(user_id)))
    if before is not None:
        instant = parse_memory_date(before)  # ValueError names a bad value
        conditions.append(
            MetadataFilter(key=date_key, operator=FilterOperator.LT, value=instant.isoformat())
        )
    return MetadataFilters(filters=conditions) if conditions else None


def has_condition(filters: Optional[MetadataFilters]) -> bool:
    """Whether ``filters`` hold at least one condition. Without one (None, empty, or only
    empty groups) they select everything, so no delete accepts them as its selection."""
    return filters is not None and any(
        not isinstance(item, MetadataFilters) or has_condition(item) for item in filters.filters
    )


def _translate(filters: MetadataFilters, vocab: _Vocabulary) -> Any:
    condition = filters.condition or FilterCondition.AND
    conditions = []
    for item in _items(filters, condition):
        if isinstance(item, MetadataFilters):
            conditions.append(_translate(item, vocab))
        elif isinstance(item, MetadataFilter):
            conditions.append(_condition(item, vocab))
        else:
            raise InvalidInputError(f"not a MetadataFilter or MetadataFilters: {item!r}")
    if condition == FilterCondition.AND:
        return vocab.filter(conditions, [], [])
    if condition == FilterCondition.OR:
        return vocab.filter([], conditions, [])
    if condition == FilterCondition.NOT:
        return vocab.filter([], [], conditions)
    raise InvalidInputError(f"unsupported filter condition {condition!r}")


def _items(filters: MetadataFilters, condition: FilterCondition) -> Iterator[object]:
    """The items of ``filters`` that hold a condition, each AND group inside an AND spelled
    out in place (the same selection; Edge plans a flat filter faster than a nested one)."""
    for item in filters.filters:
        if not isinstance(item, MetadataFilters):
            yield item
        elif has_condition(item):
            if condition == FilterCondition.AND == (item.condition or FilterCondition.AND):
                yield from _items(item, condition)
            else:
                yield item


_RANGE_BOUNDS = {
    FilterOperator.GT: "gt",
    FilterOperator.GTE: "gte",
    FilterOperator.LT: "lt",
    FilterOperator.LTE: "lte",
}


def _condition(item: MetadataFilter, vocab: _Vocabulary) -> Any:
    key, op, value = item.key, item.operator, item.value
    if op in (FilterOperator.EQ, FilterOperator.CONTAINS):
        return _equals(key, _scalar(item), vocab)
    if op == FilterOperator.NE:
        return _outside(key, [_scalar(item)], vocab)
    if op in _RANGE_BOUNDS:
        bound = _RANGE_BOUNDS[op]
        if isinstance(value, (int, float)):
            return vocab.number_range(key, **{bound: float(value)})
        if isinstance(value, str):
            return vocab.datetime_range(key, **{bound: _rfc3339(item)})
        raise InvalidInputError(
            f"{op.name} on {key!r} needs a number or an ISO date, got {value!r}")
    if op in (FilterOperator.IN, FilterOperator.ANY):
        values = _values(item)
        if _has_float(values):
            return vocab.filter([], [_equals(key, v, vocab) for v in values], [])
        return vocab.match_any(key, values)
    if op == FilterOperator.NIN:
        return _outside(key, _values(item), vocab)
    if op == FilterOperator.ALL:
        return vocab.filter([_equals(key, v, vocab) for v in _values(item)], [], [])
    if op in (FilterOperator.TEXT_MATCH, FilterOperator.TEXT_MATCH_INSENSITIVE):
        if not isinstance(value, str):
            raise InvalidInputError(f"{op.name} on {key!r} needs a string, got {value!r}")
        return vocab.match_text(key, value)
    if op == FilterOperator.IS_EMPTY:
        return vocab.is_empty(key)
    raise InvalidInputError(f"unsupported filter operator {op!r} on {key!r}")


def _equals(key: str, value: str | int | float, vocab: _Vocabulary) -> Any:
    # Qdrant matches only str/int/bool exactly; a float equality is a closed range.
    if isinstance(value, float):
        return vocab.number_range(key, gte=value, lte=value)
    return vocab.match_value(key, value)


def _outside(key: str, values: list[Any], vocab: _Vocabulary) -> Any:
    """The field has a value not among ``values`` (Qdrant's ``except``)."""
    if not _has_float(values):
        return vocab.match_except(key, values)
    # No float "except" in Qdrant: one element must fall in a gap between the values.
    cuts = sorted({float(v) for v in values})
    gaps = [vocab.number_range(key, lt=cuts[0]), vocab.number_range(key, gt=cuts[-1])]
    gaps += [vocab.number_range(key, gt=lo, lt=hi) for lo, hi in zip(cuts, cuts[1:])]
    return vocab.filter([], gaps, [])


def _scalar(item: MetadataFilter) -> str | int | float:
    if isinstance(item.value, (str, int, float)):
        return item.value
    raise InvalidInputError(
        f"{item.operator.name} on {item.key!r} needs one value, got {item.value!r}")


def _values(item: MetadataFilter) -> list[Any]:
    value = item.value
    if isinstance(value, list) and value:
        return list(value)
    if isinstance(value, (str, int, float)):
        return [value]
    raise InvalidInputError(f"{item.operator.name} on {item.key!r} needs values, got {value!r}")


def _has_float(values: Sequence[Any]) -> bool:
    return any(isinstance(v, float) for v in values)


def _rfc3339(item: MetadataFilter) -> str:
    """An ISO date or datetime as an RFC 3339 instant: a date is midnight UTC, naive is UTC."""
    try:
        moment = datetime.fromisoformat(str(item.value))
    except ValueError:
        raise InvalidInputError(
            f"{item.operator.name} on {item.key!r} needs a number or an ISO date, "
            f"got {item.value!r}"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.isoformat()


def qdrant_selection(
    ids: Optional[Sequence[str]], filters: Optional[MetadataFilters]
) -> Optional[models.Filter]:
    """The points with these ``ids`` (all without) that ``filters`` selects, as a Qdrant filter."""
    must: list[Any] = []
    if ids is not None:
        must.append(models.HasIdCondition(has_id=list(ids)))
    if filters is not None and filters.filters:
        must.append(to_qdrant_filter(filters))
    return models.Filter(must=must) if must else None
