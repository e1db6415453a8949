"""What the ranks decide together before a round of SGD (distributed/rounds.py)."""

from sampleforge.distributed.rounds import RankRow, decide


def row(ready=0, steps=0, stopping=False, finishing=False, waiting=False) -> RankRow:
    return RankRow(stopping, finishing, waiting, ready, steps)


def test_ranks_train_the_fewest_items_any_has_and_count_every_ranks_steps():
    d = decide([row(ready=3, steps=100), row(ready=2, steps=50)])
    assert (d.items, d.env_steps, d.halt, d.peers_finished) == (2, 150, False, False)


def test_nobody_trains_while_a_rank_has_no_data():
    assert decide([row(ready=1), row(ready=0)]).items == 0


def test_nobody_trains_while_a_rank_waits_or_finishes_and_a_finish_ends_the_run_everywhere():
    waiting = decide([row(ready=1), row(waiting=True)])
    assert (waiting.items, waiting.peers_finished, waiting.halt) == (0, False, False)
    finishing = decide([row(ready=1), row(finishing=True)])
    assert (finishing.items, finishing.peers_finished, finishing.halt) == (0, True, False)


def test_a_stopping_rank_halts_the_rounds_for_all():
    d = decide([row(ready=4), row(stopping=True, steps=7)])
    assert (d.items, d.halt, d.peers_finished, d.env_steps) == (0, True, True, 7)


def test_a_row_survives_the_gathered_tensor_form():
    r = RankRow(True, False, True, 5, 123_456_789)
    assert RankRow.from_list(r.as_list()) == r


def test_with_a_sync_fraction_enough_ready_ranks_start_a_round_and_the_others_follow():
    rows = [row(ready=1), row(ready=0), RankRow(False, False, False, 1, 0, True)]
    rows[1] = RankRow(False, False, False, 0, 0, True)  # has a dataset to follow with
    d = decide(rows, sync_fraction=0.6)
    assert (d.items, d.follows) == (1, (False, True, False))
    assert decide(rows, sync_fraction=1.0).items == 0  # without the rule: wait for all


def test_a_straggler_without_a_dataset_to_follow_with_is_waited_for():
    rows = [row(ready=1), row(ready=0)]  # rank 1 never trained: nothing to follow with
    assert decide(rows, sync_fraction=0.5).items == 0


def test_too_few_ready_ranks_wait():
    follower = RankRow(False, False, False, 0, 0, True)
    assert decide([row(ready=1), follower, follower], sync_fraction=0.6).items == 0
