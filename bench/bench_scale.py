"""Benchmark: scale-out of real stages on one machine, inline vs process pool vs local Ray, by cores.

    .venv/bin/python bench/bench_scale.py [--passages 200000] [--abstracts 200000] [--claims 2000]
        [--cores 1,2,all] [--runners inline,process,ray] [--repeat 3] [--quick]

Real stage specs, real engine (``execute_step``, forced), chunks ``INLINE`` or on flows/runners.py's
``PrefectChunkRunner``: Prefect's process pool (workers = cores) or prefect-ray on a local
``ray.init(num_cpus=cores)``; Prefect's temporary server starts first, untimed, as in ``irforge run``.

* **filter**: CURE's ``filter`` (default profile), ``--passages`` passages in ``--filter-chunks``
  chunks; its ``segment`` upstream (that stage's schema) comes from a one-chunk source stage:
  distinct 50-150-word passages of the shared samples' sentences (bench/samples.py, as
  bench_dedup.py), every 100th a one-typo copy of the one before (variants for the dedup).
* **dedup**: passage variant dedup of what the filter kept: ``similar_pairs`` (0.9) of
  tasks/common/text/variants.py, clusters, the longest kept; a **whole-input** stage (one chunk,
  inline whatever the runner; numba kernels without ``prange``: one thread). Not CURE's ``dedup``
  (annotation records, ``containments`` of every passage in every other: superlinear).
* **candidates**: crossgenre's ``candidates`` (BM25, BM25+, BM25+†, top 500), ``--claims``
  headlines in ``--candidate-chunks`` chunks against ``--abstracts`` abstracts resampled from
  the real MEDLINE records of data/crossgenre/medline (bench_crossgenre_bm25.synthesise), as
  ``claims`` (cited abstracts: its ``corpus`` table) and ``distractors``. The first chunk on a
  host builds the analysed corpus and the indexes once (threads: every core it may use), the
  others wait and memory-map them (tasks/crossgenre/candidate_index.py); each repeat has a
  fingerprint of its own (``elasticsearch_index``, unused here).

A core setting pins this process and its threads (so its workers) to the first N CPUs; ``all``
= every CPU; equal settings run once. Each (runner, cores) starts its runner once, warmed by a
no-op stage of two chunks per worker (``startup_s``: pool spawn or ``ray.init``, imports), then
runs each stage ``--repeat`` times; figures are medians. ``wall_s``: the whole stage;
``speed-up``: the wall inline on the fewest cores / this wall; ``Σprocess_s``: time in ``process``;
``ovh/chunk`` = (wall − Σprocess_s / workers) / chunks: what a chunk costs beyond its work
(scheduling, pickling both ways, persisting, the slowest worker, fixed costs spread);
``noop/chunk``: wall / chunks of a stage returning its chunks as they are (same input, same
chunks). ``peak_MB``: highest summed RSS of this process and all descendants (workers, Ray,
Prefect's ~200 MB server in every row; a shared page counts per process), psutil every 0.2 s
(Ray's copy if need be), else ru_maxrss (lifetime maxima). Results: bench/results/scale.json
(``--quick``: scale_quick.json).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import math
import os
import random
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pyarrow as pa
from pydantic import BaseModel
from rich.console import Console

if __package__ in (None, ""):  # run as a script: put the repository on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import common
from bench.samples import build_passages, sample_passages
from irforge.artifacts import ArtifactStore
from irforge.config import ExecutionConfig, StrictModel
from irforge.engine import StageOutcome, StagePlan
from irforge.parallel import INLINE, ChunkRunner
from irforge.pipeline import Step, execute_step
from irforge.stage import ChunkResult, StageContext, StageSpec, TableSource, exclusion_schema, upstream_source
from tasks.common.text.variants import clusters, representative, similar_pairs
from tasks.crossgenre.corpus import CORPUS_SCHEMA
from tasks.crossgenre.stages import candidates
from tasks.crossgenre.stages.claims import SCHEMA as CLAIMS_SCHEMA
from tasks.cure.stages import filter as cure_filter
from tasks.cure.stages import segment

QUIET = {"PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
         "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}  # fmt: skip
FLOW = "bench_scale"
BASE_DIR = common.REPO / "flows" / "configs"  # candidates' dictionary path is relative to it
STAGES = ("filter", "dedup", "candidates")
WHOLE = 1 << 40
RUSAGE = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
CPUS = sorted(os.sched_getaffinity(0))  # before any pinning
COLUMNS = ["runner", "cores", "startup_s", "chunks", "wall_s", "speed-up", "Σprocess_s", "peak_MB",
           "ovh/chunk ms", "noop/chunk ms"]  # fmt: skip
SHOWN = (("chunks", "d"), ("wall_s", ".2f"), ("speedup", ".2f"), ("process_s", ".2f"), ("peak_mb", ",.0f"),
         ("overhead_ms_per_chunk", ".0f"), ("noop_ms_per_chunk", ".0f"))  # fmt: skip
CORPUS = ("passages", "abstracts", "claims", "seed", "filter_chunks", "candidate_chunks")


class Label(StrictModel):
    label: str = ""  # a source's parameters, a run's tag: a fingerprint of its own


def noop(chunk: pa.Table, _ctx: StageContext[Label]) -> ChunkResult:
    """The chunk back as it is: what the engine and the runner cost for a chunk of this shape."""
    return ChunkResult(chunk, exclusion_schema(chunk.schema.field(0)).empty_table())


def spec_of(name: str, schema: pa.Schema, up: str | None, process: Any, **more: Any) -> StageSpec[Label]:
    return StageSpec(
        name=name, version=1, config_type=Label, upstream=(up,) if up else (), schema=schema,
        excluded_schema=exclusion_schema(schema.field(0)), key=(schema.names[0],),
        source=more.pop("source", None) or upstream_source(up or ""), process=process, **more,
    )  # fmt: skip


def dedup(chunk: pa.Table, _ctx: StageContext[Label]) -> ChunkResult:
    """Variants (similarity ≥ 0.9) clustered; each cluster's longest kept, the others excluded."""
    texts, ids = chunk.column("text").to_pylist(), chunk.column("passage_id").to_pylist()
    labels = clusters(len(texts), similar_pairs(texts, 0.9))
    members: dict[int, list[int]] = {}
    for i, label in enumerate(labels):
        members.setdefault(label, []).append(i)
    canon = {label: representative(group, texts) for label, group in members.items()}
    drop = [i for i, label in enumerate(labels) if canon[label] != i]
    excluded = pa.table(
        {"reason": pa.array(["variant"] * len(drop), pa.string()),
         "detail": pa.array([f"variant of {ids[canon[labels[i]]]}" for i in drop], pa.string()),
         "passage_id": pa.array([ids[i] for i in drop], pa.string())}
    )  # fmt: skip
    keep = [i for i, label in enumerate(labels) if canon[label] == i]
    return ChunkResult(chunk.take(pa.array(keep, pa.int64())), excluded)


