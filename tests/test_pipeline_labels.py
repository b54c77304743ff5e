"""Real DVC: every label file params name is a dependency of `prepare`, wherever it lives."""

from __future__ import annotations

from tests.dvc_project import (
    DVC,
    jsonl_ids,
    make_project,
    run,
    summeval_rows,
    write_jsonl,
    write_params,
)


def test_rows_appended_to_a_listed_label_file_rerun_prepare(tmp_path):
    root, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    rows = summeval_rows(64)
    docs = sorted({r["doc_id"] for r in rows})
    base = [r for r in rows if r["doc_id"] in docs[:3]]
    extra = [r for r in rows if r["doc_id"] == docs[3]]
    env, params = make_project(root, base, {})
    new_labels = elsewhere / "new.jsonl"  # outside the project: DVC could not track it itself
    write_jsonl(new_labels, extra[:4])
    params["data"].update(new_labels=[str(new_labels)], test_fraction=0.34)
    write_params(root, params)
    prepared = root / "work" / "prepared"

    run([DVC, "repro", "prepare"], root, env)
    before = jsonl_ids(prepared / "train.jsonl") + jsonl_ids(prepared / "test.jsonl")
    assert len(before) == len(base) + 4

    again = run([DVC, "repro", "prepare"], root, env)
    assert "Running stage 'labels'" in again and "Running stage 'prepare'" not in again

    write_jsonl(new_labels, extra[:8])  # the same file, 4 rows appended
    third = run([DVC, "repro", "prepare"], root, env)
    assert "Running stage 'prepare'" in third
    after = jsonl_ids(prepared / "train.jsonl") + jsonl_ids(prepared / "test.jsonl")
    assert set(after) - set(before) == {r["id"] for r in extra[4:8]}

    new_labels.unlink()
    missing = run([DVC, "repro", "prepare"], root, env, ok=False)
    assert f"label file not found: {new_labels}" in missing
