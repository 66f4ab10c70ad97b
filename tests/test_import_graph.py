"""No import circle among the project's modules: library, application and harness.

The graph is read from the source (``ast``, nothing is imported). Every ``import`` statement
counts, at the top of a module or inside a function: a function-level import that closes a loop
is still a loop, one the reader has to untangle. An edge goes to the module named, or, for
``from package import name``, to ``package.name`` when that is a module and to the package
(its ``__init__``) when it is not. A module importing its own package's ``__init__`` (``from
tfrs_logq import x`` in ``tfrs_logq/y.py``, ``x`` not a module) is an edge like any other.
"""

from __future__ import annotations

import ast
import pathlib
from typing import Dict, Iterator, List, Set

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("tfrs_logq", "models", "train", "eval", "bench")


def module_name(path: pathlib.Path) -> str:
  parts = list(path.relative_to(ROOT).with_suffix("").parts)
  if parts[-1] == "__init__":
    parts.pop()
  return ".".join(parts)


def project_modules() -> Dict[str, pathlib.Path]:
  out = {}
  for package in PACKAGES:
    for path in sorted((ROOT / package).rglob("*.py")):
      if "out" in path.relative_to(ROOT).parts[1:2]:
        continue
      out[module_name(path)] = path
  return out


def imported(path: pathlib.Path, name: str, modules: Dict[str, pathlib.Path]) -> Iterator[str]:
  """The project modules ``path`` (module ``name``) imports."""
  is_package = path.name == "__init__.py"
  tree = ast.parse(path.read_text(), str(path))
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        target = alias.name
        while target and target not in modules:
          target = target.rpartition(".")[0]
        if target:
          yield target
    elif isinstance(node, ast.ImportFrom):
      if node.level:
        base = name.split(".")
        base = base[: len(base) - node.level + (1 if is_package else 0)]
        parent = ".".join(base + ([node.module] if node.module else []))
      else:
        parent = node.module or ""
      for alias in node.names:
        full = f"{parent}.{alias.name}"
        if full in modules:
          yield full
        elif parent in modules:
          yield parent


def import_graph() -> Dict[str, Set[str]]:
  modules = project_modules()
  return {
    name: {t for t in imported(path, name, modules) if t != name} for name, path in modules.items()
  }


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
  """The strongly connected components with more than one module (Tarjan), sorted."""
  index: Dict[str, int] = {}
  low: Dict[str, int] = {}
  stack: List[str] = []
  on_stack: Set[str] = set()
  found: List[List[str]] = []

  def visit(v: str) -> None:
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return sorted(found)


def test_the_finder_sees_circles_and_every_kind_of_import(tmp_path):
  assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
  assert circles({"a": {"b"}, "b": set()}) == []
  source = tmp_path / "m.py"
  source.write_text(
    "import pkg.sub.leaf as leaf\n"
    "from pkg import sub, not_a_module\n"
    "from . import sibling\n"
    "import numpy\n"
    "def f():\n"
    "  from pkg.sub.leaf import name\n"
  )
  modules = dict.fromkeys(["pkg", "pkg.sub", "pkg.sub.leaf", "pkg.sibling", "pkg.m"], None)
  got = sorted(set(imported(source, "pkg.m", modules)))  # type: ignore[arg-type]
  assert got == ["pkg", "pkg.sibling", "pkg.sub", "pkg.sub.leaf"]
  assert len(import_graph()) > 200


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
  found = [c for c in circles(import_graph()) if any(m.split(".")[0] == package for m in c)]
  assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)
