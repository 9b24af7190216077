"""Write a test collection as the folder MTEB's CUREv1 task loads.

CUREv1's own layout: https://huggingface.co/datasets/clinia/CUREv1

::

    folder/
      README.md                     the card (tasks.cure.dataset.card): configs, statistics, provenance
      <domain>/corpus.jsonl         {"_id", "title", "text"}             one split per domain
      <domain>/queries-en.jsonl     {"_id", "text"}                      (and queries-es, queries-fr)
      <domain>/qrels.jsonl          {"query-id", "corpus-id", "score"}

``datasets.load_dataset(folder, "<config>", split="<domain>")`` reads every config and split:
the card's ``configs`` list names each file, and declares each config's features so that
nothing is guessed from the data. ``split="all"`` gives the union of the domains: it is a
``datasets`` keyword (a split of that name cannot even be declared), which is how MTEB's
CUREv1 task gets its ``all`` split; so there is no ``all/`` folder.

Checks come first and stop the release with a :class:`ReleaseError` that names the row:
missing columns or values, duplicate ids, a query with two domains, a language other than
en/es/fr, a score outside 0/1/2, a judgement whose query or passage is not in its split,
a domain with queries or judgements but no passages.

A release is complete by construction, so that MTEB's CUREv1 task can load every config of
every split it has: a query is released only if it has a text in every language of
``CardInfo.languages``. One without (a failed translation) is left out of **every**
language's file and its judgements out of ``qrels``; it is returned as an
:class:`~tasks.cure.dataset.card.Omission` per missing language and listed in the card. A domain
with passages but no judged complete query has no split at all (``datasets`` cannot load a
split without rows): it is returned in ``dropped`` with the reason, and the card says so.
Texts in a language the card does not release are ignored.

Output is deterministic: rows sorted by id (qrels by query id, then passage id), one JSON
object per line with a fixed key order and ``ensure_ascii=False``, UTF-8, ``\\n`` line ends;
two writes of the same tables give byte-identical files. The folder is written under a
temporary sibling name and renamed into place, so a half-written release is never visible.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from tasks.common.release.files import ReleaseFile, staged_folder, write_jsonl
from tasks.common.release.hub import CARD_FILE
from tasks.cure.dataset.card import CardInfo, released_files, render_card
from tasks.cure.dataset.schema import (
    CORPUS,
    FEATURES,
    LANGUAGES,
    QRELS,
    SCORES,
    SPLIT_NAME,
    Omission,
    ReleaseError,
    data_path,
    release_splits,
)
from tasks.cure.dataset.stats import split_statistics

_CORPUS_COLUMNS: Final = ("passage_id", "article_id", "domain", "title", "text")
_QUERY_COLUMNS: Final = ("query_id", "domain", "language", "text")
_QREL_COLUMNS: Final = ("query_id", "passage_id", "domain", "score")


class Release(NamedTuple):
    """What :func:`write_release` wrote: the data files (split by split, configs in
    :data:`~tasks.cure.dataset.card.CONFIGS` order; ``README.md`` beside them is not listed), the
    queries left out of every file for want of a text in a language, and the domains left
    without a split (domain -> why)."""

    files: list[ReleaseFile]
    omissions: list[Omission]
    dropped: dict[str, str]


@dataclass(frozen=True)
class _Checked:
    corpus: list[tuple[str, str, str, str]]  # (passage_id, domain, title, text), sorted by id
    queries: dict[str, list[tuple[str, str, str]]]  # language -> (query_id, domain, text), sorted by id
    qrels: list[tuple[str, str, str, int]]  # (query_id, passage_id, domain, score), sorted
    splits: list[str]
    omissions: list[Omission]
    dropped: dict[str, str]  # domain -> why it has no split
    released: tuple[pa.Table, pa.Table, pa.Table]  # the input tables less what is left out


def write_release(
    folder: Path,
    corpus: pa.Table,
    queries: pa.Table,
    qrels: pa.Table,
    card: CardInfo,
    *,
    overwrite: bool = False,
) -> Release:
    """Check the tables, then write the release folder atomically.

    ``corpus``: ``passage_id, article_id, domain, title, text`` (title may be ``""``);
    ``queries``: ``query_id, domain, language, text``, one row per query and language;
    ``qrels``: ``query_id, passage_id, domain, score`` (integer 0/1/2). Other columns are
    ignored. An existing ``folder`` is replaced only with ``overwrite=True`` and only if it
    holds nothing but a release's files (never a clone's ``.git``, say).
    """
    checked = _check(corpus, queries, qrels, card.languages)
    stats = split_statistics(*checked.released)
    readme = render_card(card, stats, omissions=checked.omissions, dropped=checked.dropped)
    folder = Path(folder)
    _check_target(folder, overwrite=overwrite)
    with staged_folder(folder) as partial:
        for split in checked.splits:
            (partial / split).mkdir()
        files = [
            _write_jsonl(partial, c, s, _records(checked, c, s))
            for c, s in released_files(stats, card.languages)
        ]
        (partial / CARD_FILE).write_text(readme, encoding="utf-8")
    return Release(files, checked.omissions, checked.dropped)


def _records(checked: _Checked, config: str, split: str) -> Iterable[Sequence[Any]]:
    """A file's rows as value tuples in :data:`~tasks.cure.dataset.card.FEATURES` order, sorted."""
    if config == CORPUS:
        return ((pid, title, text) for pid, domain, title, text in checked.corpus if domain == split)
    if config == QRELS:
        return ((qid, pid, score) for qid, pid, domain, score in checked.qrels if domain == split)
    lang = config.removeprefix("queries-")
    return ((qid, text) for qid, domain, text in checked.queries[lang] if domain == split)


