"""Integrations: the LlamaIndex retriever, postprocessor, memory block, chat and prompts."""
