"""LLM chat models for the judge, translator and generators.

:mod:`tasks.common.llm.port` defines the :class:`~tasks.common.llm.port.ChatModel` port;
:mod:`tasks.common.llm.openai_chat` implements it on any OpenAI-compatible server and
:mod:`tasks.common.llm.vllm_batch` on ``vllm run-batch`` files (both send what
:mod:`tasks.common.llm.wire` describes); :mod:`tasks.common.llm.config` builds them;
:mod:`tasks.common.llm.cache` puts every paid request behind a reply cache;
:mod:`tasks.common.llm.prompt` reads every prompt template of ``prompts/``;
:mod:`tasks.common.llm.stage` is what every LLM stage shares (the cached call, cost, kept
and excluded rows).
"""
