"""Variant and containment detection (tasks.common.text.variants) on planted variants of real paragraphs.

The fast paths must return exactly what the exhaustive rapidfuzz comparison returns
(``*_exhaustive``, the oracle); the planted tests also say what the answer is on their own
(the planted group and nothing else), worked out from how the variants were made.
"""

from __future__ import annotations

import random
import string
import unicodedata
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lxml import etree
from rapidfuzz.distance import Levenshtein

from tasks.common.text import variant_grams
from tasks.common.text.variants import (
    Containment,
    SimilarPair,
    clusters,
    containments,
    containments_exhaustive,
    normalise,
    representative,
    similar_pairs,
    similar_pairs_exhaustive,
)
from tests.conftest import SAMPLES

needs_samples = pytest.mark.skipif(
    not SAMPLES.is_dir(),
    reason=f"the shared sample articles are not at {SAMPLES} (they live beside the checkout)",
)


def real_paragraphs(min_chars: int = 150, max_chars: int = 1200) -> list[str]:
    """Distinct ``<p>`` texts (whitespace collapsed) of the sample JATS articles, in file order."""
    seen: set[str] = set()
    out: list[str] = []
    for path in sorted((SAMPLES / "articles").glob("*.*xml")):
        parser = etree.XMLParser(recover=True, resolve_entities=False, no_network=True)
        root = etree.parse(str(path), parser).getroot()
        for el in root.iter():
            if isinstance(el.tag, str) and etree.QName(el).localname == "p":
                text = " ".join("".join(el.itertext()).split())
                key = normalise(text)
                if min_chars <= len(text) <= max_chars and key not in seen:
                    seen.add(key)
                    out.append(text)
    return out


# ----------------------------------------------------------------------------- variant makers


def typo(text: str, rng: random.Random, edits: int) -> str:
    chars = list(text)
    for _ in range(edits):
        if not chars:  # everything was deleted: nothing left to edit
            break
        p = rng.randrange(len(chars))
        op = rng.choice("sid")
        if op == "s":
            chars[p] = rng.choice(string.ascii_lowercase.replace(chars[p].lower(), ""))
        elif op == "i":
            chars.insert(p, rng.choice(string.ascii_lowercase))
        else:
            del chars[p]
    return "".join(chars)


def respace(text: str, rng: random.Random) -> str:
    words = text.split(" ")
    seps = [rng.choice([" ", "  ", "\n", " \t", "\u00a0"]) for _ in words[1:]]
    return "  " + words[0] + "".join(s + w for s, w in zip(seps, words[1:], strict=True)) + "\n"


def recase(text: str, rng: random.Random) -> str:
    return rng.choice([str.upper, str.lower, str.title, str.swapcase])(text)


def truncate(text: str, rng: random.Random) -> str:
    return text[: len(text) - max(1, round(len(text) * rng.uniform(0.03, 0.08)))]


MAKERS = {
    "typo": lambda x, rng: typo(x, rng, rng.randint(1, 3)),
    "whitespace": respace,
    "case": recase,
    "truncated": truncate,
}


def label_groups(labels: list[int]) -> set[frozenset[int]]:
    groups: dict[int, set[int]] = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, set()).add(i)
    return {frozenset(g) for g in groups.values()}


@pytest.fixture(autouse=True, scope="module")
def _always_filter() -> Iterator[None]:
    # Small inputs are scored exhaustively by design (cheaper than the filters); these
    # tests are about the filters, so they run them whatever the input size.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(variant_grams, "SMALL_PAIRS", -1)
        yield


# ----------------------------------------------------------------------------- API basics


def test_normalise_folds_case_width_and_whitespace() -> None:
    assert normalise("  Ｆｕｌｌ\u00a0WIDTH\n\tand  ß ") == "full width and ss"
    assert normalise("") == ""
    assert normalise(normalise("A  b")) == normalise("A  b") == "a b"


