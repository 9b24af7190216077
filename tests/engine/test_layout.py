"""Where things live is the design (DESIGN.md §3 in the shared notes; issue 15).

Stage S of flow F is ``tasks/F/stages/S.py``, configured under ``stages.S`` in
``flows/configs/F.yaml``, its prompts in ``prompts/F/``, its tests in ``tests/F/``; modules
stay under ~400 lines and functions under 80, numba kernels (``@compiled``,
``tasks/common/jit.py``) aside; an LLM stage is short because the shared helper does the rest.
"""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest
import yaml

from flows.registry import PIPELINES
from tests.conftest import REPO

CODE = ("irforge", "flows", "tasks", "bench")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 300
MAX_LLM_STAGE_LINES = 150
KERNEL_DECORATORS = {"compiled", "njit", "jit"}


def _modules() -> list[Path]:
    return sorted(p for folder in CODE for p in (REPO / folder).rglob("*.py") if "__pycache__" not in p.parts)


def _decorators(node: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set()
    for deco in node.decorator_list:
        target = deco.func if isinstance(deco, ast.Call) else deco
        names.add(target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", ""))
    return names


def _wrapped_kernels(tree: ast.Module) -> set[str]:
    """Names compiled by a call rather than a decorator: ``kernel = compiled(_kernel)``."""
    return {
        node.args[0].id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", "")) in KERNEL_DECORATORS
        and node.args
        and isinstance(node.args[0], ast.Name)
    }


def _long_definitions(path: Path, root: Path = REPO) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kernels = _wrapped_kernels(tree)
    found = []
    for node in ast.walk(tree):
        length = (node.end_lineno or node.lineno) - node.lineno + 1 if hasattr(node, "lineno") else 0
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            kernel = node.name in kernels or _decorators(node) & KERNEL_DECORATORS
            if length > MAX_FUNCTION_LINES and not kernel:
                found.append(f"{where} function {node.name}: {length} lines")
        elif isinstance(node, ast.ClassDef) and length > MAX_CLASS_LINES:
            found.append(f"{where} class {node.name}: {length} lines")
    return found


def test_the_size_rules_catch_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    sample = tmp_path / "probe.py"
    sample.write_text(
        f"def long():\n{body}\n\n@compiled\ndef kernel():\n{body}\n\n"
        f"def _wrapped():\n{body}\n\nwrapped = compiled(_wrapped)\n"
    )
    found = _long_definitions(sample, tmp_path)
    assert len(found) == 1 and "function long" in found[0]


def test_modules_functions_and_classes_stay_small() -> None:
    too_long = [
        f"{p.relative_to(REPO)}: {n} lines"
        for p in _modules()
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    too_long += [line for p in _modules() for line in _long_definitions(p)]
    assert not too_long, "split these (numba kernels are exempt):\n" + "\n".join(too_long)


@pytest.mark.parametrize("flow", sorted(PIPELINES))
def test_each_stage_lives_where_its_flow_says(flow: str) -> None:
    pipeline = PIPELINES[flow]
    package = REPO / "tasks" / flow
    assert (package / "__init__.py").is_file()
    assert pipeline.default_config == REPO / "flows" / "configs" / f"{flow}.yaml"
    configured = yaml.safe_load(pipeline.default_config.read_text(encoding="utf-8"))["stages"]
    for spec in pipeline.stages:
        module = package / "stages" / f"{spec.name}.py"
        assert module.is_file(), f"stage {flow}.{spec.name} is not in {module.relative_to(REPO)}"
    assert set(configured) <= {spec.name for spec in pipeline.stages}
    assert (REPO / "tests" / flow).is_dir(), f"tests of {flow} belong in tests/{flow}/"


def test_prompts_sit_in_common_or_in_the_folder_of_the_flow_using_them() -> None:
    loose = [p.name for p in (REPO / "prompts").iterdir() if p.is_file() and p.name != "README.md"]
    assert not loose, f"prompts/ holds only common/ and one folder per flow: {loose}"
    folders = {p.name for p in (REPO / "prompts").iterdir() if p.is_dir()}
    # a flow package still being built (not yet in the registry) may have its prompts already
    packages = {p.name for p in (REPO / "tasks").iterdir() if (p / "stages").is_dir()}
    assert folders <= {"common", *PIPELINES, *packages}, folders


def test_llm_stages_are_short() -> None:
    """A stage sending prompts per row (:class:`tasks.common.llm.stage.LLMCalls`) is a config,
    a request builder and a reply parser; the helper does the rest."""
    stages = [
        p
        for flow in PIPELINES
        for p in sorted((REPO / "tasks" / flow / "stages").glob("*.py"))
        if "LLMCalls(" in p.read_text(encoding="utf-8")
    ]
    assert stages, "no stage uses tasks.common.llm.stage.LLMCalls"
    long = [
        f"{p.relative_to(REPO)}: {n}"
        for p in stages
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LLM_STAGE_LINES
    ]
    assert not long, long


def _chains(graph: grimp.ImportGraph, importer: str, imported: str) -> list[str]:
    found = graph.find_shortest_chains(importer=importer, imported=imported, as_packages=True)
    return [" -> ".join(chain) for chain in sorted(found)]


def test_flow_packages_import_only_the_shared_parts_and_the_engine() -> None:
    """``flows → tasks.<flow> → tasks.common → irforge`` for every flow of the registry (import
    graph by grimp, the library under import-linter): no flow imports another, and
    ``tasks.common`` imports none."""
    graph = grimp.build_graph("tasks", "flows", "irforge")
    flows = sorted(PIPELINES)
    # the graph is the real one: every flow reaches the shared parts
    assert all(_chains(graph, f"tasks.{f}", "tasks.common") for f in flows)
    wrong = [c for f in flows for c in _chains(graph, "tasks.common", f"tasks.{f}")]
    wrong += [c for f in flows for g in flows if g != f for c in _chains(graph, f"tasks.{f}", f"tasks.{g}")]
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)
