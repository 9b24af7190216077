"""The Hugging Face release of a test collection.

:mod:`tasks.release.layout` writes the folder MTEB's CUREv1 task reads (one split per domain,
JSON Lines files, a generated card; ``split="all"`` loads their union), complete by
construction; :mod:`tasks.release.schema` holds the layout's names and rules,
:mod:`tasks.release.stats` the per-split statistics, :mod:`tasks.release.card` renders the
dataset card with the loading examples of :mod:`tasks.release.usage` (``datasets`` and
MTEB); :mod:`tasks.release.hub` pushes a written folder to the Hub as one commit.
"""
