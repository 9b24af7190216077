"""The Elasticsearch client from the environment: URL, credentials, CA bundle, server check.

- ``ES_URL``: the server, e.g. ``http://localhost:9200`` (``infra/elasticsearch/start.sh``).
- ``ES_API_KEY``: an API key (the base64 "encoded" form), **or** ``ES_USERNAME`` +
  ``ES_PASSWORD``: basic auth. Credentials may also sit in the URL.
- ``ES_CA_CERTS``: a CA bundle for a server with a self-signed certificate (ES 8's default
  security setup).

Server URLs are shown through :func:`tasks.common.urls.public_url` (no user info), and the
secrets in every form they may take are collected so messages can be scrubbed of them.
"""

from __future__ import annotations

import base64
import os
import re
import urllib.parse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from elasticsearch import (
    ApiError,
    AuthenticationException,
    Elasticsearch,
    TransportError,
    UnsupportedProductError,
)

from tasks.common.search.elastic.errors import api_reason, scrub
from tasks.common.search.port import SearchUnavailable
from tasks.common.urls import public_url

ENV_URL = "ES_URL"
ENV_API_KEY = "ES_API_KEY"
ENV_USERNAME = "ES_USERNAME"
ENV_PASSWORD = "ES_PASSWORD"
ENV_CA_CERTS = "ES_CA_CERTS"
MIN_SERVER = (8, 12)  # int8_hnsw; top-level knn in msearch


@dataclass(frozen=True)
class Connection:
    """A client from the environment, where it points (no credentials), the secrets used, and
    the server's version (empty until checked)."""

    client: Elasticsearch
    where: str
    secrets: tuple[str, ...]
    version: str = ""


def connect() -> Connection:
    """The client of ``ES_URL``, its server's version checked with ``info()``.

    Raises :class:`SearchUnavailable` saying which variable to set, or why the server did
    not answer (the client is closed then)."""
    conn = _connect_from_env()
    try:
        return replace(conn, version=_server_version(conn))
    except SearchUnavailable:
        conn.client.close()
        raise


def client_where(client: Elasticsearch) -> str:
    """The client's nodes as URLs without credentials."""
    try:
        nodes = client.transport.node_pool.all()
    except AttributeError:
        return "<client>"
    return ", ".join(sorted(public_url(n.base_url) for n in nodes)) or "<client>"


def _secret_forms(url: str, api_key: str, username: str, password: str) -> tuple[str, ...]:
    """The secrets as given and as sent (a basic-auth header is base64 of ``user:password``)."""
    forms = [api_key, password]
    pairs = [(username, password)] if password else []
    try:
        parts = urllib.parse.urlsplit(url)
        if parts.password:
            url_user = urllib.parse.unquote(parts.username or "")
            url_password = urllib.parse.unquote(parts.password)
            forms += [parts.password, url_password]
            pairs.append((url_user, url_password))
    except ValueError:
        pass
    forms += [base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in pairs]
    return tuple(sorted({f for f in forms if f}, key=len, reverse=True))


def _auth(api_key: str, username: str, password: str, ca_certs: str) -> dict[str, Any]:
    """The client's auth and TLS keyword arguments; SearchUnavailable for a wrong combination."""
    kwargs: dict[str, Any] = {}
    if api_key and (username or password):
        raise SearchUnavailable(f"set either {ENV_API_KEY} or {ENV_USERNAME}/{ENV_PASSWORD}, not both")
    if api_key:
        kwargs["api_key"] = api_key
    elif username or password:
        if not (username and password):
            raise SearchUnavailable(f"{ENV_USERNAME} and {ENV_PASSWORD} must be set together")
        kwargs["basic_auth"] = (username, password)
    if ca_certs:
        if not Path(ca_certs).is_file():
            raise SearchUnavailable(f"{ENV_CA_CERTS} names {ca_certs!r}, which is not a file")
        kwargs["ca_certs"] = ca_certs
    return kwargs


def _connect_from_env() -> Connection:
    url = os.environ.get(ENV_URL, "").strip()
    if not url:
        raise SearchUnavailable(
            f"{ENV_URL} is not set: export {ENV_URL}=http://localhost:9200 "
            "(infra/elasticsearch/start.sh starts a server), with "
            f"{ENV_API_KEY} or {ENV_USERNAME}/{ENV_PASSWORD} if security is on; "
            "or use the embedded search backend"
        )
    try:
        where = public_url(url)
    except ValueError:
        where = "<unparseable URL>"
    api_key = os.environ.get(ENV_API_KEY, "").strip()
    username = os.environ.get(ENV_USERNAME, "").strip()
    password = os.environ.get(ENV_PASSWORD, "")
    ca_certs = os.environ.get(ENV_CA_CERTS, "").strip()
    secrets = _secret_forms(url, api_key, username, password)
    kwargs = _auth(api_key, username, password, ca_certs)
    try:
        client = Elasticsearch(url, **kwargs)
    except (ValueError, TypeError):
        # The client's message repeats the URL, credentials included.
        raise SearchUnavailable(
            f"{ENV_URL} ({where}) is not a usable URL: write it as scheme://host:port, e.g. http://localhost:9200"
        ) from None
    return Connection(client, where, secrets)


def _server_version(conn: Connection) -> str:
    """``info()`` as the reachability check; SearchUnavailable with the reason otherwise."""
    try:
        info = conn.client.info().body
    except AuthenticationException:
        raise SearchUnavailable(
            f"Elasticsearch at {conn.where} refused the credentials (401): "
            f"check {ENV_API_KEY} or {ENV_USERNAME}/{ENV_PASSWORD}"
        ) from None
    except UnsupportedProductError:
        raise SearchUnavailable(
            f"the server at {conn.where} is not Elasticsearch (no X-Elastic-Product header): check {ENV_URL}"
        ) from None
    except ApiError as err:
        reason = scrub(api_reason(err), conn.secrets)
        raise SearchUnavailable(
            f"Elasticsearch at {conn.where} answered {err.status_code}: {reason}"
        ) from None
    except TransportError as err:
        raise SearchUnavailable(
            f"the server at {conn.where} did not answer ({type(err).__name__}): is it running? "
            "infra/elasticsearch/start.sh starts one; check ES_URL (and ES_CA_CERTS for https)"
        ) from None
    number = str(info.get("version", {}).get("number", "0"))
    found = tuple(int(p) for p in re.findall(r"\d+", number)[:2]) or (0,)
    if found < MIN_SERVER:
        raise SearchUnavailable(
            f"Elasticsearch at {conn.where} is {number}; this backend needs "
            f"{MIN_SERVER[0]}.{MIN_SERVER[1]} or later (int8_hnsw, knn in msearch)"
        )
    return number
