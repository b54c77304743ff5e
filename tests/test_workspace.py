"""How a stage script ends: an hdeval error in one line, an interrupt in one line that says the
answers computed so far are kept."""

from __future__ import annotations

import pytest

from hdeval import workspace as ws
from hdeval.errors import DataValidationError


def _interrupted() -> None:
    raise KeyboardInterrupt


def _bad_row() -> None:
    raise DataValidationError("row 7: field 'output' is missing")


def test_an_interrupted_stage_says_its_answers_are_kept_and_exits_130(capsys) -> None:
    with pytest.raises(SystemExit) as ended:
        ws.run_stage("evaluate", _interrupted)
    assert ended.value.code == 130
    err = capsys.readouterr().err
    assert err.strip().startswith("stage evaluate interrupted;") and "`dvc repro` goes on" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_failed_stage_names_the_error_in_one_line(capsys) -> None:
    with pytest.raises(SystemExit) as ended:
        ws.run_stage("prepare", _bad_row)
    assert ended.value.code == 1
    err = capsys.readouterr().err.strip()
    assert err == "stage prepare failed: row 7: field 'output' is missing"
