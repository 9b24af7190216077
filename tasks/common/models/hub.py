"""Where an in-process model comes from (a builtin model, a local directory or the Hugging Face
Hub) and the device it runs on.

Shared by :mod:`tasks.common.embed.local` and :mod:`tasks.common.rerank.local`, which differ only in their
model class and error types. A hub id is first loaded from the local cache only (no network);
only when it is not cached and ``HF_HUB_OFFLINE`` is not set is the hub asked, once (a single
metadata request, no retries) before the download, so that a machine without network fails
in seconds with one clear error instead of ~70 s of retries per file.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

logger = logging.getLogger(__name__)

BUILTIN_PREFIX = "builtin:"
HUB_PROBE_TIMEOUT_S = 10.0
M = TypeVar("M")


@dataclass(frozen=True)
class ModelErrors:
    """How an adapter reports a model it cannot load.

    ``error``: the user's to fix (a wrong id, path or revision, a gated model);
    ``unavailable``: the model cannot be had from here (no network, hub down, offline);
    ``alternative``: what else to configure, named in messages (e.g. ``'builtin:...'``).
    """

    error: type[Exception]
    unavailable: type[Exception]
    alternative: str


def select_device(device: str | None, errors: ModelErrors) -> str:
    """``device`` when usable; None picks CUDA when torch sees a GPU, else the CPU."""
    import torch  # noqa: PLC0415 -- ~1.5 s to import: only when a model is built

    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise errors.unavailable(
            f"device {device!r} requested but torch sees no CUDA GPU here (torch {torch.__version__}): "
            "leave device unset to use the CPU"
        )
    return device


def on_gpu(device: str | None) -> bool:
    """Whether a local model on ``device`` runs on a CUDA GPU (a stage's chunk resources, irforge/parallel.py): ``cuda...`` does; unset (CUDA when
    present) does where this host has one (torch's answer if it is loaded, else an NVIDIA driver
    that ``CUDA_VISIBLE_DEVICES`` does not hide; torch is not imported for this)."""
    if device is not None:
        return device.startswith("cuda")
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in ("", "-1"):
        return False
    torch = sys.modules.get("torch")
    if torch is not None:
        return bool(torch.cuda.is_available())
    return Path("/proc/driver/nvidia/version").exists()


def looks_like_path(model: str) -> bool:
    """True when ``model`` is meant as a directory (``/``, ``.`` or ``~`` first, or several ``/``)."""
    return model.startswith(("/", ".", "~")) or "\\" in model or model.count("/") > 1


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set."""
    # huggingface_hub reads HF_HUB_OFFLINE at import (if it is imported: not for planning a
    # run); also honour it when set after that.
    if getattr(sys.modules.get("huggingface_hub.constants"), "HF_HUB_OFFLINE", False):
        return True
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in {"1", "ON", "YES", "TRUE"}


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``exc`` as one line of at most ``limit`` characters, for error messages."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def locate_model(
    model: str,
    revision: str | None,
    builtin_path: Callable[[str], Path],
    errors: ModelErrors,
    *,
    holds: str,
) -> tuple[Path | None, str]:
    """(local model directory, model id) of ``model``; the directory is None for a hub id.

    ``builtin:...`` names are built or found by ``builtin_path``; anything that exists on disk
    or looks like a path must be a directory (``holds`` says what it holds, for the error),
    whose name is the model id. A ``revision`` is refused for local models.
    """
    path: Path | None
    if model.startswith(BUILTIN_PREFIX):
        path, model_id = builtin_path(model), model
    elif Path(model).expanduser().exists() or looks_like_path(model):
        path = Path(model).expanduser().resolve()
        if not path.is_dir():
            raise errors.error(
                f"model {model!r}: no model directory at {path}; give the directory holding {holds}, "
                "or a hub id"
            )
        model_id = path.name
    else:
        path, model_id = None, model
    if path is not None and revision is not None:
        raise errors.error(
            f"revision {revision!r} given for the local model {model!r}: revisions apply to hub ids "
            "only (local files are identified by a digest of their content); drop it"
        )
    return path, model_id


