"""A Ctrl-C or SIGTERM that stops the training measurement stops the benchmark
(bench/measure.py): the runner ends training cleanly on it, and `training_fps` then raises
`Interrupted` instead of returning a measurement for the next step to build on."""

import os
import signal
import threading

import pytest

from sampleforge.bench import measure
from sampleforge.comms.interrupts import Interrupted
from sampleforge.config import make_config


@pytest.mark.timeout(120)
def test_a_signal_that_stopped_training_stops_the_benchmark(tmp_path):
    cfg = make_config(
        env="CartPole-v1",
        serial_mode=True,  # in this process: seconds to start
        train_dir=str(tmp_path),
        experiment="bench",
        device="cpu",
        num_workers=1,
        num_envs_per_worker=8,
        stop_at_mean_return=float("inf"),
        train_for_env_steps=10**12,
        tensorboard=False,
    )
    # The runner handles SIGTERM while it starts and trains; this handler takes one that would
    # come outside (none should), so that it cannot kill the test run.
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    timer = threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        with pytest.raises(Interrupted) as stopped:
            measure.training_fps(cfg, warmup_sec=20, measure_sec=20)
    finally:
        timer.cancel()
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.signum == signal.SIGTERM and stopped.value.exit_code == 143
