"""Cited works of a news page: its study references grouped by publication, and the rules
that decide whether the page reports on one study (paper 003 §2; the stage is
``tasks/crossgenre/stages/single_study.py``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from tasks.common.pubmed.local import is_elsevier_pii, pii_key
from tasks.common.pubmed.port import ArticleId, IdKind, PubmedRecord, PubmedSource
from tasks.crossgenre.report_cues import Evidence, not_a_study, page_kind, work_evidence
from tasks.crossgenre.roundup import roundup_wording, two_claims

_ID_KINDS = frozenset({"doi", "pmid", "pmcid", "pii"})


@dataclass
class Work:
    """The references of one cited publication; ``pmid`` when PubMed knows it."""

    key: str
    pmid: str | None
    refs: list[dict[str, Any]] = field(default_factory=list)

    def cited(self) -> dict[str, Any]:
        first = self.refs[0]
        if self.pmid is not None:
            url = next((r["url"] for r in self.refs if r["kind"] != "text"), first["url"])
            return {"id_kind": "pmid", "id_value": self.pmid, "url": url}
        if first["id_kind"]:
            return {"id_kind": first["id_kind"], "id_value": first["id_value"], "url": first["url"]}
        return {"id_kind": "url", "id_value": first["url"], "url": first["url"]}


def article_id(ref: Mapping[str, Any]) -> ArticleId | None:
    kind, value = ref.get("id_kind"), ref.get("id_value")
    return ArticleId(cast(IdKind, kind), value) if kind in _ID_KINDS and value else None


def _url_key(url: str) -> str:
    bare = re.sub(r"^[a-z]+://(?:www\.)?", "", url.strip(), flags=re.IGNORECASE)
    return re.split(r"[?#]", bare, maxsplit=1)[0].rstrip("/").lower()


def ref_keys(ref: Mapping[str, Any], pmids: Mapping[ArticleId, str | None]) -> list[str]:
    """What one reference is known as: its PMID (when PubMed maps it), its identifier, an
    Elsevier DOI's PII (``10.1016/S0140-6736(19)32317-7`` is PII ``S0140-6736(19)32317-7``)
    and its URL. References sharing any key are one work."""
    keys: list[str] = []
    aid = article_id(ref)
    if aid is not None:
        pmid = pmids.get(aid)
        if pmid is not None:
            keys.append(f"pmid:{pmid}")
        if aid.kind == "pii":
            keys.append(f"pii:{pii_key(aid.value)}")
        else:
            keys.append(f"{aid.kind}:{aid.value.lower()}")
        if aid.kind == "doi":
            prefix, _, suffix = aid.value.partition("/")
            if prefix == "10.1016" and is_elsevier_pii(pii_key(suffix)):
                keys.append(f"pii:{pii_key(suffix)}")
    keys.append(f"url:{_url_key(ref['url'])}")
    return keys


def group_works(refs: Sequence[Mapping[str, Any]], pmids: Mapping[ArticleId, str | None]) -> list[Work]:
    """``refs`` grouped into works, in order of first reference: references that share a
    PMID, an identifier (an Elsevier DOI and its PII too) or a URL are one work."""
    parent = list(range(len(refs)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    keys_of = [ref_keys(ref, pmids) for ref in refs]
    first: dict[str, int] = {}
    for i, keys in enumerate(keys_of):
        for key in keys:
            j = first.setdefault(key, i)
            a, b = root(i), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in range(len(refs)):
        groups.setdefault(root(i), []).append(i)
    works = []
    for members in groups.values():
        keys = [k for i in members for k in keys_of[i]]
        pmid = next((k[5:] for k in keys if k.startswith("pmid:")), None)
        key = f"pmid:{pmid}" if pmid else keys[0]
        works.append(Work(key, pmid, [dict(refs[i]) for i in members]))
    return works


def related_series(works: Sequence[Work], records: Mapping[str, PubmedRecord]) -> str | None:
    """Why the works are one tight series (same first author, or same journal issue), or None."""
    found = [records.get(w.pmid) if w.pmid else None for w in works]
    if any(r is None for r in found):
        return None
    recs = cast(list[PubmedRecord], found)
    firsts = {r.authors[0].casefold() if r.authors else "" for r in recs}
    if len(firsts) == 1 and "" not in firsts:
        return f"same first author ({recs[0].authors[0]})"
    issues = {(r.journal.casefold(), r.volume, r.issue) for r in recs}
    if len(issues) == 1 and recs[0].volume and recs[0].issue:
        return f"same journal issue ({recs[0].journal} {recs[0].volume}({recs[0].issue}))"
    return None


@dataclass(frozen=True)
class Verdict:
    keep: bool | None  # None: undecided
    rule: str
    why: str
    reason: str = ""  # the excluded reason
    reported: tuple[int, ...] = ()  # the kept works (indexes); empty: all of them

    def cited_works(self, works: Sequence[Work]) -> list[Work]:
        """The works a kept page cites: the reported one(s), else all."""
        return [works[i] for i in self.reported] or list(works)


@dataclass(frozen=True)
class PageSigns:
    """What the page says of itself (extract's ``page_types`` / ``headings``)."""

    page_types: Sequence[str] = ()
    headings: Sequence[str] = ()
    lead: str = ""  # the first LEAD_CHARS of the main text
    year: int | None = None  # the page's publication year


LEAD_CHARS = 400


def page_signs(page: Mapping[str, Any]) -> PageSigns:
    """The signs of a journal_links row (page types, headings, lead, year)."""
    published = page.get("published") or ""
    year = int(published[:4]) if published[:4].isdigit() else None
    lead = (page.get("main_text") or "")[:LEAD_CHARS]
    return PageSigns(page.get("page_types") or (), page.get("headings") or (), lead, year)


def decide_page(
    page: Mapping[str, Any],
    works: Sequence[Work],
    records: Mapping[str, PubmedRecord],
    max_works: int,
    roundup_patterns: Sequence[str] = (),
) -> Verdict:
    """:func:`decide` on a journal_links row (its headline and :func:`page_signs`)."""
    return decide(page["headline"], works, records, max_works, roundup_patterns, page_signs(page))


def decide(
    headline: str,
    works: Sequence[Work],
    records: Mapping[str, PubmedRecord],
    max_works: int,
    roundup_patterns: Sequence[str] = (),
    signs: PageSigns = PageSigns(),
) -> Verdict:
    """The first rule that applies, in order (paper 003 §2; ``decided_by`` names it):

    1. ``roundup_wording`` — the headline reads as a round-up, digest, "in brief", a count of
       studies or a numbered listicle (:mod:`tasks.crossgenre.roundup`: English, German, French,
       Spanish, plus the config's ``roundup_patterns``; review wording such as "meta-analysis
       finds" turns the counting patterns off) → ``roundup``.
    2. ``page_kind`` — the page declares a product, recipe, FAQ or how-to (``og:type``, JSON-LD),
       or is a listicle of numbered sections (:func:`tasks.crossgenre.report_cues.page_kind`)
       → ``not_a_report``; ``not_a_study`` — its lead reports "a new perspective", "a
       commentary", "new guidelines" … (:func:`~tasks.crossgenre.report_cues.not_a_study`)
       → ``not_a_report``.
    3. ``too_many_works`` — more than ``max_works`` works → ``multiple_studies``.
    4. ``one_work`` — one work the page reports (reporting words near its link, a source
       block, the page's metadata: :func:`tasks.crossgenre.report_cues.work_evidence`) → kept;
       ``cited_in_passing`` — one work with background words near it and none of reporting
       → ``not_a_report``; one work with neither → ``no_report_cue``, undecided.
    5. ``reported_work`` — of several works, one reads as reported and none of the others
       does → kept, citing that one (the others are background).
    6. ``related_series`` — every work is a PubMed record, and all share the first author, or all
       the journal, volume and issue → kept.
    7. ``two_claims`` — a headline of two claims joined by ";" → ``roundup``.
    8. ``unrelated_works`` — otherwise undecided.

    Undecided pages go to the LLM when ``llm`` is set (prompt ``prompts/crossgenre/single_study.md``,
    JSON ``{"single_study": bool, "reason": str}``; ``decided_by: llm``; a false answer →
    ``multiple_studies``; a failed request → ``invalid_reply`` / ``truncated`` /
    ``request_failed`` with the raw reply), else are excluded ``undecided``.
    """
    wording = roundup_wording(headline, list(roundup_patterns))
    if wording:
        return Verdict(False, "roundup_wording", f"round-up headline ({wording})", "roundup")
    kind = page_kind(signs.page_types, signs.headings)
    if kind:
        return Verdict(False, "page_kind", kind, "not_a_report")
    work_kind = not_a_study(signs.lead)
    if work_kind:
        why = f"the lead reports {work_kind!r}, not a study"
        return Verdict(False, "not_a_study", why, "not_a_report")
    n = len(works)
    if n == 0:
        return Verdict(False, "no_works", "no study reference to decide on", "undecided")
    if n > max_works:
        why = f"{n} distinct cited works (more than max_works {max_works})"
        return Verdict(False, "too_many_works", why, "multiple_studies")
    evidence = [work_evidence(w.refs, headline, signs.year) for w in works]
    if n == 1:
        return _one_work(works[0], evidence[0])
    reported = [i for i, e in enumerate(evidence) if e.reported]
    if len(reported) == 1:
        i = reported[0]
        why = f"{works[i].key} reported ({evidence[i].text()}); {n - 1} other work(s) only cited"
        return Verdict(True, "reported_work", why, reported=(i,))
    series = related_series(works, records)
    if series:
        return Verdict(True, "related_series", f"{n} works of one series: {series}")
    if two_claims(headline):
        return Verdict(
            False, "two_claims", f"{n} unrelated works and a headline of two claims joined by ';'", "roundup"
        )
    keys = ", ".join(w.key for w in works)
    return Verdict(None, "unrelated_works", f"{n} works not one series ({keys})", "undecided")


def _one_work(work: Work, evidence: Evidence) -> Verdict:
    refs = f"{work.key}, {len(work.refs)} reference(s)"
    if evidence.reported:
        return Verdict(True, "one_work", f"one cited work ({refs}), reported: {evidence.text()}")
    if evidence.score < 0:
        return Verdict(
            False, "cited_in_passing", f"one cited work ({refs}): {evidence.text()}", "not_a_report"
        )
    return Verdict(None, "no_report_cue", f"one cited work ({refs}): {evidence.text()}", "undecided")


def works_text(works: Sequence[Work], records: Mapping[str, PubmedRecord]) -> str:
    lines = []
    for i, work in enumerate(works, 1):
        record = records.get(work.pmid) if work.pmid else None
        if record is not None:
            author = record.authors[0] if record.authors else "no author"
            lines.append(
                f"{i}. {record.title} ({record.journal}, {record.year or 'no year'}; first author {author})"
            )
        else:
            lines.append(f"{i}. {work.refs[0]['url']} (not in PubMed)")
    return "\n".join(lines)


def lookup_works(
    source: PubmedSource, pages: Sequence[Sequence[Mapping[str, Any]]]
) -> tuple[list[list[Work]], Mapping[str, PubmedRecord]]:
    """Each page's works (``pages``: their study references) and the records of the works of
    pages with several (what :func:`related_series` compares)."""
    ids = sorted({aid for refs in pages for ref in refs if (aid := article_id(ref))})
    pmids = source.pmids_for(ids) if ids else {}
    works = [group_works(refs, pmids) for refs in pages]
    several = sorted({w.pmid for ws in works if len(ws) > 1 for w in ws if w.pmid})
    return works, source.records(several) if several else {}
