"""Lucene's sloppy phrase frequency (``SloppyPhraseMatcher.phraseFreq``), in plain Python.

tantivy's own sloppy phrase is not Lucene's (two swapped terms need slop 3 there, 2 in
Lucene), so the embedded backend checks sloppy phrases here, on positions read from its
token store (:mod:`tasks.common.search.embedded.tokens`).
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

_T = TypeVar("_T", bound=Hashable)


def sloppy_frequency(
    terms: Sequence[_T], positions: Mapping[_T, list[int]], offsets: list[int], slop: int
) -> float:
    """Lucene's sloppy phrase frequency (``SloppyPhraseMatcher.phraseFreq``); 0 when no match.

    ``terms[i]`` sits at ``offsets[i]`` in the query; ``positions[term]`` lists the term's
    positions in the passage, ascending. Lucene sweeps "phrase positions" (a term's
    position minus its offset) from the smallest: the match length is the largest minus
    the smallest; it keeps advancing the smallest while that does not pass the next one
    (shrinking the match), then counts ``1 / (1 + length)`` for a match within ``slop`` and
    goes on, until some term has no positions left. Occurrences of a repeated query term
    start on distinct positions (the k-th one k positions in) and, when two collide, the
    one with the smaller phrase position moves on (Lucene's ``advanceRpts``).
    """
    lists = [positions.get(t, []) for t in terms]
    if not all(lists):
        return 0.0
    if len(set(terms)) == len(terms):
        return _sweep([[p - o for p in lst] for lst, o in zip(lists, offsets, strict=True)], offsets, slop)
    return _RepeatedTerms(terms, lists, offsets).frequency(slop)


class _RepeatedTerms:
    """:func:`sloppy_frequency` of a query that repeats a term: occurrences must not collide."""

    def __init__(self, terms: Sequence[Hashable], lists: list[list[int]], offsets: list[int]) -> None:
        self.lists, self.offsets = lists, offsets
        self.index = [0] * len(terms)
        self.same = [[j for j, u in enumerate(terms) if u == t and j != i] for i, t in enumerate(terms)]
        self.end = 0

    def raw(self, i: int) -> int:
        return self.lists[i][self.index[i]]

    def phrase_position(self, i: int) -> int:
        return self.lists[i][self.index[i]] - self.offsets[i]

    def start(self) -> bool:
        """Lucene's start condition: no two occurrences of a term on one position."""
        for i in range(len(self.lists)):
            while any(j < i and self.raw(j) == self.raw(i) for j in self.same[i]):
                self.index[i] += 1
                if self.index[i] >= len(self.lists[i]):
                    return False
        self.end = max(self.phrase_position(i) for i in range(len(self.lists)))
        return True

    def advance(self, i: int) -> bool:  # advancePP
        self.index[i] += 1
        if self.index[i] >= len(self.lists[i]):
            return False
        self.end = max(self.end, self.phrase_position(i))
        return True

    def resolve(self, i: int) -> tuple[bool, bool]:  # advanceRpts: (not exhausted, another one moved)
        raw, position, offsets = self.raw, self.phrase_position, self.offsets
        moved_other, start = False, i
        while (k := next((j for j in self.same[i] if raw(j) == raw(i)), None)) is not None:
            i = i if (position(i), offsets[i]) < (position(k), offsets[k]) else k
            if not self.advance(i):
                return False, moved_other
            moved_other = moved_other or i != start
        return True, moved_other

    def frequency(self, slop: int) -> float:
        if not self.start():
            return 0.0
        position_of, offsets = self.phrase_position, self.offsets
        heap = [(position_of(i), offsets[i], i) for i in range(len(self.lists))]
        heapq.heapify(heap)
        freq = 0.0
        _, _, current = heapq.heappop(heap)
        length = self.end - position_of(current)
        following = heap[0][0]
        while self.advance(current):
            alive, moved_other = self.resolve(current)
            if not alive:
                break
            if moved_other:  # re-queue the occurrences that moved
                heap = [(position_of(j), offsets[j], j) for _, _, j in heap]
                heapq.heapify(heap)
            position = position_of(current)
            if position > following:  # done minimising this match
                if length <= slop:
                    freq += 1.0 / (1.0 + length)
                heapq.heappush(heap, (position, offsets[current], current))
                _, _, current = heapq.heappop(heap)
                following = heap[0][0]
                length = self.end - position_of(current)
            else:
                length = min(length, self.end - position)
        if length <= slop:
            freq += 1.0 / (1.0 + length)
        return freq


def _sweep(shifted: list[list[int]], offsets: list[int], slop: int) -> float:
    """:func:`sloppy_frequency` for distinct query terms (``shifted``: phrase positions), inlined."""
    count = len(shifted)
    if all(len(p) == 1 for p in shifted):  # one position each: one window
        first = [p[0] for p in shifted]
        length = max(first) - min(first)
        return 1.0 / (1.0 + length) if length <= slop else 0.0
    index = [0] * count
    heap = [(shifted[i][0], offsets[i], i) for i in range(count)]
    heapq.heapify(heap)
    end = max(h[0] for h in heap)
    position, _, current = heapq.heappop(heap)
    length = end - position
    following = heap[0][0]
    freq = 0.0
    while True:
        index[current] += 1
        positions = shifted[current]
        if index[current] >= len(positions):
            break
        position = positions[index[current]]
        end = max(end, position)
        if position > following:  # done minimising this match
            if length <= slop:
                freq += 1.0 / (1.0 + length)
            position, _, current = heapq.heappushpop(heap, (position, offsets[current], current))
            following = heap[0][0]
            length = end - position
        elif end - position < length:
            length = end - position
    if length <= slop:
        freq += 1.0 / (1.0 + length)
    return freq
