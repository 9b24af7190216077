"""The ``irforge`` console script (``pyproject.toml`` ``[project.scripts]``).

It imports the command line only when called. A process-pool worker (Prefect's
``ProcessPoolTaskRunner`` starts them with multiprocessing's ``spawn``) re-imports its
parent's main script (https://docs.python.org/3/library/multiprocessing.html#the-spawn-and-forkserver-start-methods):
importing ``flows.cli`` there would load every flow's packages into every worker.
"""

from __future__ import annotations


def main() -> None:
    from flows.cli import main as cli_main  # noqa: PLC0415 -- the point of this module

    cli_main()