DEDUP = spec_of("dedup", segment.SCHEMA, "filter", dedup, whole_input=True)
NOOP_FILTER = spec_of("noop_segment", segment.SCHEMA, "segment", noop)
NOOP_CANDIDATES = spec_of("noop_claims", CLAIMS_SCHEMA, "claims", noop)


def source_spec(name: str, table: pa.Table, tables: dict[str, pa.Table] | None = None) -> StageSpec[Label]:
    """A one-chunk stage publishing ``table`` (and side ``tables``) as the artifact ``name``."""
    side = dict(tables or {})

    def emit(chunk: pa.Table, ctx: StageContext[Label]) -> ChunkResult:
        return ChunkResult(chunk, noop(chunk, ctx).excluded, side)

    source = lambda _ctx, _inputs: TableSource(table)  # noqa: E731
    tables_ = {n: t.schema for n, t in side.items()}
    return spec_of(name, table.schema, None, emit, source=source, tables=tables_, whole_input=True)


def passages_table(n: int, seed: int) -> pa.Table:
    """``n`` segment rows of real sample sentences; every 100th a one-typo copy of the one before."""
    rng = random.Random(seed)
    texts = build_passages(sample_passages(), n, rng)
    for i in range(100, n, 100):
        at = rng.randrange(len(texts[i - 1]))
        texts[i] = texts[i - 1][:at] + "x" + texts[i - 1][at + 1 :]
    ints = functools.partial(pa.array, type=pa.int32())
    return pa.Table.from_pydict(
        {"passage_id": [f"p{i:07d}" for i in range(n)], "article_id": [f"a{i // 20:06d}" for i in range(n)],
         "passage_index": ints([i % 20 for i in range(n)]), "kind": ["paragraph"] * n,
         "section_path": [["Results"]] * n, "text": texts, "char_start": ints([0] * n),
         "char_end": ints([len(t) for t in texts]), "block_indexes": [[i % 20] for i in range(n)],
         "n_words": ints([len(t.split()) for t in texts])},
        schema=segment.SCHEMA,
    )  # fmt: skip


