"""A plain-Python re-implementation of spaCy's blank English tokenizer.

datatrove's Gopher filters count words with ``spacy.blank("en")``; loading spaCy only for
that is slow and heavy, so the filter (:mod:`tasks.common.text.gopher`) uses this module, and the
tests compare both token for token. The rule data (prefix, suffix and infix lists, URL
pattern, tokenizer exceptions) follow spaCy 3.8's English defaults:

1. split the text on whitespace (``str.split``) into chunks;
2. a chunk with a special case gets its fixed tokens: contractions (``don't`` → ``do``
   ``n't``, ``cannot`` → ``can`` ``not``), abbreviations that keep their full stop
   (``e.g.``, ``vs.``, ``Dr.``, ``Jan.``), times (``10am``), emoticons (``8)``, ``):``);
3. otherwise prefixes (opening brackets and quotes, currency, ``§%=+``, ellipses,
   pictographic symbols) and suffixes (closing punctuation and quotes, ``'s``, a unit or
   currency after a digit as in ``10mg``, a full stop after a lower-case letter, a digit,
   punctuation or two capitals) are peeled off, stopping at a special case;
4. what is left stays whole if it is a URL, else is split at infixes: hyphens and
   ``/:<>=`` after a letter or digit and before a letter (``IL-6-dependent`` → ``IL-6``
   ``-`` ``dependent``), ``+-*^`` between digits, ``,`` between letters, ``.`` between a
   lower- and an upper-case letter, ellipses, pictographic symbols (``37°C``);
5. pieces of a special case cut up by step 3-4 are joined again (``said’’`` → ``said``
   ``’’``), as spaCy's special-case matcher does.

Letter classes (lower, upper, caseless) come from the Unicode database. On the samples (2,054 paragraphs of the articles,
reviews and HTML pages and 6,310 EvidenceBench sentences) the token lists are identical
to spaCy's for every text.

"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Final

# --------------------------------------------------------------------------------------
# Character classes (built once from the Unicode database, Basic Multilingual Plane)
# --------------------------------------------------------------------------------------


def _char_class(codepoints: Iterable[int]) -> str:
    """Compress code points into the body of a regex character class ("a-z...")."""
    out: list[str] = []
    cps = sorted(set(codepoints))
    i = 0
    while i < len(cps):
        j = i
        while j + 1 < len(cps) and cps[j + 1] == cps[j] + 1:
            j += 1
        lo = re.escape(chr(cps[i]))
        out.append(lo if i == j else f"{lo}-{re.escape(chr(cps[j]))}")
        i = j + 1
    return "".join(out)


def _unicode_classes() -> tuple[str, str, str, str]:
    lower: list[int] = []
    upper: list[int] = []
    uncased: list[int] = []
    icons: list[int] = []
    for cp in range(0x10000):
        if cp in (0xAA, 0xB5, 0xBA):  # ª µ º: letters to Unicode, not to spaCy ("µg/µl" stays whole)
            continue
        cat = unicodedata.category(chr(cp))
        if cat == "Ll":
            lower.append(cp)
        elif cat == "Lu":
            upper.append(cp)
        elif cat == "Lo":
            uncased.append(cp)
        elif cat == "So":
            icons.append(cp)
    # Letters without case (CJK, Hebrew, ...) count as both lower and upper case, as spaCy's do.
    al = _char_class(lower + uncased)
    au = _char_class(upper + uncased)
    a = _char_class(lower + upper + uncased)
    # "Other symbols" (°, ©, ■, ●, ▲, ►, dingbats) plus the emoji planes: split off as tokens.
    i = _char_class(icons) + "\U0001f000-\U0001faff"
    return al, au, a, i


_AL, _AU, _A, _ICON = _unicode_classes()


def _words(text: str) -> tuple[str, ...]:
    """A whitespace-separated list written as one string (for long lists of short items)."""
    return tuple(text.split())


# Opening/closing punctuation that is split off a chunk's edges (spaCy's English lists).
_PUNCT_CHARS = "…,:;!?¿؟¡()[]{}<>_#*&。？！，、；：～·।،۔؛٪"
_QUOTE_CHARS = "'\"”“`‘´’‚,„»«「」『』（）〔〕【】《》\u3008\u3009\u2329\u232a⟦⟧"
_CURRENCY_CHARS = "$£€¥฿₽﷼₠-₿"
_HYPHENS = ("-", "–", "—", "--", "---", "——", "~")  # longer alternatives after shorter: spaCy's order
_UNITS = _words(
    "km km² km³ m m² m³ dm dm² dm³ cm cm² cm³ mm mm² mm³ ha µm nm yd in ft "
    "kg g mg µg t lb oz m/s km/h kmh mph hPa Pa mbar mb MB kb KB gb GB tb TB T G M K %"
)


def _cls(chars: str) -> str:
    # Escape everything except a range dash written as "x-y" inside _CURRENCY_CHARS.
    return "".join("-" if c == "-" and 0 < k < len(chars) - 1 else re.escape(c) for k, c in enumerate(chars))


_P = re.escape(_PUNCT_CHARS)
_Q = re.escape(_QUOTE_CHARS)

# Prefix: matched at the start of what is left of a chunk; first alternative wins.
_PREFIX_RE = re.compile(
    r"^(?:\+(?![0-9])|\.\.+|US\$|C\$|A\$|"
    rf"[§%=—–{_P}{_Q}{_cls(_CURRENCY_CHARS)}{_ICON}])"
)

# Suffix: the leftmost position from which one alternative reaches the end wins.
_SUFFIX_RE = re.compile(
    r"(?:"
    r"\.\.+|……|'s|'S|’s|’S|"
    r"(?<=[0-9])\+|"
    r"(?<=°[FfCcKk])\.|"
    rf"(?<=[0-9])(?:US\$|C\$|A\$|[{_cls(_CURRENCY_CHARS)}])|"
    rf"(?<=[0-9])(?:{'|'.join(re.escape(u) for u in _UNITS)})|"
    # a full stop after a lower-case letter, a digit, %²-+, punctuation or a quote
    # (the literal "|", "(", "?", ":" and ")" are in spaCy's class, and so in ours)
    rf"(?<=[0-9{_AL}%²\-+{_P}|(?:){_Q}])\.|"
    # a full stop after two capitals ("USA.") but not after one ("J." stays whole)
    rf"(?<=[{_AU}][{_AU}])\.|"
    rf"[{_P}{_Q}{_ICON}—–]"
    r")$"
)

# Infixes: split points inside what is left after prefixes and suffixes.
_INFIX_RE = re.compile(
    "|".join(
        (
            r"\.\.+",
            "…",
            f"[{_ICON}]",
            r"(?<=[0-9])[+\-*^](?=[0-9-])",
            rf"(?<=[{_AL}{_Q}])\.(?=[{_AU}{_Q}])",
            rf"(?<=[{_A}]),(?=[{_A}])",
            rf"(?<=[{_A}0-9])(?:{'|'.join(re.escape(h) for h in _HYPHENS)})(?=[{_A}])",
            rf"(?<=[{_A}0-9])[:<>=/](?=[{_A}])",
        )
    )
)

# A URL (scheme optional) is one token once the chunk's punctuation is peeled off.
_HOST_CHAR = "A-Za-z0-9\u00a1-\uffff"
_URL_RE = re.compile(
    r"(?:[\w+\-.]{2,}://)?"  # scheme
    r"(?:\S+(?::\S*)?@)?"  # user[:password]@
    r"(?:"
    r"(?:[1-9]\d?|1\d\d|2[01]\d|22[0-3])(?:\.(?:1?\d{1,2}|2[0-4]\d|25[0-5])){2}"  # dotted IPv4
    r"(?:\.(?:[1-9]\d?|1\d\d|2[0-4]\d|25[0-4]))"
    rf"|(?:(?:[{_HOST_CHAR}][{_HOST_CHAR}_-]{{0,62}})?[{_HOST_CHAR}]\.)+[{_AL}]{{2,63}}"  # host.tld
    r")"
    r"(?::\d{2,5})?"  # port
    r"(?:[/?#]\S*)?"  # path, query, fragment
    r"\Z"
)


# --------------------------------------------------------------------------------------
# Special cases: chunks with a fixed tokenisation (spaCy's English exceptions, abridged)
# --------------------------------------------------------------------------------------


# Chunks that stay one token as they are.
_SINGLE_TOKENS = _words(
    # abbreviations that keep their full stop
    "a.m. p.m. Adm. Bros. co. Co. Corp. D.C. Dr. e.g. E.g. E.G. Gen. Gov. i.e. I.e. I.E. Inc. Jr. "
    "Ltd. Md. Messrs. Mo. Mont. Mr. Mrs. Ms. Ph.D. Prof. Rep. Rev. Sen. St. vs. v.s. Mt. "
    "Jan. Feb. Mar. Apr. Jun. Jul. Aug. Sep. Sept. Oct. Nov. Dec. "
    "Ak. Ala. Ariz. Ark. Calif. Colo. Conn. Del. Fla. Ga. Ia. Id. Ill. Ind. Kan. Kans. Ky. La. Mass. "
    "Mich. Minn. Miss. Neb. Nebr. Nev. N.C. N.D. N.H. N.J. N.M. N.Y. Okla. Ore. Pa. S.C. Tenn. Va. "
    "Wash. Wis. ä. ö. ü. "
    # contraction pieces and words that keep their apostrophe or slash
    "'s 'S ’s ’S ‘s ‘S 'd ’d 're ’re 'll ’ll 'em ’em 'bout ’bout 'nuff ’nuff ' ’ '' ’’ "
    "and/or w/o C++ em ll nuff "
    # emoticons made of characters that also occur in scientific writing
    "8) 8-) (-8 8D 8-D :) :-) (: (-: :( :-( ): )-: :/ :-/ =/ :| =| :] [: =] [= =( =) (= :1 :3 :0 "
    ":-3 :-0 =3 0.0 0.o o.0 o.o O.O O.o o.O ._. :P :p :D :o :O :x :X :* :> :} xD XD <3 <33 <333 "
    ":o) (o: ;) ;-) (; (-; ;D >.< <.< >.> :-] [-: :-} :-* :-> :-P :-p :-D :-O :-o :-X :-x "
    "-_- -__- ^_^ ^__^ ^___^ o_o O_O o_O O_o 0_0 0_o o_0 V_V v_v V.V v.v @_@ ]= =[ =D ;-D ;_; "
    ":'( :') :'-( :'-) :’( :’) :’-( :’-) :(( :((( :() :)) :))) :-(( :-((( :-)) :-))) :-| "
    "</3 >:( >:o ><(((*> XDD xDD (*_*) (-_-) (._.) (>_<) (^_^) (¬_¬) (ಠ_ಠ) ಠ_ಠ ಠ︵ಠ "
    '(╯°□°）╯︵┻━┻ ¯\\(ツ)/¯ \\") \\n \\t — <space>'
)


def _contractions() -> dict[str, tuple[str, ...]]:
    """Contractions split into their pieces ("don't" → "do" "n't"), with either apostrophe,
    without it, and capitalised."""
    sp: dict[str, tuple[str, ...]] = {}

    def add(*parts: str) -> None:
        for apos in ("'", "’"):
            p = tuple(x.replace("'", apos) for x in parts)
            sp["".join(p)] = p
            t = (p[0][:1].upper() + p[0][1:], *p[1:])  # "Don't" → "Do" "n't"
            sp["".join(t)] = t

    def contract(stem: str, *tails: str) -> None:
        """stem + each tail (pieces separated by spaces), with and without the apostrophe."""
        for tail in tails:
            parts = [stem, *tail.split()]
            add(*parts)
            add(*(x.replace("'", "") for x in parts))

    contract("i", "'m", "'m a")
    for pron in ("i", "you", "he", "she", "it", "we", "they"):
        contract(pron, "'ll", "'ll 've", "'d", "'d 've")
    for pron in ("i", "you", "we", "they"):
        contract(pron, "'ve")
    for pron in ("you", "we", "they"):
        contract(pron, "'re")
    for pron in ("he", "she", "it"):
        contract(pron, "'s")
    for word in ("who", "what", "when", "where", "why", "how", "there", "that", "this", "these", "those"):
        if word not in ("these", "those"):
            contract(word, "'s")
        contract(word, "'ll", "'ll 've", "'d", "'d 've")
        if word not in ("that", "this"):
            contract(word, "'re", "'ve")
    for verb in ("ca", "could", "did", "does", "do", "had", "may", "might", "must", "need", "ought"):
        contract(verb, "n't", "n't 've")
    for verb in ("sha", "should", "wo", "would"):
        contract(verb, "n't", "n't 've")
    for verb in ("ai", "are", "is", "was", "were", "have", "has", "dare"):
        contract(verb, "n't")
    for verb in ("could", "might", "must", "should", "would", "not"):
        contract(verb, "'ve")
    add("let", "'s")
    add("c'm", "on")
    add("how", "'d", "'y")
    for parts in (("can", "not"), ("gon", "na"), ("got", "ta")):
        add(*parts)
    sp["y'all"] = ("y'", "all")
    sp["y’all"] = ("y’", "all")
    sp["yall"] = ("y", "all")
    return sp


def _special_cases() -> dict[str, tuple[str, ...]]:
    sp = _contractions()
    # dropped-g verbs and other words that keep their apostrophe: one token each
    for word in ("doin", "goin", "havin", "lovin", "nothin", "nuthin", "somethin", "ol"):
        for w in (word, word.title()):
            for tail in ("", "'", "’"):
                sp[w + tail] = (w + tail,)
    for word in ("'cause", "'cos", "'coz", "'cuz", "ma'am", "o'clock"):
        cap = word[0] + word[1].upper() + word[2:] if word[0] == "'" else word[0].upper() + word[1:]
        for w in (word, cap):
            for apos in ("'", "’"):
                sp[w.replace("'", apos)] = (w.replace("'", apos),)
    for h in range(1, 13):
        for period in ("a.m.", "am", "p.m.", "pm"):
            sp[f"{h}{period}"] = (str(h), period)
    # Capitalised pronoun + contraction that are ordinary words, never split.
    for word in ("Ill", "ill", "Its", "its", "Hell", "hell", "Shell", "shell", "Shed", "shed"):
        sp.pop(word, None)
    for word in ("were", "Were", "Well", "well", "Whore", "whore"):
        sp.pop(word, None)

    for s in _SINGLE_TOKENS:
        sp[s] = (s,)
    for c in "abcdefghijklmnopqrstuvwxyz":
        sp[c + "."] = (c + ".",)
    for c in "CcFfKk":
        sp[f"°{c}."] = ("°", c, ".")
    return sp


SPECIALS: Final[dict[str, tuple[str, ...]]] = _special_cases()


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------


def _split_chunk(chunk: str, specials: dict[str, tuple[str, ...]]) -> tuple[str, ...]:
    """Tokens of one whitespace-free chunk (spaCy's affix algorithm), before the matcher."""
    special = specials.get(chunk)
    if special is not None:
        return special
    prefixes: list[str] = []
    suffixes: list[str] = []
    s = chunk
    last = -1
    # Peel prefixes and suffixes until nothing changes or a special case is reached.
    while s and len(s) != last:
        if s in specials:
            break
        last = len(s)
        m = _PREFIX_RE.search(s)
        pre = m.end() if m else 0
        if pre and s[pre:] in specials:
            prefixes.append(s[:pre])
            s = s[pre:]
            break
        m = _SUFFIX_RE.search(s[pre:])
        suf = len(s) - pre - m.start() if m else 0
        if suf and s[:-suf] in specials:
            suffixes.append(s[-suf:])
            s = s[:-suf]
            break
        if pre and suf and pre + suf <= len(s):
            prefixes.append(s[:pre])
            suffixes.append(s[-suf:])
            s = s[pre:-suf]
        elif pre:
            prefixes.append(s[:pre])
            s = s[pre:]
        elif suf:
            suffixes.append(s[-suf:])
            s = s[:-suf]
    middle: list[str] = []
    if s:
        special = specials.get(s)
        if special is not None:
            middle.extend(special)
        elif _URL_RE.match(s):
            middle.append(s)
        else:
            start = 0
            for m in _INFIX_RE.finditer(s):
                a, b = m.span()
                if a == 0:  # an infix at the very start does not split (spaCy)
                    continue
                if a != start:
                    middle.append(s[start:a])
                if a != b:
                    middle.append(s[a:b])
                start = b
            if start < len(s):
                middle.append(s[start:])
    suffixes.reverse()
    return (*prefixes, *middle, *suffixes)


def _affix_patterns() -> dict[tuple[str, ...], tuple[str, ...]]:
    """Special cases that the affix rules would cut up: their pieces → their tokens.

    spaCy re-joins such pieces after splitting (its "special matcher"): in ``said’’``
    the suffix rules cut ``’`` twice, and the special case ``’’`` joins them again.
    """
    out: dict[tuple[str, ...], tuple[str, ...]] = {}
    for s, toks in SPECIALS.items():
        if _PREFIX_RE.search(s) or _SUFFIX_RE.search(s) or _INFIX_RE.search(s):
            out[_split_chunk(s, {})] = toks
    return out


_PATTERNS: Final = _affix_patterns()
_PATTERN_LENGTHS: Final = sorted({len(k) for k in _PATTERNS}, reverse=True)
_PATTERN_FIRST: Final = frozenset(k[0] for k in _PATTERNS)


def _rejoin(toks: tuple[str, ...]) -> tuple[str, ...]:
    """Apply :data:`_PATTERNS` to a chunk's tokens: longest matches first, no overlaps."""
    found: list[tuple[int, int]] = []
    for i, t in enumerate(toks):
        if t in _PATTERN_FIRST:
            found.extend(
                (i, i + n) for n in _PATTERN_LENGTHS if i + n <= len(toks) and toks[i : i + n] in _PATTERNS
            )
    if not found:
        return toks
    found.sort(key=lambda se: (se[0] - se[1], se[0]))  # longest first, then leftmost
    taken: set[int] = set()
    chosen: dict[int, int] = {}
    for start, end in found:
        if start not in taken and end - 1 not in taken:
            chosen[start] = end
        taken.update(range(start, end))
    out: list[str] = []
    i = 0
    while i < len(toks):
        stop = chosen.get(i)
        if stop is None:
            out.append(toks[i])
            i += 1
        else:
            out.extend(_PATTERNS[toks[i:stop]])
            i = stop
    return tuple(out)


def chunk_tokens(chunk: str) -> tuple[str, ...]:
    """The tokens of one whitespace-free chunk of text."""
    toks = _split_chunk(chunk, SPECIALS)
    return _rejoin(toks) if len(toks) > 1 else toks
