"""Running trained policies outside training: locally, over many processes, on video.

Responsibility: re-export the public API of the evaluation modules: `LocalPolicy` (a policy in
this process), `EpisodeRunner` / `run_episodes` / `EvaluationResult` (repeatable episodes),
`evaluate_in_processes` (a process pool), `VideoRecorder` (MP4) and the policy files
(`load_saved_policy`, `read_weights_file`, `save_model_file`, ...).

Must not: train or start training components.
"""

from sampleforge.evaluation.episodes import (
    EpisodeRunner,
    EvaluationResult,
    episode_seed,
    run_episodes,
)
from sampleforge.evaluation.local_policy import LocalPolicy, WeightsDoNotFit
from sampleforge.evaluation.parallel import evaluate_in_processes
from sampleforge.evaluation.policy_files import (
    CHECKPOINT_CHOICES,
    PolicyFileError,
    SavedPolicy,
    find_checkpoint,
    load_saved_policy,
    read_experiment_config,
    read_weights_file,
    save_model_file,
)
from sampleforge.evaluation.video import VideoRecorder

__all__ = [
    "CHECKPOINT_CHOICES",
    "EpisodeRunner",
    "EvaluationResult",
    "LocalPolicy",
    "PolicyFileError",
    "SavedPolicy",
    "VideoRecorder",
    "WeightsDoNotFit",
    "episode_seed",
    "evaluate_in_processes",
    "find_checkpoint",
    "load_saved_policy",
    "read_experiment_config",
    "read_weights_file",
    "run_episodes",
    "save_model_file",
]
