"""The benchmarks' round order: each round starts one contender later, so each goes first
in turn (on the shared box going first in a round was slowest, a bias as large as the
gaps measured), and the report records the order each round ran in."""

from __future__ import annotations

from benchmarks._common import interleave, rotated


def test_round_r_starts_at_contender_r_mod_n():
    names = ("a", "b", "c")
    assert [rotated(names, r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    assert rotated((), 3) == []


def test_over_n_rounds_each_contender_runs_once_in_every_position():
    names = ["edgeload", "ceiling", "plain", "threads"]
    orders = [rotated(names, r) for r in range(len(names))]
    for position in range(len(names)):
        assert sorted(order[position] for order in orders) == sorted(names)


def test_interleave_runs_in_the_rotated_order_and_reports_it():
    ran: list[tuple[int, tuple[str, int]]] = []

    def run_one(key: tuple[str, int], round_index: int) -> str | None:
        ran.append((round_index, key))
        if key == ("b", 2) and round_index == 1:
            return None  # a failed run: that round lacks it
        return f"{key[0]}{key[1]}@{round_index}"

    keys = [("a", 1), ("b", 2)]
    runs, orders = interleave(keys, 3, run_one, label=lambda k: f"{k[0]}{k[1]}")
    assert ran == [(0, ("a", 1)), (0, ("b", 2)), (1, ("b", 2)), (1, ("a", 1)),
                   (2, ("a", 1)), (2, ("b", 2))]  # fmt: skip
    assert orders == [["a1", "b2"], ["b2", "a1"], ["a1", "b2"]]
    # Results stay in round order per contender, whatever position they ran in.
    assert runs == {("a", 1): ["a1@0", "a1@1", "a1@2"], ("b", 2): ["b2@0", "b2@2"]}
