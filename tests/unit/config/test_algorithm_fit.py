"""Settings an algorithm cannot honour are refused, each in one line naming the algorithm,
instead of being ignored: PBT, frozen opponents, Munchausen on a distributional head (value-based
algorithms), bfloat16 encoders (continuous control, which has none), return normalisation
(outside the actor-critic family)."""

from __future__ import annotations

import pytest

from sampleforge.config import ConfigError, make_config
from sampleforge.config.algorithms import family_algorithms

NOT_ACTOR_CRITIC = family_algorithms("value_based") + family_algorithms("pqn")


def _problems(**settings) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        make_config(env="CartPole-v1", **settings)
    assert all("\n" not in p for p in caught.value.problems)
    return caught.value.problems


@pytest.mark.parametrize("algorithm", NOT_ACTOR_CRITIC)
def test_pbt_with_a_value_based_algorithm_is_refused(algorithm):
    (problem,) = _problems(algorithm=algorithm, with_pbt=True, num_policies=2)
    assert problem.startswith(f"with_pbt: algorithm '{algorithm}' does not support")
    assert problem.endswith("one of appo, impala, a3c")


@pytest.mark.parametrize("algorithm", NOT_ACTOR_CRITIC)
def test_frozen_opponents_with_a_value_based_algorithm_are_refused(algorithm):
    (problem,) = _problems(algorithm=algorithm, num_frozen_opponents=2)
    assert problem.startswith(f"num_frozen_opponents: algorithm '{algorithm}' does not support")
    assert "(2 asked for)" in problem and "appo, impala, a3c" in problem


@pytest.mark.parametrize("algorithm", family_algorithms("actor_critic"))
def test_actor_critic_algorithms_keep_pbt_and_frozen_opponents(algorithm):
    cfg = make_config(
        env="CartPole-v1",
        algorithm=algorithm,
        with_pbt=True,
        num_policies=2,
        num_frozen_opponents=1,
    )
    assert cfg.with_pbt and cfg.num_frozen_opponents == 1


def test_several_policies_of_a_value_based_algorithm_are_fine():
    assert make_config(env="CartPole-v1", algorithm="dqn", num_policies=3).num_policies == 3


@pytest.mark.parametrize("head", ["categorical", "quantile", "implicit_quantile", "fqf"])
def test_munchausen_on_a_distributional_head_is_refused(head):
    (problem,) = _problems(algorithm="mdqn", q_head=head)
    assert problem == (
        f"munchausen applies to the scalar Q head only; got q_head '{head}' "
        "(algorithm 'mdqn'): use q_head scalar or munchausen false"
    )
    (problem,) = _problems(algorithm="dqn", munchausen=True, n_step=1, q_head=head)
    assert "(algorithm 'dqn')" in problem


def test_munchausen_on_the_scalar_head_is_fine():
    assert make_config(env="CartPole-v1", algorithm="mdqn").munchausen


@pytest.mark.parametrize("env", ["CartPole-v1", "atari_pong"])
def test_mdqn_is_one_step_whatever_its_env_family_s_n_step(env):
    assert make_config(env=env, algorithm="mdqn").n_step == 1
    assert make_config(env=env, algorithm="dqn").n_step == (3 if env == "CartPole-v1" else 1)


def test_munchausen_with_an_n_step_return_is_refused():
    (problem,) = _problems(algorithm="mdqn", n_step=3)
    assert problem == (
        "n_step: munchausen's target is one-step (Vieillard et al. 2020); got n_step 3 "
        "(algorithm 'mdqn'): use n_step 1 or munchausen false"
    )
    (problem,) = _problems(algorithm="dqn", munchausen=True)  # the vector family's 3 steps
    assert problem.startswith("n_step: munchausen's target is one-step")


@pytest.mark.parametrize("head", ["categorical", "quantile", "implicit_quantile", "fqf"])
def test_pqn_with_a_distributional_head_is_refused_before_anything_starts(head):
    (problem,) = _problems(algorithm="pqn", q_head=head)
    assert problem == (
        f"q_head: algorithm 'pqn' learns scalar Q-values only; got '{head}': use q_head "
        "scalar, or a replay algorithm (qrdqn, iqn, fqf, rainbow) for a distribution"
    )


