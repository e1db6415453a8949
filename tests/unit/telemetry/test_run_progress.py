"""RunProgress's scalars (what progress.csv and TensorBoard get) and its run-wide window."""

from sampleforge.comms.messages import EpisodesFinished
from sampleforge.telemetry.learning_curves import WINDOW_EPISODES
from sampleforge.telemetry.run_progress import RunProgress


def test_scalars_say_how_many_episodes_the_mean_return_is_over() -> None:
    progress = RunProgress()
    assert WINDOW_EPISODES not in progress.scalars()  # no episode yet, no mean
    progress.episodes.add(0, [1.0] * 16, [10] * 16)
    assert progress.scalars()[WINDOW_EPISODES] == 16.0
    progress.episodes.add(0, [2.0] * 120, [10] * 120)
    scalars = progress.scalars()
    assert scalars[WINDOW_EPISODES] == 100.0 and scalars["episode/return_mean"] == 2.0


def test_a_population_s_run_window_weighs_every_policy_the_same() -> None:
    # Each policy's episodes reach the runner in batches of their own. One last-100 window of
    # all policies held only the batch that came last: 100 episodes of policy 1 at return 10
    # after 100 of policy 0 at 0 made the run's mean 10 and its best 10, and with a target of
    # 10, stop_at_mean_return stopped a population whose policy 0 had learned nothing.
    progress = RunProgress(num_trained_policies=2)
    progress.record(EpisodesFinished(0, [0.0] * 100, [5] * 100))
    assert progress.episodes.mean_return is None  # policy 1 has no episode yet
    progress.record(EpisodesFinished(1, [10.0] * 100, [50] * 100))
    episodes = progress.episodes
    assert episodes.mean_return == 5.0 and episodes.mean_length == 27.5
    assert episodes.best_mean_return == 5.0
    assert episodes.count == 100 and episodes.total_episodes == 200
    progress.record(EpisodesFinished(2, [99.0] * 10, [5] * 10))  # a frozen opponent: not counted
    assert episodes.total_episodes == 200 and episodes.mean_return == 5.0
