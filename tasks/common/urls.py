"""A server's URL as it may be shown: in logs, errors, ``repr`` and options.

Used by every adapter that talks to a server (``tasks/common/llm/openai_chat.py``,
``tasks/common/embed/remote.py``, ``tasks/common/rerank/vllm_score.py``, ``tasks/common/translate/deepl.py``,
``tasks/common/search/elastic/connection.py``): a URL may carry credentials (``http://user:secret@host``)
or a key in its query, and neither may reach a log line.
"""

from __future__ import annotations

import urllib.parse


def public_url(url: str) -> str:
    """``url`` without user info, query, fragment or trailing ``/``; an IPv6 host keeps its brackets.

    :class:`ValueError` (whose message does not hold the URL) when the URL cannot be parsed,
    e.g. a port that is not a number in 0-65535.
    """
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