@settings(max_examples=400, deadline=None)
@given(
    st.text(alphabet=st.sampled_from(list("aZ ß\u00a0\u2003\t\n\x1c\x85ﬁＡİΣς\u0301e.")), max_size=30)
    | st.text(max_size=30)
)
def test_normalise_fast_paths_match_the_definition(text: str) -> None:
    # The definition, spelled out the slow way: NFKC, casefold, NFKC again, split on any
    # whitespace and join with single spaces.
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())
    assert normalise(text) == " ".join(folded.split())


def test_edge_cases() -> None:
    assert similar_pairs([], 0.9) == [] == similar_pairs_exhaustive([], 0.9)
    assert similar_pairs(["one text"], 0.9) == []
    assert containments([], 0.9) == [] == containments(["only one"], 0.5)
    # Empty strings are identical to each other (similarity 1), never similar to text.
    assert similar_pairs(["", "abc", ""], 0.9) == [SimilarPair(0, 2, 1.0)]
    assert similar_pairs(["", "abc", ""], 0.0) == similar_pairs_exhaustive(["", "abc", ""], 0.0)
    # Identical after normalisation: similarity 1.0, also at threshold 1.0.
    texts = ["Same  Text", "same text", "SAME TEXT\n", "samE texts"]
    assert similar_pairs(texts, 1.0) == [
        SimilarPair(0, 1, 1.0),
        SimilarPair(0, 2, 1.0),
        SimilarPair(1, 2, 1.0),
    ]
    assert similar_pairs(texts, 0.9) == similar_pairs_exhaustive(texts, 0.9)
    assert similar_pairs(texts, 1.01) == []
    # Identical texts are containments of each other only when equal lengths are allowed.
    dup = ["a passage typed twice, word for word", "A passage typed twice, word for word"]
    assert containments(dup, 0.9) == []
    assert containments(dup, 0.9, max_length_ratio=1.0) == [Containment(0, 1, 1.0), Containment(1, 0, 1.0)]
    assert containments(dup, 0.9, max_length_ratio=1.0) == containments_exhaustive(
        dup, 0.9, max_length_ratio=1.0
    )
    with pytest.raises(ValueError, match="NaN"):
        similar_pairs(["a", "b"], float("nan"))
    with pytest.raises(ValueError, match="max_length_ratio"):
        containments(["a", "b"], 0.9, max_length_ratio=1.5)


def test_clusters_and_representative() -> None:
    pairs = [SimilarPair(3, 5, 0.95), SimilarPair(1, 5, 0.9), SimilarPair(0, 2, 1.0)]
    assert clusters(7, pairs) == [0, 1, 0, 1, 4, 1, 6]
    assert clusters(0, []) == []
    texts = ["ab", "abcd", "abc", "wxyz", "z"]
    assert representative([0, 1, 2, 3], texts) == 1  # longest; ties go to the smaller index
    assert representative([4], texts) == 4
    with pytest.raises(ValueError):
        representative([], texts)


# ----------------------------------------------------------------------------- planted variants


@needs_samples
def test_planted_variants_of_real_paragraphs_cluster_exactly() -> None:
    rng = random.Random(20240611)
    paragraphs = real_paragraphs()[:220]
    # A few real paragraphs are near-duplicates of each other already (table footnotes
    # "a In some cases, ..." / "C In some cases, ..."); leave those out so that the planted
    # groups are the only variants.
    natural = {i for p in similar_pairs_exhaustive(paragraphs, 0.8) for i in (p.a, p.b)}
    texts = [x for i, x in enumerate(paragraphs) if i not in natural]
    assert len(texts) > 200
    planted: list[frozenset[int]] = []
    for base in rng.sample(range(len(texts)), 24):
        group = [base]
        for kind in rng.sample(sorted(MAKERS), rng.randint(1, 3)):  # 2-4 members with the base
            texts.append(MAKERS[kind](texts[base], rng))
            group.append(len(texts) - 1)
        planted.append(frozenset(group))
    order = list(range(len(texts)))
    rng.shuffle(order)  # variants are not next to their base
    texts = [texts[i] for i in order]
    where = {old: new for new, old in enumerate(order)}
    planted = [frozenset(where[i] for i in g) for g in planted]

    pairs = similar_pairs(texts, 0.9)
    assert variant_grams.STATS["pivots"] > 0  # the filtered path ran, not only the brute-force one
    assert pairs == similar_pairs_exhaustive(texts, 0.9)
    groups = label_groups(clusters(len(texts), pairs))
    expected = set(planted) | {frozenset([i]) for i in range(len(texts)) if not any(i in g for g in planted)}
    assert groups == expected
    for g in planted:  # every variant is within 0.9 of its base
        for i in g:
            assert any(p.similarity >= 0.9 for p in pairs if i in (p.a, p.b))


