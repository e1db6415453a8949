"""RunProgress's scalars: what progress.csv and TensorBoard get."""

from sampleforge.telemetry.learning_curves import WINDOW_EPISODES
from sampleforge.telemetry.run_progress import RunProgress


def test_scalars_say_how_many_episodes_the_mean_return_is_over() -> None:
    progress = RunProgress()
    assert WINDOW_EPISODES not in progress.scalars()  # no episode yet, no mean
    progress.episodes.add([1.0] * 16, [10] * 16)
    assert progress.scalars()[WINDOW_EPISODES] == 16.0
    progress.episodes.add([2.0] * 120, [10] * 120)
    scalars = progress.scalars()
    assert scalars[WINDOW_EPISODES] == 100.0 and scalars["episode/return_mean"] == 2.0
