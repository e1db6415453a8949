"""The process shell every component runs in (comms/component_process.py)."""

from __future__ import annotations

from sampleforge.comms.component_process import releasables_in
from sampleforge.components.runner import Runner
from sampleforge.components.wiring import wire
from sampleforge.config import make_config


def test_the_shell_finds_every_policy_weights_a_component_was_given(tmp_path):
    # Each process releases what it finds before it exits (on CUDA the weights are mapped
    # from the runner); one missed would keep its mapping alive past the process.
    cfg = make_config(
        env="CartPole-v1", train_dir=str(tmp_path), experiment="e", device="cpu", num_policies=2
    )
    runner = Runner(cfg)
    wiring = wire(runner.cfg, runner.env_spec, runner.env, runner.device, runner.exp, False)
    found = {spec.name: {id(w) for w in releasables_in(spec.kwargs)} for spec in wiring.specs}
    acting = {id(w) for w in wiring.weights.values()}
    for p in (0, 1):
        assert found[f"learner_p{p}"] == acting | {id(wiring.incoming_weights[p])}
        assert found[f"inference_worker_p{p}_0"] == {id(wiring.weights[p])}
    assert found["rollout_worker_0"] == found["rollout_worker_1"] == set()
