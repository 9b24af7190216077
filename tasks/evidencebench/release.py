"""An EvidenceBench release: the released JSON schema and a Hugging Face dataset folder.

Two formats of the same instances:

* ``evidencebench.json``: one JSON object ``{instance id: instance}`` whose instances have
  exactly the fields, order and shapes of the authors' release (App. A.6; see
  :data:`tasks.evidencebench.instance.RELEASED_FIELDS`), so their evaluation code and ours read it;
* ``data/test.parquet`` with a generated ``README.md`` card: one row per instance for
  ``datasets.load_dataset(folder)``. The released fields whose keys are ids
  (``aspect2sentence_indices``, ``sentence_index2aspects``) become lists aligned with
  ``aspect_list_ids`` (a table cannot hold per-row keys), and the row adds what the JSON
  leaves out: the aspects' texts and labels, the evidence summary and where it comes from.

Files are written to a temporary name and renamed, so a crash leaves no half file.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from tasks.common.release.card import citation
from tasks.common.release.hub import CARD_FILE

PAPER_BIBTEX = """@misc{wang2025evidencebench,
  title = {EvidenceBench: A Benchmark for Extracting Evidence from Biomedical Papers},
  author = {Wang, Jianyou and Cao, Weili and Wang, Kaicheng and Wang, Xiaoyue and Dalvi, Ashish and Prasad, Gino and Liang, Qishan and Her, Hsuan-lin and Wang, Ming and Yang, Qin and Yeo, Gene W. and Neal, David E. and Khan, Maxim and Rosin, Christopher D. and Paturi, Ramamohan and Bergen, Leon},
  year = {2025}
}"""
"""The paper whose construction the evidencebench flow follows (paper 002), for the card's citation."""
JSON_FILE = "evidencebench.json"
PARQUET_FILE = "data/test.parquet"

ROW_SCHEMA = pa.schema(
    [
        pa.field("instance_id", pa.string(), nullable=False),
        pa.field("paper_id", pa.string(), nullable=False),
        pa.field("hypothesis", pa.string(), nullable=False),
        pa.field("paper_as_candidate_pool", pa.list_(pa.string()), nullable=False),
        pa.field("sentence_types_in_candidate_pool", pa.list_(pa.string()), nullable=False),
        pa.field("aspect_list_ids", pa.list_(pa.string()), nullable=False),
        pa.field("aspect_texts", pa.list_(pa.string()), nullable=False),
        pa.field("aspect_labels", pa.list_(pa.string()), nullable=False),
        pa.field("results_aspect_list_ids", pa.list_(pa.string())),
        pa.field("aspect2sentence_indices", pa.list_(pa.list_(pa.int32())), nullable=False),
        pa.field("optimal", pa.int32(), nullable=False),
        pa.field("optimal_selection", pa.list_(pa.int32()), nullable=False),
        pa.field("at_10_selection", pa.list_(pa.int32()), nullable=False),
        pa.field("results_optimal", pa.int32()),
        pa.field("results_optimal_selection", pa.list_(pa.int32())),
        pa.field("results_at_5_selection", pa.list_(pa.int32())),
        pa.field("evidence_summary", pa.string(), nullable=False),
        pa.field("review_id", pa.string(), nullable=False),
        pa.field("review_license", pa.string()),
    ]
)


@dataclass(frozen=True)
class ReleaseInfo:
    """What the card says about how the release was made."""

    name: str
    license: str
    models: Mapping[str, str] = field(default_factory=dict)  # role → model id
    prompts: Mapping[str, str] = field(default_factory=dict)  # prompt → sha256
    stage_fingerprints: Mapping[str, str] = field(default_factory=dict)
    demo_models: bool = False


@dataclass(frozen=True)
class WrittenFile:
    path: str  # relative to the release folder
    rows: int
    bytes: int
    sha256: str


@dataclass(frozen=True)
class ReleaseRow:
    """One instance: the released object plus what the table adds."""

    instance_id: str
    instance: Mapping[str, Any]
    aspect_texts: Sequence[str]  # every covered aspect's text, in aspect_list_ids order
    aspect_labels: Sequence[str]
    evidence_summary: str
    review_id: str
    review_license: str | None


def table_row(row: ReleaseRow) -> dict[str, Any]:
    inst = row.instance
    ids = list(inst["aspect_list_ids"])
    optimal = inst["evidence_retrieval_at_optimal_evaluation"]
    results_optimal = inst["results_evidence_retrieval_at_optimal_evaluation"]
    results_at_5 = inst["results_evidence_retrieval_at_5_evaluation"]
    return {
        "instance_id": row.instance_id,
        "paper_id": inst["paper_id"],
        "hypothesis": inst["hypothesis"],
        "paper_as_candidate_pool": inst["paper_as_candidate_pool"],
        "sentence_types_in_candidate_pool": inst["sentence_types_in_candidate_pool"],
        "aspect_list_ids": ids,
        "aspect_texts": list(row.aspect_texts),
        "aspect_labels": list(row.aspect_labels),
        "results_aspect_list_ids": inst["results_aspect_list_ids"],
        "aspect2sentence_indices": [sorted(inst["aspect2sentence_indices"][a]) for a in ids],
        "optimal": optimal["optimal"],
        "optimal_selection": optimal["one_selection_of_sentences"],
        "at_10_selection": inst["evidence_retrieval_at_10_evaluation"]["one_selection_of_sentences"],
        "results_optimal": None if results_optimal is None else results_optimal["optimal"],
        "results_optimal_selection": None
        if results_optimal is None
        else results_optimal["one_selection_of_sentences"],
        "results_at_5_selection": None
        if results_at_5 is None
        else results_at_5["one_selection_of_sentences"],
        "evidence_summary": row.evidence_summary,
        "review_id": row.review_id,
        "review_license": row.review_license,
    }