def corpus_table(ids: Sequence[str], abstracts: Sequence[str]) -> pa.Table:
    n = len(ids)
    return pa.Table.from_pydict(
        {"doc_id": list(ids), "title": [" ".join(a.split()[:8]) for a in abstracts], "abstract": abstracts,
         "sections": [[]] * n, "labelled": [False] * n, "mesh": [[]] * n, "publication_types": [[]] * n,
         "journal": ["Synthetic"] * n, "year": pa.array([None] * n, pa.int32())},
        schema=CORPUS_SCHEMA,
    )  # fmt: skip


def claims_tables(abstracts: int, claims: int, seed: int) -> tuple[pa.Table, pa.Table, pa.Table]:
    """(claims rows, their cited abstracts: claims' ``corpus`` table, every other abstract: distractors)."""
    from bench.bench_crossgenre_bm25 import synthesise  # noqa: PLC0415 -- not in every worker

    texts, headlines, cited = synthesise(abstracts, claims, seed)
    ids, q = [f"{10_000_000 + i}" for i in range(len(texts))], [f"q{i:05d}" for i in range(len(headlines))]
    rows = pa.Table.from_pydict(
        {"query_id": q, "page_id": q, "headline": headlines, "url": [f"https://news.example/{i}" for i in q],
         "site": ["news.example"] * len(q), "published": [None] * len(q), "pmids": [[ids[c]] for c in cited],
         "cluster_id": q, "cluster_size": pa.array([1] * len(q), pa.int32())},
        schema=CLAIMS_SCHEMA,
    )  # fmt: skip
    wanted = set(cited)
    parts = ([i for i in range(len(texts)) if (i in wanted) == side] for side in (True, False))
    corpus, rest = (corpus_table([ids[i] for i in part], [texts[i] for i in part]) for part in parts)
    return rows, corpus, rest


class Bench:
    """The store, the published sources and the plans of the timed stages."""

    def __init__(self, root: Path, args: Any, console: Console) -> None:
        self.store, self.fps, self.args = ArtifactStore(root), dict[str, str](), args
        label, t0 = f"{args.passages}-{args.abstracts}-{args.claims}-{args.seed}", time.perf_counter()
        self.publish(source_spec("segment", passages_table(args.passages, args.seed)), label)
        rows, cited, rest = claims_tables(args.abstracts, args.claims, args.seed)
        self.publish(source_spec("claims", rows, {"corpus": cited}), label)
        self.publish(source_spec("distractors", rest), label)
        self.rows = {"segment": args.passages, "claims": rows.num_rows}
        console.print(f"sources published in {time.perf_counter() - t0:.0f} s")

    def plan(self, spec: StageSpec[Any], config: BaseModel) -> StagePlan:
        return StagePlan.make(spec, StageContext(config, BASE_DIR), {u: self.fps[u] for u in spec.upstream})

    def publish(self, spec: StageSpec[Any], label: str) -> None:
        outcome = self.run(self.plan(spec, Label(label=label)), WHOLE, INLINE)
        self.fps[spec.name] = outcome.artifact.fingerprint

    def run(self, plan: StagePlan, chunk_rows: int, runner: ChunkRunner) -> StageOutcome:
        execution = ExecutionConfig(chunk_rows=chunk_rows)
        return execute_step(Step(plan, force=True), self.store, FLOW, execution, runner=runner)

    def stage(self, name: str, tag: str) -> tuple[StagePlan, int]:
        """The plan of a timed stage (``tag``: runner, cores, repeat) and its chunk size."""
        passages = math.ceil(self.rows["segment"] / self.args.filter_chunks)
        headlines = math.ceil(self.rows["claims"] / self.args.candidate_chunks)
        if name == "candidates":
            config = candidates.CandidatesConfig(elasticsearch_index=f"bench-{tag}")
            return self.plan(candidates.SPEC, config), headlines
        specs: dict[str, tuple[StageSpec[Any], int]] = {
            "filter": (cure_filter.SPEC, passages), "noop_filter": (NOOP_FILTER, passages),
            "dedup": (DEDUP, WHOLE), "noop_candidates": (NOOP_CANDIDATES, headlines)}  # fmt: skip
        spec, rows = specs[name]
        return self.plan(spec, cure_filter.FilterConfig() if name == "filter" else Label(label=tag)), rows


