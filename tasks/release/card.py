"""The dataset card of a release: what it holds, how it was built, how to load it.

:class:`CardInfo` is everything the card says that the tables cannot: names, licences,
provenance (the flow config, prompt digests, models, stage fingerprints) and notes.
:func:`split_statistics` computes, per split, the columns of CURE's Table 6 (passages,
articles, queries, judgements, mean query length per language, mean passage length, in
whitespace-delimited tokens as the paper counts them) plus the judgements per score.
:func:`render_card` turns both into ``README.md``: YAML front matter the Hub and ``datasets``
read (``configs`` with one ``data_files`` entry per split, ``corpus`` marked ``default: true``,
the features of each config, licence, languages, task category) and a Markdown body: how to
load it with ``datasets`` and as MTEB's ``CUREv1`` task (:mod:`tasks.release.usage`),
statistics, provenance, licences, and what was left out (queries lacking a translation,
domains without a split, CUREv1 domains not covered).

The card only says what it is given: nothing here reads the environment, so a credential
can only reach a card by being put into a :class:`CardInfo` field. As a second line of
defence :func:`render_card` refuses a card in which something looks like a credential
(a Hugging Face or OpenAI-style token, a DeepL free key, an ``Authorization`` value, a
``token:``/``api_key:``/``password:`` entry with a value), naming the line, never the value.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from irforge.errors import IrforgeError
from tasks.release.usage import loading_section

ALL_SPLIT: Final = "all"
"""The union of every domain's rows. ``datasets`` reserves the split name: ``split="all"``
loads the concatenation of a config's splits (which is how MTEB's CUREv1 task gets its
``all`` split), and a ``data_files`` split named ``all`` makes the whole config fail to load.
So ``all`` has no files of its own; the card's statistics still have an ``all`` row."""
LANGUAGES: Final = ("en", "es", "fr")
"""Query languages, in the order of their configs; the corpus is English."""
CORPUS: Final = "corpus"
QRELS: Final = "qrels"
CONFIGS: Final = (CORPUS, *(f"queries-{lang}" for lang in LANGUAGES), QRELS)
"""Config names MTEB's CUREv1 task loads, in the order the card lists them."""
CUREV1_DOMAINS: Final = (
    "dentistry_and_oral_health",
    "dermatology",
    "gastroenterology",
    "genetics",
    "neuroscience_and_neurology",
    "orthopedic_surgery",
    "otorhinolaryngology",
    "plastic_surgery",
    "psychiatry_and_psychology",
    "pulmonology",
)
"""CUREv1's domain splits (reference/cure_layout.md); a release may have fewer (or others)."""
SCORES: Final = (0, 1, 2)
"""Graded relevance: 0 not relevant, 1 partially relevant, 2 relevant (CURE §2.3)."""
SPLIT_NAME: Final = re.compile(r"^\w+(\.\w+)*$")
"""The Hub's rule for split names (``datasets`` refuses others): no hyphens, no spaces."""

_QUERY_FEATURES: Final = (("_id", "string"), ("text", "string"))
FEATURES: Final[Mapping[str, tuple[tuple[str, str], ...]]] = {
    CORPUS: (("_id", "string"), ("title", "string"), ("text", "string")),
    **{f"queries-{lang}": _QUERY_FEATURES for lang in LANGUAGES},
    QRELS: (("query-id", "string"), ("corpus-id", "string"), ("score", "int64")),
}
"""Columns of each config's JSON Lines files, with their ``datasets`` dtypes (declared in the
card so that loading never has to guess them)."""

