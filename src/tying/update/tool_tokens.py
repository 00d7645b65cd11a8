"""The new-token update's data, generated from GSM8K (docs/updates-design.md, "Updates that
touch the interface"): calculator calls written with k = 4 new tokens.

GSM8K's worked solutions carry calculator annotations, `48/2 = <<48/2=24>>24`, and end with
`#### 72`. `tool_call_text` rewrites them with the new tokens:

    48/2 = <<48/2=24>>24 clips   ->   48/2 = <calc>48/2</calc>24 clips
    #### 72                      ->   <answer>72</answer>

so every training completion uses the new tokens in a fixed grammar, and nothing else about
the text changes. `write_tool_token_data(folder)` writes

    tokens.txt    the 4 new strings, one a line (`tying add-tokens --tokens`)
    train.jsonl   {"id", "prompt", "completion"} from gsm8k/train.jsonl (`tying finetune --task`)
    test.jsonl    the same from gsm8k/test.jsonl: the target (held-out likelihood of the
                  completions, the new tokens included)

deterministically (the files' sha256 are returned and recorded by the experiment).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from tying.errors import MissingFileError
from tying.paths import bench_dir

#: The new tokens, in id order.
TOOL_TOKENS = ("<calc>", "</calc>", "<answer>", "</answer>")
_CALL = re.compile(r"<<([^<>=]*)=([^<>]*)>>")
_FINAL = re.compile(r"\n#### *(.+?)\s*$")
PROMPT = "Question: {question}\nAnswer:"


def tool_call_text(answer: str) -> str:
    """A GSM8K solution with its calculator annotations and final answer in the new tokens.

    Raises:
        ValueError: a solution without the final `#### N` line.
    """
    final = _FINAL.search(answer)
    if final is None:
        raise ValueError(f"not a GSM8K solution (no '#### N' line): {answer[-60:]!r}")
    body = _CALL.sub(lambda m: f"<calc>{m.group(1)}</calc>", answer[: final.start()])
    return f"{body}\n<answer>{final.group(1)}</answer>"


def tool_examples(split: str = "train", limit: int | None = None) -> list[dict[str, str]]:
    """Prompt/completion records of the GSM8K split whose solution has at least one call."""
    path = bench_dir() / "gsm8k" / f"{split}.jsonl"
    if not path.is_file():
        raise MissingFileError(f"{path} not found: set TYING_BENCH_DIR or TYING_DATA_DIR")
    records = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            item = json.loads(line)
            if "<<" not in item["answer"]:
                continue
            records.append(
                {
                    "id": f"gsm8k-{split}-{i}",
                    "prompt": PROMPT.format(question=item["question"]),
                    "completion": " " + tool_call_text(item["answer"]),
                }
            )
            if limit is not None and len(records) >= limit:
                break
    return records


def write_tool_token_data(
    folder: str | Path, train_limit: int | None = 2000, test_limit: int | None = 200
) -> dict[str, str]:
    """tokens.txt, train.jsonl and test.jsonl in `folder` (see the module docstring).

    Returns:
        {file name: sha256 hex of its bytes}.
    """
    folder = Path(folder).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "tokens.txt": "".join(t + "\n" for t in TOOL_TOKENS),
        "train.jsonl": "".join(json.dumps(r) + "\n" for r in tool_examples("train", train_limit)),
        "test.jsonl": "".join(json.dumps(r) + "\n" for r in tool_examples("test", test_limit)),
    }
    digests = {}
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
        digests[name] = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return digests
