"""Controlled values of annotation exports: language names and codes, folded keys, list fields."""

from __future__ import annotations

import re
import unicodedata

LANGUAGE_NAMES = {
    "en": "en", "eng": "en", "english": "en", "anglais": "en", "ingles": "en",
    "fr": "fr", "fra": "fr", "fre": "fr", "french": "fr", "francais": "fr",
    "es": "es", "spa": "es", "spanish": "es", "espanol": "es", "castellano": "es", "espagnol": "es",
}  # fmt: skip


def fold(value: str) -> str:
    """Lower-case ASCII skeleton: "Français" → "francais", "Oral & Dental Health" → "oral and dental health"."""
    text = unicodedata.normalize("NFKD", value).encode("ascii", "ignore").decode()
    return re.sub(r"\s+", " ", text.replace("&", " and ").casefold()).strip()


def language_code(value: str) -> str | None:
    return LANGUAGE_NAMES.get(fold(value).split("-")[0].split("_")[0])


def domain_key(value: str) -> str:
    """ "Neuroscience & Neurology" → "neuroscience_and_neurology"."""
    return re.sub(r"[^a-z0-9]+", "_", fold(value)).strip("_")


def split_list(value: object) -> list[str]:
    """A list field as exported: a JSON list, or a string with ; | or , between items."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [str(v).strip() for v in value if v is not None and str(v).strip()]
    return [part.strip() for part in re.split(r"[;|,]", str(value)) if part.strip()]
