"""DeepL adapter for the translator port, on the official ``deepl`` client (``DeepLClient``).

What it sends (``deepl`` 1.32.0): ``POST {server}/v2/translate`` with a JSON body
``{"target_lang", "source_lang", "formality"?, "glossary_id"?, "model_type"?, "text": [...],
"show_billed_characters": true}`` and the header ``Authorization: DeepL-Auth-Key <key>``;
glossaries through ``/v3/glossaries`` (multilingual API).

Retries and time. The library's own retry loop (``deepl.http_client.max_network_retries``,
each try waiting at least ``min_connection_timeout``, 10 s: ~70 s before a hung server
fails) cannot be bounded in total, so it is switched off (0 retries) and each call is
retried here on what the library would retry (429, 5xx, dropped or timed-out connections),
with its backoff (1 s, x1.6, +-23 % jitter), at most ``max_network_retries`` times and
never past ``timeout_s`` from the call's start: each try gets ``min_connection_timeout`` =
the time left (the library waits at least ~1 s whatever it is set to). Both settings are
process-wide module attributes of the library (its documented way to set them), so calls
are serialised by a lock while they are set and in flight, and put back after each call.

- ``source_lang`` is always explicit (``EN``/``FR``/``ES``): short queries are where
  auto-detection goes wrong, and a glossary needs it anyway.
- English targets use a regional variant (``EN-US`` by default): DeepL rejects ``EN``.
- Requests are cut to ≤ 50 texts and ≤ ``max_request_bytes`` of JSON body (default 120 KiB:
  DeepL's "total request size" limit, 128 KiB, counts the request line and headers too,
  https://developers.deepl.com/docs/resources/usage-limits). A request DeepL still answers
  with 413 is a :class:`~tasks.common.translate.port.RequestTooLarge`, as is a text over the limit
  on its own (never sent): ``cached_translate_each`` halves the chunk, or records the text
  as refused.
- Empty texts are answered locally (``""``, 0 characters billed), never sent.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from typing import Any, Literal, TypeVar

import deepl
import deepl.http_client
import deepl.util
from deepl.api_data import MultilingualGlossaryDictionaryEntries

from irforge.errors import ConfigError
from tasks.common.translate.deepl_glossary import Glossaries, digest, glossary_digests, read_glossaries
from tasks.common.translate.port import (
    AuthorizationFailed,
    QuotaExceeded,
    RateLimited,
    RequestTooLarge,
    Translation,
    TranslationError,
    TranslatorUnavailable,
    check_pair,
    json_size,
    plan_batches,
)
from tasks.common.urls import public_url

Formality = Literal["prefer_less", "prefer_more"]
ModelType = Literal["quality_optimized", "prefer_quality_optimized", "latency_optimized"]
EnglishVariant = Literal["EN-US", "EN-GB"]
_T = TypeVar("_T")

MAX_TEXTS_PER_REQUEST = 50
DEEPL_REQUEST_LIMIT = 128 * 1024
"""DeepL's "total request size" (request line, headers and body)."""
MAX_REQUEST_BYTES = DEEPL_REQUEST_LIMIT - 2 * 1024
"""The largest ``max_request_bytes`` accepted: 2 KiB stay for the request line and headers."""
DEFAULT_REQUEST_BYTES = 120 * 1024
DEFAULT_TIMEOUT_S = 30.0
_BODY_MARGIN = 1024  # room for fields a future client version might add to the body
_BACKOFF_INITIAL_S, _BACKOFF_MULTIPLIER, _BACKOFF_JITTER = 1.0, 1.6, 0.23  # deepl.http_client._BackoffTimer
_CLIENT_SETTINGS = threading.RLock()  # deepl.http_client's module settings are process-wide

_SOURCE_CODES = {"en": "EN", "fr": "FR", "es": "ES"}
_FORMALITIES = ("prefer_less", "prefer_more")
_MODEL_TYPES = ("quality_optimized", "prefer_quality_optimized", "latency_optimized")
_ENV_KEY = "DEEPL_AUTH_KEY"
_ENV_URL = "DEEPL_SERVER_URL"


def _irforge_version() -> str:
    try:
        return metadata.version("irforge")
    except metadata.PackageNotFoundError:
        return "0"


def json_size_of(value: Any) -> int:
    """Bytes of ``value`` as JSON the way ``requests`` encodes a ``json=`` body (ASCII escapes)."""
    return len(json.dumps(value))


