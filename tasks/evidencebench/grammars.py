"""GBNF grammars of the replies EvidenceBench's LLM steps parse, for grammar-constrained decoding.

Why: a small local model (the embedded Gemma 3 270M) rarely writes the keyword formats of
:mod:`tasks.evidencebench.parsers` on its own, so nearly every reply would fail its parser and
end quarantined. Servers that take a GBNF grammar (llama.cpp's ``grammar``, vLLM's
``structured_outputs.grammar``; see :mod:`tasks.common.llm.openai_chat`) can be held to the form
instead. The grammar constrains only the form: replies still go through the step's parser,
which stays the authority (servers ignore fields they do not know).

The property each builder keeps: every string its grammar accepts passes the step's parser
(:func:`~tasks.evidencebench.parsers.parse_suitability`, ``parse_leak_check``,
``parse_hypothesis``, ``parse_aspects``, ``parse_labels``, ``refine_validator`` and
:func:`~tasks.evidencebench.alignment.parse_selection`). One exception a context-free grammar
cannot express cheaply: :func:`aspects_grammar` does not forbid two equal aspects, which
``parse_aspects`` refuses (the reply is then asked again). A constrained reply has no room
for the reasoning the prompts ask for before the keyword: the grammar starts with it.

Grammars are GBNF as llama.cpp reads it (root rule ``root``; bounded repetition ``x{m,n}``
is in every llama.cpp since 2024; vLLM's xgrammar reads GBNF too). Every character
outside printable ASCII is written as an escape, so a grammar is plain ASCII whatever the
paper's text holds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import pysbd

from tasks.evidencebench.llm_steps import one_line
from tasks.evidencebench.parsers import MAX_HYPOTHESIS_CHARS

LABELS = ("results", "background", "methods")
"""The aspect labels :func:`~tasks.evidencebench.parsers.parse_labels` accepts (``AspectLabel``)."""

# str.splitlines() breaks lines at each of these; a one-line answer must contain none.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
# What str.strip() / str.split() remove (str.isspace()); a free-text answer starts with none,
# or the parser would see a different (or empty) text after stripping.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)
# How keyword_value finds a keyword at the start of a line (case-sensitive, bold tolerated).
_HINT_LINE = re.compile(r"[ \t]*(?:\*\*)?HINT(?:\*\*)?[ \t]*:")
_KEYWORD = re.compile(r"[A-Z][A-Z_]*")


def _escape_char(char: str) -> str:
    """``char`` as GBNF writes it inside a literal: itself when printable ASCII, else an escape."""
    if char in ('"', "\\"):
        return "\\" + char
    if char == "\n":
        return "\\n"
    if char == "\r":
        return "\\r"
    if char == "\t":
        return "\\t"
    code = ord(char)
    if 0x20 <= code < 0x7F:
        return char
    if code <= 0xFF:
        return f"\\x{code:02X}"
    if code <= 0xFFFF:
        return f"\\u{code:04X}"
    return f"\\U{code:08X}"


def literal(text: str) -> str:
    """``text`` as a GBNF string literal (quotes, backslashes, newlines and non-ASCII escaped)."""
    return '"' + "".join(_escape_char(c) for c in text) + '"'


def _class(chars: str, *, negate: bool = False) -> str:
    """A GBNF character class of ``chars`` (or of all but them); every member escaped by code
    point, so ``]``, ``^``, ``-`` and ``\\`` need no special cases."""
    body = "".join(f"\\x{ord(c):02X}" if ord(c) <= 0xFF else f"\\u{ord(c):04X}" for c in chars)
    return f"[{'^' if negate else ''}{body}]"


def _grammar(rules: Sequence[tuple[str, str]]) -> str:
    """Rules as GBNF text, one per line, ``root`` first."""
    return "".join(f"{name} ::= {body}\n" for name, body in rules)


def _free_text(max_chars: int) -> list[tuple[str, str]]:
    """Rules ``text``: 1 .. ``max_chars`` characters of one line, the first not whitespace."""
    rules = [("text", "first" if max_chars == 1 else f"first rest{{0,{max_chars - 1}}}")]
    rules.append(("first", _class(WHITESPACE, negate=True)))
    if max_chars > 1:
        rules.append(("rest", _class(LINE_BREAKS, negate=True)))
    return rules


def _check_keyword(keyword: str) -> None:
    if not _KEYWORD.fullmatch(keyword):
        raise ValueError(f"keyword {keyword!r}: the parsers' keywords are upper-case words like DECISION")


# -- the builders ---------------------------------------------------------------------


@functools.cache  # the align stage asks for the same one or two window lengths on every paper
def selection_grammar(window_len: int, *, allow_empty: bool = True) -> str:
    """``DECISION: [i, j, ...]`` (:func:`~tasks.evidencebench.alignment.parse_selection`): indices
    strictly increasing in 0 .. ``window_len`` - 1, possibly none (``[]``) unless ``allow_empty``
    is false (then at least one index).

    Strictly increasing is how a grammar rules out repeats: rule ``iK`` writes K and then,
    optionally, ``, `` and an index above K; ``tK`` is any index from K up. Linear in
    ``window_len``.
    """
    if window_len < 0:
        raise ValueError(f"a window has no negative length ({window_len})")
    if window_len == 0:
        return _grammar([("root", literal("DECISION: []"))])
    rules = [("root", f'{literal("DECISION: [")} t0{"?" if allow_empty else ""} "]"')]
    last = window_len - 1
    for k in range(window_len):
        rules.append((f"t{k}", f"i{k}" if k == last else f"i{k} | t{k + 1}"))
        rules.append((f"i{k}", literal(str(k)) if k == last else f'{literal(str(k))} (", " t{k + 1})?'))
    return _grammar(rules)


def choice_grammar(keyword: str, choices: Sequence[str]) -> str:
    """``KEYWORD: choice``, one of ``choices`` as written (suitability: ``DECISION`` with
    experiment / results / both / neither; leak check: ``DECISION`` with yes / no)."""
    _check_keyword(keyword)
    if not choices:
        raise ValueError("no choices given")
    for choice in choices:
        if not choice or choice != one_line(choice):
            raise ValueError(f"choice {choice!r} must be non-empty, one line, without outer spaces")
    alternatives = " | ".join(literal(c) for c in dict.fromkeys(choices))
    return _grammar([("root", f"{literal(keyword + ': ')} ({alternatives})")])


def hypothesis_grammar(max_chars: int = 400) -> str:
    """``HYPOTHESIS: `` then one line of 1 .. ``max_chars`` characters, the first not
    whitespace (:func:`~tasks.evidencebench.parsers.parse_hypothesis`)."""
    if not 1 <= max_chars <= MAX_HYPOTHESIS_CHARS:
        raise ValueError(f"max_chars {max_chars}: need 1 .. {MAX_HYPOTHESIS_CHARS} (what the parser accepts)")
    return _grammar([("root", f"{literal('HYPOTHESIS: ')} text"), *_free_text(max_chars)])


def aspects_grammar(max_aspects: int = 12, max_chars: int = 200) -> str:
    """``ASPECTS:`` then 1 .. ``max_aspects`` lines ``1. text``, ``2. text``, ... numbered from
    1, each text one line of 1 .. ``max_chars`` characters
    (:func:`~tasks.evidencebench.parsers.parse_aspects`; equal aspects are not ruled out)."""
    if max_aspects < 1 or max_chars < 1:
        raise ValueError(f"need max_aspects >= 1 and max_chars >= 1, got {max_aspects} and {max_chars}")
    rules = [("root", f"{literal('ASPECTS:')} a1")]
    for n in range(1, max_aspects + 1):
        item = literal("\n" + str(n) + ". ") + " text"
        rules.append((f"a{n}", item if n == max_aspects else f"{item} a{n + 1}?"))
    return _grammar(rules + _free_text(max_chars))


def labels_grammar(n_aspects: int) -> str:
    """``LABELS:`` then exactly ``n_aspects`` lines ``1: label``, ``2: label``, ... each label
    results, background or methods (:func:`~tasks.evidencebench.parsers.parse_labels`)."""
    if n_aspects < 1:
        raise ValueError("an instance to label has at least one aspect")
    lines = " ".join(literal("\n" + str(n) + ": ") + " label" for n in range(1, n_aspects + 1))
    label = " | ".join(literal(c) for c in LABELS)
    return _grammar([("root", f"{literal('LABELS:')} {lines}"), ("label", label)])


def refine_grammar(sentences: Sequence[str], citing: int) -> str:
    """``HINT:`` then some of ``sentences``, one per line, in their order, none twice,
    sentence ``citing`` among them (App. H.2; :func:`~tasks.evidencebench.parsers.refine_validator`
    for a paragraph the sentences come from and a citation sentence ``citing`` contains).

    Sentences are written with whitespace collapsed to single spaces
    (:func:`~tasks.evidencebench.llm_steps.one_line`), as the validator compares them.
    """
    if not 0 <= citing < len(sentences):
        raise ValueError(f"citing sentence {citing} is not one of the {len(sentences)} sentences")
    return _refine_grammar(sentences, {citing})


def _refine_grammar(sentences: Sequence[str], required: set[int]) -> str:
    """:func:`refine_grammar` where at least one of the sentences ``required`` must be chosen."""
    lines = [one_line(s) for s in sentences]
    for i in sorted(required):
        if not lines[i]:
            raise ValueError(f"the citing sentence {i} is empty")
        if _HINT_LINE.match(lines[i]):
            raise ValueError(
                f"the citing sentence {i} starts like the keyword HINT: (the reply could not parse)"
            )
    # Candidates: each text once (the parser refuses a repeated sentence, and two equal
    # sentences are the same answer), minus blank lines and lines the parser would read as
    # a second keyword.
    first_at: dict[str, int] = {}
    for i, line in enumerate(lines):
        if line and not _HINT_LINE.match(line):
            first_at.setdefault(line, i)
    candidates = sorted(first_at.values())
    must = {lines[i] for i in required}
    needed = [lines[i] in must for i in candidates]
    first_needed = needed.index(True)
    last_needed = max(k for k, flag in enumerate(needed) if flag)

    # uK: candidates from K on, a required one still due; vK: from K on, any (none needed).
    m = len(candidates)
    rules = [("root", f"{literal('HINT:')} u0")]
    for k, i in enumerate(candidates):
        line = literal("\n" + lines[i])
        after_v = f" v{k + 1}" if k + 1 < m else ""
        if k <= last_needed:
            take = line + (after_v if needed[k] else f" u{k + 1}")
            rules.append((f"u{k}", take if k == last_needed else f"{take} | u{k + 1}"))
        if k > first_needed:  # vK follows a required sentence chosen before K
            rules.append((f"v{k}", f"({line})?{after_v}"))
    return _grammar(rules)


@functools.lru_cache(maxsize=1)
def _english() -> pysbd.Segmenter:
    # clean=False: segments keep the paragraph's own text, which the reply must copy verbatim.
    return pysbd.Segmenter(language="en", clean=False)


def paragraph_sentences(paragraph: str) -> list[str]:
    """The sentences of ``paragraph`` (pysbd, English, as the paper pools are split), with
    whitespace collapsed to single spaces.

    The paragraph is split as one line: a line break inside a review paragraph is wrapping,
    not a boundary, and the validator compares sentences with the paragraph so collapsed.
    """
    return [one_line(s) for s in _english().segment(one_line(paragraph)) if s.strip()]


def refine_grammar_for(paragraph: str, citation: str) -> str | None:
    """:func:`refine_grammar` for ``paragraph`` split by :func:`paragraph_sentences`, where
    any sentence containing ``citation`` may be the kept citing sentence; None when no
    sentence contains it (e.g. the splitter cut the marker in two): ask unconstrained."""
    marker = one_line(citation)
    if not marker:
        raise ValueError("the citation is empty")
    text = one_line(paragraph)
    # Only sentences the validator finds in the paragraph may be offered (always so for
    # pysbd's segments; kept as a guard against a splitter that rewrites text).
    sentences = [s for s in paragraph_sentences(paragraph) if one_line(s) in text]
    citing = {
        i for i, s in enumerate(sentences) if marker in one_line(s) and not _HINT_LINE.match(one_line(s))
    }
    if not citing:
        return None
    return _refine_grammar(sentences, citing)
