"""What the in-process model adapters share (:mod:`tasks.common.embed.local`, :mod:`tasks.common.rerank.local`).

:mod:`tasks.common.models.hub` says where a model comes from (a builtin model, a local directory or
the Hugging Face Hub) and loads hub models without minutes of retries on machines without
network. Importing this package loads neither torch nor sentence-transformers.
"""
