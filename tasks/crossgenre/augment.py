"""Augmented headlines: the reranker's oversampled positives (paper 003 §3.2).

The paper generates m extra positives per headline by word insertion and substitution
(half each), changing at most 10 tokens and at most 30 % of the headline's tokens. Here
with nlpaug (https://github.com/makcedward/nlpaug, 1.1.11), two engines:

- ``embeddings`` (offline default): ``nlpaug.augmenter.word.WordEmbsAug`` on word vectors
  built from the corpus (:mod:`tasks.crossgenre.word_vectors`). nlpaug's own vector readers
  need gensim, which is not installed; the augmenter accepts any model object with
  ``get_vocab()`` / ``predict(word)`` (``nlpaug/augmenter/word/word_embs.py``), so
  :class:`CorpusVectors` gives it ours. Substitution draws among the ``top_k`` nearest
  words; insertion, which in WordEmbsAug draws from ``get_vocab()``, draws here from the
  neighbours of the headline's own words (a random vocabulary word would not be
  "distributionally likely").
- ``contextual`` (production): ``nlpaug.augmenter.word.ContextualWordEmbsAug`` with a
  masked language model by hub id (the paper's Bio+Clinical BERT); it must be in the local
  Hugging Face cache or reachable, else one :class:`IrforgeError` line says so.

Limits: tokens are the headline's whitespace-separated words (punctuation stays attached,
so a headline is rebuilt exactly); each augmentation changes ``min(aug_max, ⌊aug_p ·
tokens⌋)`` of them — the floor keeps it within 30 % (nlpaug's own count rounds up). A
headline under ``1 / aug_p`` tokens is left alone. A draw equal to the headline or to an
earlier kept one (compared case-insensitively, token by token) is not kept; the augmenter
draws again, up to ``attempts`` draws per wanted headline, and :class:`ActionReport` says
how many draws were such duplicates and how many headlines could not be made.

Seeds: nlpaug's word augmenters draw through ``Augmenter.sample`` and ``Augmenter.prob``
(``nlpaug/base_augmenter.py``), which use Python's ``random`` and numpy's global generator.
Ours override both with generators of their own (:class:`_LocalDraws`), reseeded for each
headline from the config's seed and the query id: a query's augmentations depend neither on
which queries share its chunk nor on another stage drawing in a thread of the same process
(issue 30 §4). The contextual engine also samples with torch's global generator; it is
seeded per headline under a process-wide lock.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import math
import random
import string
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field

from irforge.config import StrictModel
from irforge.errors import IrforgeError
from irforge.fingerprint import Transport
from tasks.crossgenre.preprocess import stop_words
from tasks.crossgenre.word_vectors import WordVectors

Action = Literal["insert", "substitute"]
ACTIONS: tuple[Action, ...] = ("insert", "substitute")
_PUNCTUATION = string.punctuation + "“”‘’«»…–—"


class AugmentConfig(StrictModel):
    engine: Literal["embeddings", "contextual"] = Field(
        "embeddings", description="embeddings: corpus word vectors (offline); contextual: a masked LM."
    )
    model: str = Field(
        "emilyalsentzer/Bio_ClinicalBERT", description="contextual engine: hub id or local path."
    )
    model_type: Literal["bert", "roberta", "distilbert"] = "bert"
    device: Transport[str] = Field("cpu", description="contextual engine: cpu, cuda, ...")
    aug_max: int = Field(10, ge=1, description="At most this many changed tokens per headline.")
    aug_p: float = Field(0.3, gt=0, le=1, description="At most this share of a headline's tokens changed.")
    top_k: int = Field(10, ge=1, description="Candidates drawn from for one substitution or insertion.")
    attempts: int = Field(5, ge=1, description="Draws per wanted headline before giving up.")
    dims: int = Field(100, ge=2, description="embeddings engine: vector dimensions.")
    window: int = Field(4, ge=1, description="embeddings engine: co-occurrence window (tokens each side).")
    min_count: int = Field(3, ge=1, description="embeddings engine: a word's minimum corpus count.")
    max_words: int = Field(20_000, ge=3, description="embeddings engine: vocabulary size.")
    max_documents: int = Field(
        50_000, ge=1, description="embeddings engine: distractor abstracts sampled (seeded) to learn vectors."
    )


def change_limit(headline: str, config: AugmentConfig) -> int:
    """How many tokens one augmentation of ``headline`` changes: ``min(aug_max, ⌊aug_p · n⌋)``."""
    return min(config.aug_max, math.floor(config.aug_p * len(headline.split()) + 1e-9))


def split_counts(m: int) -> dict[Action, int]:
    """Half insertions, half substitutions (an odd one more insertion): 4 → 2 + 2, 5 → 3 + 2."""
    return {"insert": (m + 1) // 2, "substitute": m // 2}


def _core(token: str) -> tuple[str, str, str]:
    """A token as (leading punctuation, word, trailing punctuation)."""
    word = token.strip(_PUNCTUATION)
    if not word:
        return token, "", ""
    start = token.index(word)
    return token[:start], word, token[start + len(word) :]


class _Vocabulary(list[str]):
    """What :class:`CorpusVectors` answers to ``get_vocab()``. ``in`` asks whether a headline
    token (punctuation stripped, any case) has a vector (WordEmbsAug's choice of words to
    substitute); as a list (what its insertion samples from: ``Augmenter.sample`` wants a
    ``list``) it is the current headline's insertion pool."""

    def __init__(self, vectors: WordVectors) -> None:
        super().__init__()
        self.vectors = vectors

    def __contains__(self, token: object) -> bool:
        return isinstance(token, str) and _core(token)[1].lower() in self.vectors.index


