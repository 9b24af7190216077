"""A local server speaking DeepL's documented API (v2 translate/usage, v3 glossaries), for tests.

The official ``deepl`` client talks to it unchanged (``DeepLClient(key, server_url=url)``).
It serves 127.0.0.1 only, on an ephemeral port, from a thread; the fixture stops it.

- ``Authorization: DeepL-Auth-Key <key>`` is checked on every request; a wrong or missing
  key gets 403 with a message that *echoes the presented key*, on purpose, so tests can
  prove the adapter never passes a key on to the user.
- ``POST /v2/translate`` accepts the JSON body the client sends (and the older form body);
  the "translation" is visibly fake and deterministic: ``"[FR] " + text`` (the target code
  in brackets), with glossary terms replaced by their target terms. ``billed_characters``
  is the text's length in code points. Limits as documented
  (https://developers.deepl.com/docs/resources/usage-limits): a request whose *total* size
  (request line, headers and body) is over 128 KiB → 413, as is one of > 50 texts (the
  mock's 413 on big bodies is body-parser's; DeepL's own API counts the headers); target ``EN`` → 400; ``less``/``more`` formality for a target without
  formality → 400; unknown glossary → 404.
- ``GET /v2/usage``; ``POST/GET /v3/glossaries``, ``GET/DELETE /v3/glossaries/{id}``,
  ``GET /v3/glossaries/{id}/entries``.
- ``character_limit``: once used up, ``/v2/translate`` answers 456 (quota exceeded).
- Fault injection: ``inject(fault, times, after=k)`` makes the next ``times`` requests to a
  path (after ``k`` good ones) answer 413, 429, 456, 500, 503, drop the connection unanswered
  (``"drop"``), or never answer (``"hang"``: the connection is held open until the server
  stops or ``hang_s`` passes, like deepl-mock's ``mock-server-session-no-response-count``).
- Every request is recorded (method, path, query, headers, parsed body, size, status).
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest

from tests.fakes.loopback import (
    MALFORMED,
    FaultQueue,
    LoopbackServer,
    QuietHandler,
    RecordingService,
    Reply,
    answer_of,
    presented_auth,
)

Fault = Literal[413, 429, 456, 500, 503, "drop", "hang"]

MAX_TEXTS = 50
MAX_REQUEST_BYTES = 128 * 1024  # "Total request size", headers included
TARGETS = {"EN-US", "EN-GB", "FR", "ES", "DE", "IT", "PT-PT", "PT-BR"}
SOURCES = {"EN", "FR", "ES", "DE", "IT", "PT"}
FORMALITY_TARGETS = {"FR", "ES", "DE", "IT", "PT-PT", "PT-BR"}
FORMALITIES = {"less", "more", "prefer_less", "prefer_more", "default"}
MODEL_TYPES = {"quality_optimized", "prefer_quality_optimized", "latency_optimized"}
CREATION_TIME = "2025-01-01T00:00:00.000000Z"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any
    body_bytes: int
    status: int | None  # None: the connection was dropped (or held) without an answer
    request_bytes: int = 0  # request line + headers + body, as DeepL counts a request

    @property
    def texts(self) -> list[str]:
        text = self.body.get("text", []) if isinstance(self.body, dict) else []
        return list(text) if isinstance(text, list) else [text]


@dataclass
class _Glossary:
    glossary_id: str
    name: str
    dictionaries: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def info(self) -> dict[str, Any]:
        return {
            "glossary_id": self.glossary_id,
            "name": self.name,
            "creation_time": CREATION_TIME,
            "dictionaries": [
                {"source_lang": s.lower(), "target_lang": t.lower(), "entry_count": len(e)}
                for (s, t), e in self.dictionaries.items()
            ],
        }


def _parse_entries(entries: str, fmt: str) -> dict[str, str]:
    sep = "\t" if fmt == "tsv" else ","
    out: dict[str, str] = {}
    for line in entries.splitlines():
        if not line.strip():
            continue
        parts = line.split(sep)
        if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
            raise Reply(400, {"message": f"Invalid glossary entry line: {line!r}"})
        out[parts[0].strip()] = parts[1].strip()
    return out


class FakeDeepL(RecordingService[RecordedRequest]):
    """The server's state and controls; ``url`` is the base to give ``DeepLClient``."""

    thread_name = "fake-deepl"

    def __init__(
        self,
        auth_key: str = "irforge-test-key",
        *,
        character_limit: int | None = None,
        max_texts: int = MAX_TEXTS,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        hang_s: float = 30.0,
    ) -> None:
        super().__init__()
        self.auth_key = auth_key
        self.character_limit = character_limit
        self.character_count = 0
        self.max_texts = max_texts
        self.max_request_bytes = max_request_bytes
        self.hang_s = hang_s
        self.glossaries: dict[str, _Glossary] = {}
        self._faults = FaultQueue[Fault]()
        self._lock = threading.Lock()
        self._listen(_Server, _Handler)

    # -- controls for tests -----------------------------------------------------------

    def inject(
        self, fault: Fault, times: int = 1, *, after: int = 0, path: str | None = "/v2/translate"
    ) -> None:
        """The next ``times`` requests to ``path`` (any path if None), after ``after`` requests
        to it that are served normally, answer with ``fault`` (an HTTP status, or ``"drop"``:
        the connection is closed without an answer). Faults queue in the order injected."""
        self._faults.add(fault, times, after, path)

    def requests_to(self, path: str, method: str | None = None) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path == path and (method is None or r.method == method)]

    def translated(self) -> list[RecordedRequest]:
        """``/v2/translate`` requests that were answered 200 (i.e. paid for)."""
        return [r for r in self.requests_to("/v2/translate") if r.status == 200]

    # -- request handling (called from the handler threads) ---------------------------

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], headers: dict[str, str], body: Any
    ) -> Any:
        presented = presented_auth(headers, f"DeepL-Auth-Key {self.auth_key}")
        if presented is not None:
            raise Reply(403, {"message": f"Forbidden: invalid authorization {presented!r}"})
        if method == "POST" and path == "/v2/translate":
            return self._translate(body)
        if method == "GET" and path == "/v2/usage":
            with self._lock:
                return {
                    "character_count": self.character_count,
                    "character_limit": self.character_limit or 500000,
                }
        if path == "/v3/glossaries":
            if method == "POST":
                return self._create_glossary(body)
            if method == "GET":
                with self._lock:
                    return {"glossaries": [g.info() for g in self.glossaries.values()]}
        match = re.fullmatch(r"/v3/glossaries/([^/]+)(/entries)?", path)
        if match:
            with self._lock:
                glossary = self.glossaries.get(match.group(1))
            if glossary is None:
                raise Reply(404, {"message": "Glossary not found"})
            if match.group(2) and method == "GET":
                pair = (query.get("source_lang", [""])[0].upper(), query.get("target_lang", [""])[0].upper())
                entries = glossary.dictionaries.get(pair)
                if entries is None:
                    raise Reply(404, {"message": "Dictionary not found"})
                tsv = "\n".join(f"{s}\t{t}" for s, t in entries.items())
                return {
                    "dictionaries": [
                        {
                            "source_lang": pair[0].lower(),
                            "target_lang": pair[1].lower(),
                            "entries": tsv,
                            "entries_format": "tsv",
                        }
                    ]
                }
            if not match.group(2) and method == "GET":
                return glossary.info()
            if not match.group(2) and method == "DELETE":
                with self._lock:
                    del self.glossaries[glossary.glossary_id]
                raise Reply(204)
        raise Reply(404, {"message": f"Not found: {method} {path}"})

    def _translate(self, body: Any) -> Any:
        if not isinstance(body, dict):
            raise Reply(400, {"message": "Invalid request body"})
        texts = body.get("text")
        if isinstance(texts, str):
            texts = [texts]
        if not texts or not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise Reply(400, {"message": "Parameter 'text' not specified."})
        if len(texts) > self.max_texts:
            raise Reply(413, {"message": f"Too many texts: at most {self.max_texts} per request"})
        target = str(body.get("target_lang", "")).upper()
        if target not in TARGETS:
            raise Reply(400, {"message": "Value for 'target_lang' not supported."})
        source = str(body["source_lang"]).upper() if body.get("source_lang") else None
        if source is not None and source not in SOURCES:
            raise Reply(400, {"message": "Value for 'source_lang' not supported."})
        formality = body.get("formality")
        if formality is not None:
            if formality not in FORMALITIES:
                raise Reply(400, {"message": "Value for 'formality' not supported."})
            if formality in ("less", "more") and target not in FORMALITY_TARGETS:
                raise Reply(400, {"message": "'formality' is not supported for given 'target_lang'."})
        model_type = body.get("model_type")
        if model_type is not None and model_type not in MODEL_TYPES:
            raise Reply(400, {"message": "Value for 'model_type' not supported."})
        entries: dict[str, str] = {}
        glossary_id = body.get("glossary_id")
        if glossary_id is not None:
            if source is None:
                raise Reply(400, {"message": "Use of a glossary requires the 'source_lang' parameter."})
            with self._lock:
                glossary = self.glossaries.get(str(glossary_id))
            if glossary is None:
                raise Reply(404, {"message": "Glossary not found"})
            found = glossary.dictionaries.get((source, target.split("-")[0]))
            if found is None:
                raise Reply(400, {"message": "No dictionary for this language pair in the glossary"})
            entries = found
        billed = [len(t) for t in texts]
        with self._lock:
            if self.character_limit is not None and self.character_count + sum(billed) > self.character_limit:
                raise Reply(456, {"message": "Quota Exceeded"})
            self.character_count += sum(billed)
        out = []
        for text, n in zip(texts, billed, strict=True):
            fake = text
            for term in sorted(entries, key=len, reverse=True):
                fake = fake.replace(term, entries[term])
            item: dict[str, Any] = {"detected_source_language": source or "EN", "text": f"[{target}] {fake}"}
            if body.get("show_billed_characters") in (True, "1", "true"):
                item["billed_characters"] = n
            if model_type is not None:
                item["model_type_used"] = model_type.removeprefix("prefer_")
            out.append(item)
        return {"translations": out}

    def _create_glossary(self, body: Any) -> Any:
        if not isinstance(body, dict) or not body.get("name") or not body.get("dictionaries"):
            raise Reply(400, {"message": "Missing 'name' or 'dictionaries'"})
        glossary = _Glossary(glossary_id=str(uuid.uuid4()), name=str(body["name"]))
        for d in body["dictionaries"]:
            pair = (str(d["source_lang"]).upper(), str(d["target_lang"]).upper())
            glossary.dictionaries[pair] = _parse_entries(
                str(d["entries"]), str(d.get("entries_format", "tsv"))
            )
        with self._lock:
            self.glossaries[glossary.glossary_id] = glossary
        raise Reply(201, glossary.info())


