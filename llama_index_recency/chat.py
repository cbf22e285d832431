"""Answer even when no memory passed: a synthesizer and a context chat engine that do.

LlamaIndex's synthesizers reply "Empty Response" without calling the LLM when they get
no nodes. A character must still answer then, just with no memory in its prompt.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.base.response.schema import RESPONSE_TYPE
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.response_synthesizers import CompactAndRefine
from llama_index.core.response_synthesizers.base import QueryTextType
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_recency.prompts import (
    RETRIEVED_MEMORY_CONTEXT_TEMPLATE,
    RETRIEVED_MEMORY_PROMPT,
)


class MemoryResponseSynthesizer(CompactAndRefine):
    """``CompactAndRefine`` with the B-format prompt that asks the LLM even with no memory."""

    def __init__(self, text_qa_template: Any = None, **kwargs: Any) -> None:
        super().__init__(text_qa_template=text_qa_template or RETRIEVED_MEMORY_PROMPT, **kwargs)

    def synthesize(
        self,
        query: QueryTextType,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        if nodes:
            return super().synthesize(query, nodes, additional_source_nodes, **response_kwargs)
        prompt = self._no_memory_prompt(query)
        if self._streaming:
            answer = self._llm.stream(prompt, context_str="", **response_kwargs)
        else:
            answer = self._llm.predict(prompt, context_str="", **response_kwargs)
        return self._prepare_response_output(answer, list(additional_source_nodes or []))

    async def asynthesize(
        self,
        query: QueryTextType,
        nodes: List[NodeWithScore],
        additional_source_nodes: Optional[Sequence[NodeWithScore]] = None,
        **response_kwargs: Any,
    ) -> RESPONSE_TYPE:
        if nodes:
            return await super().asynthesize(
                query, nodes, additional_source_nodes, **response_kwargs
            )
        prompt = self._no_memory_prompt(query)
        if self._streaming:
            answer = await self._llm.astream(prompt, context_str="", **response_kwargs)
        else:
            answer = await self._llm.apredict(prompt, context_str="", **response_kwargs)
        return self._prepare_response_output(answer, list(additional_source_nodes or []))

    def _no_memory_prompt(self, query: QueryTextType) -> Any:
        query_str = query.query_str if isinstance(query, QueryBundle) else str(query)
        return self._text_qa_template.partial_format(query_str=query_str)


class RecencyChatEngine(ContextChatEngine):
    """``ContextChatEngine`` with the B-format context template that answers without memories too.

    Build it like the stock engine::

        RecencyChatEngine.from_defaults(
            retriever=index.as_retriever(similarity_top_k=8),
            node_postprocessors=[RecencyBonusPostprocessor()],
            llm=llm,
            system_prompt="You are Mimi, Taro's cheerful desk companion.",
        )
    """

    @classmethod
    def from_defaults(cls, retriever: Any, **kwargs: Any) -> "RecencyChatEngine":
        kwargs.setdefault("context_template", RETRIEVED_MEMORY_CONTEXT_TEMPLATE)
        return super().from_defaults(retriever, **kwargs)  # type: ignore[return-value]

    def _get_response_synthesizer(
        self, chat_history: List[ChatMessage], streaming: bool = False
    ) -> CompactAndRefine:
        stock = super()._get_response_synthesizer(chat_history, streaming)
        return MemoryResponseSynthesizer(
            llm=self._llm,
            callback_manager=self.callback_manager,
            text_qa_template=stock._text_qa_template,
            refine_template=stock._refine_template,
            streaming=streaming,
        )
