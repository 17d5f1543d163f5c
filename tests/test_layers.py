"""The code's import graph: rooms import downward, never in a loop.

Read from the source with ``ast`` (every import, at module level or inside a function), so a lazy import
that closes a loop counts as the loop it is. STYLE.md: a stage never imports one that runs after it, and
what several share lives in one room below them all.
"""

from __future__ import annotations

import ast
import functools
import graphlib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("contracts", "glue_processor", "lambdas", "infra", "bench")
# Which top-level package may import which: contracts at the bottom, the off-AWS runner
# (glue_processor.local) may drive the manifest builder, infra and bench above everything.
ALLOWED = {
    "contracts": set(),
    "lambdas": {"contracts"},
    "glue_processor": {"contracts", "lambdas"},
    "infra": {"contracts", "glue_processor", "lambdas"},
    "bench": {"contracts", "glue_processor", "lambdas", "infra"},
}


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _imported(module: str, path: Path) -> Iterator[str]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parent, *([base] if base else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


@functools.cache  # one parse of the 194 modules serves every test (none changes the graph)
def graph() -> dict[str, set[str]]:
    """module -> the modules of ours it imports (a package's submodule importing its own package's
    ``__init__`` is not an edge: that is how a package hands its names on)."""
    mods = modules()

    def ours(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    edges: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        for name in _imported(module, path):
            target = ours(name)
            if target and target != module and not module.startswith(target + "."):
                edges[module].add(target)
    return edges


def loop(edges: dict[str, set[str]]) -> list[str]:
    """One import loop (its modules, the first repeated at the end), or [] when there is none."""
    try:
        graphlib.TopologicalSorter(edges).prepare()
    except graphlib.CycleError as err:
        return list(err.args[1])
    return []


def test_the_graph_sees_function_level_imports_and_finds_loops(tmp_path: Path) -> None:
    edges = graph()
    assert "infra.wheelhouse" in edges["infra.package"]  # imported inside wheelhouse(), not at the top
    assert "contracts.manifest" in edges["lambdas.manifest_builder.batching"]
    assert sorted(set(loop({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}))) == ["a", "b", "c"]
    assert loop({"a": {"b"}, "b": set()}) == []
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "one.py").write_text("def f():\n    from .two import g\n")
    assert list(_imported("pkg.one", tmp_path / "pkg" / "one.py")) == ["pkg.two", "pkg.two.g"]


def test_no_two_modules_import_each_other_even_lazily() -> None:
    # infra.runtime and infra.wheelhouse did, through a function-level import of read_lock
    assert loop(graph()) == []


def test_packages_import_downward() -> None:
    edges = graph()
    wrong = sorted(
        (module, target)
        for module, targets in edges.items()
        for target in targets
        if target.split(".")[0] != module.split(".")[0] and target.split(".")[0] not in ALLOWED[module.split(".")[0]]
    )
    assert wrong == []
    local_only = {
        m for m, ts in edges.items() if m.startswith("glue_processor") and any(t.startswith("lambdas") for t in ts)
    }
    assert all(m.startswith("glue_processor.local.") for m in local_only), local_only


STAGES = ("plan", "read", "write", "commit")  # the order a batch runs them (batch.py)
# The room below them all: what several stages share (names, declared types, the partition spec,
# the rules, what a task is handed and what it finds, the object store, the text framing) imports
# only itself, the defaults and the contracts.
BOTTOM = "glue_processor.shared"
BELOW_BOTTOM = {"glue_processor.defaults"}


def _stage(module: str) -> int | None:
    parts = module.split(".")
    return STAGES.index(parts[1]) if len(parts) > 1 and parts[0] == "glue_processor" and parts[1] in STAGES else None


def test_no_stage_imports_one_that_runs_after_it() -> None:
    # plan.memory read past batches through commit.ledger.BatchCommitter (now a Protocol, Records), and
    # the object store and the column names lived in read/ (now shared/): five such imports gone; the
    # parse task's parts used the write stage's Parquet writer and spill layout (now shared/): three more;
    # and the partition bound over the tasks' parts, which the write stage runs, was in plan/: one more;
    # and how an object's text is read and framed, which the planner's byte ranges use too: two more
    later = {
        (module, target)
        for module, targets in graph().items()
        for target in targets
        if (a := _stage(module)) is not None and (b := _stage(target)) is not None and b > a
    }
    # and what the plan hands the parse task and gets back (read.spec, read.task's outcome and its
    # reading of an event's version, with the declared types, partition spec and rules they carry,
    # from table/): the last four
    assert later == set()


def test_the_shared_room_imports_nothing_above_it() -> None:
    upward = sorted(
        (module, target)
        for module, targets in graph().items()
        if module.startswith(BOTTOM + ".") or module == BOTTOM
        for target in targets
        if target.startswith("glue_processor")
        and not (target == BOTTOM or target.startswith(BOTTOM + ".") or target in BELOW_BOTTOM)
    )
    assert upward == []
