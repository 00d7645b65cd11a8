"""tying.outputs: a folder or a file is written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tying.outputs import output_folder, write_text_atomic


def test_write_text_atomic_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    assert write_text_atomic(path, "first\n") == path
    write_text_atomic(path, "second, ünïcode\n")
    assert path.read_text(encoding="utf-8") == "second, ünïcode\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "DONE.json"
    path.write_text("old\n")

    def killed(*args, **kwargs):
        raise OSError("the process died between writing and renaming")

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(OSError, match="died"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["DONE.json"]


def test_output_folder_appears_only_when_the_block_succeeds(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), output_folder(out) as tmp:
        (tmp / "half.txt").write_text("x")
        raise RuntimeError("failed half-way")
    assert not out.exists() and list(tmp_path.iterdir()) == []
    with output_folder(out) as tmp:
        (tmp / "whole.txt").write_text("y")
    assert [p.name for p in out.iterdir()] == ["whole.txt"]
    with pytest.raises(FileExistsError, match="not empty"), output_folder(out):
        pass
    with output_folder(out, overwrite=True) as tmp:
        (tmp / "new.txt").write_text("z")
    assert [p.name for p in out.iterdir()] == ["new.txt"]  # replaced, not mixed into
