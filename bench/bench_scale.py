"""Benchmark: a stage's chunks inline vs on Prefect's process pool, on the same N cores.

    .venv/bin/python bench/bench_scale.py [--articles 250] [--passages 100000] [--abstracts 50000] [--claims 1000]
        [--chunk-rows 500] [--cores all] [--rounds 3] [--runners process,ray] [--quick]

Real stage specs and engine (``execute_step``, forced), chunks ``INLINE`` or on flows/runners.py's
``PrefectChunkRunner``; Prefect's temporary server starts first, untimed. A core setting N pins
this process (so its workers and threads) to the same N CPUs for both sides (``all``: no
pinning): N workers against inline on the N cores it may use, never one pinned, busy core.

* **startup**: a fresh runner made, started and warmed by an empty stage of two chunks a worker
  (spawn or ``ray.init``, imports, first task runs), ``--start-rounds`` times each, rotated.
* **empty chunk**: ``--empty-chunks`` one-row chunks returned as they are (never resized): wall
  / chunks, what a chunk costs beyond its work, inline, on our pool, on Prefect's pool as it is
  (settings and a client rebuilt every task run: the peer) and on a warm local Ray.
* **segment**: CURE's ``segment`` over ``--articles`` articles of 20 parse blocks (every 10th
  four passages long: split at pysbd's sentence boundaries); chunks never split an article.
* **filter**: CURE's ``filter`` over ``--passages`` distinct 50-150-word passages of the shared
  samples' sentences (bench/samples.py), every 100th a one-typo copy of the one before.
* **candidates**: crossgenre's ``candidates`` (BM25, BM25+, BM25+†, top 500), ``--claims``
  headlines against ``--abstracts`` abstracts resampled from data/crossgenre/medline
  (bench_crossgenre_bm25.synthesise); the first chunk on a host builds the indexes, the others
  memory-map them; each run a fingerprint of its own (``elasticsearch_index``).

Stages run with ``execution.chunk_rows`` = ``--chunk-rows`` (the flows' configs: 500): inline
chunks are that, the pool's sized by the engine (irforge/parallel.py ``rows_per_chunk``).
Timing: bench/common.py ``interleaved`` (a cold call each, then ``--rounds`` rounds, order
rotated); ``speed-up`` = inline / pool per round, median (min–max); ``efficiency`` = the
median speed-up / N. Results: bench/results/scale.json (``--quick``: scale_quick.json).
"""

from __future__ import annotations

import functools
import importlib
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
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

