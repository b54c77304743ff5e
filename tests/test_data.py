"""Label-file loading, validation, document splits and merging (hdeval.data)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from hdeval.data import (
    LabelledData,
    load_labels,
    merge_labels,
    save_labels,
    split_by_document,
    subsample_documents,
)
from hdeval.data.splitting import load_split, subsample_texts
from hdeval.data.summeval import SUMMEVAL_ASPECTS, convert_summeval, load_summeval, summeval_row
from hdeval.errors import ConfigError, DataValidationError
from hdeval.params import DataParams

REPO = Path(__file__).resolve().parents[1]
SUMMEVAL = REPO / "data" / "summeval" / "summeval.jsonl"
ASPECTS = ("coherence", "fluency")
RANGE = (1.0, 5.0)


def row(row_id: str = "a", doc: str = "d1", **overrides) -> dict:
    base = {
        "id": row_id,
        "doc_id": doc,
        "system_id": "m1",
        "source": f"Source text of {doc}.",
        "output": f"Output {row_id}.",
        "references": ["A reference."],
        "scores": {"coherence": 3.0, "fluency": 4.0},
    }
    base.update(overrides)
    return base


def jsonl(*rows: dict | str) -> bytes:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    return ("\n".join(lines) + "\n").encode("utf-8")


def without(d: dict, key: str) -> dict:
    return {k: v for k, v in d.items() if k != key}


CSV_HEADER = "id,doc_id,system_id,source,output,reference,coherence,fluency\n"


def csv(*lines: str, header: str = CSV_HEADER) -> bytes:
    return (header + "".join(line + "\n" for line in lines)).encode("utf-8")


GOOD_CSV_LINE = "a,d1,m1,Source one.,Output a.,Ref.,3,4"

_BAD_UTF8 = jsonl(row("a")) + b'{"id": "b", "doc_id": "d1", "source": "caf\xe9"}\n'
_BAD_UTF8_OFFSET = _BAD_UTF8.index(b"\xe9")

# (case name, file name, content, substrings the error message must contain)
BAD_FILES = [
    (
        "jsonl missing doc_id",
        "l.jsonl",
        jsonl(row("a"), without(row("b"), "doc_id")),
        ["line 2", "(id 'b')", "'doc_id'", "required field is missing"],
    ),
    (
        "jsonl missing output",
        "l.jsonl",
        jsonl(without(row("a"), "output")),
        ["line 1", "(id 'a')", "'output'", "missing"],
    ),
    (
        "jsonl missing scores object",
        "l.jsonl",
        jsonl(without(row("a"), "scores")),
        ["line 1", "'scores'", "missing"],
    ),
    (
        "jsonl missing aspect score",
        "l.jsonl",
        jsonl(row("a"), row("b", scores={"coherence": 2})),
        ["line 2", "(id 'b')", "'scores.fluency'", "missing score for aspect 'fluency'"],
    ),
    (
        "jsonl null aspect score",
        "l.jsonl",
        jsonl(row("a", scores={"coherence": None, "fluency": 2})),
        ["line 1", "'scores.coherence'", "missing score"],
    ),
    (
        "jsonl NaN score",
        "l.jsonl",
        jsonl(
            row("a"), row("b"), json.dumps(row("c", scores={"coherence": math.nan, "fluency": 2}))
        ),
        ["line 3", "(id 'c')", "'scores.coherence'", "finite", "nan"],
    ),
    (
        "jsonl infinite score",
        "l.jsonl",
        jsonl(json.dumps(row("a", scores={"coherence": 3, "fluency": math.inf}))),
        ["line 1", "'scores.fluency'", "finite", "inf"],
    ),
    (
        "jsonl score above range",
        "l.jsonl",
        jsonl(row("a"), row("b", scores={"coherence": 7, "fluency": 2})),
        ["line 2", "(id 'b')", "'scores.coherence'", "score 7", "allowed range [1, 5]"],
    ),
    (
        "jsonl score below range",
        "l.jsonl",
        jsonl(row("a", scores={"coherence": 3, "fluency": 0.5})),
        ["line 1", "'scores.fluency'", "score 0.5", "[1, 5]"],
    ),
    (
        "jsonl duplicate ids",
        "l.jsonl",
        jsonl(row("a"), row("b"), row("a", doc="d2")),
        ["line 3", "(id 'a')", "'id'", "duplicate id 'a'", "first used at line 1"],
    ),
    (
        "jsonl empty source",
        "l.jsonl",
        jsonl(row("a", source="")),
        ["line 1", "(id 'a')", "'source'", "empty or whitespace"],
    ),
    (
        "jsonl whitespace-only output",
        "l.jsonl",
        jsonl(row("a"), row("b", output=" \n\t ")),
        ["line 2", "(id 'b')", "'output'", "empty or whitespace"],
    ),
    (
        "jsonl empty id",
        "l.jsonl",
        jsonl(row("  ")),
        ["line 1", "'id'", "empty or whitespace"],
    ),
    (
        "jsonl empty reference in list",
        "l.jsonl",
        jsonl(row("a", references=["ok", " "])),
        ["line 1", "'references[1]'", "empty"],
    ),
    (
        "jsonl number where text expected",
        "l.jsonl",
        jsonl(row("a", output=42)),
        ["line 1", "(id 'a')", "'output'", "expected text", "got number 42"],
    ),
    (
        "jsonl list where text expected",
        "l.jsonl",
        jsonl(row("a", source=["x", "y"])),
        ["line 1", "'source'", "expected text", "got list"],
    ),
    (
        "jsonl float id",
        "l.jsonl",
        jsonl(row(1.5)),
        ["line 1", "'id'", "expected text", "got number 1.5"],
    ),
    (
        "jsonl number inside references",
        "l.jsonl",
        jsonl(row("a", references=["ok", 3])),
        ["line 1", "'references[1]'", "expected text"],
    ),
    (
        "jsonl references not a list",
        "l.jsonl",
        jsonl(row("a", references="just one")),
        ["line 1", "'references'", "expected a list of text", "got text"],
    ),
    (
        "jsonl list where number expected",
        "l.jsonl",
        jsonl(row("a", scores={"coherence": [4], "fluency": 2})),
        ["line 1", "(id 'a')", "'scores.coherence'", "expected a number", "got list"],
    ),
    (
        "jsonl text where number expected",
        "l.jsonl",
        jsonl(row("a", scores={"coherence": "4", "fluency": 2})),
        ["'scores.coherence'", "expected a number", "got text '4'"],
    ),
    (
        "jsonl boolean score",
        "l.jsonl",
        jsonl(row("a", scores={"coherence": True, "fluency": 2})),
        ["'scores.coherence'", "expected a number", "got boolean"],
    ),
    (
        "jsonl scores not an object",
        "l.jsonl",
        jsonl(row("a", scores=[3, 4])),
        ["line 1", "'scores'", "expected an object"],
    ),
    (
        "jsonl score error reported with a type error",
        "l.jsonl",
        jsonl(row("a", output=1, scores={"coherence": 9, "fluency": 2})),
        ["'output'", "'scores.coherence'", "score 9"],
    ),
    (
        "jsonl malformed line",
        "l.jsonl",
        jsonl(row("a"), '{"id": "b", "doc_id": ', row("c")),
        ["line 2", "malformed JSON"],
    ),
    (
        "jsonl line is not an object",
        "l.jsonl",
        jsonl(row("a"), "[1, 2]"),
        ["line 2", "expected a JSON object, got list"],
    ),
    (
        "jsonl non-UTF-8 byte",
        "l.jsonl",
        _BAD_UTF8,
        ["line 2", "invalid UTF-8 byte 0xe9", f"byte offset {_BAD_UTF8_OFFSET}"],
    ),
    ("jsonl empty file", "l.jsonl", b"", ["file is empty"]),
    ("jsonl whitespace-only file", "l.jsonl", b"\n \n\t\n", ["file is empty"]),
    (
        "json array bad item",
        "l.json",
        json.dumps([row("a"), row("b", scores={"coherence": 3, "fluency": 6})], indent=2).encode(),
        ["item 2", "(id 'b')", "'scores.fluency'", "[1, 5]"],
    ),
    (
        "json array malformed",
        "l.json",
        b'[\n  {"id": "a",\n  }\n]\n',
        ["line 3", "malformed JSON"],
    ),
    ("json array empty", "l.json", b"[]", ["no labelled rows"]),
    (
        "csv missing doc_id column",
        "l.csv",
        csv(
            "a,m1,Source.,Output.,Ref.,3,4",
            header="id,system_id,source,output,reference,coherence,fluency\n",
        ),
        ["header", "missing column 'doc_id'"],
    ),
    (
        "csv missing score column",
        "l.csv",
        csv("a,d1,Source.,Output.,3", header="id,doc_id,source,output,coherence\n"),
        ["header", "missing score column 'fluency'"],
    ),
    (
        "csv both plain and prefixed score column",
        "l.csv",
        csv(
            "a,d1,S.,O.,3,3,4",
            header="id,doc_id,source,output,coherence,scores.coherence,fluency\n",
        ),
        ["header", "'coherence'", "'scores.coherence'"],
    ),
    (
        "csv NaN score",
        "l.csv",
        csv(GOOD_CSV_LINE, "b,d1,m2,Source one.,Output b.,Ref.,nan,4"),
        ["data row 2", "(id 'b')", "'scores.coherence'", "finite"],
    ),
    (
        "csv empty score cell",
        "l.csv",
        csv(GOOD_CSV_LINE, "b,d1,m2,Source one.,Output b.,Ref.,3,"),
        ["data row 2", "(id 'b')", "'scores.fluency'", "missing score"],
    ),
    (
        "csv non-numeric score",
        "l.csv",
        csv("a,d1,m1,Source.,Output.,Ref.,good,4"),
        ["data row 1", "(id 'a')", "'scores.coherence'", "expected a number", "'good'"],
    ),
    (
        "csv out-of-range score",
        "l.csv",
        csv(GOOD_CSV_LINE, GOOD_CSV_LINE.replace("a,", "b,", 1), "c,d2,m1,S.,O.,R.,3,5.5"),
        ["data row 3", "(id 'c')", "'scores.fluency'", "score 5.5", "[1, 5]"],
    ),
    (
        "csv whitespace-only source",
        "l.csv",
        csv('a,d1,m1,"   ",Output.,Ref.,3,4'),
        ["data row 1", "(id 'a')", "'source'", "whitespace"],
    ),
    (
        "csv empty output",
        "l.csv",
        csv("a,d1,m1,Source.,,Ref.,3,4"),
        ["data row 1", "'output'", "empty"],
    ),
    (
        "csv duplicate ids",
        "l.csv",
        csv(GOOD_CSV_LINE, "b,d1,m2,S.,O.,R.,3,4", GOOD_CSV_LINE),
        ["data row 3", "duplicate id 'a'", "first used at data row 1"],
    ),
    (
        "csv non-UTF-8 byte",
        "l.csv",
        csv(GOOD_CSV_LINE) + b"b,d1,m2,Caf\xe9 au lait.,O.,R.,3,4\n",
        ["line 3", "invalid UTF-8 byte 0xe9", "byte offset"],
    ),
    (
        "csv first data row has an extra field",
        "l.csv",
        csv("a,d1,m1,Source, unquoted.,Output.,Ref.,3,4"),
        ["malformed CSV", "more fields than the header"],
    ),
    ("csv header only", "l.csv", csv(), ["no labelled rows"]),
    (
        "jsonl blank wrong ending",
        "l.jsonl",
        jsonl(row("a"), row("b", wrong_ending="  ")),
        ["line 2", "(id 'b')", "'wrong_ending'", "must not be empty"],
    ),
    (
        "jsonl wrong ending not text",
        "l.jsonl",
        jsonl(row("a", wrong_ending=["x"])),
        ["line 1", "'wrong_ending'", "expected text, got list"],
    ),
    ("csv empty file", "l.csv", b"", ["file is empty"]),
    (
        "csv ragged row",
        "l.csv",
        csv(GOOD_CSV_LINE, "b,d1,m2,S.,O.,R.,3,4,extra,cells"),
        ["malformed CSV"],
    ),
]


@pytest.mark.parametrize(
    ("name", "filename", "content", "expected"), BAD_FILES, ids=[c[0] for c in BAD_FILES]
)
def test_bad_label_file_is_reported(
    tmp_path: Path, name: str, filename: str, content: bytes, expected: list[str]
) -> None:
    path = tmp_path / filename
    path.write_bytes(content)
    with pytest.raises(DataValidationError) as info:
        load_labels(path, ASPECTS, RANGE)
    message = str(info.value)
    assert str(path) in message
    for part in expected:
        assert part in message, f"{name}: {part!r} not in:\n{message}"


def load_error(path: Path) -> str:
    with pytest.raises(DataValidationError) as info:
        load_labels(path, ASPECTS, RANGE)
    return str(info.value)


def test_every_problem_in_a_file_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(jsonl(row("a", output=""), row("b"), row("c", scores={"coherence": 9})))
    message = load_error(path)
    assert "3 problems" in message
    assert "line 1 (id 'a'): field 'output'" in message
    assert "line 3 (id 'c'): field 'scores.coherence'" in message
    assert "line 3 (id 'c'): field 'scores.fluency'" in message
    assert "line 2" not in message


def test_blank_text_is_reported_alongside_type_errors(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(jsonl(row("a", source="  ", output=3, references=["", 1])))
    message = load_error(path)
    assert "4 problems" in message
    for field in ("'source'", "'output'", "'references[0]'", "'references[1]'"):
        assert f"line 1 (id 'a'): field {field}" in message


def test_invisible_only_or_nul_holding_text_is_refused_naming_the_row(tmp_path: Path) -> None:
    """A text of zero-width characters shows nothing, and NUL is no text: both are refused."""
    path = tmp_path / "l.jsonl"
    rows = [
        row("a", output="\u200b\u200d\ufeff \u2060"),
        row("b", output="Fine\u0000 text."),
        row("c", output="Fine\u200b text."),
        row("d", source="\u00ad\n", references=["\u200c"]),
    ]
    path.write_bytes(jsonl(*rows))
    message = load_error(path)
    assert "4 problems" in message
    invisible = "must not be empty or whitespace only (invisible characters such as U+200B count)"
    assert f"line 1 (id 'a'): field 'output': {invisible}" in message
    assert (
        "line 2 (id 'b'): field 'output': holds a NUL character (U+0000) at character 4" in message
    )
    assert "line 3" not in message
    assert f"line 4 (id 'd'): field 'source': {invisible}" in message
    assert f"line 4 (id 'd'): field 'references[0]': {invisible}" in message


def test_error_list_is_capped_with_a_count_of_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(jsonl(*[row(f"r{i}", source=" ") for i in range(25)]))
    message = load_error(path)
    assert "25 problems" in message
    assert message.count("\n  - ") == 20
    assert "line 20 (id 'r19')" in message
    assert "line 21" not in message
    assert "and 5 more" in message


def test_every_non_utf8_line_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_bytes(csv(*[f"r{i},d1,m1,S.,O.,R.,3,4" for i in range(30)]).replace(b"S.", b"S\xff"))
    message = load_error(path)
    assert "30 problems" in message
    assert "line 2: invalid UTF-8 byte 0xff" in message
    assert "and 10 more" in message


@pytest.mark.parametrize("name", ["labels.txt", "labels.parquet"])
def test_unsupported_extension(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(jsonl(row("a")))
    with pytest.raises(DataValidationError, match="unsupported label file type"):
        load_labels(path, ASPECTS, RANGE)


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.jsonl"
    with pytest.raises(DataValidationError, match=r"nope\.jsonl"):
        load_labels(path, ASPECTS, RANGE)


@pytest.mark.parametrize(
    ("aspects", "score_range"),
    [
        ((), RANGE),
        ("coherence", RANGE),
        (("coherence", "coherence"), RANGE),
        (ASPECTS, (5.0, 1.0)),
        (ASPECTS, {"coherence": (1.0, 5.0)}),
    ],
)
def test_bad_aspect_or_range_arguments(tmp_path: Path, aspects, score_range) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(jsonl(row("a")))
    with pytest.raises(ConfigError):
        load_labels(path, aspects, score_range)


# --------------------------------------------------------------------------- good files


def test_good_jsonl_loads(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(
        jsonl(
            row("a", doc="d1"),
            without(row("b", doc="d1", reference="Only ref."), "references"),
            without(without(row(7, doc=12), "system_id"), "references"),
            row("c", doc="d2", references=[], scores={"coherence": 1, "fluency": 5, "extra": "x"}),
        )
        + b"\n\n"
    )
    data = load_labels(path, ASPECTS, RANGE)
    assert len(data) == 4
    assert data.ids == ["a", "b", "7", "c"]
    assert data.aspects == list(ASPECTS)
    assert data.samples.index.name == "id"
    assert data.samples.shape == (4, 5)
    assert data.targets.shape == (4, 2)
    assert list(data.targets.dtypes) == [np.float64, np.float64]
    assert data.samples.loc["a", "references"] == ["A reference."]
    assert data.samples.loc["b", "references"] == ["Only ref."]
    assert data.samples.loc["7", "references"] == []
    assert data.samples.loc["7", "doc_id"] == "12"
    assert data.samples.loc["7", "system_id"] is None
    assert data.targets.loc["c"].tolist() == [1.0, 5.0]
    assert "extra" not in data.targets.columns


def test_good_json_array_and_bom_load(tmp_path: Path) -> None:
    array = tmp_path / "l.json"
    array.write_text(json.dumps([row("a"), row("b", doc="d2")], indent=2), encoding="utf-8")
    lines = tmp_path / "m.json"
    lines.write_bytes(b"\xef\xbb\xbf" + jsonl(row("a"), row("b", doc="d2")))
    for path in (array, lines):
        data = load_labels(path, ASPECTS, RANGE)
        assert data.ids == ["a", "b"]
        assert data.samples["doc_id"].tolist() == ["d1", "d2"]


def test_good_csv_loads(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_bytes(
        csv(
            'a,d1,m1,"Source, with comma.","Multi\nline output.",Ref.,3,4',
            "b,d1,,Source.,Output b.,,1,5",
            "c,d2,m1,Source two.,Output c.,Ref two.,2.5,4.333333333333333",
            header="id,doc_id,system_id,source,output,reference,scores.coherence,fluency\n",
        )
    )
    data = load_labels(path, ASPECTS, RANGE)
    assert data.ids == ["a", "b", "c"]
    assert data.samples.shape == (3, 5)
    assert data.targets.shape == (3, 2)
    assert data.samples.loc["a", "source"] == "Source, with comma."
    assert data.samples.loc["a", "output"] == "Multi\nline output."
    assert data.samples.loc["b", "system_id"] is None
    assert data.samples.loc["b", "references"] == []
    assert data.samples.loc["c", "references"] == ["Ref two."]
    assert data.targets.loc["c", "coherence"] == 2.5
    assert data.targets.loc["c", "fluency"] == pytest.approx(13 / 3)


def test_csv_without_optional_columns_loads(tmp_path: Path) -> None:
    path = tmp_path / "l.csv"
    path.write_bytes(csv("1,1,S.,O.,3,4", header="id,doc_id,source,output,coherence,fluency\n"))
    data = load_labels(path, ASPECTS, RANGE)
    assert data.ids == ["1"]
    assert data.samples.loc["1", "system_id"] is None


def test_per_aspect_score_ranges(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(jsonl(row("a", scores={"coherence": 2.5, "fluency": 0.5})))
    ranges = {"coherence": (1.0, 3.0), "fluency": (0.0, 1.0)}
    data = load_labels(path, ASPECTS, ranges)
    assert data.targets.loc["a"].tolist() == [2.5, 0.5]
    path.write_bytes(jsonl(row("a", scores={"coherence": 3.5, "fluency": 0.5})))
    with pytest.raises(DataValidationError, match=re.escape("allowed range [1, 3]")):
        load_labels(path, ASPECTS, ranges)


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_multi_megabyte_texts_load(tmp_path: Path, suffix: str) -> None:
    big_source = "word " * 600_000  # 3 MB
    big_output = "é" * 600_000  # 1.2 MB of UTF-8
    path = tmp_path / f"big{suffix}"
    if suffix == ".jsonl":
        path.write_bytes(jsonl(row("a", source=big_source, output=big_output), row("b")))
    else:
        path.write_bytes(csv(f"a,d1,m1,{big_source},{big_output},Ref.,3,4", "b,d1,m1,S.,O.,R.,3,4"))
    with pytest.raises(DataValidationError, match="3,000,000 characters, more than the limit"):
        load_labels(path, ASPECTS, RANGE)  # the default limit is 1,000,000 characters
    data = load_labels(path, ASPECTS, RANGE, max_chars=3_000_000)
    assert len(data) == 2
    assert data.samples.loc["a", "source"] == big_source
    assert data.samples.loc["a", "output"] == big_output


def test_wrong_ending_is_an_optional_field(tmp_path: Path) -> None:
    path = tmp_path / "l.jsonl"
    path.write_bytes(jsonl(row("a", wrong_ending="They all died."), row("b")))
    data = load_labels(path, ASPECTS, RANGE)
    assert data.samples.loc["a", "wrong_ending"] == "They all died."
    assert data.samples.loc["b", "wrong_ending"] is None
    rows = {r["id"]: r for r in data.rows()}
    assert rows["a"]["wrong_ending"] == "They all died." and "wrong_ending" not in rows["b"]
    save_labels(data, tmp_path / "saved.jsonl")
    again = load_labels(tmp_path / "saved.jsonl", ASPECTS, RANGE)
    assert again.samples["wrong_ending"].tolist() == ["They all died.", None]
    assert again.fingerprint() == data.fingerprint()

    path.write_bytes(jsonl(row("a"), row("b")))
    plain = load_labels(path, ASPECTS, RANGE)
    assert "wrong_ending" not in plain.samples.columns
    assert all("wrong_ending" not in r for r in plain.rows())
    assert plain.fingerprint() != data.fingerprint()

    path = tmp_path / "l.csv"
    path.write_bytes(
        csv(
            "a,d1,S.,O.,The end.,3,4",
            "b,d1,S.,O b.,,3,4",
            header="id,doc_id,source,output,wrong_ending,coherence,fluency\n",
        )
    )
    assert load_labels(path, ASPECTS, RANGE).samples["wrong_ending"].tolist() == ["The end.", None]


# --------------------------------------------------------------------------- container


def small(tmp_path: Path, n_docs: int = 10, per_doc: int = 3) -> LabelledData:
    rows = [
        row(
            f"d{d}#m{m}",
            doc=f"d{d}",
            system_id=f"m{m}",
            scores={"coherence": 1 + (d + m) % 5, "fluency": 1 + d % 5},
        )
        for d in range(n_docs)
        for m in range(per_doc)
    ]
    path = tmp_path / "small.jsonl"
    path.write_bytes(jsonl(*rows))
    return load_labels(path, ASPECTS, RANGE)


def test_subset_keeps_given_order_and_rejects_unknown_ids(tmp_path: Path) -> None:
    data = small(tmp_path)
    part = data.subset(["d3#m1", "d0#m0"])
    assert part.ids == ["d3#m1", "d0#m0"]
    assert part.targets.index.tolist() == ["d3#m1", "d0#m0"]
    assert part.samples.loc["d3#m1", "doc_id"] == "d3"
    with pytest.raises(KeyError, match="nope"):
        data.subset(["d0#m0", "nope"])


def test_labelled_data_rejects_mismatched_frames(tmp_path: Path) -> None:
    data = small(tmp_path)
    with pytest.raises(ValueError, match="same index"):
        LabelledData(data.samples, data.targets.iloc[::-1])
    with pytest.raises(ValueError, match="missing columns"):
        LabelledData(data.samples.drop(columns=["output"]), data.targets)


def test_fingerprint_tracks_content_not_order(tmp_path: Path) -> None:
    data = small(tmp_path)
    fp = data.fingerprint()
    assert re.fullmatch(r"[0-9a-f]{64}", fp)
    assert data.subset(reversed(data.ids)).fingerprint() == fp
    assert small(tmp_path).fingerprint() == fp
    rescored = data.targets.copy()
    rescored.iloc[0, 0] += 1.0 / 3
    assert LabelledData(data.samples, rescored).fingerprint() != fp
    edited = data.samples.copy()
    edited.iloc[0, edited.columns.get_loc("output")] += " "
    assert LabelledData(edited, data.targets).fingerprint() != fp
    assert data.subset(data.ids[1:]).fingerprint() != fp


def test_save_labels_round_trips(tmp_path: Path) -> None:
    data = small(tmp_path)
    out = tmp_path / "saved.jsonl"
    save_labels(data, out)
    again = load_labels(out, ASPECTS, RANGE)
    assert again.ids == data.ids
    assert again.fingerprint() == data.fingerprint()


# --------------------------------------------------------------------------- splits


def test_split_by_document_has_no_overlap_and_covers_all(tmp_path: Path) -> None:
    data = small(tmp_path, n_docs=20)
    train, test = split_by_document(data, test_fraction=0.25, seed=0)
    train_docs, test_docs = set(train.samples["doc_id"]), set(test.samples["doc_id"])
    assert not train_docs & test_docs
    assert len(test_docs) == 5
    assert len(train_docs) == 15
    assert sorted(train.ids + test.ids) == sorted(data.ids)
    assert len(train) + len(test) == len(data)
    # every row of a document stays together
    assert all(len(test.samples[test.samples["doc_id"] == d]) == 3 for d in test_docs)
    # row order within each part follows the input
    assert train.ids == [i for i in data.ids if i in set(train.ids)]


def test_split_by_document_is_seed_deterministic(tmp_path: Path) -> None:
    data = small(tmp_path, n_docs=30)
    first = split_by_document(data, 0.3, seed=7)
    second = split_by_document(data, 0.3, seed=7)
    assert first[0].ids == second[0].ids
    assert first[1].ids == second[1].ids
    others = {tuple(split_by_document(data, 0.3, seed=s)[1].ids) for s in range(1, 6)}
    assert len(others | {tuple(first[1].ids)}) > 1


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_split_by_document_rejects_bad_fraction(tmp_path: Path, fraction: float) -> None:
    with pytest.raises(ConfigError):
        split_by_document(small(tmp_path), fraction, seed=0)


def test_subsample_documents(tmp_path: Path) -> None:
    data = small(tmp_path, n_docs=10, per_doc=4)
    sub = subsample_documents(data, 3, seed=1)
    docs = set(sub.samples["doc_id"])
    assert len(docs) == 3
    assert len(sub) == 12
    assert subsample_documents(data, 3, seed=1).ids == sub.ids
    assert subsample_documents(data, None, seed=1).ids == data.ids
    assert len({tuple(subsample_documents(data, 3, seed=s).ids) for s in range(6)}) > 1
    for bad in (0, 11):
        with pytest.raises(ConfigError):
            subsample_documents(data, bad, seed=1)


def test_subsample_texts_keeps_at_most_k_rows_of_every_document(tmp_path: Path) -> None:
    data = small(tmp_path, n_docs=5, per_doc=4)
    sub = subsample_texts(data, 2, seed=3)
    assert (sub.samples.groupby("doc_id").size() == 2).all()
    assert set(sub.samples["doc_id"]) == set(data.samples["doc_id"])
    assert sub.ids == [i for i in data.ids if i in set(sub.ids)]  # order follows the input
    assert subsample_texts(data, 2, seed=3).ids == sub.ids
    assert len({tuple(subsample_texts(data, 2, seed=s).ids) for s in range(6)}) > 1
    assert subsample_texts(data, 9, seed=3).ids == data.ids
    assert subsample_texts(data, None, seed=3).ids == data.ids


def test_train_texts_per_doc_thins_training_documents_only() -> None:
    train, test = load_split(DataParams(path=SUMMEVAL, n_docs=30, train_texts_per_doc=8))
    full_train, full_test = load_split(DataParams(path=SUMMEVAL, n_docs=30))
    assert test.ids == full_test.ids  # the held-out documents keep every text
    assert set(train.samples["doc_id"]) == set(full_train.samples["doc_id"])
    assert (train.samples.groupby("doc_id").size() == 8).all()
    assert set(train.ids) <= set(full_train.ids)


def _new_documents(tmp_path: Path, name: str, docs: list[str]) -> Path:
    """A label file of SummEval's rows of ``docs``, renamed into documents never seen."""
    rows = [json.loads(line) for line in SUMMEVAL.read_text().splitlines()]
    renamed = [
        {**r, "id": f"{name}-{r['id']}", "doc_id": f"{name}-{r['doc_id']}"}
        for r in rows
        if r["doc_id"] in docs
    ]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in renamed))
    return path


