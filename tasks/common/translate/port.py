"""The translator port: what a query-translation stage needs from a machine translator.

A stage receives a :class:`Translator` (DeepL in production, an LLM or a local server that
speaks DeepL's protocol elsewhere) and calls it through :func:`cached_translate`,
which puts every paid request behind a :class:`TranslationCache` (a crash or a
rerun never pays twice for the same request).

Cache key = sha256 of the canonical JSON of (text, source, target, engine, options), where
``options`` is everything that changes the output (formality, glossary digest, model type,
server kind) and never a credential. Results are committed chunk by chunk as they arrive, so
a crash part-way through a long list only repeats the chunk that was in flight. A chunk the
engine refuses as too large (:class:`RequestTooLarge`, DeepL's HTTP 413) is halved until it
passes; a text too large on its own becomes a :class:`Refused` outcome (never cached) that
the stage records as an excluded row.

Workers sharing one cache file (a process pool, Ray workers) translate a text once between them:
:func:`cached_translate_each` claims its misses as a batch before sending and waits for those
another worker claimed, counting them as hits (``irforge/sqlite_cache.py``, ``SqliteCache.fill``);
a failed chunk's claims are released, and a dead worker's lapse with their lease.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, runtime_checkable

from irforge.errors import IrforgeError
from irforge.fingerprint import canonical_json
from irforge.sqlite_cache import SqliteCache

LANGUAGES: tuple[str, ...] = ("en", "fr", "es")
"""The ISO 639-1 codes of the CURE query languages; ports take and return these."""

DEFAULT_BATCH_TEXTS = 50
DEFAULT_BATCH_BYTES = 120 * 1024
"""Default unit of persisted work in :func:`cached_translate`: at most 50 texts and 120 KiB
of JSON-encoded text, a little under DeepL's per-request limits (50 texts, 128 KiB body)
so that one chunk is one paid request."""


@dataclass(frozen=True)
class Translation:
    text: str
    billed_characters: int
    detected_source: str | None


class TranslationError(IrforgeError):
    """A translation request failed; the message says what to do. Never contains a key."""


class QuotaExceeded(TranslationError):
    """The account's character quota for the billing period is used up (DeepL: HTTP 456)."""


class AuthorizationFailed(TranslationError):
    """The service rejected the credentials, or none were given (DeepL: HTTP 403)."""


class RateLimited(TranslationError):
    """Still answered 'too many requests' (HTTP 429) after the client's retries."""


class TranslatorUnavailable(TranslationError):
    """The service could not be reached, or kept failing (5xx) after the client's retries."""


class RequestTooLarge(TranslationError):
    """The engine refused a request as too large (DeepL: HTTP 413), or the adapter would not
    send it (one text over its ``max_request_bytes``): a smaller request may pass."""


@dataclass(frozen=True)
class Refused:
    """A text the engine cannot take even alone; ``reason`` is the excluded row's reason."""

    reason: str
    detail: str


@runtime_checkable
class Translator(Protocol):
    """A machine translator between the CURE query languages.

    ``engine`` names the backend (``"deepl"``); ``options()`` returns everything besides the
    text and the language pair that changes the output, JSON-serialisable, without secrets.
    ``translate`` returns one :class:`Translation` per input text, in order.
    """

    engine: str

    def options(self) -> dict[str, Any]: ...

    def translate(self, texts: Sequence[str], source: str, target: str) -> list[Translation]: ...


def check_pair(source: str, target: str) -> None:
    """Raise :class:`TranslationError` unless source and target are distinct CURE languages."""
    for role, lang in (("source", source), ("target", target)):
        if lang not in LANGUAGES:
            raise TranslationError(
                f"unsupported {role} language {lang!r}: use one of {', '.join(LANGUAGES)} (ISO 639-1)"
            )
    if source == target:
        raise TranslationError(
            f"source and target are both {source!r}: drop this pair from the config, there is nothing to translate"
        )


def json_size(text: str) -> int:
    """Bytes ``text`` takes as a JSON string the way ``requests`` encodes it (ASCII escapes)."""
    return len(json.dumps(text))


def plan_batches(sizes: Sequence[int], max_items: int, max_bytes: int) -> list[range]:
    """Cut ``len(sizes)`` items, in order, into ranges of at most ``max_items`` items whose
    sizes (plus 2 bytes of separator each) add up to at most ``max_bytes``.

    An item larger than ``max_bytes`` on its own gets a range of its own; the caller decides
    whether that is an error.
    """
    if max_items < 1 or max_bytes < 1:
        raise ValueError("max_items and max_bytes must be positive")
    batches: list[range] = []
    start, used = 0, 0
    for i, size in enumerate(sizes):
        cost = size + 2
        if i > start and (i - start >= max_items or used + cost > max_bytes):
            batches.append(range(start, i))
            start, used = i, 0
        used += cost
    if start < len(sizes):
        batches.append(range(start, len(sizes)))
    return batches


def cache_key(text: str, source: str, target: str, engine: str, options: Mapping[str, Any]) -> str:
    material = {"text": text, "source": source, "target": target, "engine": engine, "options": options}
    return hashlib.sha256(canonical_json(material).encode("utf-8")).hexdigest()