class DeepLTranslator:
    """The :class:`~tasks.common.translate.port.Translator` port on DeepL's API.

    ``glossaries`` maps a language pair (``("en", "fr")`` or ``"en-fr"``) to a CSV of medical
    terms (``source_term,target_term``). All pairs go into one multilingual glossary, created
    on first use (or reused when one with the same content-derived name exists) and kept for
    the life of this object; its per-pair content digests are part of :meth:`options`.

    ``max_network_retries`` and ``timeout_s`` bound each call (module docstring): at most
    that many retries, and never more than ``timeout_s`` seconds in all.
    """

    engine: str = "deepl"

    def __init__(
        self,
        auth_key: str,
        *,
        server_url: str | None = None,
        formality: Formality | None = None,
        glossaries: Glossaries | None = None,
        model_type: ModelType | None = None,
        english_variant: EnglishVariant = "EN-US",
        max_network_retries: int = 5,
        reuse_glossary: bool = True,
        glossary_name_prefix: str = "irforge-medical",
        max_texts_per_request: int = MAX_TEXTS_PER_REQUEST,
        max_request_bytes: int = DEFAULT_REQUEST_BYTES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        auth_key = (auth_key or "").strip()
        if not auth_key:
            raise AuthorizationFailed(
                f"no DeepL auth key: set {_ENV_KEY} (from your DeepL account's API keys page)"
            )
        if formality is not None and formality not in _FORMALITIES:
            raise ConfigError(
                f"DeepL formality {formality!r}: use one of {', '.join(_FORMALITIES)} (safe for every target)"
            )
        if model_type is not None and model_type not in _MODEL_TYPES:
            raise ConfigError(f"DeepL model_type {model_type!r}: use one of {', '.join(_MODEL_TYPES)}")
        if english_variant not in ("EN-US", "EN-GB"):
            raise ConfigError(f"english_variant {english_variant!r}: use EN-US or EN-GB (DeepL rejects EN)")
        if max_network_retries < 0:
            raise ConfigError("max_network_retries must be >= 0")
        if not 1 <= max_texts_per_request <= MAX_TEXTS_PER_REQUEST:
            raise ConfigError(f"max_texts_per_request must be between 1 and {MAX_TEXTS_PER_REQUEST}")
        if not 4 * _BODY_MARGIN <= max_request_bytes <= MAX_REQUEST_BYTES:
            raise ConfigError(
                f"max_request_bytes must be between {4 * _BODY_MARGIN} and {MAX_REQUEST_BYTES}: DeepL's "
                f"{DEEPL_REQUEST_LIMIT // 1024} KiB request limit counts the headers too"
            )
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}")

        self._secret = auth_key
        self._formality = formality
        self._model_type = model_type
        self._english_variant = english_variant
        self._retries = max_network_retries
        self._reuse_glossary = reuse_glossary
        self._max_texts = max_texts_per_request
        self._max_bytes = max_request_bytes
        self._timeout_s = timeout_s
        self._jitter = random.Random()

        self._glossary_entries = read_glossaries(glossaries)
        self._glossary_digests = glossary_digests(self._glossary_entries)
        self._glossary_name = (
            f"{glossary_name_prefix}-{digest(self._glossary_digests)[:16]}"
            if self._glossary_entries
            else None
        )
        self._glossary_id: str | None = None
        self._glossary_lock = threading.Lock()

        if server_url:
            self._server = {"kind": "custom", "url": public_url(server_url)}
        else:
            self._server = {"kind": "free" if deepl.util.auth_key_is_free_account(auth_key) else "pro"}
        self._where = self._server.get("url", f"DeepL {self._server['kind']} API")

        self._client = deepl.DeepLClient(auth_key, server_url=server_url or None)
        self._client.set_app_info("irforge", _irforge_version())

    @classmethod
    def from_env(cls, **kwargs: Any) -> DeepLTranslator:
        """Build from ``DEEPL_AUTH_KEY`` and optional ``DEEPL_SERVER_URL``; ``kwargs`` as in the constructor."""
        key = os.environ.get(_ENV_KEY, "").strip()
        if not key:
            raise AuthorizationFailed(
                f"{_ENV_KEY} is not set: export your DeepL API key (Free keys end in ':fx'), "
                f"or set {_ENV_URL} and a key for a local DeepL-compatible server"
            )
        url = os.environ.get(_ENV_URL, "").strip() or None
        return cls(key, server_url=url, **kwargs)

    @property
    def chunk_limits(self) -> tuple[int, int]:
        """(texts, bytes of JSON-encoded text) a chunk may have to go out as one request:
        what ``cached_translate_each`` should be given, so that each paid request is cached."""
        return self._max_texts, self._max_bytes - 2 * _BODY_MARGIN

    # -- the port ---------------------------------------------------------------------

    def options(self) -> dict[str, Any]:
        return {
            "server": dict(self._server),
            "english_variant": self._english_variant,
            "formality": self._formality,
            "model_type": self._model_type,
            "glossary": dict(sorted(self._glossary_digests.items())) or None,
        }

    def translate(self, texts: Sequence[str], source: str, target: str) -> list[Translation]:
        check_pair(source, target)
        texts = list(texts)
        out: list[Translation | None] = [
            Translation(text="", billed_characters=0, detected_source=None) if t == "" else None
            for t in texts
        ]
        todo = [i for i, t in enumerate(texts) if t != ""]
        if not todo:
            return [t for t in out if t is not None]

        fields: dict[str, Any] = {
            "target_lang": self._target_code(target),
            "source_lang": _SOURCE_CODES[source],
        }
        if self._formality is not None:
            fields["formality"] = self._formality
        glossary_id = self.glossary_id(source, target)
        if glossary_id is not None:
            fields["glossary_id"] = glossary_id
        if self._model_type is not None:
            fields["model_type"] = self._model_type

        # The body is JSON: the fields, "text": [...] and "show_billed_characters": true.
        overhead = json_size_of({**fields, "text": [], "show_billed_characters": True})
        budget = self._max_bytes - overhead - _BODY_MARGIN
        sizes = [json_size(texts[i]) for i in todo]
        for i, size in zip(todo, sizes, strict=True):
            if size + 2 > budget:
                which = f"text #{i}" if len(texts) > 1 else "the text"
                raise RequestTooLarge(
                    f"{which} is {size} bytes as JSON, over the {self._max_bytes} bytes a DeepL request may "
                    "have (deepl.max_request_bytes): split it into smaller passages before translating"
                )

        for batch in plan_batches(sizes, self._max_texts, budget):
            idx = todo[batch.start : batch.stop]
            for i, result in zip(idx, self._request([texts[i] for i in idx], fields), strict=True):
                out[i] = result
        return [t for t in out if t is not None]

    # -- extras -----------------------------------------------------------------------

    def glossary_id(self, source: str, target: str) -> str | None:
        """The id of this run's glossary if it has a dictionary for (source, target), else None.

        Creates the glossary on first need (one per translator object), or reuses one with
        the same content-derived name when ``reuse_glossary``.
        """
        if (source, target) not in self._glossary_entries:
            return None
        with self._glossary_lock:
            if self._glossary_id is None:
                self._glossary_id = self._ensure_glossary()
            return self._glossary_id

    def usage(self) -> tuple[int | None, int | None]:
        """(characters used, character limit) for this billing period, None where unknown."""
        usage = self._call(self._client.get_usage, "reading usage")
        return usage.character.count, usage.character.limit

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> DeepLTranslator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DeepLTranslator(options={self.options()!r})"

    # -- internals --------------------------------------------------------------------

    def _target_code(self, target: str) -> str:
        return self._english_variant if target == "en" else _SOURCE_CODES[target]

    def _request(self, batch: list[str], fields: Mapping[str, Any]) -> list[Translation]:
        doing = f"translating {len(batch)} text{'s' if len(batch) > 1 else ''} ({json_size_of(batch)} bytes)"
        raw = self._call(
            lambda: self._client.translate_text(
                batch,
                source_lang=fields["source_lang"],
                target_lang=fields["target_lang"],
                formality=fields.get("formality"),
                glossary=fields.get("glossary_id"),
                model_type=fields.get("model_type"),
            ),
            doing,
        )
        results = raw if isinstance(raw, list) else [raw]
        if len(results) != len(batch):
            raise TranslatorUnavailable(
                f"{self._where} returned {len(results)} translations for {len(batch)} texts: "
                "the server is not speaking DeepL's protocol; check DEEPL_SERVER_URL"
            )
        return [
            Translation(
                text=r.text,
                billed_characters=int(r.billed_characters),
                detected_source=(r.detected_source_lang or "").lower() or None,
            )
            for r in results
        ]

    def _ensure_glossary(self) -> str:
        assert self._glossary_name is not None
        dictionaries = [
            MultilingualGlossaryDictionaryEntries(_SOURCE_CODES[s], _SOURCE_CODES[t], entries)
            for (s, t), entries in sorted(self._glossary_entries.items())
        ]
        wanted = {(d.source_lang, d.target_lang, len(d.entries)) for d in dictionaries}
        name = self._glossary_name
        if self._reuse_glossary:
            for info in self._call(self._client.list_multilingual_glossaries, "listing glossaries"):
                have = {(d.source_lang, d.target_lang, d.entry_count) for d in info.dictionaries}
                if info.name == name and have == wanted:
                    return info.glossary_id
        created = self._call(
            lambda: self._client.create_multilingual_glossary(name, dictionaries), "creating the glossary"
        )
        return created.glossary_id

    def _scrub(self, text: str) -> str:
        one_line = " ".join(text.split())
        one_line = one_line.replace(self._secret, "<auth key>")
        return one_line if len(one_line) <= 300 else one_line[:297] + "..."

    def _call(self, fn: Callable[[], _T], doing: str = "translating") -> _T:
        """Run one client call, retried (module docstring) within ``timeout_s``; map what still fails.

        The mapped error is raised outside the ``except`` block so that the library's
        exception is attached (as ``__cause__``) only when its text does not carry the key.
        """
        deadline = time.monotonic() + self._timeout_s
        retries = 0
        while True:
            with _CLIENT_SETTINGS:
                saved = deepl.http_client.max_network_retries, deepl.http_client.min_connection_timeout
                deepl.http_client.max_network_retries = 0
                deepl.http_client.min_connection_timeout = max(deadline - time.monotonic(), 0.01)
                try:
                    return fn()
                except deepl.DeepLException as exc:
                    failure = exc
                finally:  # the library's settings are process-wide: leave them as found
                    deepl.http_client.max_network_retries, deepl.http_client.min_connection_timeout = saved
            retryable = (
                failure.should_retry
                or isinstance(failure, deepl.TooManyRequestsException)
                or (failure.http_status_code is not None and failure.http_status_code >= 500)
            )
            delay = _BACKOFF_INITIAL_S * _BACKOFF_MULTIPLIER**retries
            delay *= 1 + _BACKOFF_JITTER * self._jitter.uniform(-1, 1)
            out_of_time = time.monotonic() + delay >= deadline
            if not retryable or retries >= self._retries or out_of_time:
                raise self._map_error(failure, doing, retries, out_of_time and retryable)
            time.sleep(delay)
            retries += 1

    def _map_error(
        self, exc: deepl.DeepLException, doing: str, tried: int, out_of_time: bool
    ) -> TranslationError:
        retries = f"{tried} retr{'y' if tried == 1 else 'ies'}"
        if out_of_time:
            retries += f" (timeout_s {self._timeout_s:g} s: no time for another)"
        status = exc.http_status_code
        detail = self._scrub(str(exc))
        err: TranslationError
        if isinstance(exc, deepl.QuotaExceededException):
            err = QuotaExceeded(
                f"DeepL character quota for this billing period is used up (HTTP 456) while {doing}: "
                "rerun after it resets or raise the account's limit; results already paid for stay cached"
            )
        elif isinstance(exc, deepl.AuthorizationException):
            err = AuthorizationFailed(
                f"DeepL rejected the auth key (HTTP 403) at {self._where}: check {_ENV_KEY}; "
                f"Free keys end in ':fx' and need no {_ENV_URL}"
            )
        elif isinstance(exc, deepl.TooManyRequestsException):
            err = RateLimited(
                f"DeepL still answered 429 Too Many Requests after {retries} while {doing}: "
                "run fewer translation jobs at once or raise max_network_retries, then rerun"
            )
        elif isinstance(exc, deepl.ConnectionException):
            err = TranslatorUnavailable(
                f"cannot reach {self._where} after {retries} while {doing} ({detail}): "
                f"check the network and {_ENV_URL}, then rerun"
            )
        elif status == 413:
            err = RequestTooLarge(
                f"{self._where} refused the request as too large (HTTP 413) while {doing}: "
                "lower deepl.max_request_bytes, or split the text into smaller passages"
            )
        elif status is not None and status >= 500:
            err = TranslatorUnavailable(
                f"{self._where} kept failing with HTTP {status} after {retries} while {doing}: "
                "the service is having trouble; rerun later"
            )
        else:
            where = f"HTTP {status}: " if status is not None else ""
            err = TranslationError(
                f"DeepL refused the request while {doing} ({where}{detail}): check the translation config"
            )
        link: BaseException | None = exc
        while link is not None:  # never chain an exception whose text carries the key
            if self._secret in str(link) or self._secret in repr(link):
                break
            link = link.__cause__ or link.__context__
        else:
            err.__cause__ = exc
        err.__suppress_context__ = True
        return err
