"""tasks.common.text.licences.release_licence: a card never claims more than its sources allow (issue 29 §4)."""

from __future__ import annotations

from tasks.common.text.licences import release_licence


def test_the_most_restrictive_source_licence_wins_over_a_more_permissive_setting() -> None:
    assert release_licence("cc0-1.0", {"CC-BY-4.0": 5, "CC0-1.0": 1}) == ("cc-by-4.0", None)
    assert release_licence("cc0-1.0", {"CC-BY-NC-ND-3.0": 1, "CC-BY-4.0": 2}) == ("cc-by-nc-nd-3.0", None)
    assert release_licence("cc-by-nc-4.0", {"CC-BY-4.0": 5}) == (
        "cc-by-nc-4.0",
        None,
    )  # stricter setting stays
    assert release_licence("cc-by-4.0", {}) == ("cc-by-4.0", None)


def test_unknown_or_conflicting_sources_make_it_other_with_the_reason() -> None:
    licence, why = release_licence("cc0-1.0", {"CC-BY-4.0": 5, "unknown": 1})
    assert licence == "other" and why is not None and "unknown" in why
    licence, why = release_licence("cc-by-4.0", {"CC-BY-SA-4.0": 1, "CC-BY-NC-4.0": 1})
    assert licence == "other" and why is not None and "cc-by-nc and cc-by-sa" in why
