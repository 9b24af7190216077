"""What the in-process model adapters share (:mod:`tasks.embed.local`, :mod:`tasks.rerank.local`).

:mod:`tasks.models.hub` says where a model comes from (a builtin model, a local directory or
the Hugging Face Hub) and loads hub models without minutes of retries on machines without
network. Importing this package loads neither torch nor sentence-transformers.
"""
