"""The study's power arithmetic: Student-t quantiles against printed tables, paired differences, the MDE."""

import math
import statistics

import pytest

from minirl.study.power import bar, mde, paired, seeds_for, t_quantile


@pytest.mark.parametrize("p,df,table", [(0.975, 1, 12.706), (0.975, 4, 2.776), (0.8, 4, 0.941), (0.975, 9, 2.262),
                                        (0.995, 4, 4.604), (0.975, 30, 2.042), (0.9, 2, 1.886)])
def test_t_quantiles_match_the_printed_table(p, df, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=2e-3)
    assert t_quantile(1 - p, df) == pytest.approx(-table, abs=2e-3)


def test_t_approaches_the_normal_with_many_degrees_of_freedom():
    assert t_quantile(0.975, 2000) == pytest.approx(statistics.NormalDist().inv_cdf(0.975), abs=2e-3)


def test_paired_difference_removes_what_the_seeds_share():
    seed_effect = [0.10, 0.30, 0.20, 0.25, 0.15]  # e.g. a lucky prompt order, shared by both arms of a seed
    a = [s + 0.00 for s in seed_effect]
    b = [s + 0.03 + e for s, e in zip(seed_effect, [0.004, -0.004, 0.002, -0.002, 0.0])]
    d = paired(a, b)
    assert d["n"] == 5 and d["mean"] == pytest.approx(0.03)
    unpaired_se = math.hypot(statistics.stdev(a), statistics.stdev(b)) / math.sqrt(5)
    assert d["se"] < unpaired_se / 10  # the shared part cancels
    assert abs(d["mean"]) > bar(d["se"], d["n"])  # clear paired, though the two means are within noise unpaired
    with pytest.raises(ValueError, match="one value per seed"):
        paired([1.0], [1.0, 2.0])


def test_mde_shrinks_with_seeds_and_grows_with_tests():
    assert mde(0.03, 5) > mde(0.03, 10) > mde(0.03, 40)
    assert mde(0.03, 5, tests=10) > mde(0.03, 5)
    # the normal-approximation form at many seeds: (1.96 + 0.84) sd / sqrt(n)
    assert mde(0.03, 400) == pytest.approx(2.80 * 0.03 / 20, rel=0.01)
    n = seeds_for(0.03, sd=0.03)
    assert mde(0.03, n) <= 0.03 < mde(0.03, n - 1)
    assert seeds_for(0.001, sd=0.05, at_most=20) == 20  # unreachable: capped
    assert math.isnan(mde(0.03, 1)) and math.isnan(bar(0.01, 1))