def test_new_label_files_add_documents_and_move_none_split_before(tmp_path: Path) -> None:
    before = DataParams(path=SUMMEVAL, n_docs=30)
    train, test = load_split(before)
    unused = sorted(
        set(load_summeval(SUMMEVAL).samples["doc_id"])
        - {*train.samples["doc_id"], *test.samples["doc_id"]}
    )
    first = _new_documents(tmp_path, "first", unused[:10])
    grown = before.model_copy(update={"new_labels": [first]})
    train2, test2 = load_split(grown)
    assert set(train.ids) <= set(train2.ids) and set(test.ids) <= set(test2.ids)
    added = (set(train2.ids) | set(test2.ids)) - set(train.ids) - set(test.ids)
    assert len(added) == 10 * 16  # every new row is used, n_docs notwithstanding
    assert added & set(train2.ids) and added & set(test2.ids)  # on both sides, by document
    assert not set(train2.samples["doc_id"]) & set(test2.samples["doc_id"])
    second = _new_documents(tmp_path, "second", unused[10:20])
    train3, test3 = load_split(grown.model_copy(update={"new_labels": [first, second]}))
    assert set(train2.ids) <= set(train3.ids) and set(test2.ids) <= set(test3.ids)
    with pytest.raises(ConfigError, match=r"the labels hold 100 besides the new label files'"):
        load_split(grown.model_copy(update={"n_docs": 101}))


