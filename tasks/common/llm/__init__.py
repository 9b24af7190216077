"""LLM chat models for the judge, translator and generators.

:mod:`tasks.common.llm.port` defines the :class:`~tasks.common.llm.port.ChatModel` port;
:mod:`tasks.common.llm.openai_chat` implements it on any OpenAI-compatible server and
:mod:`tasks.common.llm.cache` puts every paid request behind a reply cache;
:mod:`tasks.common.llm.prompt` reads every prompt template of ``prompts/``.
"""
