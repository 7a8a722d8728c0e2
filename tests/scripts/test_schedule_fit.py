"""``scripts/schedule_fit.py``: a run's loss read from the trainer and the verdict per schedule."""

from __future__ import annotations

import pytest
import torch
from script_module import load_script

fit = load_script("schedule_fit")


def test_total_sums_the_running_loss_items_of_a_tensor_or_a_dict() -> None:
    assert fit.total(torch.tensor([1.0, 2.0, 0.5])) == 3.5
    assert fit.total({"box": torch.tensor(1.0), "cls": torch.tensor([2.0, 0.25])}) == 3.25


@pytest.mark.parametrize(
    ("finals", "expected"),
    [
        ([2.0, 2.2, 2.9], "within the default's seed spread"),  # median 2.2 in [2.0, 2.5]
        ([1.0, 1.5, 2.4], "lower than the default's seed spread"),  # median 1.5
        ([2.4, 2.6, 2.7], "higher than it"),  # median 2.6
    ],
)
def test_a_schedule_is_placed_by_its_median_against_the_default_range(
    finals: list[float], expected: str
) -> None:
    assert fit.verdict(finals, [2.0, 2.5, 2.3]) == expected


def test_unknown_schedules_and_a_missing_default_are_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for schedules, message in (
        ("quintic,newton", "--schedules: "),
        ("aol4", "--schedules must include the default, quintic"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            fit.main(["--schedules", schedules, "--out", "x.json"])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