class _Server(LoopbackServer):
    service = "fake DeepL"
    fake: FakeDeepL


class _Handler(QuietHandler):
    server: _Server

    def _handle(self) -> None:
        fake = self.server.fake
        path, query = self.split_url()
        headers, raw = self.read_raw()
        body = self._parse_body(raw, headers.get("content-type", ""))

        size = len(self.requestline) + 2 + len(self.headers.as_bytes().replace(b"\n", b"\r\n")) + len(raw)

        def record(status: int | None) -> None:
            fake._record(RecordedRequest(self.command, path, query, headers, body, len(raw), status, size))

        fault = fake._faults.take(path)
        if fault in ("drop", "hang"):
            record(None)
            if fault == "hang":
                fake.stopping.wait(fake.hang_s)  # held until the server stops, or hang_s
            self.drop_connection()
            return

        def route() -> Any:
            if fault is not None:
                raise Reply(int(fault), {"message": f"injected fault {fault}"})
            if size > fake.max_request_bytes:
                raise Reply(413, {"message": "Request Entity Too Large"})
            return fake._route(self.command, path, query, headers, body)

        reply = answer_of(route, MALFORMED, lambda err: Reply(400, {"message": f"Bad request: {err}"}))
        record(reply.status)
        self.send_json(reply.status, reply.payload, empty=reply.payload is None)

    @staticmethod
    def _parse_body(raw: bytes, content_type: str) -> Any:
        if not raw:
            return None
        if content_type.startswith("application/json"):
            try:
                return json.loads(raw)
            except ValueError:
                return raw.decode("utf-8", "replace")
        if content_type.startswith("application/x-www-form-urlencoded"):
            form = urllib.parse.parse_qs(raw.decode("utf-8"), keep_blank_values=True)
            return {k: (v if k in ("text", "glossary_ids") else v[-1]) for k, v in form.items()}
        return raw.decode("utf-8", "replace")


@pytest.fixture
def deepl_server() -> Iterator[tuple[str, FakeDeepL]]:
    """A running fake DeepL server: ``(server_url, handle)``; stopped after the test."""
    with FakeDeepL() as server:
        yield server.url, server
