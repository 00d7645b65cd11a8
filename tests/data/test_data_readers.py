"""Readers: every format and compression, directories, globs, lists, HF datasets, fingerprints."""

from __future__ import annotations

import gzip
import json
import lzma
import os

import pytest

from tying.data import readers
from tying.data.corpus import default_train_source, default_validation_source, resolve_source
from tying.data.readers import (
    describe_source,
    iter_documents,
    parse_hf_spec,
    read_file,
    resolve_files,
)

DOCS = ["first document\nwith two lines", "second — ünïcödé 😀", "  third  \n\n"]


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_txt_file_is_one_document(tmp_path, write_text, suffix):
    text = "\n\n".join(DOCS)  # blank lines do not split a .txt file
    path = write_text(tmp_path / f"book.txt{suffix}", text)
    assert list(iter_documents(path)) == [text]


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_jsonl_reads_text_field(tmp_path, write_jsonl, suffix):
    path = write_jsonl(tmp_path / f"docs.jsonl{suffix}", DOCS)
    assert list(iter_documents(path)) == DOCS
    other = write_jsonl(tmp_path / f"other.jsonl{suffix}", DOCS, field="content")
    assert list(iter_documents(other, text_field="content")) == DOCS


def test_jsonl_skips_blank_lines_and_nulls(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "a"}\n\n{"text": null}\n   \n{"text": "b"}\n', encoding="utf-8")
    assert list(iter_documents(path)) == ["a", "b"]


def test_jsonl_missing_field_names_file_line_and_field(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "a"}\n{"body": "b"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"docs\.jsonl:2.*'text'.*body"):
        list(iter_documents(path))


