"""`sampleforge enjoy`: watch a trained policy play, print each episode's return, record MP4."""

from __future__ import annotations

import argparse
import os
import sys

from sampleforge.cli.policy_source import add_policy_arguments, input_errors, local_policy_from_args
from sampleforge.cli.signals import stop_on_signals
from sampleforge.config.cli_args import add_switch, positive_number

HELP = (
    "Play episodes with a trained policy and print their returns; --save_video writes an "
    "MP4 into the experiment folder."
)
DEFAULT_EPISODES = 3


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("enjoy")
    group.add_argument(
        "--max_num_episodes",
        type=int,
        default=DEFAULT_EPISODES,
        help=f"Episodes to play. (default: {DEFAULT_EPISODES})",
    )
    add_switch(
        group, "--save_video", help="Record the episodes (rgb_array rendering) as an MP4 video."
    )
    group.add_argument(
        "--video_name",
        default="replay.mp4",
        help="File name of the video in the experiment folder, or a path. (default: replay.mp4)",
    )
    group.add_argument(
        "--fps",
        type=positive_number,
        default=None,
        help="Frames per second of the video. (default: the env's render_fps, else 30)",
    )
    add_policy_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from sampleforge.evaluation import EpisodeRunner, VideoRecorder

    if args.max_num_episodes < 1:
        print(
            f"sampleforge: --max_num_episodes {args.max_num_episodes} must be >= 1", file=sys.stderr
        )
        return 2
    try:
        source, policy, env_metadata = local_policy_from_args(args)
    except input_errors() as e:
        print(f"sampleforge: {e}", file=sys.stderr)
        return 2
    stop_on_signals()  # the imports are done: Ctrl-C or SIGTERM ends the episodes now
    fps = args.fps or env_metadata.get("render_fps") or 30
    print(f"policy: {source.checkpoint}")
    recorder = None
    if args.save_video:
        # rgb_array rendering needs no display; without this SDL (pygame) complains on stderr.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        recorder = VideoRecorder(source.experiment_dir / args.video_name, fps=fps)
    episodes = EpisodeRunner(
        policy,
        source.env_spec,
        range(args.max_num_episodes),
        seed=source.cfg.seed,
        deterministic=source.cfg.eval_deterministic,
        num_envs=1,
        render_mode="rgb_array" if recorder else None,
        on_frame=recorder.add if recorder else None,
    )
    try:
        _play(episodes)
    finally:
        episodes.close()
        if recorder is not None:
            recorder.close()
    result = episodes.result()
    print(f"mean return {result.mean_return:.2f} over {result.num_episodes} episodes")
    if recorder is not None:
        print(f"video: {recorder.path} ({recorder.frames_written} frames at {fps:g} fps)")
    return 0


def _play(episodes) -> None:
    """Step until done, printing each episode as it ends."""
    printed = 0
    while not episodes.done:
        episodes.step()
        for index, episode_return, length in episodes.results[printed:]:
            print(f"episode {index + 1}: return {episode_return:.2f}, length {length}", flush=True)
        printed = len(episodes.results)
