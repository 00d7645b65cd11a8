"""`studies.doc_blocks`: the one reader of a page's fenced blocks and example markers, which the
examples test runs and benchmarks/quickstart.py times."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from studies.doc_blocks import blocks_of

ROOT = Path(__file__).resolve().parents[2]

PAGE = """# A page

```bash
tying train tie=tt --out runs/tt   # a comment
```

- a list item with an indented block:

    ````python
    print("```")
    ````

<!-- example: skip — needs a GPU -->
```bash
tying train preset=small
```

<!-- example: frobnicate -->
```
tying info
```
"""


def test_blocks_languages_markers_and_indents(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    blocks = blocks_of(page)
    assert [(b.line, b.language) for b in blocks] == [
        (3, "bash"),
        (9, "python"),
        (14, "bash"),
        (19, ""),
    ]
    assert blocks[0].text == "tying train tie=tt --out runs/tt   # a comment"
    assert blocks[1].text == 'print("```")'  # a longer fence holds a shorter one; indent removed
    assert [b.skip_reason for b in blocks] == [None, None, "needs a GPU", None]
    assert blocks[3].marker == "frobnicate" and blocks[3].skip_reason is None
    assert blocks[0].where == f"{page}:3"


def test_quickstart_times_the_runnable_bash_lines(tmp_path):
    """The benchmark runs each command of the bash blocks the examples test runs, comments
    stripped, skipped blocks and other languages left out."""
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        spec = importlib.util.spec_from_file_location(
            "quickstart", ROOT / "benchmarks" / "quickstart.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert module.page_commands(page) == ["tying train tie=tt --out runs/tt"]
    assert module.page_commands()[0].startswith("tying")