@pytest.mark.parametrize(
    "algorithm, expected",
    [
        ("appo", 1000.0 * 2 / 64),  # epochs x minibatches of 64 over a dataset of 4 of them
        ("pqn", 1000.0 * 2 / 64),
        ("dqn", 1000.0 * 24 / 64),  # samples per insert over the replay batch
        ("rainbow", 1000.0 * 24 / 64),
    ],
)
def test_learning_work_per_sample_follows_the_algorithms_family(algorithm, expected):
    cfg = make_config(
        env="CartPole-v1",
        algorithm=algorithm,
        num_epochs=2,
        num_batches_per_epoch=4,
        num_envs_per_worker=16,
        worker_num_splits=2,
        rollout=32,
        batch_size=64,
        samples_per_insert=24.0,
    )
    assert cfg.sgd_steps_per_1000_samples == pytest.approx(expected)


@pytest.mark.parametrize("algorithm", family_algorithms("continuous_control"))
def test_bfloat16_encoders_for_a_continuous_algorithm_are_refused(algorithm):
    with pytest.raises(ConfigError) as caught:
        make_config(env="Pendulum-v1", algorithm=algorithm, learner_precision="bfloat16")
    (problem,) = caught.value.problems
    assert problem.startswith(
        f"learner_precision: algorithm '{algorithm}' has no observation encoder to run in "
        "bfloat16; use float32 (bfloat16 applies to appo, impala, a3c, dqn,"
    )


@pytest.mark.parametrize("algorithm", ["appo", *NOT_ACTOR_CRITIC])
def test_bfloat16_encoders_are_fine_for_the_families_with_encoders(algorithm):
    assert make_config(algorithm=algorithm, learner_precision="bfloat16").learner_precision == (
        "bfloat16"
    )


@pytest.mark.parametrize("algorithm", ["appo", "impala", "a3c", "pqn"])
def test_the_bootstrap_thread_is_refused_where_there_is_no_target_pass(algorithm):
    with pytest.raises(ConfigError) as caught:
        make_config(env="CartPole-v1", algorithm=algorithm, learner_bootstrap_thread=True)
    (problem,) = caught.value.problems
    assert problem == (
        f"learner_bootstrap_thread: algorithm '{algorithm}' has no target-network pass to run "
        "beside its update; use false (true applies to dqn, rainbow, qrdqn, iqn, fqf, mdqn, "
        "ddpg, td3, sac, crossq)"
    )


@pytest.mark.parametrize("algorithm", ["dqn", "rainbow", "sac", "crossq"])
def test_the_bootstrap_thread_is_fine_for_the_replay_families(algorithm):
    env = "Pendulum-v1" if algorithm in ("sac", "crossq") else "CartPole-v1"
    cfg = make_config(env=env, algorithm=algorithm, learner_bootstrap_thread=True)
    assert cfg.learner_bootstrap_thread


def test_the_bootstrap_thread_and_adaptive_learner_threads_are_refused_together():
    with pytest.raises(ConfigError) as caught:
        make_config(
            env="Pendulum-v1",
            algorithm="sac",
            learner_bootstrap_thread=True,
            learner_threads_adaptive=True,
        )
    (problem,) = caught.value.problems
    assert problem.startswith(
        "learner_threads_adaptive true cannot be combined with learner_bootstrap_thread true"
    )


@pytest.mark.parametrize("algorithm", ["dqn", "pqn", "sac", "td3"])
def test_return_normalisation_outside_the_actor_critic_family_is_refused(algorithm):
    # Once taken and ignored: no replay or PQN learner normalises its targets.
    env = "Pendulum-v1" if algorithm in ("sac", "td3") else "CartPole-v1"
    with pytest.raises(ConfigError) as caught:
        make_config(env=env, algorithm=algorithm, normalize_returns=True)
    (problem,) = caught.value.problems
    assert problem == (
        f"normalize_returns: algorithm '{algorithm}' does not normalise its value targets; use "
        "false (true applies to appo, impala, a3c)"
    )