def load_from_hub(
    construct: Callable[[bool], M],
    repo_id: str,
    revision: str | None,
    cache_folder: str | None,
    errors: ModelErrors,
    *,
    download_errors: tuple[type[Exception], ...],
) -> M:
    """``construct(local_files_only)`` from the local cache, else after one probe of the hub.

    ``download_errors`` are what ``construct`` raises when the download fails; they become
    ``errors.unavailable``.
    """
    at = f"{repo_id}@{revision}" if revision else repo_id
    try:
        # The local cache first: no network, no retries, and the usual case after a first run.
        return construct(True)
    except OSError:
        pass
    cache = cache_folder or "the Hugging Face cache (HF_HOME)"
    if hub_offline():
        raise errors.unavailable(
            f"model {at} is not in {cache} and HF_HUB_OFFLINE is set: download it on a machine "
            f"with network (`hf download {repo_id}`) and copy the cache, or configure a local "
            f"model directory (or {errors.alternative})"
        )
    probe_hub(repo_id, revision, cache, errors)
    try:
        return construct(False)
    except download_errors as exc:
        raise errors.unavailable(
            f"downloading model {at} from the Hugging Face Hub failed ({one_line(exc)}): rerun, or "
            "configure a local model directory"
        ) from exc


def probe_hub(repo_id: str, revision: str | None, cache: str, errors: ModelErrors) -> None:
    """One metadata request (no retries), so an unreachable hub fails in seconds, not minutes."""
    from huggingface_hub import HfApi  # noqa: PLC0415 -- only when a model is fetched
    from huggingface_hub.errors import (  # noqa: PLC0415
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    at = f"{repo_id}@{revision}" if revision else repo_id
    try:
        HfApi().model_info(repo_id, revision=revision, timeout=HUB_PROBE_TIMEOUT_S)
    except GatedRepoError:
        raise errors.error(
            f"model {at} is gated on the Hugging Face Hub: accept its terms on the model page and "
            "set HF_TOKEN to a token of that account"
        ) from None
    except RepositoryNotFoundError:
        raise errors.error(
            f"no model {repo_id!r} on the Hugging Face Hub (or it is private: set HF_TOKEN); "
            "check the model id, or give a local directory"
        ) from None
    except RevisionNotFoundError:
        raise errors.error(f"model {repo_id} has no revision {revision!r} on the Hugging Face Hub") from None
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        raise errors.unavailable(
            f"the Hugging Face Hub answered HTTP {status} for model {at}, which is not in {cache}: "
            "rerun later, or configure a local model directory"
        ) from None
    except Exception as exc:  # connection refused, DNS, TLS, timeout: all mean "no hub from here"
        raise errors.unavailable(
            f"model {at} is not in {cache} and the Hugging Face Hub cannot be reached "
            f"({type(exc).__name__}: {one_line(exc)}): download it where there is network "
            f"(`hf download {repo_id}`), configure a local model directory (or {errors.alternative}), "
            "and set HF_HUB_OFFLINE=1 on machines without network"
        ) from None


def snapshot_commit(
    repo_id: str, revision: str | None, cache_folder: str | None, filenames: Sequence[str]
) -> str | None:
    """The commit of the cached snapshot holding one of ``filenames``, so a branch name is pinned;
    ``revision`` (with a warning) when the cache does not tell."""
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415

    for filename in filenames:
        found = try_to_load_from_cache(repo_id, filename, cache_dir=cache_folder, revision=revision)
        if isinstance(found, str):
            snapshot = Path(found).parent
            if snapshot.parent.name == "snapshots":
                return snapshot.name
    logger.warning(
        "could not find the commit of %s in %s: the fingerprint records revision=%r only",
        repo_id,
        cache_folder or "the Hugging Face cache",
        revision,
    )
    return revision
