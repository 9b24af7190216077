"""Augmented headlines (paper 003 §3.2) with nlpaug on word vectors learnt from a corpus.

The vectors come from a small corpus written so that the distributional neighbours are
known (two drugs that share every context, two organs that share every context); the
augmentations are checked against the paper's limits (at most 10 tokens, at most 30 % of
the headline), for distinctness, for the seed, and against the words the vectors allow.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from irforge.errors import IrforgeError
from tasks.crossgenre.augment import AugmentConfig, HeadlineAugmenter, change_limit, query_seed, split_counts
from tasks.crossgenre.word_vectors import WordVectors, build_vectors, read_word2vec, write_word2vec
from tests.crossgenre.collection import changed_tokens

DRUGS = ("aspirin", "ibuprofen")
ORGANS = ("liver", "kidney")


def _corpus() -> list[str]:
    """Drugs always near "tablets dose daily", organs near "damage biopsy tissue"; never both."""
    texts = []
    for i in range(30):
        drug, organ = DRUGS[i % 2], ORGANS[i % 2]
        texts.append(f"Patients swallowed {drug} tablets at a low dose daily for weeks.")
        texts.append(f"Surgeons found {organ} damage in the biopsy tissue samples.")
    return texts


@pytest.fixture(scope="module")
def vectors() -> WordVectors:
    built = build_vectors(_corpus(), dims=4, window=3, min_count=3, max_words=1000, seed=7)
    assert built is not None
    return built


def test_limits_follow_the_paper() -> None:
    config = AugmentConfig()
    # ⌊0.3 n⌋, at most 10: 3 tokens allow none, 4 allow one, 40 would allow 12.
    assert [change_limit(" ".join(["w"] * n), config) for n in (3, 4, 9, 10, 33, 40)] == [0, 1, 2, 3, 9, 10]
    assert change_limit("a  b\tc d", config) == 1  # whitespace runs are one separator
    assert split_counts(4) == {"insert": 2, "substitute": 2}  # the paper's (4, 10)
    assert split_counts(20) == {"insert": 10, "substitute": 10}  # and (20, 50)
    assert split_counts(5) == {"insert": 3, "substitute": 2}
    assert split_counts(0) == {"insert": 0, "substitute": 0}


def test_vectors_put_words_sharing_contexts_together(vectors: WordVectors) -> None:
    assert set(vectors.words) >= {*DRUGS, *ORGANS, "tablets", "biopsy"}
    assert not {"the", "at", "for", "in", "a"} & set(vectors.words)  # stop words have no vector
    assert vectors.neighbours("aspirin", 1) == ["ibuprofen"]
    assert vectors.neighbours("liver", 1) == ["kidney"]
    assert vectors.neighbours("unknown", 3) == []
    assert np.allclose(np.linalg.norm(vectors.vectors, axis=1), 1, atol=1e-5)
    again = build_vectors(_corpus(), dims=4, window=3, min_count=3, max_words=1000, seed=7)
    assert again is not None and again.words == vectors.words
    assert np.array_equal(again.vectors, vectors.vectors)  # seeded
    assert build_vectors(["one two"], dims=4, window=2, min_count=1, max_words=10, seed=1) is None


def test_word2vec_text_round_trip_and_bad_files(vectors: WordVectors, tmp_path: Path) -> None:
    path = tmp_path / "vectors.txt"
    write_word2vec(path, vectors)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0] == f"{len(vectors.words)} {vectors.dims}"
    assert lines[1].split(" ")[0] == vectors.words[0] and len(lines[1].split(" ")) == vectors.dims + 1
    back = read_word2vec(path)
    assert back.words == vectors.words
    assert np.allclose(back.vectors, vectors.vectors, atol=1e-5)
    assert back.neighbours("aspirin", 1) == ["ibuprofen"]

    lines[2] = lines[2].rsplit(" ", 1)[0]  # one value short
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(IrforgeError, match=r"vectors\.txt:3: 3 values, the header says 4"):
        read_word2vec(path)
    path.write_text("not a header\n", encoding="utf-8")
    with pytest.raises(IrforgeError, match="not a word2vec text file"):
        read_word2vec(path)


def test_augmentations_respect_the_limits_and_the_vectors(vectors: WordVectors) -> None:
    headline = "Daily aspirin tablets may protect the liver from damage, biopsy study finds"
    tokens = headline.split()
    limit = change_limit(headline, AugmentConfig())
    assert limit == 3  # 13 tokens
    made = HeadlineAugmenter(AugmentConfig(), vectors).augment(headline, 6, seed=1)
    assert [(r.action, r.wanted, r.kept, r.limit) for r in made.reports] == [
        ("insert", 3, 3, 3),
        ("substitute", 3, 3, 3),
    ]
    texts = [t for _a, t in made.texts]
    assert len({t.lower() for t in texts} | {headline.lower()}) == 7  # distinct, none the original
    for action, text in made.texts:
        assert 0 < changed_tokens(headline, text) <= min(10, 0.3 * len(tokens))
        if action == "substitute":
            after = text.split()
            assert len(after) == len(tokens)
            for old, new in zip(tokens, after, strict=True):
                if old != new:  # a vocabulary word replaced by one of its neighbours, in its case
                    core = old.strip(",").lower()
                    assert new.strip(",").lower() in vectors.neighbours(core, 10)
                    assert old.endswith(",") == new.endswith(",")
        else:
            assert len(text.split()) == len(tokens) + limit
            pool = {n for t in tokens for n in vectors.neighbours(t.strip(",").lower(), 10)}
            inserted = [w for w in text.split() if w not in tokens]
            assert inserted and set(inserted) <= pool


def test_seeded_and_leaves_the_global_generators_alone(vectors: WordVectors) -> None:
    augmenter = HeadlineAugmenter(AugmentConfig(), vectors)
    headline = "Ibuprofen tablets cut kidney damage in biopsy study of patients"
    random.seed(123)
    expected_next = random.random()
    random.seed(123)
    first = augmenter.augment(headline, 4, query_seed(42, "q1"))
    assert random.random() == expected_next  # nlpaug's draws did not move the caller's generator
    assert augmenter.augment(headline, 4, query_seed(42, "q1")) == first
    others = {augmenter.augment(headline, 4, query_seed(42, f"q{i}")).texts for i in range(2, 8)}
    assert len(others | {first.texts}) > 1  # the seed matters
    assert query_seed(42, "q1") != query_seed(43, "q1")


class _DrawingVectors(WordVectors):
    """Vectors whose look-ups also draw from the global generators, as another stage running
    in a thread of the same process may do at any moment of an augmentation."""

    def neighbours(self, word: str, k: int) -> list[str]:
        random.random()
        np.random.random()
        return super().neighbours(word, k)


def test_draws_ignore_other_users_of_the_global_generators(vectors: WordVectors) -> None:
    """Issue 30 §4: the same headline and seed give the same augmentations however much the
    process-wide generators are used meanwhile (pairs beside another stage in threads)."""
    headline = "Daily aspirin tablets may protect the liver from damage, biopsy study finds"
    alone = HeadlineAugmenter(AugmentConfig(), vectors).augment(headline, 6, query_seed(3, "q9"))
    busy = _DrawingVectors(vectors.words, vectors.vectors)
    crowded = HeadlineAugmenter(AugmentConfig(), busy).augment(headline, 6, query_seed(3, "q9"))
    assert crowded == alone and len(alone.texts) == 6


def test_one_augmenter_shared_by_threads_gives_each_headline_its_own_draws(vectors: WordVectors) -> None:
    """A shared augmenter (the contextual engine's is cached) used from several threads at once
    gives every headline what it gives alone."""
    from concurrent.futures import ThreadPoolExecutor

    headlines = [
        f"Daily aspirin tablets protect the liver of patient group {i} in biopsy study" for i in range(24)
    ]
    shared = HeadlineAugmenter(AugmentConfig(), vectors)
    alone = [shared.augment(h, 4, query_seed(5, h)) for h in headlines]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda h: shared.augment(h, 4, query_seed(5, h)), headlines * 3))
    assert together == alone * 3


def test_duplicates_are_dropped_and_counted(vectors: WordVectors) -> None:
    """One substitutable word with one neighbour: one distinct substitution can exist."""
    config = AugmentConfig(top_k=1, attempts=5)
    made = HeadlineAugmenter(config, vectors).augment("New aspirin rules announced on Monday", 3, seed=3)
    substitute = next(r for r in made.reports if r.action == "substitute")
    assert substitute == type(substitute)("substitute", wanted=1, kept=1, duplicates=0, limit=1)
    made = HeadlineAugmenter(config, vectors).augment("New aspirin rules announced on Monday", 0, seed=3)
    assert made.texts == () and all(r.wanted == 0 for r in made.reports)

    config = AugmentConfig(top_k=1, attempts=5, aug_p=0.2)
    substitutions = HeadlineAugmenter(config, vectors)
    substitutions.augmenters.pop("insert")  # substitutions only
    made = substitutions.augment("New aspirin rules announced on Monday", 6, seed=3)
    report = next(r for r in made.reports if r.action == "substitute")
    # 3 wanted x 5 attempts = 15 draws; the first gives "ibuprofen", the 14 others repeat it.
    assert (report.wanted, report.kept, report.duplicates) == (3, 1, 14)
    assert [t for _a, t in made.texts] == ["New ibuprofen rules announced on Monday"]


def test_short_headlines_and_missing_vectors_make_nothing(vectors: WordVectors) -> None:
    made = HeadlineAugmenter(AugmentConfig(), vectors).augment("Aspirin works", 4, seed=1)
    assert made.texts == () and [r.limit for r in made.reports] == [0, 0]
    made = HeadlineAugmenter(AugmentConfig(), None).augment(
        "Aspirin tablets may protect the liver", 4, seed=1
    )
    assert made.texts == () and [r.kept for r in made.reports] == [0, 0]


def test_contextual_model_that_cannot_load_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    # No Hub here: offline mode makes transformers fail at once rather than after retries.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    config = AugmentConfig(engine="contextual", model="emilyalsentzer/Bio_ClinicalBERT")
    with pytest.raises(IrforgeError) as err:
        HeadlineAugmenter(config, None)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(
        "pairs.augment: cannot load the contextual model 'emilyalsentzer/Bio_ClinicalBERT'"
    )