@needs_samples
def test_the_longest_variant_represents_its_cluster() -> None:
    rng = random.Random(7)
    base = real_paragraphs()[10]
    texts = [truncate(base, rng), base, respace(base, rng).upper(), typo(base, rng, 2)]
    labels = clusters(len(texts), similar_pairs(texts, 0.9))
    assert labels == [0, 0, 0, 0]
    longest = max(range(4), key=lambda i: (len(texts[i]), -i))
    assert representative([0, 1, 2, 3], texts) == longest == 2  # extra whitespace makes it longest


# ----------------------------------------------------------------------------- containments


@needs_samples
def test_paragraph_inside_a_longer_passage_is_found() -> None:
    rng = random.Random(99)
    paragraphs = real_paragraphs()
    inner = paragraphs[30]
    outer = paragraphs[31] + " " + inner + " " + paragraphs[32]
    inner_typos = [typo(inner, rng, k) for k in (1, 2, 2)]
    same_length = typo(inner, random.Random(3), 0)[:-1] + "x"  # a variant of equal length
    others = paragraphs[40:70]
    texts = [*others, outer, inner, *inner_typos, same_length]
    o = len(others)
    found = containments(texts, 0.95)
    assert found == containments_exhaustive(texts, 0.95)
    inners_of_outer = {c.inner for c in found if c.outer == o}
    assert inners_of_outer == {o + 1, o + 2, o + 3, o + 4, o + 5}
    exact = next(c for c in found if c.outer == o and c.inner == o + 1)
    assert exact.score == 1.0
    assert all(c.score >= 0.95 for c in found)
    # The inner and its same-length variants are variants of each other, not containments.
    assert not any({c.outer, c.inner} <= {o + 1, o + 2, o + 3, o + 4, o + 5} for c in found)
    assert Levenshtein.normalized_similarity(normalise(inner), normalise(same_length)) > 0.99


@needs_samples
def test_containment_score_is_partial_ratio_and_respects_the_length_rules() -> None:
    paragraphs = real_paragraphs()
    inner = paragraphs[5][:120]
    outer = paragraphs[6] + " " + inner.upper()
    short = inner[:15]
    texts = [outer, inner, short]
    assert containments(texts, 0.9) == [Containment(0, 1, 1.0)]  # 15 < min_inner_chars
    assert containments(texts, 0.9, min_inner_chars=10) == [
        Containment(0, 1, 1.0),
        Containment(0, 2, 1.0),
        Containment(1, 2, 1.0),
    ]
    # The inner must be at most max_length_ratio of the outer's length.
    assert containments(texts, 0.9, max_length_ratio=len(inner) / len(outer) - 0.01) == []


# ----------------------------------------------------------------------------- oracle equality


WORDS = [
    *("patients", "with", "chronic", "plaque", "psoriasis", "were", "treated", "three", "times", "weekly"),
    *("the", "dose", "was", "increased", "unless", "erythema", "occurred", "and", "adherence", "checked"),
    *("at", "each", "visit", "results", "showed", "a", "reduction", "of", "in", "x"),
]