QUIET = {"PREFECT_LOGGING_LEVEL": "WARNING", "PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW": "ignore",
         "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}  # fmt: skip
FLOW = "bench_scale"
BASE_DIR = common.REPO / "flows" / "configs"  # candidates' dictionary path is relative to it
STAGES = ("segment", "filter", "candidates")
WHOLE = 1 << 40
CPUS = sorted(os.sched_getaffinity(0))  # before any pinning
CORPUS = ("articles", "passages", "abstracts", "claims", "seed", "chunk_rows", "empty_chunks")


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


EMPTY = spec_of("empty", pa.schema([pa.field("id", pa.string())]), "tiny", noop, chunk_rows=1)
WARM = spec_of("warm", pa.schema([pa.field("id", pa.string())]), "tiny", noop)


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
    from tasks.cure.stages import segment  # noqa: PLC0415 -- the stages' imports: not in a worker's start

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


def parse_table(articles: int, seed: int) -> pa.Table:
    """``articles`` × 20 parse blocks (an abstract, then paragraphs) of real sample sentences; every
    10th block four passages long (200-600 words: split at pysbd's sentence boundaries)."""
    from tasks.cure.stages.parse import BLOCK_SEPARATOR, SCHEMA  # noqa: PLC0415

    texts = build_passages(sample_passages(), articles * 23, random.Random(seed))
    blocks = [[" ".join(texts[a * 23 + b : a * 23 + b + 4]) if b % 10 == 9 else texts[a * 23 + b]
               for b in range(20)] for a in range(articles)]  # fmt: skip
    sep = len(BLOCK_SEPARATOR)
    starts = [[sum(len(t) + sep for t in bl[:b]) for b in range(20)] for bl in blocks]
    rows = {"article_id": [f"a{a:06d}" for a in range(articles) for _ in range(20)],
            "block_index": list(range(20)) * articles, "kind": (["abstract"] + ["paragraph"] * 19) * articles,
            "section_path": ([[]] + [["Results"]] * 19) * articles, "text": [t for bl in blocks for t in bl],
            "char_start": [s for st in starts for s in st],
            "char_end": [s + len(t) for st, bl in zip(starts, blocks, strict=True) for s, t in zip(st, bl, strict=True)]}  # fmt: skip
    return pa.Table.from_pydict(rows, schema=SCHEMA)


def corpus_table(ids: Sequence[str], abstracts: Sequence[str]) -> pa.Table:
    from tasks.crossgenre.corpus import CORPUS_SCHEMA  # noqa: PLC0415

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
    from tasks.crossgenre.stages.claims import SCHEMA as CLAIMS_SCHEMA  # noqa: PLC0415

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
        self.store, self.fps, self.args, self.runs = ArtifactStore(root), dict[str, str](), args, itertools.count()  # fmt: skip
        label, t0 = f"{args.passages}-{args.abstracts}-{args.claims}-{args.seed}", time.perf_counter()
        self.publish(source_spec("segment", passages_table(args.passages, args.seed)), label)
        self.publish(source_spec("parse", parse_table(args.articles, args.seed)), label)
        rows, cited, rest = claims_tables(args.abstracts, args.claims, args.seed)
        self.publish(source_spec("claims", rows, {"corpus": cited}), label)
        self.publish(source_spec("distractors", rest), label)
        self.publish(source_spec("tiny", pa.table({"id": [f"r{i:05d}" for i in range(args.empty_chunks)]})), label)  # fmt: skip
        console.print(f"sources published in {time.perf_counter() - t0:.0f} s")

    def plan(self, spec: StageSpec[Any], config: BaseModel) -> StagePlan:
        return StagePlan.make(spec, StageContext(config, BASE_DIR), {u: self.fps[u] for u in spec.upstream})

    def publish(self, spec: StageSpec[Any], label: str) -> None:
        outcome = self.run(self.plan(spec, Label(label=label)), WHOLE, INLINE)
        self.fps[spec.name] = outcome.artifact.fingerprint

    def run(self, plan: StagePlan, chunk_rows: int, runner: ChunkRunner) -> StageOutcome:
        execution = ExecutionConfig(chunk_rows=chunk_rows)
        return execute_step(Step(plan, force=True), self.store, FLOW, execution, runner=runner)

    def stage(self, name: str, runner: ChunkRunner) -> StageOutcome:
        """One forced run of stage ``name`` (``empty`` or one of ``STAGES``) on ``runner``."""
        from tasks.crossgenre.stages import candidates  # noqa: PLC0415
        from tasks.cure.stages import filter as cure_filter  # noqa: PLC0415
        from tasks.cure.stages import segment  # noqa: PLC0415

        tag, rows = f"run-{next(self.runs)}", self.args.chunk_rows
        plans = {"segment": lambda: self.plan(segment.SPEC, segment.SegmentConfig()),
                 "filter": lambda: self.plan(cure_filter.SPEC, cure_filter.FilterConfig()),
                 "candidates": lambda: self.plan(candidates.SPEC, candidates.CandidatesConfig(elasticsearch_index=f"bench-{tag}"))}  # fmt: skip
        if name in plans:
            return self.run(plans[name](), rows, runner)
        return self.run(self.plan(EMPTY, Label(label=tag)), 1, runner)


def pin(cores: int) -> None:
    """This process and every thread of it (so every process it starts) on the first ``cores`` CPUs."""
    cpus = set(CPUS[:cores])
    for task in Path("/proc/self/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except OSError:  # a thread that just ended
            continue


def _environment(env: dict[str, str]) -> None:  # the peer's worker initializer, as flows/runners.py had it
    os.environ.update(env)


def prefect_pool(execution: ExecutionConfig) -> Any:
    """The peer: Prefect's ``ProcessPoolTaskRunner`` as it is, with our workers' environment."""
    from prefect.task_runners import ProcessPoolTaskRunner  # noqa: PLC0415

    from flows import runners  # noqa: PLC0415 -- Prefect only where a runner needs it

    workers = execution.workers or 1
    env = runners._worker_environment() | runners.thread_shares(workers)
    return ProcessPoolTaskRunner(workers, initializer=_environment, initargs=(env,))


def make_runner(kind: str, cores: int) -> Any:
    """A ``PrefectChunkRunner`` of ``cores`` workers (not started): process, prefect (the peer), ray."""
    from flows.runners import PrefectChunkRunner  # noqa: PLC0415

    execution = ExecutionConfig(runner="process" if kind == "prefect" else kind, workers=cores)
    return PrefectChunkRunner(execution, FLOW, make=prefect_pool if kind == "prefect" else None)


def warm(bench: Bench, runner: Any, cores: int) -> None:
    """Start ``runner`` and run two empty chunks a worker on it."""
    bench.run(bench.plan(WARM, Label(label=f"warm-{next(bench.runs)}")), -(-bench.args.empty_chunks // (2 * cores)), runner)  # fmt: skip


def startup(bench: Bench, kinds: Sequence[str], cores: int, console: Console) -> dict[str, Any]:
    """Seconds to make, start and warm a fresh runner of each kind, ``--start-rounds`` times, rotated."""
    seconds: dict[str, list[float]] = {kind: [] for kind in kinds}
    for r in range(bench.args.start_rounds):
        for kind in [*kinds[r % len(kinds) :], *kinds[: r % len(kinds)]]:
            runner, t0 = make_runner(kind, cores), time.perf_counter()
            try:
                warm(bench, runner, cores)
                seconds[kind].append(time.perf_counter() - t0)
            finally:
                runner.close()
            console.print(f"  start {kind} x{cores}: {seconds[kind][-1]:.1f} s")
    return {k: {"seconds": v, "median_s": statistics.median(v), "min_s": min(v), "max_s": max(v)}
            for k, v in seconds.items()}  # fmt: skip


def compare(bench: Bench, name: str, runners: dict[str, Any], cores: int) -> dict[str, Any]:
    """Stage ``name`` on each runner, interleaved; per runner its timings, chunks and Σprocess_s."""

    def run(runner: ChunkRunner) -> tuple[int, float]:  # read now: the next run replaces the manifest
        manifest = bench.stage(name, runner).manifest
        return manifest["chunks"]["total"], float(manifest["process_s"])

    timings = common.interleaved({k: functools.partial(run, r) for k, r in runners.items()}, bench.args.rounds)  # fmt: skip
    out: dict[str, Any] = {"timings": timings.summary(), "chunks": {}, "process_s": {}}
    for kind, (chunks, process_s) in timings.results.items():
        out["chunks"][kind], out["process_s"][kind] = chunks, process_s
    for kind in runners:
        if name == "empty":  # wall / chunks; the peers' seconds over ours
            per = [1000 * s / out["chunks"][kind] for s in timings.warm[kind]]
            out.setdefault("ms_per_chunk", {})[kind] = statistics.median(per)
            out.setdefault("vs_ours", {})[kind] = common.ratio_summary(timings.warm[kind], timings.warm["process"])  # fmt: skip
        elif kind != "inline":
            speedup = common.ratio_summary(timings.warm["inline"], timings.warm[kind])
            out.setdefault("speedup", {})[kind] = speedup | {"efficiency": speedup["median"] / cores}
    return out


def run_cores(bench: Bench, cores: int, console: Console) -> dict[str, Any]:
    """Startup, the empty chunk and each stage on ``cores`` cores, both sides pinned alike."""
    pin(cores)
    kinds = [k for k in bench.args.runners.split(",") if k in ("process", "ray")]
    out: dict[str, Any] = {"cores": cores, "startup": startup(bench, kinds, cores, console), "stages": {}}
    runners: dict[str, Any] = {"inline": INLINE}
    for kind in ("process", "prefect", *[k for k in kinds if k == "ray"]):
        runners[kind] = make_runner(kind, cores)
        warm(bench, runners[kind], cores)
    try:
        out["stages"]["empty"] = compare(bench, "empty", runners, cores)
        console.print(f"  empty chunk x{cores}: {out['stages']['empty']['ms_per_chunk']}")
        for name in bench.args.stage_list:
            out["stages"][name] = compare(bench, name, {k: runners[k] for k in ("inline", "process")}, cores)
            console.print(f"  {name} x{cores}: {out['stages'][name]['speedup']['process']['text']}")
    finally:
        for runner in list(runners.values())[1:]:  # all but inline
            runner.close()
    return out


def parse_args(argv: Sequence[str] | None) -> Any:
    parser = common.bench_parser(__doc__)
    add = parser.add_argument
    add("--passages", type=int, default=100_000, help="filter input (default 100k)")
    add("--articles", type=int, default=250, help="segment input: articles of 20 blocks (default 250)")
    add("--abstracts", type=int, default=50_000, help="candidates corpus (default 50k)")
    add("--claims", type=int, default=1000, help="candidates queries (default 1000)")
    add("--chunk-rows", type=int, default=500, help="execution.chunk_rows (default 500: the flows' configs)")
    add("--empty-chunks", type=int, default=100, help="chunks of the empty stage (default 100)")
    add("--cores", default="all", help="core settings, numbers or 'all' (default all)")
    add("--runners", default="process,ray", help="runners whose start is timed (ray: also its empty chunk)")
    add("--stages", default=",".join(STAGES), help=f"timed stages (default {','.join(STAGES)})")
    add("--rounds", type=int, default=3, help="interleaved warm rounds (default 3)")
    add("--start-rounds", type=int, default=3, help="fresh starts of each runner (default 3)")
    add("--seed", type=int, default=0)
    add("--root", type=Path, default=None, help="artifact store (default: a temporary folder)")
    add("--quick", action="store_true", help="smoke run: 10k passages and abstracts, 100 claims, 1 round")
    args = common.parse_with_out(parser, argv, common.results_file("scale"))
    if args.quick:  # its results beside the full run's, not over them
        args.passages, args.abstracts, args.claims, args.articles, args.empty_chunks = (
            10_000,
            10_000,
            100,
            100,
            20,
        )
        args.rounds = args.start_rounds = 1
        full, quick = common.results_file("scale"), common.results_file("scale_quick")
        args.out = quick if args.out == full else args.out
    every = len(CPUS)
    cores = (every if c == "all" else min(int(c), every) for c in args.cores.split(","))
    args.core_list = list(dict.fromkeys(cores))
    args.stage_list = [s for s in STAGES if s in args.stages.split(",")]
    return args


def show(configs: list[dict[str, Any]], console: Console) -> None:
    columns = [
        "stage",
        "cores",
        "chunks inline/pool",
        "inline s",
        "pool s",
        "speed-up (min–max)",
        "efficiency",
    ]
    table = common.figures_table("inline vs process pool, same cores: warm medians", columns, left=1)
    for c in configs:
        for name, s in c["stages"].items():
            t, chunks = s["timings"], s["chunks"]
            if name == "empty":
                ms = ", ".join(f"{k} {v:.0f} ms" for k, v in s["ms_per_chunk"].items())
                console.print(f"empty chunk on {c['cores']} core(s): {ms}")
                continue
            speedup = s["speedup"]["process"]
            table.add_row(name, str(c["cores"]), f"{chunks['inline']}/{chunks['process']}",
                          f"{t['inline']['median_s']:.2f}", f"{t['process']['median_s']:.2f}",
                          speedup["text"], f"{speedup['efficiency']:.2f}")  # fmt: skip
        starts = ", ".join(f"{k} {v['median_s']:.1f} s ({v['min_s']:.1f}–{v['max_s']:.1f})"
                           for k, v in c["startup"].items())  # fmt: skip
        console.print(f"runner start on {c['cores']} core(s): {starts}")
    console.print(table)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.update({k: v for k, v in QUIET.items() if k not in os.environ})  # before Prefect loads
    from flows.ephemeral import guard_temporary_server  # noqa: PLC0415 -- imports Prefect

    args, console, started_at = parse_args(argv), Console(width=120), time.perf_counter()
    server_s = common.timed(guard_temporary_server)[1]
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        bench = Bench(args.root or Path(tmp), args, console)
        configs = [run_cores(bench, cores, console) for cores in args.core_list]
        pin(len(CPUS))
    show(configs, console)
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    packages = {p: version(p) for p in ("pyarrow", "numpy", "numba", "prefect", "prefect-ray", "ray")}
    machine = {"cores": len(CPUS), "ram_gib": round(ram, 1), "load_average": os.getloadavg(),
               **common.environment(**packages)}  # fmt: skip
    result = {"machine": machine, "prefect_server_start_s": server_s, "total_s": time.perf_counter() - started_at,
              "corpus": {k: getattr(args, k) for k in CORPUS}, "rounds": args.rounds, "configs": configs}  # fmt: skip
    common.write_results(args.out, result, console)
    return 0


if __name__ == "__main__":  # through the importable module: workers unpickle its stages by name
    sys.exit(importlib.import_module("bench.bench_scale").main())