# --------------------------------------------------------------------------- merging


def _write_and_load(path: Path, *rows: dict) -> LabelledData:
    path.write_bytes(jsonl(*rows))
    return load_labels(path, ASPECTS, RANGE)


def test_merge_labels_appends_and_rescores(tmp_path: Path) -> None:
    base = _write_and_load(tmp_path / "base.jsonl", row("a"), row("b"))
    new = _write_and_load(
        tmp_path / "new.jsonl",
        row("c", doc="d2"),
        row("b", scores={"coherence": 5, "fluency": 1}),
    )
    merged = merge_labels(base, new)
    assert merged.ids == ["a", "b", "c"]
    assert merged.targets.loc["b"].tolist() == [5.0, 1.0]
    assert merged.targets.loc["a"].tolist() == [3.0, 4.0]
    assert merged.samples.loc["c", "doc_id"] == "d2"
    assert base.targets.loc["b"].tolist() == [3.0, 4.0]  # inputs are not modified


def test_merge_labels_rejects_changed_texts(tmp_path: Path) -> None:
    base = _write_and_load(tmp_path / "base.jsonl", row("a"), row("b"))
    new = _write_and_load(tmp_path / "new.jsonl", row("b", output="Output b, edited."))
    with pytest.raises(DataValidationError, match=r"id 'b': output differ"):
        merge_labels(base, new)
    other_refs = _write_and_load(tmp_path / "refs.jsonl", row("a", references=["Other."]))
    with pytest.raises(DataValidationError, match=r"id 'a': references differ"):
        merge_labels(base, other_refs)
    wrong = _write_and_load(tmp_path / "wrong.jsonl", row("a", wrong_ending="Another end."))
    with pytest.raises(DataValidationError, match=r"id 'a': wrong_ending differ"):
        merge_labels(base, wrong)