def mutate(text: str, rng: random.Random) -> str:
    out = typo(text, rng, rng.randint(0, 4)) if text else text
    if rng.random() < 0.2:
        out = recase(out, rng)
    if rng.random() < 0.2 and out:
        out = out[: max(0, len(out) - rng.randint(1, 8))]
    if rng.random() < 0.15:
        out = rng.choice(WORDS) + " " + out + " " + rng.choice(WORDS)  # embed in a longer text
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n_bases=st.integers(1, 4),
    n_texts=st.integers(0, 16),
    threshold=st.floats(0.7, 1.0),
    ratio=st.sampled_from([0.5, 0.9, 1.0]),
    min_inner=st.sampled_from([1, 10, 20]),
)
def test_fast_paths_equal_the_exhaustive_oracle(
    seed: int, n_bases: int, n_texts: int, threshold: float, ratio: float, min_inner: int
) -> None:
    rng = random.Random(seed)
    bases = [" ".join(rng.choices(WORDS, k=rng.randint(0, 25))) for _ in range(n_bases)]
    texts = [mutate(rng.choice(bases), rng) for _ in range(n_texts)]
    assert similar_pairs(texts, threshold) == similar_pairs_exhaustive(texts, threshold)
    assert containments(texts, threshold, max_length_ratio=ratio, min_inner_chars=min_inner) == (
        containments_exhaustive(texts, threshold, max_length_ratio=ratio, min_inner_chars=min_inner)
    )


@needs_samples
@pytest.mark.parametrize("threshold", [0.7, 0.8, 0.86, 0.9, 0.95, 0.99, 1.0])
def test_oracle_equality_on_mutated_real_paragraphs(threshold: float) -> None:
    rng = random.Random(int(threshold * 1000))
    paragraphs = real_paragraphs(min_chars=60, max_chars=700)
    texts: list[str] = []
    for base in rng.sample(paragraphs, 25):
        texts.append(base)
        for _ in range(rng.randint(0, 3)):
            variant = base
            for kind in rng.sample(sorted(MAKERS), rng.randint(1, 2)):
                variant = MAKERS[kind](variant, rng)
            # heavier edits land near the threshold
            texts.append(typo(variant, rng, rng.randint(0, int(len(variant) * (1.0 - threshold) * 1.3))))
        if rng.random() < 0.3:
            texts.append(rng.choice(paragraphs) + " " + base + " " + rng.choice(paragraphs))
    rng.shuffle(texts)
    assert similar_pairs(texts, threshold) == similar_pairs_exhaustive(texts, threshold)
    assert containments(texts, threshold) == containments_exhaustive(texts, threshold)


@needs_samples
@pytest.mark.parametrize("mode", ["join", "scan_limit", "too_long_to_pack"])
def test_join_and_its_brute_force_fallback_agree_with_the_oracle(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "scan_limit": FALLBACK 0 makes the join give up at once (brute force over the
    # length band); "too_long_to_pack": texts longer than the packed index entries can
    # address go to brute force too. "join" never gives up. All must give the oracle's answer.
    monkeypatch.setattr(variant_grams, "FALLBACK", 0.0 if mode == "scan_limit" else 1e9)
    if mode == "too_long_to_pack":
        monkeypatch.setattr(variant_grams, "JOIN_MAX_CHARS", 300)
    rng = random.Random(7)
    paragraphs = real_paragraphs(min_chars=80, max_chars=600)
    texts = [typo(p, rng, rng.randint(0, 6)) for p in rng.sample(paragraphs, 40) for _ in range(2)]
    assert max(map(len, texts)) > 300
    assert similar_pairs(texts, 0.85) == similar_pairs_exhaustive(texts, 0.85)
    assert variant_grams.STATS["pivots"] > 0
    assert ("brute_force_texts" in variant_grams.STATS) == (mode != "join")


@needs_samples
def test_small_inputs_are_scored_exhaustively_with_the_same_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variant_grams, "SMALL_PAIRS", 100_000)  # the shipped default
    rng = random.Random(3)
    texts = [
        typo(p, rng, rng.randint(0, 4)) for p in rng.sample(real_paragraphs(min_chars=80, max_chars=600), 30)
    ]
    texts += texts[:5]
    assert similar_pairs(texts, 0.9) == similar_pairs_exhaustive(texts, 0.9)
    assert variant_grams.STATS["brute_force_texts"] > 0 and "pivots" not in variant_grams.STATS
    assert containments(texts, 0.95) == containments_exhaustive(texts, 0.95)
    assert "pivots" not in variant_grams.STATS