def test_non_string_text_is_an_error(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": 3}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="int, expected a string"):
        list(iter_documents(path))


def test_invalid_utf8_txt_is_an_error(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café".encode("latin-1"))
    with pytest.raises(ValueError, match="not valid UTF-8"):
        list(iter_documents(path))


@pytest.mark.parametrize("suffix", ["", ".gz", ".xz"])
def test_parquet_reads_column_across_row_groups_and_batches(tmp_path, monkeypatch, suffix):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    docs = [f"row {i} " + "x" * i for i in range(23)] + [None, "last"]
    table = pa.table({"id": list(range(len(docs))), "text": docs})
    plain = tmp_path / "docs.parquet"
    pq.write_table(table, plain, row_group_size=5)  # several row groups
    path = plain
    if suffix:
        path = tmp_path / f"docs.parquet{suffix}"
        compress = gzip.compress if suffix == ".gz" else lzma.compress
        path.write_bytes(compress(plain.read_bytes()))
    monkeypatch.setattr(readers, "_PARQUET_BATCH_ROWS", 3)  # batches that cross row groups
    assert list(iter_documents(path)) == [d for d in docs if d is not None]
    with pytest.raises(ValueError, match=r"no column 'body'.*\['id', 'text'\]"):
        list(iter_documents(path, text_field="body"))


def test_directory_is_recursive_sorted_and_skips_other_files(tmp_path, write_jsonl, write_text):
    write_jsonl(tmp_path / "b" / "2.jsonl.xz", ["b2"])
    write_jsonl(tmp_path / "a.jsonl", ["a"])
    write_text(tmp_path / "b" / "1.txt.gz", "b1")
    (tmp_path / "README.md").write_text("not a corpus file")
    (tmp_path / "b" / "notes.json").write_text("{}")
    files = resolve_files(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in files] == [
        "a.jsonl",
        "b/1.txt.gz",
        "b/2.jsonl.xz",
    ]
    assert all(p.is_absolute() for p in files)
    assert list(iter_documents(tmp_path)) == ["a", "b1", "b2"]


def test_globs_lists_and_deduplication(tmp_path, write_jsonl):
    for name in ("train-01.jsonl", "train-00.jsonl.gz", "validation.jsonl"):
        write_jsonl(tmp_path / name, [name])
    assert list(iter_documents(str(tmp_path / "train-*"))) == [
        "train-00.jsonl.gz",
        "train-01.jsonl",
    ]
    assert list(iter_documents(str(tmp_path / "**" / "*.jsonl"))) == [
        "train-01.jsonl",
        "validation.jsonl",
    ]
    # a list keeps its order; a file named twice is read once
    source = [tmp_path / "validation.jsonl", str(tmp_path / "train-*"), tmp_path / "train-01.jsonl"]
    assert list(iter_documents(source)) == [
        "validation.jsonl",
        "train-00.jsonl.gz",
        "train-01.jsonl",
    ]


def test_missing_and_unsupported_paths(tmp_path):
    missing = tmp_path / "nowhere" / "corpus.jsonl"
    with pytest.raises(FileNotFoundError, match=r"corpus path not found: .*nowhere.*expected"):
        list(iter_documents(missing))
    with pytest.raises(FileNotFoundError, match="matches no"):
        resolve_files(str(tmp_path / "*.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="in directory"):
        resolve_files(tmp_path / "empty")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(ValueError, match=r"unsupported file type: .*data\.csv"):
        resolve_files(tmp_path / "data.csv")
    with pytest.raises(ValueError, match="empty list"):
        resolve_files([])
    with pytest.raises(ValueError, match="Hugging Face"):
        resolve_files([tmp_path, "hf:foo"])


def test_read_file_matches_iter_documents(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "d.jsonl.gz", DOCS)
    assert list(read_file(path)) == list(iter_documents(path))


def test_parse_hf_spec():
    spec = parse_hf_spec("hf:HuggingFaceFW/fineweb-edu:sample-10BT@train")
    assert (spec.name, spec.config, spec.split, spec.kwargs) == (
        "HuggingFaceFW/fineweb-edu",
        "sample-10BT",
        "train",
        {},
    )
    spec = parse_hf_spec("hf:json@validation?data_files=a.jsonl&data_files=b.jsonl&streaming=false")
    assert (spec.name, spec.config, spec.split) == ("json", None, "validation")
    assert spec.kwargs == {"data_files": ["a.jsonl", "b.jsonl"], "streaming": False}
    assert parse_hf_spec("hf:wikitext:wikitext-2-raw-v1").split == "train"
    with pytest.raises(ValueError, match="no dataset name"):
        parse_hf_spec("hf:@train")


def test_hf_source_streams_local_files(tmp_path, write_jsonl, monkeypatch):
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    path = write_jsonl(tmp_path / "docs.jsonl", DOCS)
    local = f"data_files={path}&cache_dir={tmp_path / 'hf'}"  # no writes under ~/.cache
    assert list(iter_documents(f"hf:json?{local}")) == DOCS
    assert list(iter_documents(f"hf:json@train?{local}&streaming=false")) == DOCS
    with pytest.raises(ValueError, match="no column 'body'"):
        list(iter_documents(f"hf:json?{local}", text_field="body"))


def test_datasets_object_is_a_source():
    datasets = pytest.importorskip("datasets")
    dataset = datasets.Dataset.from_dict({"text": DOCS, "n": [1, 2, 3]})
    assert list(iter_documents(dataset)) == DOCS
    assert list(iter_documents(dataset.to_iterable_dataset())) == DOCS
    with pytest.raises(ValueError, match="no column 'body'"):
        list(iter_documents(dataset, text_field="body"))


def test_fingerprint_tracks_files_not_spelling(tmp_path, write_jsonl, monkeypatch):
    write_jsonl(tmp_path / "a.jsonl", ["a"])
    write_jsonl(tmp_path / "b.jsonl", ["b"])
    info = describe_source(tmp_path)
    monkeypatch.chdir(tmp_path)
    same = describe_source(["a.jsonl", str(tmp_path / "b.jsonl")])
    assert same.fingerprint == info.fingerprint  # same files, spelled differently
    assert [f["path"] for f in info.files] == [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    assert describe_source(tmp_path, text_field="body").fingerprint != info.fingerprint
    stat = (tmp_path / "a.jsonl").stat()
    os.utime(tmp_path / "a.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert describe_source(tmp_path).fingerprint != info.fingerprint  # touched
    write_jsonl(tmp_path / "c.jsonl", ["c"])
    assert len(describe_source(tmp_path).files) == 3


def test_hf_fingerprint_covers_spec_and_local_data_files(tmp_path, write_jsonl):
    path = write_jsonl(tmp_path / "a.jsonl", ["a"])
    info = describe_source(f"hf:json?data_files={path}")
    assert info.files and info.files[0]["path"] == str(path)
    other = describe_source(f"hf:json@test?data_files={path}")
    assert other.fingerprint != info.fingerprint
    assert describe_source("hf:some/remote").files == []


# --------------------------------------------------------------------------- the shared corpus


def test_first_validation_document_matches_the_raw_file():
    path = default_validation_source()
    with lzma.open(path, "rt", encoding="utf-8") as f:
        expected = json.loads(f.readline())["text"]
    first = next(iter(iter_documents(path)))
    assert first == expected and len(first) > 1000


def test_default_train_source_excludes_validation():
    files = resolve_files(default_train_source())
    names = [p.name for p in files]
    assert names == sorted(names) and len(names) >= 1
    assert all(n.startswith("train-") and n.endswith(".jsonl.xz") for n in names)
    assert "validation.jsonl.xz" not in names
    assert resolve_source(None) == resolve_source("gutenberg-train") == default_train_source()
    assert resolve_source("gutenberg-validation") == default_validation_source()
    assert resolve_source("x.jsonl") == "x.jsonl"


def test_missing_default_corpus_names_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("TYING_DATA_DIR", str(tmp_path / "no-data"))
    with pytest.raises(FileNotFoundError, match="TYING_DATA_DIR"):
        default_train_source()
    with pytest.raises(FileNotFoundError, match="TYING_DATA_DIR"):
        default_validation_source()


def test_compressed_files_really_are_compressed(tmp_path, write_jsonl):
    """Guard on the helper: .gz/.xz files are written compressed, so the tests above read them."""
    gz = write_jsonl(tmp_path / "x.jsonl.gz", DOCS)
    xz = write_jsonl(tmp_path / "x.jsonl.xz", DOCS)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert xz.read_bytes()[:6] == b"\xfd7zXZ\x00"