def _write_jsonl(root: Path, config: str, split: str, records: Iterable[Sequence[Any]]) -> ReleaseFile:
    keys = [name for name, _ in FEATURES[config]]
    written = write_jsonl(root, data_path(config, split), config, split, keys, records)
    if written.rows == 0:  # released_files() and _check() rule this out; an empty split would not load
        raise ReleaseError(f"split {split!r} has no {config} rows")
    return written


def _check_target(folder: Path, *, overwrite: bool) -> None:
    if not folder.exists():
        return
    if not folder.is_dir():
        raise ReleaseError(f"release folder {folder} exists and is not a folder")
    if not overwrite:
        raise ReleaseError(f"release folder {folder} exists: pass overwrite=True to replace it")
    strangers = [
        p.relative_to(folder).as_posix()
        for p in sorted(folder.rglob("*"))
        if not (
            (p.is_file() and p.parent == folder and p.name == CARD_FILE)
            or (p.is_dir() and p.parent == folder and SPLIT_NAME.fullmatch(p.name))
            or (p.is_file() and p.parent.parent == folder and p.suffix == ".jsonl")
        )
    ]
    if strangers:
        raise ReleaseError(
            f"refusing to replace {folder}: it holds {strangers[:5]}, which a release does not; "
            "write the release into a new or empty folder"
        )


# ---------------------------------------------------------------------------------- checks


def _check(corpus: pa.Table, queries: pa.Table, qrels: pa.Table, languages: Sequence[str]) -> _Checked:
    passages = _rows(corpus, "corpus", _CORPUS_COLUMNS, "passage_id")
    query_rows = _rows(queries, "queries", _QUERY_COLUMNS, "query_id")
    qrel_rows = _rows(qrels, "qrels", _QREL_COLUMNS, "query_id")
    splits = release_splits(
        (p["domain"] for p in passages), (q["domain"] for q in query_rows), (r["domain"] for r in qrel_rows)
    )
    passage_domain = _check_corpus(passages)
    query_domain, texts = _check_queries(query_rows, languages)
    _check_qrels(qrel_rows, query_domain, passage_domain)

    omissions = sorted(
        Omission(domain, qid, lang)
        for qid, domain in query_domain.items()
        for lang in languages
        if (qid, lang) not in texts
    )
    incomplete = {o.query_id for o in omissions}
    kept_qrels = [r for r in qrel_rows if r["query_id"] not in incomplete]
    dropped = _empty_domains(splits, passage_domain, qrel_rows, kept_qrels)
    splits = [s for s in splits if s not in dropped]
    if not splits:
        raise ReleaseError(
            f"nothing to release: no domain has a judged query with a text in every language {list(languages)} "
            f"({'; '.join(f'{d}: {why}' for d, why in sorted(dropped.items()))})"
        )
    kept = {qid for qid, domain in query_domain.items() if qid not in incomplete and domain not in dropped}
    return _Checked(
        corpus=sorted(
            (p["passage_id"], p["domain"], p["title"], p["text"]) for p in passages if p["domain"] in splits
        ),
        queries={
            lang: sorted(
                (qid, query_domain[qid], text)
                for (qid, code), text in texts.items()
                if code == lang and qid in kept
            )
            for lang in languages
        },
        qrels=sorted((r["query_id"], r["passage_id"], r["domain"], r["score"]) for r in kept_qrels),
        splits=splits,
        omissions=omissions,
        dropped=dropped,
        released=(
            corpus.filter(pc.is_in(corpus.column("domain"), pa.array(splits, pa.string()))),
            queries.filter(
                pc.and_(
                    pc.is_in(queries.column("query_id"), pa.array(sorted(kept), pa.string())),
                    pc.is_in(queries.column("language"), pa.array(list(languages), pa.string())),
                )
            ),
            qrels.filter(
                pc.invert(pc.is_in(qrels.column("query_id"), pa.array(sorted(incomplete), pa.string())))
            ),
        ),
    )