def test_merge_labels_rejects_other_aspects(tmp_path: Path) -> None:
    base = _write_and_load(tmp_path / "base.jsonl", row("a"))
    path = tmp_path / "other.jsonl"
    path.write_bytes(jsonl(row("b")))
    other = load_labels(path, ("coherence",), RANGE)
    with pytest.raises(DataValidationError, match="different aspects"):
        merge_labels(base, other)


# --------------------------------------------------------------------------- SummEval


@pytest.fixture(scope="module")
def summeval() -> LabelledData:
    return load_summeval(SUMMEVAL)


def test_shipped_summeval_loads(summeval: LabelledData) -> None:
    assert len(summeval) == 1600
    assert summeval.aspects == list(SUMMEVAL_ASPECTS)
    assert summeval.samples["doc_id"].nunique() == 100
    assert (summeval.samples.groupby("doc_id").size() == 16).all()
    assert summeval.samples["system_id"].nunique() == 16
    assert (summeval.samples["references"].map(len) == 11).all()
    for aspect in SUMMEVAL_ASPECTS:
        assert summeval.targets[aspect].min() == 1.0
        assert summeval.targets[aspect].max() == 5.0
    assert summeval.targets["coherence"].mean() == pytest.approx(3.413, abs=1e-3)
    first = summeval.samples.iloc[0]
    assert summeval.ids[0] == f"{first['doc_id']}#{first['system_id']}"
    assert first["system_id"] == "M0"


