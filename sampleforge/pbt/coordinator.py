"""The runner's side of a policy population: per-policy statistics, frozen snapshots and PBT.

The runner hands it every `EpisodesFinished` report and, on each loop, the total env steps; it
answers with the commands that carry out its decisions:

- **Statistics** per policy: mean return and length over its last 100 episodes (the run's
  own windows, `RunProgress.episodes`, which the runner fills), its win rate
  over its last 100 matches (envs that report outcomes), its policy lag and its share of the
  samples trained on, written as `policy_<p>/...` scalars and one console line.
- **Frozen snapshots**: every `snapshot_every_env_steps`, frozen opponent `k` (round robin)
  becomes a copy of a random trained policy (`PublishSnapshot` to that policy's learner).
- **PBT** (`with_pbt`): at each round of `sampleforge.pbt.PopulationBasedTraining`, replaced
  policies copy their source's weights (`CopyPolicy`), every policy an event touched gets its
  hyperparameters (`SetHyperparameters`) and reward shaping (`SetRewardShaping` to every
  rollout worker). Events go to `<experiment>/pbt_history.jsonl` and TensorBoard. A round that
  copied weights asks for a checkpoint at once (`step` returns True). The PBT state goes to
  `<experiment>/pbt_state.json` only once every learner has written the checkpoint it was asked
  for with it, so the state a resumed run continues from never runs ahead of the weights: a crash
  between a round and its checkpoint runs that round again after the resume, instead of going
  on with the round's hyperparameters on weights that never got its copies.

Must not: touch processes, buffers or learning; it only decides and sends commands.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from sampleforge.checkpoint.experiment_dir import write_json_atomic
from sampleforge.comms.messages import (
    CopyPolicy,
    EpisodesFinished,
    PublishSnapshot,
    SetHyperparameters,
    SetRewardShaping,
    TrainingReport,
)
from sampleforge.config import Config
from sampleforge.config.ranges import PBT_LEARNER_HYPERPARAMETERS
from sampleforge.pbt import (
    HISTORY_FILENAME,
    PbtEvent,
    PbtHistory,
    PbtSettings,
    PopulationBasedTraining,
)
from sampleforge.telemetry import EpisodeStatsWindow, PopulationEpisodeWindows

log = logging.getLogger(__name__)

PBT_STATE_FILENAME = "pbt_state.json"
SHAPING_PREFIX = "shaping."


class CommandChannels(Protocol):
    """Where the coordinator's commands go: the runner's wiring provides them."""

    def send_to_learner(self, policy_id: int, messages: list) -> None: ...

    def send_to_rollout_worker(self, worker: int, messages: list) -> None: ...


class PopulationCoordinator:
    """Statistics and population decisions for the runner; see the module docstring."""

    def __init__(
        self,
        cfg: Config,
        channels: CommandChannels,
        experiment_path: Path,
        reward_shaping: dict[str, float],
        resume: bool,
        episodes: PopulationEpisodeWindows,
    ):
        self.cfg = cfg
        self.channels = channels
        self.path = experiment_path
        self.returns: Mapping[int, EpisodeStatsWindow] = episodes.windows  # read, not filled
        self.wins: dict[int, deque[float]] = {p: deque(maxlen=100) for p in range(cfg.num_policies)}
        self.lag: dict[int, float] = {}  # mean policy lag of each learner's last iteration
        self.env_steps: dict[int, int] = {}
        self._rng = np.random.default_rng(cfg.seed)
        self._next_snapshot = cfg.snapshot_every_env_steps
        self._snapshots = 0
        self.pbt: PopulationBasedTraining | None = None
        self.history: PbtHistory | None = None  # set together with `pbt`
        self._pending_states: deque[_PendingState] = deque()  # oldest request first
        if cfg.with_pbt:
            self._start_pbt(reward_shaping, resume)

    # --- statistics -----------------------------------------------------------------------------
    def on_episodes(self, msg: EpisodesFinished) -> None:
        if msg.policy_id in self.wins:  # frozen opponents' episodes are not tracked
            self.wins[msg.policy_id].extend(msg.wins)

    def on_training(self, msg: TrainingReport) -> None:
        self.lag[msg.policy_id] = msg.lag_mean
        self.env_steps[msg.policy_id] = msg.env_steps

    def sample_share(self, policy: int) -> float | None:
        """The policy's share of all samples trained on so far (its share of the FPS)."""
        total = sum(self.env_steps.values())
        return self.env_steps.get(policy, 0) / total if total else None

    def win_rate(self, policy: int) -> float | None:
        wins = self.wins[policy]
        return float(np.mean(wins)) if wins else None

    def objective(self, policy: int) -> float | None:
        """What PBT ranks by: win rate (self-play) or mean return."""
        use_wins = self.cfg.pbt_objective == "win_rate" or (
            self.cfg.pbt_objective == "auto" and any(self.wins.values())
        )
        return self.win_rate(policy) if use_wins else self.returns[policy].mean_return

    def scalars(self) -> dict[str, float]:
        """`policy_<p>/...` metrics (only with several policies or when wins are reported)."""
        if self.cfg.num_policies == 1 and not self.wins[0]:
            return {}
        out: dict[str, float] = {}
        for p, window in self.returns.items():
            mean_return, mean_length = window.mean_return, window.mean_length
            if mean_return is not None and mean_length is not None:  # i.e. window.count > 0
                out[f"policy_{p}/return_mean"] = mean_return
                out[f"policy_{p}/length_mean"] = mean_length
            rate = self.win_rate(p)
            if rate is not None:
                out[f"policy_{p}/win_rate"] = rate
            if p in self.lag:
                out[f"policy_{p}/lag_mean"] = self.lag[p]
                share = self.sample_share(p)
                if share is not None:  # always: p's report counted its env steps
                    out[f"policy_{p}/sample_share"] = share
            if self.pbt is not None:
                for name, value in self.pbt.hyperparameters(p).items():
                    out[f"policy_{p}/pbt_{name}"] = value
        return out

    def summary_line(self) -> str:
        """One console line with each policy's return and win rate."""
        parts = []
        for p, window in self.returns.items():
            text = f"p{p}: "
            text += "-" if window.mean_return is None else f"R {window.mean_return:.2f}"
            rate = self.win_rate(p)
            if rate is not None:
                text += f" win {rate:.0%}"
            if p in self.lag:
                text += f" lag {self.lag[p]:.1f} share {self.sample_share(p):.0%}"
            parts.append(text)
        return " | ".join(parts)

    # --- decisions ------------------------------------------------------------------------------
    def step(self, env_steps: int) -> bool:
        """Refresh a frozen snapshot and run a PBT round when due; True when the round copied
        weights, which the runner then checkpoints at once."""
        if self.cfg.num_frozen_opponents and env_steps >= self._next_snapshot:
            self._refresh_snapshot()
            self._next_snapshot = env_steps + self.cfg.snapshot_every_env_steps
        if self.pbt is None or not self.pbt.due(env_steps):
            return False
        objectives = {p: self.objective(p) for p in self.returns}
        events = self.pbt.step(env_steps, objectives)
        self._carry_out(events)
        assert self.history is not None  # created together with self.pbt
        self.history.append(events)
        for event in events:
            log.info("PBT: %s", _describe(event))
        return any(e.kind == "replace" and e.source_policy is not None for e in events)

    def _refresh_snapshot(self) -> None:
        frozen = self.cfg.num_policies + self._snapshots % self.cfg.num_frozen_opponents
        source = int(self._rng.integers(self.cfg.num_policies))
        self.channels.send_to_learner(source, [PublishSnapshot(frozen)])
        self._snapshots += 1

    # --- PBT ------------------------------------------------------------------------------------
    def _start_pbt(self, reward_shaping: dict[str, float], resume: bool) -> None:
        cfg = self.cfg
        initial = {name: getattr(cfg, name) for name in PBT_LEARNER_HYPERPARAMETERS}
        initial.update({SHAPING_PREFIX + k: v for k, v in reward_shaping.items()})
        settings = PbtSettings(
            period_env_steps=cfg.pbt_period_env_steps,
            mutation_probability=cfg.pbt_mutation_probability,
            mutation_factor=cfg.pbt_mutation_factor,
            replace_threshold=cfg.pbt_replace_threshold,
            seed=cfg.seed,
        )
        self.pbt = PopulationBasedTraining(
            settings, cfg.num_policies, {p: dict(initial) for p in range(cfg.num_policies)}
        )
        self.history = PbtHistory(self.path / HISTORY_FILENAME)
        state_path = self.path / PBT_STATE_FILENAME
        if resume and state_path.exists():
            self.pbt.load_state_dict(json.loads(state_path.read_text()))
            log.info(
                "PBT resumed after %d rounds (next at %d env steps)",
                self.pbt.rounds,
                self.pbt.next_round_env_steps,
            )

    def send_current_hyperparameters(self) -> None:
        """Tell every learner and rollout worker the population's current values (after a
        start or resume, so a resumed population continues with what PBT chose)."""
        if self.pbt is not None:
            self._apply_hyperparameters(range(self.cfg.num_policies))

    def _carry_out(self, events: list[PbtEvent]) -> None:
        touched = []
        for event in events:
            if event.kind == "replace" and event.source_policy is not None:
                self.channels.send_to_learner(event.policy, [CopyPolicy(event.source_policy)])
            touched.append(event.policy)
        self._apply_hyperparameters(sorted(set(touched)))

    def _apply_hyperparameters(self, policies: Iterable[int]) -> None:
        assert self.pbt is not None  # called only when PBT runs
        for p in policies:
            values = self.pbt.hyperparameters(p)
            learner = {k: v for k, v in values.items() if k in PBT_LEARNER_HYPERPARAMETERS}
            self.channels.send_to_learner(p, [SetHyperparameters(learner)])
            shaping = {
                k.removeprefix(SHAPING_PREFIX): v
                for k, v in values.items()
                if k.startswith(SHAPING_PREFIX)
            }
            if shaping:
                for w in range(self.cfg.num_workers):
                    self.channels.send_to_rollout_worker(w, [SetRewardShaping(p, shaping)])

    # --- the PBT state, saved with the checkpoints -----------------------------------------------
    def checkpoint_requested(self) -> None:
        """Every learner was just asked for a checkpoint: keep the PBT state of this moment until
        they have all answered. Each learner answers its requests in order, so a learner's answer
        concerns the oldest pending request it has not answered yet."""
        if self.pbt is not None:
            self._pending_states.append(_PendingState(self.pbt.state_dict(), set(self.returns)))

    def checkpoint_written(self, policy_id: int) -> None:
        """Policy `policy_id` wrote its checkpoint: once all have, save the state asked with it."""
        self._answered(policy_id, written=True)

    def checkpoint_failed(self, policy_id: int) -> None:
        """Policy `policy_id` could not write its checkpoint: the state asked with it is never
        saved, since the newest weights on disk are older than it."""
        self._answered(policy_id, written=False)

    def _answered(self, policy_id: int, written: bool) -> None:
        pending = next((p for p in self._pending_states if policy_id in p.waiting), None)
        if pending is None:
            return  # no PBT, or a checkpoint not asked through the runner
        pending.waiting.discard(policy_id)
        pending.all_written &= written
        while self._pending_states and not self._pending_states[0].waiting:
            done = self._pending_states.popleft()
            if done.all_written:
                write_json_atomic(self.path / PBT_STATE_FILENAME, done.state)


@dataclass
class _PendingState:
    """The PBT state at a checkpoint request, and the learners yet to answer it."""

    state: dict
    waiting: set[int]
    all_written: bool = True


def _describe(event: PbtEvent) -> str:
    changes = ", ".join(f"{k} {old:.3g} -> {new:.3g}" for k, (old, new) in event.changes.items())
    if event.kind == "replace":
        return f"policy {event.policy} copies policy {event.source_policy}" + (
            f" ({changes})" if changes else ""
        )
    return f"policy {event.policy} mutated: {changes}"
