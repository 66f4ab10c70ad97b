"""Every ```python block of README.md and of the guides in docs/*.md runs as written, and every
relative link of those pages points to an existing file.

Blocks are extracted from each page (fenced with ```python), each executed on its own in a fresh
namespace, in this process (the package is installed and TF_USE_LEGACY_KERAS is set by
tests/conftest.py); a block never depends on another one, in its page or elsewhere. A block that
must not run is marked by an HTML comment `<!-- no-test -->` on the line just before its fence
(blank lines allowed in between); such blocks are kept rare, page by page.

Links: every Markdown link or image `[text](target)` outside code whose target is not a URL
must name an existing file or folder, relative to the page; a `#fragment` on a Markdown page must
name one of its headings (GitHub's anchors).
"""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# The pages whose code blocks run: the front page and the guides.
PAGES = [README] + sorted(DOCS.glob("*.md"))
# The pages whose links are checked: the same, and the index of the results.
LINKED_PAGES = PAGES + [DOCS / "results" / "README.md"]
NO_TEST = "<!-- no-test -->"
_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_ANY_FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
_INLINE_CODE = re.compile(r"(`+).*?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def _name(page):
  return page.relative_to(ROOT).as_posix()


def _blocks(page):
  """(line number, code, marked no-test) of every ```python block of `page`."""
  text = page.read_text(encoding="utf-8")
  out = []
  for match in _FENCE.finditer(text):
    before = text[: match.start()].rstrip().splitlines()
    marked = bool(before) and before[-1].strip() == NO_TEST
    out.append((text.count("\n", 0, match.start()) + 1, match.group(1), marked))
  return out


_RUNNABLE = [
  (_name(page), line, code) for page in PAGES for line, code, marked in _blocks(page) if not marked
]


def test_pages_exist():
  assert README.is_file()
  guides = [p.name for p in PAGES[1:]]
  assert "README.md" in guides, "docs/README.md (the index of the guides) is missing"
  assert len(guides) >= 5, f"docs/ holds too few guides: {guides}"


def test_readme_is_a_front_page():
  lines = README.read_text(encoding="utf-8").splitlines()
  assert len(lines) <= 300, f"README.md has {len(lines)} lines: move details to docs/"


def test_pages_have_python_blocks_and_few_are_excluded():
  assert sum(1 for name, _, _ in _RUNNABLE if name == "README.md") >= 1, (
    "README.md lost its runnable example"
  )
  assert len(_RUNNABLE) >= 3, "README.md and docs/ lost their runnable examples"
  for page in PAGES:
    blocks = _blocks(page)
    assert sum(marked for _, _, marked in blocks) <= max(1, len(blocks) // 4), (
      f"too many {NO_TEST} blocks in {_name(page)}: examples should run"
    )


@pytest.mark.parametrize(
  "page,line,code", _RUNNABLE, ids=[f"{page}:line{line}" for page, line, _ in _RUNNABLE]
)
def test_page_block_runs(page, line, code):
  namespace = {"__name__": f"doc_block_{re.sub(r'[^0-9a-zA-Z]', '_', page)}_line{line}"}
  exec(compile(code, f"{page}:{line}", "exec"), namespace)


def _github_anchors(page):
  """The anchors GitHub gives the headings of a Markdown page."""
  text = _ANY_FENCE.sub("", page.read_text(encoding="utf-8"))
  anchors, seen = set(), {}
  for heading in re.findall(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", text, re.M):
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")
    n = seen.get(slug, 0)
    seen[slug] = n + 1
    anchors.add(slug if n == 0 else f"{slug}-{n}")
  return anchors


def _links(page):
  """(line number, target) of every Markdown link of `page` outside code and comments."""
  text = page.read_text(encoding="utf-8")

  def blank(match):  # keeps line numbers
    return re.sub(r"[^\n]", " ", match.group(0))

  for pattern in (_ANY_FENCE, _COMMENT, _INLINE_CODE):
    text = pattern.sub(blank, text)
  return [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in _LINK.finditer(text)]


@pytest.mark.parametrize("page", LINKED_PAGES, ids=[_name(p) for p in LINKED_PAGES])
def test_relative_links_point_to_existing_files(page):
  assert page.is_file(), f"{_name(page)} is missing"
  broken = []
  for line, target in _links(page):
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # https:, mailto:, ...
      continue
    path, _, fragment = target.partition("#")
    resolved = (page.parent / path).resolve() if path else page
    if not resolved.exists():
      broken.append(f"{_name(page)}:{line}: {target} (no such file)")
    elif fragment and resolved.suffix == ".md" and fragment not in _github_anchors(resolved):
      broken.append(f"{_name(page)}:{line}: {target} (no heading #{fragment})")
  assert not broken, "broken links:\n" + "\n".join(broken)


def test_every_results_folder_is_in_the_results_index():
  """docs/results/README.md's index links every folder and file of docs/results (the next
  result committed without its index row fails here)."""
  index = DOCS / "results" / "README.md"
  linked = {target.partition("#")[0].split("/")[0] for _, target in _links(index)}
  entries = {p.name for p in (DOCS / "results").iterdir() if p.name != "README.md"}
  missing = sorted(entries - linked)
  assert not missing, f"not in the index of {_name(index)}: {missing}"