@functools.cache
def corpus_vectors_class() -> type[Any]:
    """:class:`CorpusVectors`, defined on first use: nlpaug imports transformers and torch
    (seconds), which planning a run never needs."""
    from nlpaug.model.word_embs import WordEmbeddings  # type: ignore[import-untyped]  # noqa: PLC0415

    return type("CorpusVectors", (_CorpusVectors, WordEmbeddings), {})


class _CorpusVectors:
    """Our word vectors as the model nlpaug's ``WordEmbsAug`` consults (mixed into nlpaug's
    ``WordEmbeddings`` by :func:`corpus_vectors_class`)."""

    top_k: int

    def __init__(self, vectors: WordVectors, top_k: int) -> None:
        super().__init__(top_k=top_k, skip_check=True)  # type: ignore[call-arg]
        self.vectors = vectors
        self.vocab = _Vocabulary(vectors)
        self.vocab_size = len(vectors.words)

    def get_vocab(self) -> _Vocabulary:
        return self.vocab

    def focus(self, headline: str) -> None:
        """Make the insertion pool the neighbours of ``headline``'s words (first seen first),
        less the headline's own words: inserting one again ("liver liver") adds no variation."""
        pool: dict[str, None] = {}
        words = [_core(token)[1].lower() for token in headline.split()]
        own = set(words)
        for word in words:
            if word in self.vectors.index:
                pool.update(dict.fromkeys(self.vectors.neighbours(word, self.top_k)))
        self.vocab[:] = [w for w in pool if w not in own]

    def predict(self, word: str, n: int = 1) -> list[str]:
        """The ``top_k`` nearest words to a headline token, in its case and punctuation."""
        before, core, after = _core(word)
        found = self.vectors.neighbours(core.lower(), self.top_k)
        if core.isupper() and len(core) > 1:
            found = [w.upper() for w in found]
        elif core[:1].isupper():
            found = [w[:1].upper() + w[1:] for w in found]
        return [f"{before}{w}{after}" for w in found]


@dataclass(frozen=True)
class ActionReport:
    """One headline, one action: what was asked, made, and lost to duplicates."""

    action: Action
    wanted: int
    kept: int
    duplicates: int  # draws equal to the headline or to a kept augmentation
    limit: int  # tokens changed per augmentation (0: the headline is too short)


@dataclass(frozen=True)
class Augmented:
    texts: tuple[tuple[Action, str], ...]  # kept augmentations: insertions first
    reports: tuple[ActionReport, ...]


def _key(text: str) -> tuple[str, ...]:
    return tuple(text.lower().split())


