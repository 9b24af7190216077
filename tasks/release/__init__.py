"""The Hugging Face release of a test collection (DESIGN §7).

:mod:`tasks.release.layout` writes the folder MTEB's CUREv1 task reads (one split per domain,
JSON Lines files, a generated card; ``split="all"`` loads their union); :mod:`tasks.release.card` computes the
per-split statistics and renders the dataset card; :mod:`tasks.release.hub` pushes a
written folder to the Hub as one commit.
"""
