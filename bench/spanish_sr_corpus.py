"""The synthetic Spanish corpus of ``bench/bench_spanish_sr_retrieval.py`` (its module
docstring says how it is drawn from the real CT-EBM-SP records) and the random-vector
Encoder it searches with."""

from __future__ import annotations

import random
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench import common
from tasks.common.embed.port import F32, Kind, ProgressFn, normalise_rows

DATA = common.REPO / "data" / "spanish_sr" / "ct-ebm-sp"
DIMS = 384


class RandomUnitEncoder:
    """The Encoder port returning deterministic random unit vectors (seeded by the texts):
    retrieval timing without a model."""

    name = "random-unit-vectors (bench only)"
    model_id = "random"
    revision = None
    dims = DIMS

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def encode(self, texts: Sequence[str], *, kind: Kind, on_batch: ProgressFn | None = None) -> F32:
        digest = 0
        for text in texts:
            digest = zlib.crc32(text.encode(), digest)
        rng = np.random.default_rng([self.seed, kind == "query", digest, len(texts)])
        out = np.empty((len(texts), DIMS), dtype=np.float32)
        for at in range(0, len(texts), 8192):  # in blocks, as a model's batches: no corpus-sized float64
            block = rng.standard_normal((min(8192, len(texts) - at), DIMS), dtype=np.float32)
            out[at : at + len(block)] = normalise_rows(block, source=self.name)
        return out

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "dims": DIMS, "seed": self.seed}


def read_real() -> list[tuple[str, str]]:
    """(title, abstract) of each real record: first non-blank line, then the others."""
    out = []
    for path in sorted(DATA.glob("*.txt")):
        lines = [s for line in path.read_text(encoding="utf-8").splitlines() if (s := line.strip())]
        if len(lines) > 1:
            out.append((lines[0], " ".join(lines[1:])))
    return out


def tail_word(i: int) -> str:
    """A made-up rare word (letters only): the Zipf tail a real corpus has."""
    out = "zq"
    while True:
        i, r = divmod(i, 26)
        out += chr(97 + r)
        if not i:
            return out


def synthesise(n: int, queries: int, seed: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(corpus ``(record_id, abstract)``, questions ``(record_id, title)``); module docstring."""
    real = read_real()
    words = [a.split() for _, a in real]
    pool = np.array([w for ws in words for w in ws], dtype=object)
    title_pool = [w for t, _ in real for w in t.split()]
    rng = np.random.default_rng(seed)
    template = rng.integers(0, len(real), size=n)
    lengths = np.maximum(
        20, (np.array([len(words[t]) for t in template]) * rng.lognormal(0, 0.3, n)).astype(int)
    )
    cited = sorted(rng.choice(n, size=min(queries, n), replace=False).tolist())
    wanted, kept = set(cited), {}
    owns = [np.array(ws, dtype=object) for ws in words]
    corpus = []
    for i in range(n):
        own, size = owns[template[i]], lengths[i]
        source = rng.random(size)
        drawn = np.where(
            source < 0.6, own[rng.integers(0, len(own), size)], pool[rng.integers(0, len(pool), size)]
        )
        rare = np.flatnonzero(source >= 0.95)
        drawn[rare] = [tail_word(int(z)) for z in rng.zipf(1.3, size=len(rare)) % 3_000_000]
        corpus.append((f"SYN{i:07d}", " ".join(drawn)))
        if i in wanted:
            kept[i] = drawn
    pick, questions = random.Random(seed), []
    for i in cited:
        title = real[template[i]][0].split()
        size = max(3, round(len(title) * pick.uniform(0.7, 1.3)))
        draw = [pick.choices((title, list(kept[i]), title_pool), (0.6, 0.2, 0.2))[0] for _ in range(size)]
        text = " ".join(pick.choice(src) for src in draw)
        questions.append((corpus[i][0], text[:1].upper() + text[1:]))
    return corpus, questions
