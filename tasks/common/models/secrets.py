"""Keeping an API key out of what an adapter shows: messages, logs and chained exceptions.

Shared by the adapters that send a key (:mod:`tasks.common.embed.remote`,
:mod:`tasks.common.rerank.vllm_score`, :mod:`tasks.common.translate.deepl_requests`).
"""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def scrub(text: str, secret: str | None, mask: str = "<api key>", limit: int = 300) -> str:
    """``text`` on one line, ``secret`` replaced by ``mask``, cut to ``limit`` characters."""
    one_line = " ".join(text.split())
    if secret:
        one_line = one_line.replace(secret, mask)
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def carries(exc: BaseException, secret: str | None) -> bool:
    """Whether any exception of ``exc``'s chain (causes and contexts) shows ``secret``."""
    if not secret:
        return False
    link: BaseException | None = exc
    while link is not None:
        if secret in str(link) or secret in repr(link):
            return True
        link = link.__cause__ or link.__context__
    return False


def chained(err: E, exc: BaseException, secret: str | None) -> E:
    """``err`` with ``exc`` as its ``__cause__`` unless ``exc``'s chain shows ``secret``; the
    context is suppressed either way, so a traceback never prints the key."""
    if not carries(exc, secret):
        err.__cause__ = exc
    err.__suppress_context__ = True
    return err
