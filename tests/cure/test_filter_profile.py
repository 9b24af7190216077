"""The filter's scientific-passage profile: science kept, menus and number tables dropped."""

from __future__ import annotations

import pytest

from tasks.common.text.gopher import GopherRules, all_failures, first_failure
from tasks.cure.stages.filter import FilterConfig

SCIENCE = [
    # number-dense Results (issue 18: dropped by the paper's min_alpha_word_ratio)
    "Of 516 patients, 62 (12 %) had a CRP above 10 mg/l and 44 (8.5 %) had an IL-6 above 7 pg/ml at 12 "
    "months (OR 2.1, 95 % CI 1.3-3.4; p = 0.002).",
    "Age (22.9 ± 8.8 vs 24.1 ± 9.2 years), BMI (21.4 ± 3.1 vs 22.0 ± 2.9) and HbA1c (7.9 ± 1.2 vs 8.1 ± 1.4 %) "
    "did not differ between groups at baseline.",
    # a short abstract section without two of Gopher's eight stop words
    "Conclusions: Sarcopenia is highly prevalent in older inpatients and independently predicts "
    "mortality at one year.",
    # methods that repeat a phrase (the paper's top-4-gram rule)
    "Except for this difference between the basic and the fully adjusted models, the two models produced "
    "essentially the same results, wherefore only the results from the fully adjusted models are presented.",
    # a sentence with a long URL (the paper's max_mean_word_length)
    "A protocol was written and the review registered on PROSPERO, the international register of "
    "reviews (CRD42011001123, http://www.crd.york.ac.uk/NIHR_PROSPERO/display_record.asp?ID=CRD42011001123).",
]
CHROME = [
    "Home About Journals Submit Contact Login Register Search Subscribe Alerts RSS Help",
    "0.12 0.34 0.56 0.78 1.02 1.35 1.67 1.99 2.21 2.54 2.87 3.10",
    "Download figure Open in new tab Download powerpoint Download figure Open in new tab Download powerpoint",
]


@pytest.mark.parametrize("text", SCIENCE)
def test_scientific_profile_keeps_science_the_paper_profile_drops(text: str) -> None:
    assert first_failure(text, FilterConfig()) is None
    assert first_failure(text, GopherRules()) is not None


@pytest.mark.parametrize("text", CHROME)
def test_scientific_profile_still_drops_menus_number_tables_and_widgets(text: str) -> None:
    assert first_failure(text, FilterConfig()) is not None


def test_all_failures_lists_every_rule_the_first_failure_first() -> None:
    rules = GopherRules()
    text = SCIENCE[0]
    every = all_failures(text, rules)
    assert [f.rule for f in every] == ["min_mean_word_length", "min_alpha_word_ratio"]
    assert every[0] == first_failure(text, rules)
    assert all_failures("A plain sentence that is of the kind the rules like to see in a text.", rules) == []


def test_datatrove_compatible_rules_are_unchanged_by_the_profile() -> None:
    compatible = GopherRules.datatrove_compatible()
    assert compatible.min_alpha_word_ratio == 0.8 and compatible.min_stop_words == 2
    assert compatible.stop_words == ("the", "be", "to", "of", "and", "that", "have", "with")
