"""A published peer's predictions (hdeval.baselines.peer): read in either form, mapped onto the
label file's row ids, and refused where a row of the run has none."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from hdeval.baselines.peer import peer_scores, read_peer
from hdeval.data.convert import data_to_text_rows
from hdeval.errors import DataValidationError
from hdeval.params import Params

ASPECTS = ["informativeness", "naturalness"]
ITEMS = [
    {"doc_id": i, "source": f"inform(name=x{i})", "reference": "x is a place .",
     "system_output": f"x{i} is a place .", "scores": {a: 3.0 for a in [*ASPECTS, "overall"]},
     "predict_scores": {"informativeness": 0.1 * i, "naturalness": 0.5, "overall": 0.3}}
    for i in range(3)
]  # fmt: skip


def test_a_published_result_file_maps_onto_the_converted_rows(tmp_path) -> None:
    path = tmp_path / "sfres_result.json"
    path.write_text(json.dumps(ITEMS))
    peer = read_peer(path, "sfres", ASPECTS)
    ids = [row["id"] for row in data_to_text_rows(ITEMS, "SFRES").rows]
    assert list(peer.index) == ids
    assert peer.loc[ids[2], "informativeness"] == pytest.approx(0.2)
    held_out = pd.Index(ids[1:], name="id")
    assert list(peer_scores(peer, held_out, path).index) == ids[1:]


def test_a_jsonl_peer_missing_a_held_out_row_is_refused_naming_it(tmp_path) -> None:
    path = tmp_path / "peer.jsonl"
    rows = [{"id": "a", "scores": {"informativeness": 1, "naturalness": 2}}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    peer = read_peer(path, "jsonl", ASPECTS)
    with pytest.raises(DataValidationError, match="no prediction for row b"):
        peer_scores(peer, pd.Index(["a", "b"]), path)


def test_a_peer_row_without_an_aspect_is_refused_naming_line_and_aspect(tmp_path) -> None:
    path = tmp_path / "peer.jsonl"
    path.write_text(json.dumps({"id": "a", "scores": {"informativeness": 1}}) + "\n")
    with pytest.raises(DataValidationError, match="line 1: no finite prediction for aspect"):
        read_peer(path, "jsonl", ASPECTS)


def test_a_peer_cannot_take_the_name_of_one_of_hdevals_scorers() -> None:
    with pytest.raises(ValueError, match="scorer of hdeval's own"):
        Params.model_validate({"evaluate": {"peer": {"name": "hdeval", "path": "p.jsonl"}}})
