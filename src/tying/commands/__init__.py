"""Verb modules of the `tying` command line (see `tying.cli`), and the one way a verb reports.

Every verb ends with `report(args, lines, data, json_path)`:

- stdout gets a few human lines (what was done, the key figures with units, where the files
  are), or, with `--json` (a flag of every verb, added by `tying.cli.build_parser`), the verb's
  JSON result and nothing else (logs and progress stay on stderr);
- a verb with an output folder writes its JSON there (`json_path`): the file the library
  wrote (lens.json, probe.json, results.json, ...; `data=None` reads it back), or the result
  the verb writes itself (train.json in the run folder, convert.json, export.json). A verb
  without an output folder (info, params, tokenize, eval) writes no file: `--json` is the only
  way to get its JSON.

The JSON printed by `--json` is the file's content exactly (`json.loads` of both agree).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any


def report(
    args: argparse.Namespace,
    lines: Iterable[str] | str,
    data: Mapping[str, Any] | None = None,
    json_path: str | Path | None = None,
) -> None:
    """Print a verb's result: `lines` (human), or its JSON when `args.json`.

    Args:
        args: the verb's parsed arguments (`args.json`: print JSON instead of `lines`).
        lines: the human summary, a string or one string per line.
        data: the JSON result; written to `json_path` (atomically) when both are given.
            None: the library already wrote `json_path`, which is read back.
        json_path: where the verb's JSON is (None: the verb has no output file). The summary
            names it, in a last line "wrote PATH" unless a line already does.
    """
    from tying.outputs import write_text_atomic

    if data is None:
        if json_path is None:
            raise ValueError("report needs data or the json_path the library wrote")
        data = json.loads(Path(json_path).read_text(encoding="utf-8"))
    elif json_path is not None:
        write_text_atomic(json_path, json.dumps(data, indent=2) + "\n")
    if getattr(args, "json", False):
        text = [json.dumps(data, indent=2)]
    else:
        text = [lines] if isinstance(lines, str) else list(lines)
        if json_path is not None and not any(str(json_path) in line for line in text):
            text.append(f"wrote {json_path}")
    try:
        print("\n".join(text), flush=True)
    except BrokenPipeError:  # the reader left (`tying info --json | head`): not a failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def warn_contradictions(options: Any, verb: str) -> None:
    """Log one warning per setting of `options` that cannot take effect with its step schedule
    (`tying.options.common.contradictions`), on the verb's logger `tying.VERB`."""
    from tying.options.common import contradictions

    log = logging.getLogger(f"tying.{verb}")
    for warning in contradictions(options):
        log.warning(warning)
