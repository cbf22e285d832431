"""One LLM call per question, memory text only inside the escaped block, an answer with no memory.

LlamaIndex's stock synthesizers reply "Empty Response" without calling the LLM when they
get no nodes, and split context longer than the LLM's window into refine calls whose
stock prompt carries memory text outside the block. A character must answer in one call
either way, with its memories only inside ``<retrieved_memory>``.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, Dict, List, Optional, Sequence, Union

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.callbacks import CallbackManager
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.llms import LLM
from llama_index.core.prompts import BasePromptTemplate
from llama_index.core.response_synthesizers import BaseSynthesizer
from llama_index.core.response_synthesizers.base import QueryTextType
from llama_index.core.schema import NodeWithScore, QueryBundle
from llama_index.core.settings import Settings
from llama_index.core.types import RESPONSE_TEXT_TYPE

from llama_index_recency.errors import InvalidInputError
from llama_index_recency.integrations.prompts import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    RETRIEVED_MEMORY_PROMPT,
    memory_context,
)
from llama_index_recency.ranking.vague import is_vague_ranking
from llama_index_recency.records.nodes import calendar_day
from llama_index_recency.records.text import memory_text

TodayLike = Union[date, datetime, str, None]
"""The prompt's "today": a date, a datetime (its own calendar day), an ISO string, or None (now)."""

_TOKENS_PER_MESSAGE = 4  # role and separators, as OpenAI counts them


def _memory_day(today: TodayLike) -> Optional[str]:
    """``today`` as ``YYYY-MM-DD``, or None for "the current date when the prompt is built"."""
    if today is None:
        return None
    try:
        return calendar_day(today).isoformat()
    except ValueError:
        raise InvalidInputError(
            f"today must be a date, a datetime or an ISO date string, not {today!r}"
        ) from None


