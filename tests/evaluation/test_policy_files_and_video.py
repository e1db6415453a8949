"""Policy files (model files, experiment folders, checkpoints), the process-pool evaluation and
MP4 recording."""

import imageio.v2 as imageio
import numpy as np
import pytest
import torch

from sampleforge.checkpoint import CheckpointStore
from sampleforge.config import make_config
from sampleforge.envs import env_info, resolve_env
from sampleforge.envs.registry import make_env
from sampleforge.evaluation import (
    LocalPolicy,
    PolicyFileError,
    VideoRecorder,
    WeightsDoNotFit,
    evaluate_in_processes,
    find_checkpoint,
    load_saved_policy,
    read_weights_file,
    run_episodes,
    save_model_file,
)
from sampleforge.testing import register_faulty_env
from sampleforge.testing.faulty_envs import InjectedFault


def _policy(cfg, seed=0):
    torch.manual_seed(seed)
    info = env_info(cfg.env)
    return LocalPolicy.build(cfg, info.observation_space, info.action_space)


def test_model_file_round_trip(tmp_path):
    cfg = make_config(env="CartPole-v1", mlp_hidden_sizes=(16, 16), seed=3)
    weights = _policy(cfg).model.state_dict()
    path = save_model_file(tmp_path / "sub" / "model.pt", cfg, {0: weights}, env_steps=1234)
    saved = load_saved_policy(path)
    assert saved.cfg == cfg and saved.env_steps == 1234
    assert all(torch.equal(saved.state_dicts[0][k], v) for k, v in weights.items())
    assert read_weights_file(path).keys() == weights.keys()
    assert not list((tmp_path / "sub").glob(".*tmp"))


def test_experiment_folder_and_checkpoints(tmp_path):
    cfg = make_config(env="CartPole-v1")
    (tmp_path / "config.json").write_text('{"env": "CartPole-v1", "rnn": "gru"}')
    with pytest.raises(PolicyFileError, match="no latest checkpoint of policy 0"):
        find_checkpoint(tmp_path)
    with pytest.raises(PolicyFileError, match="eval_every_env_steps"):
        find_checkpoint(tmp_path, "best_eval")
    weights = _policy(cfg.replace(rnn="gru")).model.state_dict()
    store = CheckpointStore(tmp_path / "checkpoints" / "p0")
    store.save({"model": weights, "env_steps": 99}, env_steps=99, policy_version=5, mean_return=1.0)
    saved = load_saved_policy(tmp_path, "best")
    assert saved.cfg.rnn == "gru" and saved.env_steps == 99
    assert find_checkpoint(tmp_path).name == "checkpoint_000000005_99.pt"
    with pytest.raises(PolicyFileError, match="neither a file nor one of"):
        find_checkpoint(tmp_path, "newest")
    with pytest.raises(PolicyFileError, match="is not an experiment folder"):
        load_saved_policy(tmp_path / "checkpoints")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(PolicyFileError, match="cannot load"):
        read_weights_file(tmp_path / "junk.pt")


def test_the_latest_checkpoint_is_the_newest_that_verifies_as_for_a_resume(tmp_path):
    """enjoy, eval, export and load(folder) once took the newest file unverified, and failed
    on a corrupt one where a resume fell back to the one before."""
    cfg = make_config(env="CartPole-v1")
    weights = _policy(cfg).model.state_dict()
    store = CheckpointStore(tmp_path / "checkpoints" / "p0")
    for version in (1, 2):
        store.save(
            {"model": weights, "env_steps": version}, env_steps=version, policy_version=version
        )
    older, newest = store.list()
    newest.write_bytes(newest.read_bytes()[:-10])  # truncated
    with pytest.warns(RuntimeWarning, match=f"skipping unusable checkpoint {newest}"):
        assert find_checkpoint(tmp_path) == older
    older.write_bytes(b"")
    with pytest.raises(PolicyFileError, match="all 2 checkpoints .* are unusable"):
        find_checkpoint(tmp_path)


@pytest.mark.timeout(120)
def test_process_pool_gives_the_in_process_results(tmp_path):
    cfg = make_config(env="CartPole-v1")
    policy = _policy(cfg, seed=5)
    spec = resolve_env("CartPole-v1")
    local = run_episodes(policy, spec, 6, seed=2)
    pooled = evaluate_in_processes(
        cfg, spec, policy.model.state_dict(), num_episodes=6, num_processes=2, seed=2
    )
    assert pooled == local
    with pytest.raises(ValueError, match="num_processes: 0"):
        evaluate_in_processes(cfg, spec, policy.model.state_dict(), num_episodes=2, num_processes=0)


@pytest.mark.timeout(120)
def test_a_pool_whose_processes_cannot_build_the_policy_fails_instead_of_hanging(tmp_path):
    """The pool once built the policy in its initializer: a failure there makes the pool
    replace the process and run the initializer again, for ever."""
    env = register_faulty_env("eval_broken_init", fault="raise_in_init_in_workers")
    cfg = make_config(env=env)
    spec = resolve_env(env)
    weights = LocalPolicy.build(cfg, *_spaces(spec)).model.state_dict()
    with pytest.raises(InjectedFault, match="construction of FaultyEnv failed"):
        evaluate_in_processes(cfg, spec, weights, num_episodes=4, num_processes=2)
    other = make_config(env=env, mlp_hidden_sizes=(8,))
    with pytest.raises(WeightsDoNotFit, match="Unexpected key"):  # in this process, at once
        evaluate_in_processes(other, spec, weights, num_episodes=4, num_processes=2)


def _spaces(spec):
    env = make_env(spec)
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def test_video_recorder_writes_every_frame(tmp_path):
    frames = [np.full((50, 70, 3), 10 * i, dtype=np.uint8) for i in range(12)]
    with VideoRecorder(tmp_path / "v.mp4", fps=10) as video:
        for frame in frames:
            video.add(frame)
    assert video.frames_written == 12
    read = [frame for frame in imageio.get_reader(tmp_path / "v.mp4")]  # len() is inf
    assert len(read) == 12 and read[0].shape == (64, 80, 3)  # padded to 16-pixel blocks
    assert abs(int(read[5][:50, :70].mean()) - 50) <= 3
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        VideoRecorder(tmp_path / "x.mp4").add(None)
