"""Records: what a memory is (its keys, ids, dates and text), below every other layer.

The names of :mod:`llama_index_recency.records.nodes` are also read from here, as 0.3 spelled
them (``from llama_index_recency.records import memory_node``).
"""

from llama_index_recency.records.nodes import (
    MAX_FACT_CHARS,
    MEMORY_NAMESPACE,
    SUBJECT_PLACEHOLDERS,
    SUPERSEDED_BY_KEY,
    SUPERSEDES_KEY,
    USER_ID_KEY,
    Role,
    SeveralUsersWarning,
    Turn,
    calendar_day,
    canonical_id,
    check_not_future,
    check_user_name,
    control_character,
    has_subject,
    is_memory_id,
    memory_id,
    memory_node,
    quoted,
    with_subject,
)

__all__ = [
    "MAX_FACT_CHARS",
    "MEMORY_NAMESPACE",
    "SUBJECT_PLACEHOLDERS",
    "SUPERSEDED_BY_KEY",
    "SUPERSEDES_KEY",
    "USER_ID_KEY",
    "Role",
    "SeveralUsersWarning",
    "Turn",
    "calendar_day",
    "canonical_id",
    "check_not_future",
    "check_user_name",
    "control_character",
    "has_subject",
    "is_memory_id",
    "memory_id",
    "memory_node",
    "quoted",
    "with_subject",
]