class TranslationCache(SqliteCache[Translation]):
    """Translations by request hash, in one SQLite file (WAL: one writer, many readers).

    ``put_many`` commits before it returns (``synchronous=FULL``), so a result that was
    paid for survives a crash of the process right after. The first result stored for a
    key is kept (a later ``put_many`` of the same key is ignored): reruns are stable.
    Safe to share between threads of one process; several processes may open the same file.
    """

    table = "translations"
    columns: ClassVar[Mapping[str, str]] = {
        "text": "TEXT NOT NULL",
        "billed_characters": "INTEGER NOT NULL",
        "detected_source": "TEXT",
    }
    what = "translation cache"
    error = TranslationError

    def _row(self, value: Translation) -> tuple[Any, ...]:
        return (value.text, value.billed_characters, value.detected_source)

    def _value(self, row: tuple[Any, ...]) -> Translation:
        text, billed, detected = row
        return Translation(text=text, billed_characters=billed, detected_source=detected)


@dataclass(frozen=True)
class CacheStats:
    """What one :func:`cached_translate` call did.

    ``hits``: input positions answered from the cache; ``misses``: the other positions
    (``hits + misses == len(texts)``); ``sent_characters``: code points of the distinct texts
    sent (a text repeated in the input is sent once); ``billed_characters``: what the engine
    billed for them; ``sent_texts``: how many distinct texts were translated; ``refused``:
    distinct texts refused as too large even alone (not counted as sent).
    """

    hits: int
    misses: int
    sent_characters: int
    billed_characters: int
    sent_texts: int = 0
    refused: int = 0

    def __add__(self, other: CacheStats) -> CacheStats:
        return CacheStats(
            self.hits + other.hits,
            self.misses + other.misses,
            self.sent_characters + other.sent_characters,
            self.billed_characters + other.billed_characters,
            self.sent_texts + other.sent_texts,
            self.refused + other.refused,
        )


def cached_translate(
    translator: Translator, cache: TranslationCache, texts: Sequence[str], source: str, target: str
) -> tuple[list[Translation], CacheStats]:
    """:func:`cached_translate_each` (default batch limits) for callers that want every text
    translated: a text the engine refused (too large even alone) is a :class:`RequestTooLarge`
    naming its position, raised after every other text was translated and cached."""
    outcomes, stats = cached_translate_each(translator, cache, texts, source, target)
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, Refused):
            raise RequestTooLarge(f"text #{i}: {outcome.detail}")
    return [o for o in outcomes if isinstance(o, Translation)], stats


def cached_translate_each(
    translator: Translator,
    cache: TranslationCache,
    texts: Sequence[str],
    source: str,
    target: str,
    *,
    max_batch_texts: int = DEFAULT_BATCH_TEXTS,
    max_batch_bytes: int = DEFAULT_BATCH_BYTES,
) -> tuple[list[Translation | Refused], CacheStats]:
    """Translate ``texts``, paying only for those not in ``cache``; outcomes align with ``texts``.

    The misses are deduplicated (first occurrence order) and sent in chunks of at most
    ``max_batch_texts`` texts / ``max_batch_bytes`` bytes of JSON-encoded text (give the
    engine's per-request limits, so that one chunk is one paid request); each chunk's
    results are committed to the cache before the next chunk is sent. A chunk refused as
    :class:`RequestTooLarge` is halved and each half sent (recursively); a single text
    refused so is a :class:`Refused` (``too_large``) outcome and is not cached. Any other
    error propagates and the chunks before it stay cached, so a rerun resumes there. Misses
    are claimed first; those another worker claimed are waited for and count as hits.
    """
    check_pair(source, target)
    engine, options = translator.engine, translator.options()
    keys = [cache_key(t, source, target, engine, options) for t in texts]
    known: dict[str, Translation | Refused] = dict(cache.get_many(keys))

    pending: dict[str, str] = {}  # key -> text, first occurrence order
    for key, text in zip(keys, texts, strict=True):
        if key not in known:
            pending.setdefault(key, text)
    sent: list[str] = []  # keys this call sent
    billed = [0]

    def send(chunk_keys: list[str], chunk: list[str]) -> None:
        try:
            results = translator.translate(chunk, source, target)
        except RequestTooLarge as exc:
            if len(chunk) == 1:
                known[chunk_keys[0]] = Refused("too_large", str(exc))
                return
            half = len(chunk) // 2
            send(chunk_keys[:half], chunk[:half])
            send(chunk_keys[half:], chunk[half:])
            return
        if len(results) != len(chunk):
            raise TranslationError(
                f"{engine} returned {len(results)} translations for {len(chunk)} texts: "
                "the engine or its adapter is broken; report it, nothing was cached for this chunk"
            )
        fresh = dict(zip(chunk_keys, results, strict=True))
        cache.put_many(fresh)
        known.update(fresh)
        billed[0] += sum(r.billed_characters for r in results)

    def send_claimed(todo_keys: list[str]) -> None:
        todo_texts = [pending[k] for k in todo_keys]
        for batch in plan_batches([json_size(t) for t in todo_texts], max_batch_texts, max_batch_bytes):
            send(todo_keys[batch.start : batch.stop], todo_texts[batch.start : batch.stop])
            sent.extend(todo_keys[batch.start : batch.stop])

    known.update(cache.fill(list(pending), send_claimed))  # what other workers translated meanwhile
    done = [k for k in sent if isinstance(known[k], Translation)]
    hits = sum(1 for k in keys if k not in sent)
    stats = CacheStats(
        hits=hits,
        misses=len(texts) - hits,
        sent_characters=sum(len(pending[k]) for k in done),
        billed_characters=billed[0],
        sent_texts=len(done),
        refused=len(sent) - len(done),
    )
    return [known[k] for k in keys], stats