_SIZE_BUCKETS: Final = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"))
_SIZE_BUCKETS_LARGE: Final = ((1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"))

_SECRETS: Final = (
    ("a Hugging Face token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("an OpenAI-style API key", re.compile(r"\bsk-[A-Za-z0-9_-]{20,}")),
    ("a DeepL free API key", re.compile(r"\b[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}:fx\b")),
    (
        "an Authorization header value",
        re.compile(r"(?i)\b(?:bearer|deepl-auth-key)\s+[A-Za-z0-9._~+/:=-]{12,}"),
    ),
    (
        "a credential entry",
        re.compile(
            r"(?im)^[\s\-]*[\w.-]*(?:api[_-]?key|auth[_-]?key|token|secret|password)\s*[:=]\s*"
            r"['\"]?[^\s'\"#{}$]{8,}"
        ),
    ),
)

DEFAULT_DESCRIPTION: Final = (
    "A passage-retrieval test collection for questions asked by medical professionals, built with "
    "irforge the way CURE was built (arXiv 2412.06954): expert-written queries, an English corpus of "
    "open-access article passages mined per medical domain, candidate pools from a cross-encoder and "
    "graded relevance labels (0 not relevant, 1 partially relevant, 2 relevant) from an LLM judge. "
    "Queries come in English, Spanish and French against the English corpus (one monolingual and two "
    "cross-lingual conditions)."
)


class ReleaseError(IrforgeError):
    """A release cannot be written as asked; the message names the row, split or field and why."""


def data_path(config: str, split: str) -> str:
    """Where a config's rows for a split live, relative to the release folder."""
    return f"{split}/{config}.jsonl"


@dataclass(frozen=True, order=True)
class Omission:
    """A query that has no text in ``language``: it has no row in that language's file."""

    domain: str
    query_id: str
    language: str


class PromptInfo(BaseModel):
    """A prompt template as used: its name and the sha256 of its rendered template text."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ModelInfo(BaseModel):
    """A model in one role (encoder, cross-encoder, judge, translator...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    description: str = ""


class CardInfo(BaseModel):
    """What the card says beyond the statistics. Every field is printed as given."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, description="Hub repository id or folder name, used in the examples")
    pretty_name: str = Field(min_length=1)
    license: str = Field(
        pattern=r"^[a-z0-9][a-z0-9.+-]*$", description="Hub licence id, e.g. cc-by-nc-4.0, or 'other'"
    )
    license_name: str | None = Field(default=None, description="Required when license is 'other'")
    license_link: str | None = None
    source_licences: dict[str, int] = Field(
        default_factory=dict, description="licence of the source articles -> number of articles"
    )
    languages: tuple[str, ...] = Field(
        LANGUAGES, description="Released query languages: a query without a text in one of them is left out"
    )
    revision: str = Field(
        "main", min_length=1, description="Hub branch, tag or commit the card's MTEB example reads"
    )
    description: str = DEFAULT_DESCRIPTION
    tags: tuple[str, ...] = ("medical", "biomedical", "information-retrieval", "cross-lingual", "mteb")
    flow_config: str = Field(default="", description="The flow config YAML text the release was built with")
    prompts: tuple[PromptInfo, ...] = ()
    models: dict[str, ModelInfo] = Field(default_factory=dict, description="role -> model")
    stage_fingerprints: dict[str, str] = Field(default_factory=dict, description="stage -> fingerprint")
    translation_engine: str | None = Field(default=None, description="Machine translation of the queries")
    judge_model: str | None = Field(default=None, description="Model id of the LLM relevance judge")
    demo_models: bool = Field(
        default=False,
        description="Labels and pools come from tiny demo models: the card warns they are meaningless",
    )

    @field_validator("languages")
    @classmethod
    def _known_languages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [lang for lang in value if lang not in LANGUAGES]
        if unknown or not value or len(set(value)) != len(value):
            raise ValueError(f"languages must be a non-empty subset of {list(LANGUAGES)}, got {list(value)}")
        return tuple(lang for lang in LANGUAGES if lang in value)

    @field_validator("source_licences")
    @classmethod
    def _counts(cls, value: dict[str, int]) -> dict[str, int]:
        negative = {k: v for k, v in value.items() if v < 0}
        if negative:
            raise ValueError(f"article counts must not be negative: {negative}")
        return value

    @model_validator(mode="after")
    def _other_is_named(self) -> CardInfo:
        if self.license == "other" and not self.license_name:
            raise ValueError("license 'other' needs a license_name saying which licence applies")
        return self


@dataclass(frozen=True)
class SplitStats:
    """CURE Table 6's columns for one split, plus the judgements per score."""

    passages: int
    articles: int
    queries: int  # distinct query ids
    judgements: int  # qrels rows
    judgements_by_score: dict[int, int]
    queries_by_language: dict[str, int]  # language -> queries with a text in it
    query_tokens: dict[str, float | None]  # language -> mean whitespace tokens; None: no query in it
    passage_tokens: float | None  # mean whitespace tokens of title-less passage text


def split_statistics(corpus: pa.Table, queries: pa.Table, qrels: pa.Table) -> dict[str, SplitStats]:
    """Per domain (sorted), then for ``all`` (the union), the statistics of CURE's Table 6.

    Inputs are the tables :func:`tasks.release.layout.write_release` takes: corpus
    (``passage_id, article_id, domain, text``), queries (``query_id, domain, language,
    text``), qrels (``domain, score``). Lengths count whitespace-delimited tokens
    (``str.split()``), as the paper does; passage length is over the passage text without
    its title. A score outside 0/1/2 is counted under its own value.
    """
    passage_domains = _column(corpus, "corpus", "domain")
    articles = _column(corpus, "corpus", "article_id")
    passage_texts = _column(corpus, "corpus", "text")
    query_ids = _column(queries, "queries", "query_id")
    query_domains = _column(queries, "queries", "domain")
    languages = _column(queries, "queries", "language")
    query_texts = _column(queries, "queries", "text")
    qrel_domains = _column(qrels, "qrels", "domain")
    scores = _column(qrels, "qrels", "score")

    splits = [*release_splits(passage_domains, query_domains, qrel_domains), ALL_SPLIT]
    passage_rows, query_rows, qrel_rows = (
        _rows_by_split(c) for c in (passage_domains, query_domains, qrel_domains)
    )
    stats: dict[str, SplitStats] = {}
    for split in splits:
        rows = passage_rows.get(split, [])
        by_language: dict[str, list[int]] = defaultdict(list)
        for i in query_rows.get(split, []):
            by_language[languages[i]].append(len(str(query_texts[i]).split()))
        by_score = Counter(scores[i] for i in qrel_rows.get(split, []))
        stats[split] = SplitStats(
            passages=len(rows),
            articles=len({articles[i] for i in rows}),
            queries=len({query_ids[i] for i in query_rows.get(split, [])}),
            judgements=len(qrel_rows.get(split, [])),
            judgements_by_score={s: by_score.get(s, 0) for s in sorted({*SCORES, *by_score})},
            queries_by_language={lang: len(by_language.get(lang, [])) for lang in LANGUAGES},
            query_tokens={lang: _mean(by_language.get(lang, [])) for lang in LANGUAGES},
            passage_tokens=_mean([len(str(passage_texts[i]).split()) for i in rows]),
        )
    return stats


def release_splits(*domain_columns: Iterable[Any]) -> list[str]:
    """The release's split names: every domain that occurs, sorted (``all`` is not one of them).

    Raises :class:`ReleaseError` for a domain that is not a valid split name (the Hub and
    ``datasets`` accept only ``^\\w+(\\.\\w+)*$``) or is the reserved name ``all``.
    """
    domains = sorted({d for column in domain_columns for d in column})
    for domain in domains:
        if not isinstance(domain, str) or not SPLIT_NAME.fullmatch(domain):
            raise ReleaseError(
                f"domain {domain!r} cannot be a split name: the Hub accepts letters, digits and "
                "underscores, with single dots between parts (e.g. 'plastic_surgery')"
            )
        if domain == ALL_SPLIT:
            raise ReleaseError(
                f"domain {ALL_SPLIT!r} is reserved: datasets loads split='all' as the union of every domain"
            )
    if not domains:
        raise ReleaseError("nothing to release: the tables name no domain")
    return domains


def release_configs(languages: Sequence[str] = LANGUAGES) -> list[str]:
    """The configs of a release with these query languages, in :data:`CONFIGS` order."""
    return [c for c in CONFIGS if not c.startswith("queries-") or c.removeprefix("queries-") in languages]


def released_files(
    stats: Mapping[str, SplitStats], languages: Sequence[str] = LANGUAGES
) -> list[tuple[str, str]]:
    """The (config, split) files of a release with these statistics, domain by domain in
    :data:`CONFIGS` order: every config of :func:`release_configs` for every domain (a
    release is complete: every released query has a text in every language). The ``all``
    row of ``stats`` has no files (see :data:`ALL_SPLIT`)."""
    return [(c, split) for split in stats if split != ALL_SPLIT for c in release_configs(languages)]


def render_card(
    info: CardInfo,
    stats: Mapping[str, SplitStats],
    *,
    omissions: Sequence[Omission] = (),
    dropped: Mapping[str, str] | None = None,
) -> str:
    """``README.md`` for a release with these splits: YAML front matter, then Markdown.

    The ``configs`` list names every config of :func:`release_configs` with one
    ``data_files`` entry per split of ``stats`` (in its order), at :func:`data_path`;
    ``corpus`` is the default config. ``omissions``: queries left out for want of a
    translation; ``dropped``: domains left out (domain -> why). Raises :class:`ReleaseError`
    if the card would contain something that looks like a credential.
    """
    splits = [s for s in stats if s != ALL_SPLIT]
    if not splits:
        raise ReleaseError("a card needs at least one domain split")
    for split in splits:
        if not SPLIT_NAME.fullmatch(split):
            raise ReleaseError(f"split {split!r} is not a valid split name (^\\w+(\\.\\w+)*$)")
    front = yaml.safe_dump(
        _front_matter(info, splits, stats), sort_keys=False, allow_unicode=True, width=1000
    )
    body = "\n".join(
        [
            f"# {info.pretty_name}",
            "",
            *_demo_warning(info),
            info.description.strip(),
            "",
            *loading_section(info, splits, release_configs(info.languages)),
            *_statistics(stats),
            *_provenance(info),
            *_licences(info),
            *_notes(info),
            *_left_out(omissions, dropped or {}, splits),
        ]
    )
    card = f"---\n{front}---\n\n{body.rstrip()}\n"
    _refuse_secrets(card)
    return card


def _front_matter(info: CardInfo, splits: list[str], stats: Mapping[str, SplitStats]) -> dict[str, Any]:
    front: dict[str, Any] = {"pretty_name": info.pretty_name, "license": info.license}
    if info.license_name:
        front["license_name"] = info.license_name
    if info.license_link:
        front["license_link"] = info.license_link
    front["language"] = list(info.languages)
    front["multilinguality"] = "multilingual" if len(info.languages) > 1 else "monolingual"
    front["task_categories"] = ["text-retrieval"]
    front["task_ids"] = ["document-retrieval"]
    front["tags"] = list(info.tags)
    size = stats.get(ALL_SPLIT, next(iter(stats.values()))).passages
    front["size_categories"] = [_size_category(size)]
    configs = release_configs(info.languages)
    # ``default: true``: what load_dataset(repo) reads without a config name (the Hub's card spec).
    front["configs"] = [
        {
            "config_name": c,
            **({"default": True} if c == CORPUS else {}),
            "data_files": [{"split": s, "path": data_path(c, s)} for s in splits],
        }
        for c in configs
    ]
    front["dataset_info"] = [
        {"config_name": c, "features": [{"name": n, "dtype": t} for n, t in FEATURES[c]]} for c in configs
    ]
    return front


def _demo_warning(info: CardInfo) -> list[str]:
    if not info.demo_models:
        return []
    return [
        "> **Warning: the candidate pools and relevance labels of this release come from tiny demo "
        "models. They are meaningless: do not use this release to evaluate or compare retrieval "
        "systems. It shows the pipeline's plumbing, nothing more.**",
        "",
    ]


def _statistics(stats: Mapping[str, SplitStats]) -> list[str]:
    header = (
        "| split | passages | articles | queries | judgements | score 0 | score 1 | score 2 "
        "| query len en | query len es | query len fr | passage len |"
    )
    lines = [
        "## Statistics",
        "",
        "Lengths are mean whitespace-delimited tokens (passage length without the title).",
        "",
        header,
        "|" + " --- |" * header.count(" | ") + " --- |",
    ]
    for split, s in stats.items():
        cells = [
            split,
            s.passages,
            s.articles,
            s.queries,
            s.judgements,
            *(s.judgements_by_score.get(score, 0) for score in SCORES),
            *(_number(s.query_tokens.get(lang)) for lang in LANGUAGES),
            _number(s.passage_tokens),
        ]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return [*lines, ""]


def _provenance(info: CardInfo) -> list[str]:
    lines = ["## Provenance", ""]
    if info.flow_config.strip():
        fence = "`" * max(3, _longest_run(info.flow_config, "`") + 1)
        lines += ["Flow configuration:", "", f"{fence}yaml", info.flow_config.rstrip("\n"), fence, ""]
    if info.prompts:
        lines += _table(("prompt", "sha256"), [(p.name, p.sha256) for p in info.prompts])
    if info.models:
        lines += _table(
            ("role", "model", "description"), [(r, m.id, m.description) for r, m in info.models.items()]
        )
    if info.stage_fingerprints:
        lines += _table(("stage", "fingerprint"), list(info.stage_fingerprints.items()))
    if len(lines) == 2:
        lines += ["No provenance was recorded for this release.", ""]
    return lines


def _licences(info: CardInfo) -> list[str]:
    named = info.license_name or info.license
    lines = ["## Licences", "", f"This release: `{named}`."]
    if info.license_link:
        lines[-1] += f" See {info.license_link}."
    lines.append("")
    if info.source_licences:
        lines += [
            "Passages are excerpts of open-access articles under these licences:",
            "",
            *_table(("licence", "articles"), sorted(info.source_licences.items())),
        ]
    return lines


def _notes(info: CardInfo) -> list[str]:
    notes = []
    if info.translation_engine:
        notes.append(
            f"- Spanish and French queries are machine translations made with {info.translation_engine}."
        )
    if info.judge_model:
        notes.append(f"- Relevance labels were assigned by an LLM judge: `{info.judge_model}`.")
    if info.demo_models:
        notes.append("- **Labels and candidate pools come from tiny demo models and are meaningless.**")
    return ["## Notes", "", *notes, ""] if notes else []


def _left_out(omissions: Sequence[Omission], dropped: Mapping[str, str], splits: Sequence[str]) -> list[str]:
    """What the release leaves out, and why: incomplete queries, empty domains, CUREv1's absent ones."""
    absent = [d for d in CUREV1_DOMAINS if d not in splits and d not in dropped]
    if not omissions and not dropped and not absent:
        return []
    lines = ["## Left out", ""]
    if omissions:
        missing: dict[tuple[str, str], list[str]] = defaultdict(list)
        for o in sorted(omissions):
            missing[o.domain, o.query_id].append(o.language)
        lines += [
            "A query is released only with a text in every language, so that each language's file holds "
            "the same queries. These lack a translation, so they are in no queries file and their "
            "judgements are not in `qrels`:",
            "",
            *(
                f"- `{q}` ({d}): no {', '.join(f'`{lang}`' for lang in langs)} text"
                for (d, q), langs in missing.items()
            ),
            "",
        ]
    if dropped:
        lines += [
            "These domains have no split (`datasets` cannot load a split without rows):",
            "",
            *(f"- `{d}`: {why}" for d, why in sorted(dropped.items())),
            "",
        ]
    if absent:
        lines += [
            f"CUREv1 domains this collection does not cover: {', '.join(f'`{d}`' for d in absent)}.",
            "",
        ]
    return lines


def _table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _cell(value: object) -> str:
    # A pipe or a newline would break the table row.
    return " ".join(str(value).split()).replace("|", "\\|")


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def _rows_by_split(domains: list[Any]) -> dict[str, list[int]]:
    rows: dict[str, list[int]] = defaultdict(list)
    for i, domain in enumerate(domains):
        rows[domain].append(i)
    rows[ALL_SPLIT] = list(range(len(domains)))
    return rows


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _longest_run(text: str, char: str) -> int:
    return max((len(m) for m in re.findall(f"{re.escape(char)}+", text)), default=0)


def _size_category(n: int) -> str:
    for bound, name in (*_SIZE_BUCKETS, *_SIZE_BUCKETS_LARGE):
        if n < bound:
            return name
    return "n>10M"


def _column(table: pa.Table, what: str, name: str) -> list[Any]:
    if name not in table.column_names:
        raise ReleaseError(f"{what} table has no column {name!r} (it has {table.column_names})")
    values: list[Any] = table.column(name).to_pylist()
    return values


def _refuse_secrets(card: str) -> None:
    for number, line in enumerate(card.splitlines(), start=1):
        for kind, pattern in _SECRETS:
            if pattern.search(line):
                raise ReleaseError(
                    f"the dataset card would contain what looks like {kind} on line {number}; "
                    "remove it from the CardInfo field it came from (often the flow config): "
                    "credentials come from the environment and never go into a release"
                )


__all__ = [
    "ALL_SPLIT",
    "CONFIGS",
    "CUREV1_DOMAINS",
    "FEATURES",
    "LANGUAGES",
    "SCORES",
    "CardInfo",
    "ModelInfo",
    "Omission",
    "PromptInfo",
    "ReleaseError",
    "SplitStats",
    "data_path",
    "release_configs",
    "release_splits",
    "released_files",
    "render_card",
    "split_statistics",
]
