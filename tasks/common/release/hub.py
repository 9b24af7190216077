"""Push a written release folder to the Hugging Face Hub as one commit.

``huggingface_hub`` (2.x) does the work: ``HfApi.create_repo(repo_type="dataset",
exist_ok=True)``, ``create_branch`` for a revision other than ``main``, then **one**
``create_commit`` holding every file of the folder, plus deletions of remote ``*.jsonl``
files the release no longer has (a split dropped since the last push would otherwise
linger). ``upload_folder`` is not used: with ``hf_xet`` installed it commits large folders
in several batches (by file count, bytes, or every 5 minutes), and a release must appear
all at once. Large files still travel through the library's LFS / Xet path.

Retries: each step is retried up to ``max_attempts`` times, waiting ``backoff x 2^n``
seconds (capped at ``max_backoff``; a 429's ``Retry-After`` is honoured within the cap), on
network errors (``httpx2.TransportError``, the HTTP client of huggingface_hub 2.x: connection,
timeout, protocol; and the built-in ``ConnectionError`` / ``TimeoutError``) and on HTTP 408,
429 and 5xx. HTTP 401, 403
and 404 are not retried: they mean a missing or read-only token, or a namespace the token
cannot write to, and raise :class:`HubAuthError` saying so. ``HF_HUB_OFFLINE`` makes every
call fail at once, with a message naming it. The token is never printed: messages are
built from the library's error text with any occurrence of the token masked.

A commit whose response was lost may have landed; retrying it then commits the same files
again, which the Hub records as a commit without changes. That is harmless, unlike a
release pushed half-way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeVar

if TYPE_CHECKING:  # huggingface_hub is imported by a push only: a release folder needs none of it
    from huggingface_hub import CommitOperation
    from huggingface_hub.errors import HfHubHTTPError

from irforge.errors import IrforgeError

CARD_FILE: Final = "README.md"  # a release folder's dataset card
RETRY_STATUS: Final = frozenset({408, 429})
"""HTTP statuses retried besides every 5xx."""
AUTH_STATUS: Final = frozenset({401, 403, 404})

_T = TypeVar("_T")


class HubError(IrforgeError):
    """The push failed; the message says which step, why, and never holds the token."""


class HubAuthError(HubError):
    """The Hub refused the token (HTTP 401/403/404): check HF_TOKEN and the rights on the repository."""


def push_release(
    folder: Path,
    repo_id: str,
    *,
    token: str | None,
    private: bool,
    revision: str | None = None,
    commit_message: str = "Release",
    max_attempts: int = 5,
    backoff: float = 2.0,
    max_backoff: float = 60.0,
    endpoint: str | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> str:
    """Push ``folder`` (written by :func:`tasks.cure.dataset.layout.write_release`) to the dataset
    repository ``repo_id`` in one commit; returns the commit's URL.

    ``token``: the caller reads it from ``HF_TOKEN``; ``None`` lets ``huggingface_hub`` use its
    own stored login. ``private`` applies when the repository is created; an existing
    repository keeps its visibility. ``revision``: the branch to commit to (created from
    ``main`` if missing); ``None`` is ``main``. ``endpoint``: another Hub (or a test server).
    """
    from huggingface_hub import (  # noqa: PLC0415
        CommitInfo,
        CommitOperationAdd,
        CommitOperationDelete,
        HfApi,
    )

    files = _release_files(folder)
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    api = HfApi(endpoint=endpoint, token=token, library_name="irforge")

    def attempt(step: str, call: Callable[[], _T]) -> _T:
        return _with_retries(step, repo_id, call, token, max_attempts, backoff, max_backoff, sleep)

    attempt(
        "create the repository",
        lambda: api.create_repo(repo_id, repo_type="dataset", exist_ok=True, private=private),
    )
    if revision not in (None, "main"):
        branch = str(revision)
        attempt(
            f"create branch {branch!r}",
            lambda: api.create_branch(repo_id, branch=branch, repo_type="dataset", exist_ok=True),
        )
    remote = attempt(
        "list the repository", lambda: api.list_repo_files(repo_id, repo_type="dataset", revision=revision)
    )
    stale = sorted(p for p in remote if p.endswith(".jsonl") and p not in files)
    operations: list[CommitOperation] = [CommitOperationDelete(path_in_repo=p) for p in stale]
    operations += [CommitOperationAdd(path_in_repo=p, path_or_fileobj=folder / p) for p in sorted(files)]
    info = attempt(
        "commit the release",
        lambda: api.create_commit(
            repo_id, operations, commit_message=commit_message, repo_type="dataset", revision=revision
        ),
    )
    if not isinstance(info, CommitInfo):  # only with run_as_future=True, which is not asked
        raise HubError(f"unexpected answer from create_commit: {type(info).__name__}")
    return str(info.commit_url)


def _release_files(folder: Path) -> set[str]:
    """Paths (POSIX, relative) of the files to push: README.md and every ``<split>/<config>.jsonl``."""
    folder = Path(folder)
    if not (folder / CARD_FILE).is_file():
        raise HubError(
            f"{folder} is not a release folder: it has no {CARD_FILE} (write it with write_release)"
        )
    files = {CARD_FILE} | {p.relative_to(folder).as_posix() for p in folder.glob("*/*.jsonl") if p.is_file()}
    if len(files) == 1:
        raise HubError(f"{folder} holds no <split>/<config>.jsonl file: nothing to release")
    return files


def _with_retries(
    step: str,
    repo_id: str,
    call: Callable[[], _T],
    token: str | None,
    max_attempts: int,
    backoff: float,
    max_backoff: float,
    sleep: Callable[[float], None],
) -> _T:
    import httpx2  # noqa: PLC0415
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError, OfflineModeIsEnabled  # noqa: PLC0415

    for number in range(1, max_attempts + 1):
        try:
            return call()
        except HFValidationError as err:  # the library checks repository ids and revisions
            raise HubError(f"cannot {step} {repo_id}: {err}") from None
        except OfflineModeIsEnabled:
            raise HubError(
                f"cannot {step} {repo_id}: HF_HUB_OFFLINE is set; unset it to push to the Hub"
            ) from None
        except HfHubHTTPError as err:
            status = err.response.status_code
            why = _masked(str(err), token)
            if status in AUTH_STATUS:
                raise HubAuthError(
                    f"the Hub refused to {step} {repo_id} (HTTP {status}): check that HF_TOKEN holds a token "
                    f"with write access to {repo_id} (or to its namespace, to create it). Hub said: {why}"
                ) from None
            if status not in RETRY_STATUS and status < 500:
                raise HubError(f"the Hub refused to {step} {repo_id} (HTTP {status}): {why}") from None
            wait = _retry_after(err) if status == 429 else None
            failure = f"HTTP {status}: {why}"
        except (httpx2.TransportError, ConnectionError, TimeoutError) as err:  # refused, timed out, dropped
            failure = f"{type(err).__name__}: {_masked(str(err), token)}"
            wait = None
        if number == max_attempts:
            raise HubError(
                f"could not {step} {repo_id} after {max_attempts} attempt(s); last error: {failure}"
            )
        sleep(min(max_backoff, wait if wait is not None else backoff * 2 ** (number - 1)))
    raise AssertionError("unreachable")


def _retry_after(err: HfHubHTTPError) -> float | None:
    value = err.response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: use the backoff
        return None


def _masked(text: str, token: str | None) -> str:
    return text.replace(token, "***") if token else text


__all__ = ["AUTH_STATUS", "RETRY_STATUS", "HubAuthError", "HubError", "push_release"]
