"""Running one spanish_sr stage on upstream artifacts made from small tables, without Prefect.

``artifact_of`` publishes a table (and side tables) as an artifact of a stage named as the
upstream one, through the real engine (:func:`irforge.engine.run_stage`); ``run_one`` runs
a stage's spec on such artifacts the way a flow run does (fingerprint, chunks, accounting).
"""

from __future__ import annotations

import functools
from pathlib import Path

from tests import stage_harness

DATA = Path(__file__).resolve().parents[2] / "data"
CT_EBM_SP = DATA / "spanish_sr" / "ct-ebm-sp"
MEDLINE = DATA / "crossgenre" / "medline"

artifact_of = functools.partial(stage_harness.artifact_of, flow="spanish_sr")
run_one = functools.partial(stage_harness.run_one, flow="spanish_sr")
