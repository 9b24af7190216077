"""CURE's controlled values: the ten domains (paper 001 §2.3). Languages and folding: tasks/common/annotations/vocab.py."""

from __future__ import annotations

# CURE's ten splits (paper §2.3, MTEB's CUREv1 task), in the order the release lists them.
CURE_DOMAINS: tuple[str, ...] = (
    "dentistry_and_oral_health",
    "dermatology",
    "gastroenterology",
    "genetics",
    "neuroscience_and_neurology",
    "orthopedic_surgery",
    "otorhinolaryngology",
    "plastic_surgery",
    "psychiatry_and_psychology",
    "pulmonology",
)