class MemoryResponseSynthesizer(BaseSynthesizer):
    """Send the B-format prompt in exactly one LLM call, with or without memories.

    Every memory goes into the escaped block once, on one line. If the prompt would not
    fit the LLM's ``context_window`` minus its ``num_output``, the longest memory texts
    are cut to a common length (marked "…") instead of being split into refine calls.
    ``today`` ties the prompt's date to your recency policy's reference date.

    Use it wherever LlamaIndex takes a response synthesizer; with a retriever (such as
    ``QdrantRecencyRetriever``)::

        RetrieverQueryEngine(retriever, response_synthesizer=MemoryResponseSynthesizer(llm=llm))

    (``RetrieverQueryEngine.from_args(retriever, llm=llm)`` would send LlamaIndex's stock
    QA prompt: no block, no rules, no escaping.) Nodes a vague reference brought
    (:func:`~llama_index_recency.ranking.vague.is_vague_ranking`) add the note that they are the
    candidates to ask back about (format variable ``vague_reference``).
    """

    def __init__(
        self,
        llm: Optional[LLM] = None,
        callback_manager: Optional[CallbackManager] = None,
        text_qa_template: Optional[BasePromptTemplate] = None,
        streaming: bool = False,
        today: TodayLike = None,
    ) -> None:
        """A synthesizer for ``llm`` (default: ``Settings.llm``) sending
        ``text_qa_template`` (default: ``RETRIEVED_MEMORY_PROMPT``).

        Raises:
            InvalidInputError: ``today`` is not a date, a datetime or an ISO date string.
        """
        super().__init__(llm=llm, callback_manager=callback_manager, streaming=streaming)
        self._text_qa_template = text_qa_template or RETRIEVED_MEMORY_PROMPT
        self._today = _memory_day(today)

    def _get_prompts(self) -> Dict[str, Any]:
        return {"text_qa_template": self._text_qa_template}

    def _update_prompts(self, prompts: Dict[str, Any]) -> None:
        if "text_qa_template" in prompts:
            self._text_qa_template = prompts["text_qa_template"]

    def synthesize(
        self,
        query: QueryTextType,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """The answer to ``query`` in one LLM call, ``nodes`` in the block (none: no block).

        Raises:
            InvalidInputError: The prompt does not fit the LLM's ``context_window`` minus
                ``num_output`` even with every memory cut to its date.
        """
        if nodes:
            return super().synthesize(query, nodes, additional_source_nodes,
                                      memory_texts=_memory_texts(nodes),
                                      **_vague(nodes), **response_kwargs)
        answer = self.get_response(_query_str(query), [], **response_kwargs)
        return self._prepare_response_output(answer, list(additional_source_nodes or []))

    async def asynthesize(
        self,
        query: QueryTextType,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        """Async :meth:`synthesize`.

        Raises:
            InvalidInputError: The prompt does not fit the LLM's ``context_window`` minus
                ``num_output`` even with every memory cut to its date.
        """
        if nodes:
            return await super().asynthesize(query, nodes, additional_source_nodes,
                                             memory_texts=_memory_texts(nodes),
                                             **_vague(nodes), **response_kwargs)
        answer = await self.aget_response(_query_str(query), [], **response_kwargs)
        return self._prepare_response_output(answer, list(additional_source_nodes or []))

    def get_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        memory_texts: Optional[Sequence[str]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        """The answer; ``memory_texts`` (passed by :meth:`synthesize`) replace ``text_chunks``,
        which LlamaIndex renders with a plain node's metadata in them.

        Raises:
            InvalidInputError: The prompt does not fit the LLM's ``context_window`` minus
                ``num_output`` even with every memory cut to its date.
        """
        memories = text_chunks if memory_texts is None else memory_texts
        prompt, context_str = self._prompt(query_str, memories, response_kwargs)
        if self._streaming:
            return self._llm.stream(prompt, context_str=context_str, **response_kwargs)
        return self._llm.predict(prompt, context_str=context_str, **response_kwargs)

    async def aget_response(
        self,
        query_str: str,
        text_chunks: Sequence[str],
        memory_texts: Optional[Sequence[str]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TEXT_TYPE:
        """Async :meth:`get_response`.

        Raises:
            InvalidInputError: The prompt does not fit the LLM's ``context_window`` minus
                ``num_output`` even with every memory cut to its date.
        """
        memories = text_chunks if memory_texts is None else memory_texts
        prompt, context_str = self._prompt(query_str, memories, response_kwargs)
        if self._streaming:
            return await self._llm.astream(prompt, context_str=context_str, **response_kwargs)
        return await self._llm.apredict(prompt, context_str=context_str, **response_kwargs)

    def _prompt(
        self, query_str: str, text_chunks: Sequence[str], response_kwargs: Dict[str, Any]
    ) -> tuple[BasePromptTemplate, str]:
        """The template with query and today filled in, and the ``context_str`` that fits."""
        prompt = self._text_qa_template.partial_format(query_str=query_str)
        if self._today:
            prompt = prompt.partial_format(today=self._today)
        memories = list(text_chunks)
        return prompt, self._fit(prompt, memories, response_kwargs)

    def _fit(
        self, prompt: BasePromptTemplate, memories: List[str], response_kwargs: Dict[str, Any]
    ) -> str:
        """All memories for ``context_str``; if too long, cut to the longest common length
        that fits."""
        window, num_output = self._prompt_helper.context_window, self._prompt_helper.num_output
        budget = window - num_output

        def fits(limit: Optional[int]) -> bool:
            messages = prompt.format_messages(
                llm=self._llm, context_str=memory_context(memories, limit), **response_kwargs
            )
            tokens = sum(
                len(Settings.tokenizer(str(message.content or ""))) + _TOKENS_PER_MESSAGE
                for message in messages
            )
            return tokens <= budget

        if not memories or fits(None):
            return memory_context(memories)
        if not fits(0):
            raise InvalidInputError(
                f"the prompt does not fit the LLM's context_window={window} minus "
                f"num_output={num_output} even with every memory cut to its date"
            )
        fitting, too_long = 0, max(map(len, memories))
        while too_long - fitting > 1:
            middle = (fitting + too_long) // 2
            fitting, too_long = (middle, too_long) if fits(middle) else (fitting, middle)
        return memory_context(memories, fitting)


def _memory_texts(nodes: Sequence[NodeWithScore]) -> list[str]:
    """Each node as the block shows a memory (``YYYY-MM-DD: <content>``, no metadata)."""
    return [memory_text(n.node) for n in nodes]


def _vague(nodes: Sequence[NodeWithScore]) -> Dict[str, Any]:
    """``vague_reference=True`` for the prompt when the nodes were listed for a vague reference."""
    return {"vague_reference": True} if is_vague_ranking(nodes) else {}


def _query_str(query: QueryTextType) -> str:
    return query.query_str if isinstance(query, QueryBundle) else str(query)


class RecencyChatEngine(ContextChatEngine):
    """``ContextChatEngine`` with the B-format context template, one LLM call per message
    (memories only inside the escaped block, cut to fit the window), and an answer when
    no memory passes too.

    Build it like the stock engine; ``today`` sets the prompt's date (default: the
    current date at each message)::

        RecencyChatEngine.from_defaults(
            retriever=index.as_retriever(similarity_top_k=8),
            node_postprocessors=[RecencyBonusPostprocessor()],
            llm=llm,
            system_prompt="You are Mimi, Taro's cheerful desk companion.",
        )
    """

    def __init__(self, *args: Any, today: TodayLike = None, **kwargs: Any) -> None:
        """The stock engine's arguments, plus ``today`` (the prompt's date).

        Raises:
            InvalidInputError: ``today`` is not a date, a datetime or an ISO date string.
        """
        super().__init__(*args, **kwargs)
        self._today = _memory_day(today)

    @classmethod
    def from_defaults(  # type: ignore[override]  # adds today=
        cls, retriever: Any, today: TodayLike = None, **kwargs: Any
    ) -> "RecencyChatEngine":
        """The stock ``from_defaults`` with the B-format ``context_template`` (unless one is
        given) and ``today`` (the prompt's date; default: the current date at each message).

        Raises:
            InvalidInputError: ``today`` is not a date, a datetime or an ISO date string.
        """
        day = _memory_day(today)
        kwargs["context_template"] = (
            kwargs.get("context_template") or RETRIEVED_MEMORY_CONTEXT_TEMPLATE
        )
        engine = super().from_defaults(retriever, **kwargs)
        assert isinstance(engine, RecencyChatEngine)
        engine._today = day
        return engine

    def _get_response_synthesizer(  # type: ignore[override]  # a one-call synthesizer
        self, chat_history: List[ChatMessage], streaming: bool = False
    ) -> BaseSynthesizer:
        stock = super()._get_response_synthesizer(chat_history, streaming)
        return MemoryResponseSynthesizer(
            llm=self._llm,
            callback_manager=self.callback_manager,
            text_qa_template=stock.get_prompts()["text_qa_template"],
            streaming=streaming,
            today=self._today,
        )
