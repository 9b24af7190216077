"""The citation section every release card ends with (issue 29 §4): the construction's paper,
the release and irforge, as BibTeX a reader can paste."""

from __future__ import annotations

from tasks.common.release.card import citation, release_bibtex

PAPER = "@article{doe2020,\n  title = {A paper},\n  year = {2020}\n}"


def test_the_release_entry_names_the_build_and_changes_with_it() -> None:
    first = release_bibtex("org/My Release", {"ingest": "aaa", "qrels": "bbb"})
    assert first == release_bibtex("org/My Release", {"qrels": "bbb", "ingest": "aaa"})  # order-free
    assert first.startswith("@misc{org_my_release_") and "title = {org/My Release}" in first
    assert first != release_bibtex("org/My Release", {"ingest": "aaa", "qrels": "ccc"})
    assert first.count("{") == first.count("}")


def test_the_section_holds_three_fenced_entries() -> None:
    lines = citation(PAPER, "rel", {"s": "f"})
    text = "\n".join(lines)
    assert lines[0] == "## Citation" and text.count("```bibtex") == 2 and text.count("```") == 4
    assert "@article{doe2020," in text and "@misc{rel_" in text and "@software{irforge," in text