@functools.cache
def _psutil() -> Any:
    """psutil, or the copy Ray ships (importing Ray puts it on the path), or None."""
    for first in ((), ("ray",)):
        with contextlib.suppress(ImportError):
            for name in first:
                importlib.import_module(name)
            return importlib.import_module("psutil")
    return None


def rss_mb() -> float:
    """RSS of this process and all its descendants (psutil), else ru_maxrss of self + waited children."""
    psutil = _psutil()
    if psutil is None:
        return sum(resource.getrusage(who).ru_maxrss for who in RUSAGE) / 1024
    me, total = psutil.Process(), 0
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += proc.memory_info().rss
    return total / 2**20


@contextlib.contextmanager
def peak_rss() -> Iterator[list[float]]:
    """``[peak MB]`` while the block runs (:func:`rss_mb`), sampled every 0.2 s."""
    peak, stop = [0.0], threading.Event()

    def loop() -> None:
        while True:
            peak[0] = max(peak[0], rss_mb())
            if stop.wait(0.2):
                return

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()


def pin(cores: int) -> None:
    """This process and every thread of it (so every process it starts) on the first ``cores`` CPUs."""
    cpus = set(CPUS[:cores])
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except OSError:  # a thread that just ended
            continue


@contextlib.contextmanager
def started(kind: str, cores: int, bench: Bench) -> Iterator[tuple[ChunkRunner, float]]:
    """The runner, warmed by a no-op stage of two chunks per worker, and what that took."""
    if kind == "inline":
        yield INLINE, 0.0
        return
    from flows.runners import PrefectChunkRunner  # noqa: PLC0415 -- Prefect only where a runner needs it

    t0 = time.perf_counter()
    runner = PrefectChunkRunner(ExecutionConfig(runner=kind, workers=cores), FLOW)
    try:
        warm = bench.plan(NOOP_CANDIDATES, Label(label=f"warm-{kind}-{cores}"))
        bench.run(warm, max(1, bench.rows["claims"] // (2 * cores)), runner)
        yield runner, time.perf_counter() - t0
    finally:
        runner.close()


def run_config(bench: Bench, kind: str, cores: int, console: Console) -> dict[str, Any]:
    """Each stage ``--repeat`` times on one runner, stage after stage (so the memory a worker
    holds for one stage never counts in another's peak)."""
    pin(cores)
    out: dict[str, Any] = {"runner": kind, "cores": cores, "stages": {}}
    with started(kind, cores, bench) as (runner, startup):
        out["startup_s"] = startup
        for name in [n for s in bench.args.stage_list for n in (s, f"noop_{s}") if n != "noop_dedup"]:
            runs: list[tuple[float, float, int, float, float]] = []
            for r in range(bench.args.repeat):
                plan, chunk_rows = bench.stage(name, f"{kind}-{cores}-r{r}")
                with peak_rss() as peak:
                    outcome, wall = common.timed(functools.partial(bench.run, plan, chunk_rows, runner))
                bench.fps[plan.spec.name] = outcome.artifact.fingerprint  # the filter's, for the dedup
                chunks, process_s = outcome.manifest["chunks"]["total"], float(outcome.manifest["process_s"])
                workers = 1 if kind == "inline" or name == "dedup" else cores
                runs.append((wall, process_s, chunks, peak[0], (wall - process_s / workers) / chunks))
            walls, process, chunks, peaks, overheads = zip(*runs, strict=True)
            out["stages"][name] = {"wall_s": statistics.median(walls), "walls_s": walls, "chunks": chunks[0],
                                   "process_s": statistics.median(process), "peak_mb": max(peaks),
                                   "overhead_ms_per_chunk": 1000 * statistics.median(overheads)}  # fmt: skip
            console.print(f"  {kind} x{cores} {name}: {out['stages'][name]['wall_s']:.2f} s")
    for name in {"filter", "candidates"} & set(bench.args.stage_list):
        noop_stage = out["stages"].pop(f"noop_{name}")
        out["stages"][name]["noop_ms_per_chunk"] = 1000 * noop_stage["wall_s"] / noop_stage["chunks"]
    return out


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = common.bench_parser(__doc__)
    add = parser.add_argument
    add("--passages", type=int, default=200_000, help="filter and dedup input (default 200k)")
    add("--abstracts", type=int, default=200_000, help="candidates corpus (default 200k)")
    add("--claims", type=int, default=2000, help="candidates queries (default 2000)")
    add("--filter-chunks", type=int, default=20)
    add("--candidate-chunks", type=int, default=8)
    add("--cores", default=None, help="core settings, numbers or 'all' (default 1,2,all; --quick: all)")
    add("--runners", default="inline,process,ray")
    add("--stages", default=",".join(STAGES), help=f"timed stages (default {','.join(STAGES)})")
    add("--repeat", type=int, default=3, help="timed runs per stage and setting (the median is shown)")
    add("--seed", type=int, default=0)
    add("--root", type=Path, default=None, help="artifact store (default: a temporary folder)")
    add("--quick", action="store_true", help="smoke run: 10k passages and abstracts, 100 claims, repeat 1")
    args = common.parse_with_out(parser, argv, common.results_file("scale"))
    if args.quick:  # its results beside the full run's, not over them
        args.passages, args.abstracts, args.claims, args.repeat = 10_000, 10_000, 100, 1
        full, quick = common.results_file("scale"), common.results_file("scale_quick")
        args.out = quick if args.out == full else args.out
    every = len(CPUS)
    settings = (args.cores or ("all" if args.quick else "1,2,all")).split(",")
    args.core_list = list(dict.fromkeys(every if c == "all" else min(int(c), every) for c in settings))
    chosen = args.stages.split(",")  # the dedup's input is the filter's output
    args.stage_list = [s for s in STAGES if s in chosen or (s == "filter" and "dedup" in chosen)]
    return args


def show(configs: list[dict[str, Any]], console: Console) -> None:
    inline = sorted((c for c in configs if c["runner"] == "inline"), key=lambda c: int(c["cores"]))
    base = {s: inline[0]["stages"][s]["wall_s"] for s in inline[0]["stages"]} if inline else {}
    versus = f"inline on {inline[0]['cores']} core(s)" if inline else "nothing (no inline run)"
    for stage in [s for s in STAGES if s in configs[0]["stages"]]:
        table = common.figures_table(f"{stage}: medians; speed-up vs {versus}", COLUMNS, left=2)
        for c in configs:
            s = c["stages"][stage]
            s["speedup"] = base[stage] / s["wall_s"] if stage in base else None
            cells = ["-" if s.get(k) is None else format(s[k], f) for k, f in SHOWN]
            table.add_row(c["runner"], str(c["cores"]), f"{c['startup_s']:.1f}", *cells)
        console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.update({k: v for k, v in QUIET.items() if k not in os.environ})  # before Prefect loads
    from flows.ephemeral import guard_temporary_server  # noqa: PLC0415 -- imports Prefect

    args, console, started_at = parse_args(argv), Console(width=120), time.perf_counter()
    server_s = common.timed(guard_temporary_server)[1]
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        bench, configs = Bench(args.root or Path(tmp), args, console), []
        for cores in args.core_list:
            for kind in args.runners.split(","):
                console.print(f"[bold]{kind}, {cores} core(s)[/bold]")
                configs.append(run_config(bench, kind, cores, console))
        pin(len(CPUS))
    show(configs, console)
    memory = "psutil: summed RSS of the process tree" if _psutil() else "ru_maxrss: self + waited children"
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    packages = {p: version(p) for p in ("pyarrow", "numpy", "numba", "prefect", "prefect-ray", "ray")}
    machine = {"cores": len(CPUS), "ram_gib": round(ram, 1), "load_average": os.getloadavg(),
               **common.environment(**packages)}  # fmt: skip
    result = {"machine": machine, "memory_method": memory, "prefect_server_start_s": server_s,
              "total_s": time.perf_counter() - started_at, "corpus": {k: getattr(args, k) for k in CORPUS},
              "repeat": args.repeat, "configs": configs}  # fmt: skip
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":  # through the importable module: workers unpickle its stages by name
    sys.exit(importlib.import_module("bench.bench_scale").main())
