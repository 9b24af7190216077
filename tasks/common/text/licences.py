"""Normalise what an article says about its licence to one short identifier.

Both readers call :func:`normalise_licence` with whatever the file offers (a licence URL,
the licence statement, a ``license-type`` attribute). The result is an SPDX-like id
("CC-BY-4.0", "CC-BY-NC-ND-3.0", "CC0-1.0"), "CC-BY" (etc.) when the statement names the
licence but no version, "public-domain", or None when nothing recognisable is said: a
release must never claim a licence the article does not state.
"""

from __future__ import annotations

import re

# creativecommons.org/licenses/by-nc/4.0/..., /publicdomain/zero/1.0, /publicdomain/mark/1.0
_CC_URL = re.compile(
    r"creativecommons\.org/(?:licenses|licences)/(?P<code>[a-z-]+)(?:/(?P<version>\d+(?:\.\d+)?))?"
    r"|creativecommons\.org/publicdomain/(?P<pd>zero|mark)(?:/(?P<pdversion>\d+(?:\.\d+)?))?",
    re.IGNORECASE,
)
_CC_CODES = {"by", "by-sa", "by-nd", "by-nc", "by-nc-sa", "by-nc-nd"}

# "CC BY-NC 4.0", "CC-BY 4.0", "cc-by", "CCBY" (attribute values and statements).
_CC_SHORT = re.compile(
    r"\bCC[\s_-]?(?P<code>BY(?:[\s_-]?(?:NC|SA|ND)){0,2})\b(?:[\s_-]*(?P<version>\d\.\d))?",
    re.IGNORECASE,
)
# "Creative Commons Attribution-NonCommercial-NoDerivatives 4.0 International License"
_CC_LONG = re.compile(
    r"Creative\s+Commons\s+Attribution(?P<mods>(?:[\s,-]*(?:Non-?Commercial|No-?Deriv(?:ative)?s?|Share-?Alike))*)"
    r"(?:\s*(?:\(CC[\s-]BY[^)]*\))?\s*(?:License|Licence)?\s*(?:version\s*)?(?P<version>\d\.\d))?",
    re.IGNORECASE,
)
_CC0 = re.compile(r"\bCC\s?0\b|CC\s?Zero|public\s+domain\s+dedication", re.IGNORECASE)
_PUBLIC_DOMAIN = re.compile(r"\bpublic[\s-]+domain\b", re.IGNORECASE)
_STATEMENT_MAX = 500  # characters of a licence statement kept in ArticleMeta.license_text


def normalise_licence(url: str | None, text: str | None, license_type: str | None) -> str | None:
    """The licence id, trusting a URL over a statement over a bare type attribute."""
    for candidate in (url, _first_url(text)):
        if candidate:
            found = _from_url(candidate)
            if found:
                return found
    for candidate in (text, license_type):
        if candidate:
            found = _from_words(candidate)
            if found:
                return found
    return None


def _first_url(text: str | None) -> str | None:
    if not text:
        return None
    match = _CC_URL.search(text)
    return match.group(0) if match else None


def _from_url(url: str) -> str | None:
    match = _CC_URL.search(url)
    if not match:
        return None
    if match.group("pd"):
        if match.group("pd").lower() == "zero":
            return f"CC0-{match.group('pdversion') or '1.0'}"
        return "public-domain"  # the Public Domain Mark is a statement, not a licence
    code = match.group("code").lower()
    if code not in _CC_CODES:
        return None
    return _cc_id(code, match.group("version"))


def _from_words(text: str) -> str | None:
    if _CC0.search(text):
        return "CC0-1.0"
    match = _CC_SHORT.search(text)
    if match:
        code = re.sub(r"[\s_-]+", "", match.group("code").lower())
        # "bync" -> "by-nc": split the run of two-letter elements back apart.
        code = "-".join(code[i : i + 2] for i in range(0, len(code), 2))
        if code in _CC_CODES:
            return _cc_id(code, match.group("version"))
    match = _CC_LONG.search(text)
    if match:
        mods = match.group("mods").lower()
        code = "by"
        if "commercial" in mods:
            code += "-nc"
        if "share" in mods:
            code += "-sa"
        elif "deriv" in mods:
            code += "-nd"
        return _cc_id(code, match.group("version"))
    if _PUBLIC_DOMAIN.search(text):
        return "public-domain"
    return None


def _cc_id(code: str, version: str | None) -> str:
    base = "CC-" + code.upper()
    return f"{base}-{_version(version)}" if version else base


def _version(version: str) -> str:
    return version if "." in version else f"{version}.0"


def shorten_statement(text: str) -> str:
    """A licence statement cut at a word boundary to at most ~500 characters (… marks a cut)."""
    if len(text) <= _STATEMENT_MAX:
        return text
    return text[:_STATEMENT_MAX].rsplit(" ", 1)[0] + "…"


# How much each licence family restricts re-use (CC's own order: each step adds a condition).
_STRICTNESS = {"cc0": 0, "public-domain": 0, "cc-by": 1, "cc-by-sa": 2, "cc-by-nd": 3, "cc-by-nc": 3,
               "cc-by-nc-sa": 4, "cc-by-nc-nd": 5}  # fmt: skip
# Pairs whose terms cannot both hold for one work: the release is "other", naming both.
_CONFLICTS = (
    {"cc-by-sa", "cc-by-nc"},
    {"cc-by-sa", "cc-by-nd"},
    {"cc-by-sa", "cc-by-nc-nd"},
    {"cc-by-sa", "cc-by-nc-sa"},
)


def _family(licence: str) -> str | None:
    lower = licence.lower()
    if lower.startswith("cc0") or lower == "public-domain":
        return "cc0" if lower.startswith("cc0") else "public-domain"
    found = re.match(r"(cc-by(?:-nc)?(?:-sa|-nd)?)(?:-(\d\.\d))?$", lower)
    return found.group(1) if found else None


def hub_id(licence: str) -> str:
    """A source licence id ("CC-BY-4.0") as the Hugging Face Hub writes it ("cc-by-4.0")."""
    lower = licence.lower()
    return lower if re.search(r"-\d\.\d$", lower) else f"{lower}-4.0" if lower.startswith("cc-by") else lower


def release_licence(configured: str, sources: dict[str, int]) -> tuple[str, str | None]:
    """The licence a release may carry: the configured one, unless a source licence is more
    restrictive (then that one), conflicts with another, or is unknown (then ``other``, with
    the reason as its name). A card never claims more than its sources allow."""
    families = {s: _family(s) for s in sources}
    unknown = sorted(s for s, f in families.items() if f is None)
    if unknown:
        return "other", f"sources under unknown or unrecognised licences ({', '.join(unknown)}): check each"
    present = {f for f in families.values() if f is not None}
    clash = next((pair for pair in _CONFLICTS if pair <= present), None)
    if clash:
        return "other", f"sources under {' and '.join(sorted(clash))}, whose terms conflict: see each source"
    strictest = max(sources, key=lambda s: _STRICTNESS[families[s] or "cc0"], default=None)
    own = _family(configured)
    if strictest is None or (
        own is not None and _STRICTNESS[own] >= _STRICTNESS[families[strictest] or "cc0"]
    ):
        return configured, None
    return hub_id(strictest), None