def test_shipped_summeval_split_is_by_document(summeval: LabelledData) -> None:
    train, test = split_by_document(summeval, test_fraction=0.2, seed=0)
    assert not set(train.samples["doc_id"]) & set(test.samples["doc_id"])
    assert len(test) == 20 * 16
    assert len(train) == 80 * 16


def test_convert_summeval(tmp_path: Path) -> None:
    scores = {"coherence": 2.0, "consistency": 5.0, "fluency": 13 / 3, "relevance": 1.0}
    raw = [
        {
            "doc_id": "doc-1",
            "system_id": sid,
            "source": "Ärticle text.",
            "system_output": f"Summary by {sid}.",
            "reference": "Ref 0.",
            "references": ["Ref 0.", "Ref 1."],
            "scores": scores,
        }
        for sid in ("M0", "M1")
    ]
    src, dst = tmp_path / "raw.jsonl", tmp_path / "out" / "summeval.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in raw), encoding="utf-8")
    assert convert_summeval(src, dst) == 2
    rows = [json.loads(line) for line in dst.read_text(encoding="utf-8").splitlines()]
    assert rows[1] == summeval_row(raw[1])
    assert rows[0] == {
        "id": "doc-1#M0",
        "doc_id": "doc-1",
        "system_id": "M0",
        "source": "Ärticle text.",
        "output": "Summary by M0.",
        "references": ["Ref 0.", "Ref 1."],
        "scores": scores,
    }
    assert len(load_summeval(dst)) == 2


