"""`max_batch_size` (datasets that grow with the learner's speed) is refused, in one line,
where it cannot apply, and sizes what is allocated where it does."""

from __future__ import annotations

import pytest

from sampleforge.config import ConfigError, make_config


def test_none_by_default_and_the_largest_dataset_follows_it():
    cfg = make_config(rollout=32, batch_size=256, num_batches_per_epoch=4)
    assert cfg.max_batch_size is None and cfg.max_dataset_size == cfg.dataset_size == 1024
    grown = make_config(rollout=32, batch_size=256, num_batches_per_epoch=4, max_batch_size=1024)
    assert grown.dataset_size == 1024 and grown.max_dataset_size == 4096


@pytest.mark.parametrize(
    "settings, says",
    [
        (dict(max_batch_size=0), "max_batch_size: 0 must be >= 1 (or none)"),
        (dict(max_batch_size=256), "must be at least batch_size (512)"),
        (dict(max_batch_size=1000), "a multiple of rollout (32)"),
        (dict(max_batch_size=2048, serial_mode=True), "serial_mode true runs are reproducible"),
        (dict(algorithm="dqn", max_batch_size=2048), "trains on replay batches of batch_size"),
    ],
)
def test_refused_in_one_line(settings, says):
    with pytest.raises(ConfigError) as refused:
        make_config(rollout=32, batch_size=512, **settings)
    assert "\n" not in str(refused.value)
    assert says in str(refused.value)