def _write_atomic(path: Path, data: bytes) -> WrittenFile:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return WrittenFile(path.name, 0, len(data), hashlib.sha256(data).hexdigest())


def write_release(folder: Path, rows: Sequence[ReleaseRow], info: ReleaseInfo) -> list[WrittenFile]:
    """Write the JSON, the Parquet table and the card under ``folder``; instances by id."""
    ordered = sorted(rows, key=lambda r: r.instance_id)
    ids = [r.instance_id for r in ordered]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ValueError(f"instance id {dup!r} is given twice")
    released = {r.instance_id: dict(r.instance) for r in ordered}
    json_bytes = json.dumps(released, ensure_ascii=False, indent=1).encode()
    table = pa.Table.from_pylist([table_row(r) for r in ordered], schema=ROW_SCHEMA)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    written = [
        _with(JSON_FILE, len(ordered), _write_atomic(folder / JSON_FILE, json_bytes)),
        _with(PARQUET_FILE, len(ordered), _write_atomic(folder / PARQUET_FILE, sink.getvalue().to_pybytes())),
    ]
    card = render_card(ordered, info).encode()
    written.append(_with(CARD_FILE, 0, _write_atomic(folder / CARD_FILE, card)))
    return written


def _with(path: str, rows: int, file: WrittenFile) -> WrittenFile:
    return WrittenFile(path, rows, file.bytes, file.sha256)


def _size_category(n: int) -> str:
    return "n<1K" if n < 1000 else "1K<n<10K" if n < 10_000 else "10K<n<100K"


def _mean(values: Sequence[float]) -> str:
    return f"{statistics.fmean(values):.1f}" if values else "–"


def render_card(rows: Sequence[ReleaseRow], info: ReleaseInfo) -> str:
    """The dataset card: front matter ``datasets`` reads, statistics, provenance, licences."""
    front = {
        "license": info.license,
        "language": ["en"],
        "task_categories": ["text-retrieval"],
        "tags": ["biomedical", "evidence-retrieval", "evidencebench"],
        "size_categories": [_size_category(len(rows))],
        "pretty_name": info.name,
        "configs": [{"config_name": "default", "data_files": [{"split": "test", "path": PARQUET_FILE}]}],
    }
    aspects = [len(r.instance["aspect_list_ids"]) for r in rows]
    results = [len(r.instance["results_aspect_list_ids"] or []) for r in rows]
    pools = [len(r.instance["paper_as_candidate_pool"]) for r in rows]
    optimal = [r.instance["evidence_retrieval_at_optimal_evaluation"]["optimal"] for r in rows]
    licences = Counter(r.review_license or "unknown" for r in rows)
    lines = ["---", yaml.safe_dump(front, sort_keys=False).rstrip(), "---", "", f"# {info.name}", ""]
    if info.demo_models:
        lines += [
            "> **Demo build.** The LLM steps ran on a tiny embedded model: the aspects, alignments",
            "> and labels show that the pipeline works, not what a capable model would produce.",
            "",
        ]
    lines += [
        "Sentence-level evidence retrieval instances built like EvidenceBench (hypothesis → the",
        "sentences of a paper that state each study aspect of an expert's evidence summary) by the",
        "irforge `evidencebench` flow.",
        "",
        "## Files",
        "",
        f"- `{JSON_FILE}`: the instances in the schema of the original EvidenceBench release",
        "  (`{id: {hypothesis, paper_as_candidate_pool, aspect_list_ids, ...}}`).",
        f"- `{PARQUET_FILE}`: one row per instance, with the aspects' texts and labels and the evidence",
        "  summary; `aspect2sentence_indices` is a list aligned with `aspect_list_ids`.",
        "",
        "## How to load",
        "",
        "```python",
        "from datasets import load_dataset",
        "",
        f'instances = load_dataset("{info.name}", split="test")  # one row per instance ({PARQUET_FILE})',
        "```",
        "",
        f'or, in the authors\' schema, `json.load(open("{JSON_FILE}"))`.',
        "",
        "## Statistics",
        "",
        "| instances | aspects / instance | results aspects / instance | sentences / pool | optimal |",
        "|---:|---:|---:|---:|---:|",
        f"| {len(rows)} | {_mean(aspects)} | {_mean(results)} | {_mean(pools)} | {_mean(optimal)} |",
        "",
        "## Provenance",
        "",
    ]
    lines += [f"- {role}: `{model}`" for role, model in sorted(info.models.items())]
    lines += [f"- prompt `{name}`: sha256 `{digest[:16]}`" for name, digest in sorted(info.prompts.items())]
    lines += [
        f"- stage `{name}`: fingerprint `{fp[:16]}`" for name, fp in sorted(info.stage_fingerprints.items())
    ]
    lines += ["", "## Licences", "", "Evidence summaries come from review articles under these licences:", ""]
    lines += [f"- {licence}: {count} instance(s)" for licence, count in sorted(licences.items())]
    lines += ["", f"This dataset is released under {info.license}.", ""]
    lines += citation(PAPER_BIBTEX, info.name, info.stage_fingerprints)
    return "\n".join(lines).rstrip("\n") + "\n"
