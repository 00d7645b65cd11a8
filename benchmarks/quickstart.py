"""Time the walkthrough of docs/quickstart.md: every command of its runnable bash blocks, run
once as written, in order, in a fresh folder with an empty shard cache (so the first training
run tokenizes its books, as a new user's does).

For each command it records the wall seconds, the CPU seconds of the processes it started
(user + system, from `getrusage(RUSAGE_CHILDREN)`), the 1-minute load average before and after,
and the last lines it printed; the page's expected outputs and times are copied from this file.

    python benchmarks/quickstart.py [--out benchmarks/results/quickstart.json]

Measure on a quiet machine: the JSON names the CPU, its flags and the load it saw.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))
from studies.doc_blocks import blocks_of  # noqa: E402
from timing import cpu_description, write_json  # noqa: E402

PAGE = ROOT / "docs" / "quickstart.md"


def page_commands(page: Path = PAGE) -> list[str]:
    """The commands of the page's runnable bash blocks, in order (blocks marked skip left out),
    as tests/docs/test_examples.py reads them (`studies.doc_blocks`)."""
    return [
        command
        for block in blocks_of(page)
        if block.language == "bash" and block.skip_reason is None
        for line in block.text.splitlines()
        if (command := line.split("#", 1)[0].strip())
    ]


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_command(command: str, cwd: Path, env: dict[str, str]) -> dict[str, Any]:
    """Run one command (exit status 0 expected) and time it."""
    print(f"$ {command}", flush=True)
    load_before = os.getloadavg()[0]
    cpu0, t0 = _children_cpu_s(), time.perf_counter()
    result = subprocess.run(
        shlex.split(command), cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    cpu = _children_cpu_s() - cpu0
    print(result.stdout[-2000:], end="", flush=True)
    if result.returncode != 0:
        raise SystemExit(f"{command!r} exited with {result.returncode}:\n{result.stderr[-4000:]}")
    return {
        "command": command,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "stdout": result.stdout.strip().splitlines()[-8:],
        # the verbs' own messages (logging), not their progress bars
        "messages": [line for line in result.stderr.splitlines() if line.startswith("tying ")][-8:],
    }


def quoted_values(cwd: Path, cache: Path) -> dict[str, Any]:
    """The values of the walkthrough's output files that the page quotes, and what the runs
    tokenized (the shard cache's manifests)."""
    probe = json.loads((cwd / "probe" / "probe.json").read_text())
    manifests = [json.loads(p.read_text()) for p in sorted(cache.glob("shards/*/manifest.json"))]
    return {
        "tokenized": [
            {
                "source": Path(m["source"]).name,
                "documents": m["num_documents"],
                "tokens": m["num_tokens"],
            }
            for m in manifests
        ],
        "probe": {
            "pit_consistency_frobenius": probe["consistency"]["raw"]["delta_ti"],
            "embedding_share_of_parameters": probe["params"]["embedding_share"],
        },
        "train_val_loss": {
            tie: json.loads((cwd / "runs" / tie / "train.json").read_text())["val_loss"]
            for tie in ("tt", "pit")
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/quickstart.json"))
    args = parser.parse_args()

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="quickstart-") as folder:
        cwd = Path(folder) / "work"
        cwd.mkdir()
        env = dict(
            os.environ,
            TYING_CACHE_DIR=str(Path(folder) / "cache"),
            PYTHONUNBUFFERED="1",
            # `tying` is this interpreter's, as after `make demo`'s set-up
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )
        env.pop("TYING_EXAMPLE_BUDGET", None)
        steps = [run_command(command, cwd, env) for command in page_commands()]
        quoted = quoted_values(cwd, Path(env["TYING_CACHE_DIR"]))
    result = {
        "what": "the walkthrough of docs/quickstart.md: each command of its runnable blocks run "
        "once, as written, in order, from an empty shard cache (benchmarks/quickstart.py)",
        "date": date.today().isoformat(),
        "commit": commit,
        "machine": {
            "cpu": cpu_description(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "environment": {k: v for k, v in os.environ.items() if k.startswith("TYING_")},
        "total_wall_s": round(sum(s["wall_s"] for s in steps), 1),
        "steps": steps,
        "quoted": quoted,
    }
    write_json(result, args.out)


if __name__ == "__main__":
    main()
