"""LLM chat models for the judge, translator and generators.

:mod:`tasks.llm.port` defines the :class:`~tasks.llm.port.ChatModel` port;
:mod:`tasks.llm.openai_chat` implements it on any OpenAI-compatible server and
:mod:`tasks.llm.cache` puts every paid request behind a reply cache;
:mod:`tasks.llm.prompt` reads every prompt template of ``prompts/``.
"""
