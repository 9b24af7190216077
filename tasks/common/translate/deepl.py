"""DeepL adapter for the translator port, on the official ``deepl`` client (``DeepLClient``).

What it sends (``deepl`` 1.32.0): ``POST {server}/v2/translate`` with a JSON body
``{"target_lang", "source_lang", "formality"?, "glossary_id"?, "model_type"?, "text": [...],
"show_billed_characters": true}`` and the header ``Authorization: DeepL-Auth-Key <key>``;
glossaries through ``/v3/glossaries`` (multilingual API).

Sizes, retries, time limits and error messages: :mod:`tasks.common.translate.deepl_requests`.

- ``source_lang`` is always explicit (``EN``/``FR``/``ES``): short queries are where
  auto-detection goes wrong, and a glossary needs it anyway.
- English targets use a regional variant (``EN-US`` by default): DeepL rejects ``EN``.
- A request DeepL answers with 413 is a :class:`~tasks.common.translate.port.RequestTooLarge`,
  as is a text over ``max_request_bytes`` on its own (never sent): ``cached_translate_each``
  halves the chunk, or records the text as refused.
- Empty texts are answered locally (``""``, 0 characters billed), never sent.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any, Literal

import deepl
import deepl.util
from deepl.api_data import MultilingualGlossaryDictionaryEntries

from irforge.errors import ConfigError
from tasks.common.translate.deepl_glossary import Glossaries, digest, glossary_digests, read_glossaries
from tasks.common.translate.deepl_requests import (
    BODY_MARGIN,
    DEEPL_REQUEST_LIMIT,
    DEFAULT_REQUEST_BYTES,
    DEFAULT_TIMEOUT_S,
    ENV_KEY,
    ENV_URL,
    MAX_REQUEST_BYTES,
    MAX_TEXTS_PER_REQUEST,
    Caller,
    json_size_of,
    request_batches,
)
from tasks.common.translate.port import (
    AuthorizationFailed,
    Translation,
    TranslatorUnavailable,
    check_pair,
)
from tasks.common.urls import public_url

Formality = Literal["prefer_less", "prefer_more"]
ModelType = Literal["quality_optimized", "prefer_quality_optimized", "latency_optimized"]
EnglishVariant = Literal["EN-US", "EN-GB"]

_SOURCE_CODES = {"en": "EN", "fr": "FR", "es": "ES"}
_FORMALITIES = ("prefer_less", "prefer_more")
_MODEL_TYPES = ("quality_optimized", "prefer_quality_optimized", "latency_optimized")


def _irforge_version() -> str:
    try:
        return metadata.version("irforge")
    except metadata.PackageNotFoundError:
        return "0"


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
                f"no DeepL auth key: set {ENV_KEY} (from your DeepL account's API keys page)"
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
        if not 4 * BODY_MARGIN <= max_request_bytes <= MAX_REQUEST_BYTES:
            raise ConfigError(
                f"max_request_bytes must be between {4 * BODY_MARGIN} and {MAX_REQUEST_BYTES}: DeepL's "
                f"{DEEPL_REQUEST_LIMIT // 1024} KiB request limit counts the headers too"
            )
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}")

        self._formality = formality
        self._model_type = model_type
        self._english_variant = english_variant
        self._reuse_glossary = reuse_glossary
        self._max_texts = max_texts_per_request
        self._max_bytes = max_request_bytes

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
        self._call = Caller(self._where, auth_key, max_network_retries, timeout_s)

        self._client = deepl.DeepLClient(auth_key, server_url=server_url or None)
        self._client.set_app_info("irforge", _irforge_version())

    @classmethod
    def from_env(cls, **kwargs: Any) -> DeepLTranslator:
        """Build from ``DEEPL_AUTH_KEY`` and optional ``DEEPL_SERVER_URL``; ``kwargs`` as in the constructor."""
        key = os.environ.get(ENV_KEY, "").strip()
        if not key:
            raise AuthorizationFailed(
                f"{ENV_KEY} is not set: export your DeepL API key (Free keys end in ':fx'), "
                f"or set {ENV_URL} and a key for a local DeepL-compatible server"
            )
        url = os.environ.get(ENV_URL, "").strip() or None
        return cls(key, server_url=url, **kwargs)

    @property
    def chunk_limits(self) -> tuple[int, int]:
        """(texts, bytes of JSON-encoded text) a chunk may have to go out as one request:
        what ``cached_translate_each`` should be given, so that each paid request is cached."""
        return self._max_texts, self._max_bytes - 2 * BODY_MARGIN

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

        for idx in request_batches(texts, todo, fields, self._max_texts, self._max_bytes):
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
