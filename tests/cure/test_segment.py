"""Stage ``segment`` on small made-up blocks: which short blocks merge, how long ones split."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

import pytest

from tasks.cure.stages.parse import BLOCK_SEPARATOR
from tasks.cure.stages.segment import SegmentConfig, balanced_cuts, data_like, prose_like, segment_article

LONG = (
    "The patients were followed for twelve months after the end of treatment, and the "
    "primary outcome was recorded by a nurse who did not know the allocation."
)  # 27 words
SHORT_PROSE = "Data are available on request."
NON_PROSE = [
    ">seq1 ACGTACGT",
    "FIGURE 1",
    "Table 2",
    "Fig. 3",
    "Fig. 3A: Overview of the design.",
    "S1 Table. Baseline characteristics.",
    "Background",
    "Role of the Funding Source",
    "1 2 3 4 5",
    "* * * * *",
    "p < 0.05",
    "x <- read.csv('data.csv')",
    "for i in range(10):",
    "library(ggplot2)",
    "$ pip install irforge",
    "ACGTACGTACGTAC GGTTCCAAGGTTCCA",
    "© 2014 Chiarotto et al.; licensee BioMed Central.",
]
PROSE = [
    SHORT_PROSE,
    "Please see later in the article for the Editors' Summary",
    "Thus in the haploid case on which we will focus later:",
    "Of 516 patients, 62 (12%) died.",
    "Figure 1 shows the design of the study.",
    "Figures 2–4 show the results.",
    "The forward primer was ACGTACGTACGTAC.",
    "CD4(+) T cells were counted.",
    "Conclusions: Sarcopenia is highly prevalent and independently predicts mortality.",
]
_VOCAB = "cells were grown in medium and the samples then measured for protein levels with standard assays"
VOCAB = _VOCAB.split()


def _blocks(*specs: tuple[str, tuple[str, ...], str]) -> list[dict[str, Any]]:
    out, offset = [], 0
    for i, (kind, path, text) in enumerate(specs):
        out.append({"kind": kind, "section_path": list(path), "text": text, "char_start": offset,
                    "char_end": offset + len(text), "block_index": i})  # fmt: skip
        offset += len(text) + len(BLOCK_SEPARATOR)
    return out


def _article(blocks: list[dict[str, Any]]) -> str:
    return BLOCK_SEPARATOR.join(b["text"] for b in blocks)


def _check_exact(blocks: list[dict[str, Any]], config: SegmentConfig) -> list[Any]:
    """Segment, and check what holds for every output: exact spans, every block covered."""
    passages = segment_article(blocks, config)
    text = _article(blocks)
    for p in passages:
        assert text[p.char_start : p.char_end] == p.text
        assert len({tuple(blocks[b]["section_path"]) for b in p.blocks}) == 1  # never across sections
        assert p.section_path == tuple(blocks[p.blocks[0]]["section_path"])
    assert sorted({b for p in passages for b in p.blocks}) == [b["block_index"] for b in blocks]
    return passages


def _sentence(n: int, rng: random.Random) -> str:
    words = [rng.choice(VOCAB) for _ in range(n)]
    return " ".join([words[0].capitalize(), *words[1:]]) + "."


def _long_block(lengths: list[int], rng: random.Random) -> dict[str, Any]:
    (block,) = _blocks(("paragraph", ("Results",), " ".join(_sentence(n, rng) for n in lengths)))
    return block


@pytest.mark.parametrize("text", NON_PROSE)
def test_non_prose_lines_are_recognised(text: str) -> None:
    assert not prose_like(text)


@pytest.mark.parametrize("text", PROSE)
def test_short_sentences_are_prose(text: str) -> None:
    assert prose_like(text)
    assert not data_like(text)


def test_a_long_paragraph_is_not_data_like_but_a_long_caption_is() -> None:
    assert not data_like(LONG * 3)
    assert data_like("Figure 2. " + LONG)
    assert not data_like("Figures 2 and 3 show that " + LONG)


@pytest.mark.parametrize("line", NON_PROSE)
def test_a_short_non_prose_line_stays_a_passage_of_its_own(line: str) -> None:
    for position in range(3):  # first, middle, last of its section
        specs = [("paragraph", ("Methods",), LONG)] * 2
        specs.insert(position, ("paragraph", ("Methods",), line))
        passages = _check_exact(_blocks(*specs), SegmentConfig())
        assert [p.blocks for p in passages] == [[0], [1], [2]]
        assert passages[position].text == line


def test_short_prose_joins_the_next_prose_block_else_the_one_before() -> None:
    blocks = _blocks(
        ("paragraph", ("Methods",), SHORT_PROSE),
        ("paragraph", ("Methods",), LONG),
        ("paragraph", ("Methods",), LONG),
        ("paragraph", ("Methods",), SHORT_PROSE),  # the next one is a label: joins the one before
        ("paragraph", ("Methods",), "Table 2"),
        ("paragraph", ("Methods",), SHORT_PROSE),  # after a label, last of its section: alone
        ("paragraph", ("Results",), SHORT_PROSE),  # alone in its section: alone
    )
    passages = _check_exact(blocks, SegmentConfig())
    assert [p.blocks for p in passages] == [[0, 1], [2, 3], [4], [5], [6]]
    assert passages[0].text == SHORT_PROSE + BLOCK_SEPARATOR + LONG


def test_short_prose_joins_a_number_dense_results_paragraph() -> None:
    dense = "Age (22.9 ± 8.8 vs 23.1 ± 7.9; p = 0.41), BMI (27.3 ± 4.1 vs 26.9 ± 3.8) and 62/516 (12%). " * 3
    assert data_like(dense)  # fewer letters than digits and symbols: still prose when long
    blocks = _blocks(("paragraph", ("Results",), SHORT_PROSE), ("paragraph", ("Results",), dense.strip()))
    assert [p.blocks for p in _check_exact(blocks, SegmentConfig())] == [[0, 1]]


def test_consecutive_short_prose_blocks_gather_until_they_are_long_enough() -> None:
    blocks = _blocks(*[("abstract", ("Abstract",), SHORT_PROSE)] * 4, ("paragraph", ("Abstract",), LONG))
    passages = _check_exact(blocks, SegmentConfig())
    assert [(p.blocks, p.kind) for p in passages] == [([0, 1, 2], "abstract"), ([3, 4], "paragraph")]


def test_lists_merge_only_with_lists() -> None:
    items = "first item of the list\nsecond item"
    blocks = _blocks(
        ("paragraph", ("Methods",), "The following criteria were applied:"),
        ("list", ("Methods",), items),
        ("list", ("Methods",), "\n".join(["a third list item"] * 6)),
        ("paragraph", ("Methods",), LONG),
        ("list", ("Methods",), "Age\nSex"),  # short list after a paragraph, last of its section
    )
    passages = _check_exact(blocks, SegmentConfig())
    assert [(p.blocks, p.kind) for p in passages] == [
        ([0], "paragraph"),  # a short sentence never joins a list
        ([1, 2], "list"),  # a short list joins the next list
        ([3], "paragraph"),
        ([4], "list"),  # nor does a short list join a paragraph
    ]


def test_no_merge_over_an_excluded_block() -> None:
    blocks = _blocks(
        ("paragraph", ("Methods",), SHORT_PROSE),
        ("caption", ("Methods",), "Figure 1. The design."),
        ("paragraph", ("Methods",), LONG),
    )
    kept = [b for b in blocks if b["kind"] != "caption"]
    passages = segment_article(kept, SegmentConfig())
    assert [p.blocks for p in passages] == [[0], [2]]
    text = _article(blocks)
    assert all(text[p.char_start : p.char_end] == p.text for p in passages)


def test_merging_can_be_turned_off() -> None:
    blocks = _blocks(("paragraph", ("Methods",), SHORT_PROSE), ("paragraph", ("Methods",), LONG))
    assert [p.blocks for p in _check_exact(blocks, SegmentConfig(merge_below_words=0))] == [[0], [1]]


def test_random_block_mixes_keep_accounting_and_only_merge_prose() -> None:
    rng = random.Random(18)
    kinds = ["paragraph", "paragraph", "abstract", "list"]
    for _ in range(200):
        specs = [
            (
                rng.choice(kinds),
                (rng.choice("AB"),),
                rng.choice([LONG, " ".join([LONG] * 9), *PROSE, *NON_PROSE]),
            )
            for _ in range(rng.randint(1, 8))
        ]
        blocks = _blocks(*specs)
        passages = _check_exact(blocks, SegmentConfig(split_above_words=120))
        assert passages == segment_article(blocks, SegmentConfig(split_above_words=120))  # deterministic
        for p in passages:
            if len(p.blocks) > 1:
                assert len({blocks[b]["kind"] == "list" for b in p.blocks}) == 1  # prose with prose
                for b in p.blocks:
                    kind, text = blocks[b]["kind"], blocks[b]["text"]
                    short_prose = kind != "list" and len(text.split()) < 15
                    assert prose_like(text) if short_prose else not data_like(text)


def test_a_410_word_block_of_20_word_sentences_gives_two_even_pieces() -> None:
    rng = random.Random(0)
    block = _long_block([20] * 20 + [10], rng)
    passages = _check_exact([block], SegmentConfig(split_above_words=350))
    assert [p.n_words for p in passages] == [200, 210]


def test_no_orphan_tail_where_the_old_splitter_left_one() -> None:
    # With these sentences the previous splitter gave 196 + 203 + 11 words.
    lengths = [24, 22, 22, 17, 20, 21, 21, 24, 25, 23, 18, 25, 20, 22, 25, 24, 22, 24, 11]
    passages = _check_exact([_long_block(lengths, random.Random(1))], SegmentConfig(split_above_words=350))
    assert [p.n_words for p in passages] == [196, 214]


def test_a_30_word_last_sentence_is_not_left_alone() -> None:
    rng = random.Random(2)
    for _ in range(20):
        lengths = [rng.randint(12, 28) for _ in range(rng.randint(14, 40))] + [30]
        passages = _check_exact([_long_block(lengths, rng)], SegmentConfig(split_above_words=350))
        words = sum(lengths)
        target = words / math.ceil(words / 350)
        assert len(passages) == math.ceil(words / 350)
        assert min(p.n_words for p in passages) >= target / 3
        assert max(p.n_words for p in passages) <= 350


def test_one_sentence_over_the_limit_is_a_piece_of_its_own() -> None:
    rng = random.Random(3)
    passages = _check_exact([_long_block([40, 30, 400, 30, 40], rng)], SegmentConfig(split_above_words=100))
    assert [p.n_words for p in passages] == [70, 400, 70]


def test_split_pieces_list_only_the_blocks_they_overlap() -> None:
    rng = random.Random(4)
    long = " ".join(_sentence(20, rng) for _ in range(20))
    blocks = _blocks(("paragraph", ("Results",), SHORT_PROSE), ("paragraph", ("Results",), long))
    passages = _check_exact(blocks, SegmentConfig(split_above_words=350))
    assert [p.blocks for p in passages] == [[0, 1], [1]]
    assert passages[0].text.startswith(SHORT_PROSE + BLOCK_SEPARATOR)


def _fewest(counts: list[int], limit: int) -> int:
    """Greedy packing: the fewest consecutive pieces of at most ``limit`` (sentences ≤ limit)."""
    pieces, size = 1, 0
    for n in counts:
        if size + n > limit:
            pieces, size = pieces + 1, 0
        size += n
    return pieces


def _sizes(counts: list[int], firsts: list[int]) -> list[int]:
    return [sum(counts[a:b]) for a, b in itertools.pairwise([*firsts, len(counts)])]


def test_balanced_cuts_are_optimal_against_brute_force() -> None:
    rng = random.Random(5)
    for _ in range(300):
        limit = rng.randint(20, 80)
        counts = [rng.randint(1, limit) for _ in range(rng.randint(1, 11))]
        sizes = _sizes(counts, balanced_cuts(counts, limit))
        assert sum(sizes) == sum(counts) and max(sizes) <= limit
        assert len(sizes) == _fewest(counts, limit)  # hence ceil(words / limit) when feasible
        best = min(
            sum(s * s for s in _sizes(counts, [0, *cut]))
            for cut in itertools.combinations(range(1, len(counts)), len(sizes) - 1)
            if max(_sizes(counts, [0, *cut])) <= limit
        )
        assert sum(s * s for s in sizes) == best


def test_random_long_blocks_split_exactly_evenly_and_within_the_limit() -> None:
    rng = random.Random(6)
    config = SegmentConfig(split_above_words=150)
    for _ in range(40):
        lengths = [rng.randint(3, 60) for _ in range(rng.randint(5, 30))]
        block = _long_block(lengths, rng)
        passages = _check_exact([block], config)
        words = sum(lengths)
        if words <= 150:
            assert len(passages) == 1
            continue
        assert max(p.n_words for p in passages) <= 150
        assert len(passages) == _fewest(lengths, 150) >= math.ceil(words / 150)
        assert sum(p.n_words for p in passages) == words
        assert " ".join(p.text for p in passages) == block["text"]
        assert all(p.text.endswith(".") for p in passages)  # cut at sentence ends only
