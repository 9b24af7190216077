"""What the model adapters share.

:mod:`tasks.common.models.hub` says where a model of the in-process adapters
(:mod:`tasks.common.embed.local`, :mod:`tasks.common.rerank.local`) comes from (a builtin model,
a local directory or the Hugging Face Hub) and loads hub models without minutes of retries on
machines without network. :mod:`tasks.common.models.secrets` keeps the key of the adapters that
call a server out of their messages. Importing this package loads neither torch nor
sentence-transformers.
"""
