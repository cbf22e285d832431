"""The bundled example: 16 dated memories about Taro and 10 labelled questions.

In English and in Japanese (``lang="ja"``): the same keys, dates and labels. Facts say
"The user" / 「ユーザー」, which ``user_name`` (default Taro / 太郎) replaces.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from importlib import resources
from typing import Any, Literal, Optional

from llama_index.core.schema import TextNode

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.records.nodes import memory_node

QuestionKind = Literal["hit", "contradiction", "hit_free"]

EXAMPLE_LANGUAGES = ("en", "ja")
"""Languages the bundled example ships in."""


@dataclass(frozen=True)
class ExampleQuestion:
    """A labelled question: ``targets`` are the memory keys that should reach the prompt."""

    id: str
    kind: QuestionKind
    text: str
    targets: tuple[str, ...]


def _load(name: str) -> dict[str, Any]:
    return json.loads(resources.files("llama_index_recency.data").joinpath(name).read_text("utf-8"))


EXAMPLE_REFERENCE_DATE = date.fromisoformat(_load("memories.json")["reference_date"])
"""'Today' for the bundled example: the day its scores and tables are measured on (2026-09-10)."""


def _file(stem: str, lang: str) -> str:
    if lang not in EXAMPLE_LANGUAGES:
        raise InvalidInputError(f"no bundled example in language {lang!r}; choose one of "
                                f"{', '.join(EXAMPLE_LANGUAGES)}")
    return f"{stem}.json" if lang == "en" else f"{stem}_{lang}.json"


def example_memories(user_name: Optional[str] = None, lang: str = "en") -> list[TextNode]:
    """The 16 memories in ``lang`` as nodes; metadata ``key`` names each (e.g. ``cafe_au_lait``).

    Raises:
        InvalidInputError: ``lang`` is not one of :data:`EXAMPLE_LANGUAGES`, or
            ``user_name`` is blank or holds a control character.
    """
    data = _load(_file("memories", lang))
    name = user_name or data["user_name"]
    return [
        memory_node(item["fact"], item["date"], user_name=name, metadata={"key": item["key"]},
                    reference_date=data["reference_date"])
        for item in data["memories"]
    ]


def example_questions(lang: str = "en") -> list[ExampleQuestion]:
    """H1-H4 (hit), C1-C2 (contradiction) and N1-N4 (hit-free) in ``lang``, in that order.

    Raises:
        InvalidInputError: ``lang`` is not one of :data:`EXAMPLE_LANGUAGES`.
    """
    return [
        ExampleQuestion(q["id"], q["kind"], q["text"], tuple(q["targets"]))
        for q in _load(_file("questions", lang))["questions"]
    ]