def query_seed(seed: int, query_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{query_id}".encode()).digest()[:8], "big")


class _LocalDraws:
    """nlpaug's two sources of chance, ``sample`` and ``prob`` (classmethods on Python's and
    numpy's global generators in ``nlpaug/base_augmenter.py``), on generators of this
    augmenter's own. Same streams as the globals seeded alike: ``random.Random(s)`` is
    ``random.seed(s)``, ``RandomState(s)`` is ``np.random.seed(s)``."""

    rng: random.Random
    np_rng: np.random.RandomState

    def reseed(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.np_rng = np.random.RandomState(seed % 2**32)

    def prob(self) -> float:
        return float(self.np_rng.random_sample())

    def sample(self, x: Any, num: int | None = None) -> Any:
        if isinstance(x, list):
            return self.rng.sample(x, num or 0)
        if isinstance(x, int):
            return self.np_rng.randint(1, x - 1)
        return None  # nlpaug's own answer for any other input


@functools.cache
def _local(augmenter: type[Any]) -> type[Any]:
    """``augmenter`` (an nlpaug class) drawing from :class:`_LocalDraws`."""
    return type(f"Local{augmenter.__name__}", (_LocalDraws, augmenter), {})


_TORCH_SEED = threading.Lock()  # torch's generator is process-wide: the contextual engine holds this


@contextlib.contextmanager
def _seeded(augmenters: dict[Action, Any], seed: int, with_torch: bool) -> Iterator[None]:
    for augmenter in augmenters.values():
        augmenter.reseed(seed)
    if not with_torch:
        yield
        return
    with _TORCH_SEED:  # the contextual engine samples with torch; imported only then (seconds)
        importlib.import_module("torch").manual_seed(seed)
        yield


class HeadlineAugmenter:
    """nlpaug's insertion and substitution augmenters, configured once, used per headline."""

    def __init__(self, config: AugmentConfig, vectors: WordVectors | None) -> None:
        self.config = config
        self._lock = (
            threading.Lock()
        )  # one headline at a time: the draws and the insertion pool are this object's
        self.model: Any = None
        if config.engine == "embeddings":
            self.model = None if vectors is None else corpus_vectors_class()(vectors, config.top_k)
            self.augmenters = {a: self._embeddings(a) for a in ACTIONS} if self.model else {}
        else:
            self.augmenters = {a: self._contextual(a) for a in ACTIONS}

    def _embeddings(self, action: Action) -> Any:
        from nlpaug.augmenter.word import WordEmbsAug  # type: ignore[import-untyped]  # noqa: PLC0415

        return _local(WordEmbsAug)(
            model_type="word2vec", model=self.model, action=action, aug_p=self.config.aug_p,
            aug_max=self.config.aug_max, top_k=self.config.top_k, tokenizer=str.split,
            reverse_tokenizer=" ".join,
        )  # fmt: skip

    def _contextual(self, action: Action) -> Any:
        from nlpaug.augmenter.word import ContextualWordEmbsAug  # noqa: PLC0415

        c = self.config
        try:
            return _local(ContextualWordEmbsAug)(
                model_path=c.model, model_type=c.model_type, action=action, aug_p=c.aug_p,
                aug_max=c.aug_max, top_k=c.top_k, device=c.device, stopwords=sorted(stop_words()),
            )  # fmt: skip
        except Exception as err:
            first = (str(err).strip().splitlines() or [""])[0][:200]
            raise IrforgeError(
                f"pairs.augment: cannot load the contextual model {c.model!r} ({type(err).__name__}: {first}); "
                "put it in the Hugging Face cache, give a local path, or use engine: embeddings"
            ) from None

    def augment(self, headline: str, m: int, seed: int) -> Augmented:
        """Up to ``m`` distinct augmentations of ``headline`` (see the module's rules)."""
        text = " ".join(headline.split())
        limit = change_limit(text, self.config)
        kept: list[tuple[Action, str]] = []
        reports = []
        seen = {_key(text)}
        with self._lock, _seeded(self.augmenters, seed, self.config.engine == "contextual"):
            for action, wanted in split_counts(m).items():
                made, duplicates = self._draw(action, text, wanted, limit, seen) if wanted else ([], 0)
                kept += [(action, t) for t in made]
                reports.append(ActionReport(action, wanted, len(made), duplicates, limit))
        return Augmented(tuple(kept), tuple(reports))

    def _draw(
        self, action: Action, text: str, wanted: int, limit: int, seen: set[tuple[str, ...]]
    ) -> tuple[list[str], int]:
        augmenter = self.augmenters.get(action)
        if augmenter is None or limit < 1 or not self._possible(action, text):
            return [], 0
        augmenter.aug_min, augmenter.aug_max = 1, limit  # nlpaug: min(max(⌈p·n⌉, 1), limit) = limit
        made: list[str] = []
        duplicates = 0
        for _ in range(wanted * self.config.attempts):
            drawn = augmenter.augment(text)
            candidate = drawn[0] if isinstance(drawn, list) and drawn else text
            if _key(candidate) in seen:
                duplicates += 1
                continue
            seen.add(_key(candidate))
            made.append(candidate)
            if len(made) == wanted:
                break
        return made, duplicates

    def _possible(self, action: Action, text: str) -> bool:
        """Whether the embeddings engine has something to draw (else nlpaug would fail or idle)."""
        if self.model is None:
            return True
        if action == "insert":
            self.model.focus(text)
            return len(self.model.vocab) > 0
        return any(t in self.model.vocab for t in text.split())  # stop words have no vector


__all__ = [
    "ACTIONS",
    "ActionReport",
    "AugmentConfig",
    "Augmented",
    "HeadlineAugmenter",
    "change_limit",
    "corpus_vectors_class",
    "query_seed",
    "split_counts",
]
