"""Elasticsearch's errors as messages: the server's reason, never a credential.

Every message goes through :func:`scrub` with the configured secrets before it is raised;
401 answers are reported without the server's text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from elasticsearch import ApiError, Elasticsearch, TransportError

from tasks.common.search.port import SearchError


def scrub(text: str, secrets: Sequence[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def error_text(error: Any) -> str:
    """``type: reason`` of a server error object, with the root cause when it says more."""
    if not isinstance(error, Mapping):
        return str(error)
    text = f"{error.get('type', 'error')}: {error.get('reason', '')}".rstrip(": ")
    causes: list[Any] = list(error.get("root_cause") or [])
    caused_by = error.get("caused_by")
    if isinstance(caused_by, Mapping):
        causes.append(caused_by)
    for failed in error.get("failed_shards") or []:
        if isinstance(failed, Mapping) and isinstance(failed.get("reason"), Mapping):
            causes.append(failed["reason"])
    for cause in causes:
        if isinstance(cause, Mapping):
            extra = f"{cause.get('type', 'error')}: {cause.get('reason', '')}".rstrip(": ")
            if extra not in text:
                text = f"{text} ({extra})"
                break
    return text


def api_reason(err: ApiError) -> str:
    body = err.body
    if isinstance(body, Mapping) and "error" in body:
        return error_text(body["error"])
    return str(err.message)


def is_licence_error(text: str) -> bool:
    lowered = text.lower()
    return "license" in lowered or "licence" in lowered


def item_reason(info: Mapping[str, Any]) -> str:
    """Why a bulk item failed: its status and the server's reason."""
    status = info.get("status", "?")
    error = info.get("error")
    return f"{status} {error_text(error)}" if error is not None else f"{status} (no reason given)"


@dataclass
class Server:
    """One backend's requests: the client with the adapter's request options, where it points
    (no credentials), and the secrets every message is scrubbed of."""

    es: Elasticsearch
    where: str
    secrets: tuple[str, ...] = ()

    def scrub(self, text: str) -> str:
        return scrub(text, self.secrets)

    def error(self, doing: str, err: ApiError | TransportError) -> SearchError:
        """A failed request as a :class:`SearchError` saying what was being done."""
        if isinstance(err, ApiError):
            if err.status_code == 401:
                detail = "401: the server refused the credentials"
            else:
                detail = f"{err.status_code} {api_reason(err)}"
        else:
            detail = f"no answer ({type(err).__name__}: {err.message})"
        return SearchError(self.scrub(f"Elasticsearch at {self.where}: {doing}: {detail}"))
