"""The dataset card of a release: what it holds, how it was built, how to load it.

:class:`CardInfo` is everything the card says that the tables cannot: names, licences,
provenance (the flow config, prompt digests, models, stage fingerprints) and notes.
:func:`~tasks.cure.dataset.stats.split_statistics` computes, per split, the columns of CURE's Table 6 (passages,
articles, queries, judgements, mean query length per language, mean passage length, in
whitespace-delimited tokens as the paper counts them) plus the judgements per score.
:func:`render_card` turns both into ``README.md``: YAML front matter the Hub and ``datasets``
read (``configs`` with one ``data_files`` entry per split, ``corpus`` marked ``default: true``,
the features of each config, licence, languages, task category) and a Markdown body: how to
load it with ``datasets`` and as MTEB's ``CUREv1`` task (:mod:`tasks.cure.dataset.usage`),
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
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tasks.common.release.card import citation
from tasks.cure.dataset.schema import (
    ALL_SPLIT,
    CORPUS,
    CUREV1_DOMAINS,
    FEATURES,
    LANGUAGES,
    SCORES,
    SPLIT_NAME,
    Omission,
    ReleaseError,
    data_path,
    release_configs,
)
from tasks.cure.dataset.stats import SplitStats
from tasks.cure.dataset.usage import PAPER_BIBTEX, loading_section

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
            *citation(PAPER_BIBTEX, info.name, info.stage_fingerprints),
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


def _longest_run(text: str, char: str) -> int:
    return max((len(m) for m in re.findall(f"{re.escape(char)}+", text)), default=0)


def _size_category(n: int) -> str:
    for bound, name in (*_SIZE_BUCKETS, *_SIZE_BUCKETS_LARGE):
        if n < bound:
            return name
    return "n>10M"


def _refuse_secrets(card: str) -> None:
    for number, line in enumerate(card.splitlines(), start=1):
        for kind, pattern in _SECRETS:
            if pattern.search(line):
                raise ReleaseError(
                    f"the dataset card would contain what looks like {kind} on line {number}; "
                    "remove it from the CardInfo field it came from (often the flow config): "
                    "credentials come from the environment and never go into a release"
                )
