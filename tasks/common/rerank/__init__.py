"""Cross-encoder rerankers for candidate pooling (CURE §2.3).

:mod:`tasks.common.rerank.port` defines the :class:`~tasks.common.rerank.port.Reranker` port and
:class:`~tasks.common.rerank.port.ScoredPairs` (raw logits and their sigmoid); two adapters implement
it: :mod:`tasks.common.rerank.local` runs a sentence-transformers ``CrossEncoder`` in process (the
GTE multilingual reranker in production) and :mod:`tasks.common.rerank.vllm_score` calls vLLM's
``/score`` endpoint. :mod:`tasks.common.rerank.builtin` builds the small offline cross-encoder used
on laptops and in CI (random head: its scores mean nothing).

This package imports nothing heavy: import the adapter modules themselves (torch and
sentence-transformers load with :mod:`tasks.common.rerank.local` and :mod:`tasks.common.rerank.builtin`).
"""
