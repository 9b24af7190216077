"""The Hugging Face release of a test collection.

:mod:`tasks.cure.dataset.layout` writes the folder MTEB's CUREv1 task reads (one split per domain,
JSON Lines files, a generated card; ``split="all"`` loads their union), complete by
construction; :mod:`tasks.cure.dataset.schema` holds the layout's names and rules,
:mod:`tasks.cure.dataset.stats` the per-split statistics, :mod:`tasks.cure.dataset.card` renders the
dataset card with the loading examples of :mod:`tasks.cure.dataset.usage` (``datasets`` and
MTEB); :mod:`tasks.common.release.hub` pushes a written folder to the Hub as one commit.
"""
