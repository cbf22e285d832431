"""The 0.2 name of :mod:`llama_index_recency.records`: its names, with a DeprecationWarning on
import; the module goes in a later version."""

import warnings

from llama_index_recency.errors import FutureMemoryDateError as FutureMemoryDateError
from llama_index_recency.records import MAX_FACT_CHARS as MAX_FACT_CHARS
from llama_index_recency.records import MEMORY_NAMESPACE as MEMORY_NAMESPACE
from llama_index_recency.records import SUBJECT_PLACEHOLDERS as SUBJECT_PLACEHOLDERS
from llama_index_recency.records import SUPERSEDED_BY_KEY as SUPERSEDED_BY_KEY
from llama_index_recency.records import SUPERSEDES_KEY as SUPERSEDES_KEY
from llama_index_recency.records import USER_ID_KEY as USER_ID_KEY
from llama_index_recency.records import Role as Role
from llama_index_recency.records import SeveralUsersWarning as SeveralUsersWarning
from llama_index_recency.records import Turn as Turn
from llama_index_recency.records import calendar_day as calendar_day
from llama_index_recency.records import canonical_id as canonical_id
from llama_index_recency.records import check_not_future as check_not_future
from llama_index_recency.records import check_user_name as check_user_name
from llama_index_recency.records import control_character as control_character
from llama_index_recency.records import has_subject as has_subject
from llama_index_recency.records import is_memory_id as is_memory_id
from llama_index_recency.records import memory_id as memory_id
from llama_index_recency.records import memory_node as memory_node
from llama_index_recency.records import with_subject as with_subject

warnings.warn(
    "llama_index_recency.memory moved: use `from llama_index_recency.records import ...`; "
    "the module llama_index_recency.memory goes in a later version",
    DeprecationWarning,
    stacklevel=2,
)