def test_texts_to_score_need_no_document_id_nor_labels(tmp_path: Path) -> None:
    """A production row is ``{id, source, output}``: accepted, with texts of one source grouped
    under one document id; a row lacking what a text needs is refused naming it, and the
    message says what a row must hold."""
    from hdeval.data import load_texts

    rows = [
        {"id": "a", "source": "An article.", "output": "One."},
        {"id": "b", "source": "An article.", "output": "Two.", "scores": {"coherence": 3}},
        {"id": "c", "doc_id": "d9", "source": "Another.", "output": "Three."},
    ]
    good = tmp_path / "texts.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = load_texts(good).samples
    assert list(samples.index) == ["a", "b", "c"]
    assert samples.loc["a", "doc_id"] == samples.loc["b", "doc_id"] != "d9"
    assert samples.loc["c", "doc_id"] == "d9"
    csv = tmp_path / "texts.csv"
    csv.write_text('id,source,output\nx,"An article.",One.\n')
    assert load_texts(csv).samples.loc["x", "doc_id"] == samples.loc["a", "doc_id"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "z", "source": "An article."}) + "\n")
    with pytest.raises(DataValidationError) as caught:
        load_texts(bad)
    message = str(caught.value)
    assert "1 problem in texts file" in message and "(id 'z'): field 'output'" in message
    assert (
        'a row to score needs "id", "source"' in message and "doc_id" not in message.split("\n")[1]
    )