def _check_corpus(passages: list[dict[str, Any]]) -> dict[str, str]:
    """Passage id → domain; every id non-empty and unique, every text non-empty."""
    passage_domain: dict[str, str] = {}
    for i, p in enumerate(passages):
        pid = p["passage_id"]
        if not pid.strip():
            raise ReleaseError(f"corpus row {i}: passage_id is empty")
        if pid in passage_domain:
            raise ReleaseError(f"corpus row {i}: passage_id {pid!r} occurs twice (ids must be unique)")
        if not p["text"].strip():
            raise ReleaseError(f"corpus row {i} (passage {pid!r}): text is empty")
        passage_domain[pid] = p["domain"]
    return passage_domain


def _check_queries(
    query_rows: list[dict[str, Any]], languages: Sequence[str]
) -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """Query id → domain, and (query id, language) → text for the released languages."""
    query_domain: dict[str, str] = {}
    texts: dict[tuple[str, str], str] = {}
    for i, q in enumerate(query_rows):
        qid, lang, domain = q["query_id"], q["language"], q["domain"]
        where = f"queries row {i} (query {qid!r}, {lang})"
        if not qid.strip():
            raise ReleaseError(f"{where}: query_id is empty")
        if lang not in LANGUAGES:
            raise ReleaseError(f"{where}: language {lang!r} is not one of {list(LANGUAGES)}")
        if (qid, lang) in texts:
            raise ReleaseError(f"{where}: the query has two {lang} rows")
        if query_domain.setdefault(qid, domain) != domain:
            raise ReleaseError(
                f"{where}: domain {domain!r}, but another row puts it in {query_domain[qid]!r}"
            )
        if not q["text"].strip():
            raise ReleaseError(f"{where}: text is empty (leave the row out if the translation is missing)")
        if lang in languages:
            texts[qid, lang] = q["text"]
    return query_domain, texts


def _check_qrels(
    qrel_rows: list[dict[str, Any]], query_domain: Mapping[str, str], passage_domain: Mapping[str, str]
) -> None:
    """Each pair judged once, with a released score, its query and passage in its domain."""
    judged: set[tuple[str, str]] = set()
    for i, r in enumerate(qrel_rows):
        qid, pid, domain, score = r["query_id"], r["passage_id"], r["domain"], r["score"]
        where = f"qrels row {i} (query {qid!r}, passage {pid!r})"
        if (qid, pid) in judged:
            raise ReleaseError(f"{where}: the pair is judged twice")
        judged.add((qid, pid))
        if score not in SCORES:
            raise ReleaseError(f"{where}: score {score} is not one of {list(SCORES)}")
        if query_domain.get(qid) != domain:
            found = f"it is in {query_domain[qid]!r}" if qid in query_domain else "it is in no split"
            raise ReleaseError(f"{where}: query {qid!r} is not in the {domain!r} queries ({found})")
        if passage_domain.get(pid) != domain:
            found = f"it is in {passage_domain[pid]!r}" if pid in passage_domain else "it is in no split"
            raise ReleaseError(f"{where}: passage {pid!r} is not in the {domain!r} corpus ({found})")


def _empty_domains(
    splits: list[str],
    passage_domain: Mapping[str, str],
    qrel_rows: list[dict[str, Any]],
    kept_qrels: list[dict[str, Any]],
) -> dict[str, str]:
    """Domains without a judged complete query (domain -> why): they get no split, since
    ``datasets`` cannot load an empty one. A domain with queries but no passages is an error."""
    counts: Counter[tuple[str, str]] = Counter()
    counts.update((d, CORPUS) for d in passage_domain.values())
    counts.update((r["domain"], QRELS) for r in qrel_rows)
    counts.update((r["domain"], "kept") for r in kept_qrels)
    dropped: dict[str, str] = {}
    for split in splits:
        if not counts[split, CORPUS]:
            raise ReleaseError(
                f"split {split!r} would have an empty {CORPUS} file: every domain needs passages "
                "(a domain named only by some queries is probably a typo)"
            )
        if not counts[split, QRELS]:
            dropped[split] = "no judgements: none of its queries was judged"
        elif not counts[split, "kept"]:
            dropped[split] = "every judged query lacks a text in some language (see the left-out queries)"
    return dropped


def _rows(table: pa.Table, what: str, columns: Sequence[str], id_column: str) -> list[dict[str, Any]]:
    """The table's rows (only ``columns``), after checking each column's type and that none is null."""
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise ReleaseError(f"{what} table lacks column(s) {missing} (it has {table.column_names})")
    for name in columns:
        column = table.column(name)
        kind = column.type
        wanted_int = name == "score"
        if wanted_int and not pa.types.is_integer(kind):
            raise ReleaseError(f"{what} column {name!r} is {kind}, expected integers 0/1/2")
        if not wanted_int and not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise ReleaseError(f"{what} column {name!r} is {kind}, expected strings")
        if column.null_count:
            row = column.to_pylist().index(None)
            ident = table.column(id_column)[row].as_py()
            raise ReleaseError(f"{what} row {row} ({id_column} {ident!r}): {name} is missing (null)")
    rows: list[dict[str, Any]] = table.select(list(columns)).to_pylist()
    return rows


__all__ = ["Release", "ReleaseError", "write_release"]
