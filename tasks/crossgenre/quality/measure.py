"""One labelled page through the page stages, as a flow run reads it (rules only, no LLM).

ingest (read, decompress, decode, stated URL) → extract (``read_page``) → journal_links
(``judge_page``) → single_study (:func:`tasks.crossgenre.works.decide`) → resolve (the kept
works' PMIDs in the configured PubMed source, checked where the gold PMID is in it). Each
page ends kept, or dropped by the first stage that drops it, with that stage's reason,
rule and detail — what :mod:`tasks.crossgenre.quality.report` prints.
"""

from __future__ import annotations

import contextlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tasks.common.pubmed.config import pubmed_source
from tasks.common.pubmed.port import PubmedSource
from tasks.crossgenre.domains import DomainList
from tasks.crossgenre.pages import ItemRefused, RawPage, gunzipped
from tasks.crossgenre.quality.gold import GoldPage, identifier_key
from tasks.crossgenre.stages.extract import ExtractConfig, PageRejected, read_page
from tasks.crossgenre.stages.ingest import IngestConfig, page_row
from tasks.crossgenre.stages.journal_links import judge_page
from tasks.crossgenre.stages.single_study import SingleStudyConfig
from tasks.crossgenre.works import Work, decide_page, lookup_works

_MAX_BYTES: int = IngestConfig.model_fields["max_page_bytes"].default  # ingest's own limit


@dataclass
class PageResult:
    """What the stages made of one labelled page."""

    gold: GoldPage
    headline: str = ""
    language: str = ""
    found_ids: set[str] = field(default_factory=set)  # identifier keys of its study links
    cited_ids: set[str] = field(default_factory=set)  # of the works single_study kept
    kept: bool = False
    stage: str = ""  # the stage that dropped it ("" when kept)
    reason: str = ""
    rule: str = ""
    detail: str = ""
    pmid_checked: bool | None = None  # the gold PMID among the resolved ones (None: not checkable)

    @property
    def headline_right(self) -> bool:
        return _plain(self.headline) == _plain(self.gold.headline)

    @property
    def language_right(self) -> bool:
        return (self.language or "").split("-")[0].casefold() == self.gold.language.casefold()

    @property
    def identifier_right(self) -> bool:
        return bool(self.gold.reported & (self.cited_ids or self.found_ids))


@dataclass(frozen=True)
class Tools:
    extract: ExtractConfig
    domains: DomainList
    single_study: SingleStudyConfig
    source: PubmedSource


def _plain(text: str) -> str:
    folded = unicodedata.normalize("NFKC", text).casefold()
    for a, b in (("’", "'"), ("‘", "'"), ("“", '"'), ("”", '"'), ("–", "-"), ("—", "-"), ("\xa0", " ")):
        folded = folded.replace(a, b)
    return " ".join(folded.split())


def _ids(refs: Sequence[dict[str, Any]]) -> set[str]:
    keys = set()
    for ref in refs:
        if ref.get("id_kind") and ref.get("id_value"):
            keys.add(identifier_key(ref["id_kind"], ref["id_value"]))
        keys.add(identifier_key("url", ref["url"]))
    return keys


def _work_ids(works: Sequence[Work]) -> set[str]:
    keys = {identifier_key("pmid", w.pmid) for w in works if w.pmid}
    return keys | _ids([r for w in works for r in w.refs])


def measure(folder: Path, gold: GoldPage, tools: Tools) -> PageResult:
    """``gold``'s page (in ``folder``) through the page stages."""
    result = PageResult(gold)
    try:
        data = gunzipped((folder / gold.file).read_bytes(), gold.file, _MAX_BYTES)
    except ItemRefused as err:
        result.stage, result.reason, result.detail = "ingest", err.reason, err.detail
        return result
    page = page_row(RawPage(None, data, None, ""), {"source": gold.file, "item": gold.file})
    try:
        extracted = read_page(page["html"], page["url"], page["site"], tools.extract)
    except PageRejected as err:
        result.stage, result.reason, result.detail = "extract", err.reason, err.detail
        return result
    result.headline, result.language = extracted["headline"], extracted["language"] or ""
    linked, dropped = judge_page({**page, **extracted}, tools.domains, None)
    if linked is None:
        assert dropped is not None
        result.stage, result.reason, result.detail = "journal_links", dropped["reason"], dropped["detail"]
        return result
    result.found_ids = _ids(linked["study_links"])
    return _single_study(result, linked, tools)


def _single_study(result: PageResult, linked: dict[str, Any], tools: Tools) -> PageResult:
    config = tools.single_study
    [works], records = lookup_works(tools.source, [linked["study_links"]])
    verdict = decide_page(linked, works, records, config.max_works, config.roundup_patterns)
    result.rule, result.detail = verdict.rule, verdict.why
    if not verdict.keep:
        result.stage, result.reason = "single_study", verdict.reason
        return result
    chosen = verdict.cited_works(works)
    result.kept, result.cited_ids = True, _work_ids(chosen)
    if result.gold.pmid:
        pmids = {w.pmid for w in chosen if w.pmid}
        known = tools.source.records([result.gold.pmid])
        result.pmid_checked = result.gold.pmid in pmids if known else None
    return result


def measure_all(folder: Path, pages: Sequence[GoldPage], tools: Tools) -> list[PageResult]:
    return [measure(folder, gold, tools) for gold in pages]


@contextlib.contextmanager
def opened_source(config: SingleStudyConfig, base_dir: Path) -> Any:
    """The single_study stage's PubMed source (no reply cache: a quality run asks nothing twice)."""
    with contextlib.closing(pubmed_source(config.pubmed, base_dir, None)) as source:
        yield source
