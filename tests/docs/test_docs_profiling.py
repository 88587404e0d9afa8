"""The profiling script of docs/profiling.md runs as written and its table shows the labels."""

from __future__ import annotations

import contextlib
import io
import linecache
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "profiling.md"


def test_the_profiling_script_shows_matchbox_ranges():
    source = re.search(r"```python\n(# profile_rnn\.py\n.*?)```", DOC.read_text(), re.S).group(1)
    # Its source in linecache, as IPython keeps a cell's: @batch reads the function's lines.
    filename = "<docs/profiling.md script>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(source, filename, "exec"), {"__name__": "__main__"})  # noqa: S102
    table = printed.getvalue()
    for label in ("matchbox.batch.step", "matchbox.batch.merge", "matchbox.recurrent"):
        assert re.search(rf"^\s*{re.escape(label)}\s", table, re.M), label
