"""Every ```python block of README.md runs as written.

Blocks are extracted from the README (fenced with ```python), each executed on its own in a fresh
namespace, in this process (the package is installed and TF_USE_LEGACY_KERAS is set by
tests/conftest.py). A block that must not run is marked by an HTML comment `<!-- no-test -->` on
the line just before its fence (blank lines allowed in between); such blocks are kept rare.
"""

import pathlib
import re

import pytest

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"
NO_TEST = "<!-- no-test -->"
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def _blocks():
  """(line number, code, marked no-test) of every ```python block of README.md."""
  text = README.read_text(encoding="utf-8")
  out = []
  for match in _FENCE.finditer(text):
    before = text[:match.start()].rstrip().splitlines()
    marked = bool(before) and before[-1].strip() == NO_TEST
    out.append((text.count("\n", 0, match.start()) + 1, match.group(1), marked))
  return out


_RUNNABLE = [(line, code) for line, code, marked in _blocks() if not marked]


def test_readme_has_python_blocks_and_few_are_excluded():
  blocks = _blocks()
  assert len(_RUNNABLE) >= 3, "README.md lost its runnable examples"
  assert sum(marked for _, _, marked in blocks) <= max(1, len(blocks) // 4), (
      f"too many {NO_TEST} blocks: README examples should run")


@pytest.mark.parametrize("line,code", _RUNNABLE, ids=[f"line{line}" for line, _ in _RUNNABLE])
def test_readme_block_runs(line, code):
  namespace = {"__name__": f"readme_block_line{line}"}
  exec(compile(code, f"README.md:{line}", "exec"), namespace)  # pylint: disable=exec-used