def test_a_lone_surrogate_is_refused_naming_the_row_and_field(tmp_path: Path) -> None:
    """A text cut inside an emoji (``"\\ud83d"`` in JSON: a lone surrogate, which no encoding
    can write) is refused when the file is read, naming the row and the field, in texts and
    label files alike; with ``invalid_unicode="replace"`` it becomes U+FFFD and the row is
    marked."""
    from hdeval.data import load_texts

    rows = [row("a"), row("b", output="Emoji cut \ud83d here."), row("c")]
    rows[2]["references"] = ["Fine.", "Cut \udc00"]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))  # written as \ud83d escapes
    for load in (
        lambda **o: load_labels(path, ASPECTS, RANGE, **o),
        lambda **o: load_texts(path, **o),
    ):
        with pytest.raises(DataValidationError) as caught:
            load()
        message = str(caught.value)
        assert (
            "line 2 (id 'b'): field 'output': invalid Unicode: lone surrogate U+D83D at " in message
        )
        assert (
            "line 3 (id 'c'): field 'references[1]': invalid Unicode: lone surrogate U+DC00"
            in message
        )
        assert "invalid_unicode: replace" in message
        replaced = load(invalid_unicode="replace")
        assert replaced.samples.loc["b", "output"] == "Emoji cut \ufffd here."
        assert replaced.samples.loc["c", "references"] == ["Fine.", "Cut \ufffd"]
        assert replaced.replaced == {"b": ["output"], "c": ["references[1]"]}
        assert len(replaced.fingerprint()) == 64  # every text can be encoded now


def test_a_lone_surrogate_in_the_pipelines_labels_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "labels.jsonl"
    rows = [row("a"), row("b", doc="d2", source="Cut \ud83d")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = DataParams(path=path, aspects=list(ASPECTS), n_docs=None, test_fraction=0.5)
    with pytest.raises(
        DataValidationError, match=r"line 2 \(id 'b'\): field 'source': invalid Unicode"
    ):
        load_split(config)
    train, test = load_split(config.model_copy(update={"invalid_unicode": "replace"}))
    assert "Cut \ufffd" in {*train.samples["source"], *test.samples["source"]}
