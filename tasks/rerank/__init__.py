"""Cross-encoder rerankers for candidate pooling (CURE §2.3).

:mod:`tasks.rerank.port` defines the :class:`~tasks.rerank.port.Reranker` port and
:class:`~tasks.rerank.port.ScoredPairs` (raw logits and their sigmoid); two adapters implement
it: :mod:`tasks.rerank.local` runs a sentence-transformers ``CrossEncoder`` in process (the
GTE multilingual reranker in production) and :mod:`tasks.rerank.vllm_score` calls vLLM's
``/score`` endpoint. :mod:`tasks.rerank.builtin` builds the small offline cross-encoder used
on laptops and in CI (random head: its scores mean nothing).

This package imports nothing heavy: import the adapter modules themselves (torch and
sentence-transformers load with :mod:`tasks.rerank.local` and :mod:`tasks.rerank.builtin`).
"""
