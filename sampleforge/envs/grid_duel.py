"""Duel: a tiny, fast two-player shooting game on a grid, in pure Python and NumPy.

Two agents start on opposite sides of a 7x7 arena with a few wall cells. Each turn both act at
once: stay, move one cell up/down/left/right (a move also turns the agent to face that way, even
when the cell is blocked), or shoot straight ahead. A shot hits the opponent if it stands in the
facing direction within `shot_range` cells with no wall in between; after shooting an agent
must wait `cooldown` turns. Shots resolve before moves, so whoever is in the line of fire at the
start of a turn can be hit. An agent at 0 health loses (+1 / -1); at the time limit the game is
a draw (0), truncated.

The arena is point-symmetric (a 180 degree turn maps it onto itself), and seat 1 sees and acts
in that turned frame: its observations and its up/down/left/right are those seat 0 would have in
the mirrored position. The game is therefore the same from both seats, and ONE policy can play
either seat.

Responsibility: the game rules (`DuelEnv`, a `MultiAgentEnv`), a scripted opponent of fixed skill
(`ScriptedDuelBot`), a single-agent gymnasium view against that bot (`DuelVsBotEnv`, used to
train with the single-agent trainer and to evaluate a policy: its ``info["win"]``), and picklable
factories (`make_duel`, `make_duel_vs_bot`).

It must not: register names in the env registry (the package wiring does that), download or read
files, or import torch: it is a plain environment, cheap to build in every worker (its speed and
the bot's strength: docs/design_notes.md).
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Sequence
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from sampleforge.envs.multi_agent import MultiAgentEnv, MultiAgentStep
from sampleforge.envs.registry import EnvContext

# '#' is a wall. The layout must be point-symmetric so both seats play the same game.
DEFAULT_LAYOUT: tuple[str, ...] = (
    ".......",
    ".#...#.",
    ".......",
    "..#.#..",
    ".......",
    ".#...#.",
    ".......",
)
DEFAULT_HEALTH = 3
DEFAULT_SHOT_RANGE = 4
DEFAULT_COOLDOWN = 2  # turns between two shots of one agent
DEFAULT_MAX_STEPS = 100
# Strong enough that random play almost never wins, weak enough that APPO beats it within a
# test's budget (docs/design_notes.md).
DEFAULT_BOT_SKILL = 0.7
START_ROWS = 2  # each seat starts in the first START_ROWS rows of its own frame

# Actions, in the acting seat's frame.
NOOP, UP, DOWN, LEFT, RIGHT, SHOOT = range(6)
NUM_ACTIONS = 6
# Directions (also the one-hot order of facing in observations).
D_UP, D_DOWN, D_LEFT, D_RIGHT = range(4)
_DELTAS = ((-1, 0), (1, 0), (0, -1), (0, 1))
_OPPOSITE_DIR = (D_DOWN, D_UP, D_RIGHT, D_LEFT)
# A 180 degree turn swaps up/down and left/right; noop and shoot stay.
_MIRROR_ACTION = (NOOP, DOWN, UP, RIGHT, LEFT, SHOOT)

OBS_SIZE = 24


class _Arena:
    """Precomputed lookup tables of one (layout, shot range), shared by every env using it.

    Cells are ints ``row * width + col``; the 180 degree turn of cell ``x`` is ``n - 1 - x``.
    """

    def __init__(self, layout: tuple[str, ...], shot_range: int) -> None:
        self.height = len(layout)
        self.width = len(layout[0])
        self.size = self.height * self.width
        self.walls = frozenset(
            r * self.width + c
            for r, row in enumerate(layout)
            for c, ch in enumerate(row)
            if ch == "#"
        )
        self.free = [x for x in range(self.size) if x not in self.walls]
        # neighbour[x][d]: the cell one step from x in direction d, or -1 (edge or wall).
        self.neighbour = [[self._step(x, d) for d in range(4)] for x in range(self.size)]
        # ray[x][d]: cells a shot from x facing d can hit, in order (stops at walls and range).
        self.ray = [[self._ray(x, d, shot_range) for d in range(4)] for x in range(self.size)]
        self.ray_set = [[frozenset(r) for r in rays] for rays in self.ray]
        # lined_up[t]: cells from which some direction has a clear shot at t (the rays from t).
        self.lined_up = [frozenset().union(*self.ray[t]) for t in range(self.size)]
        # approach[t][x]: turns from x to the nearest cell lined up on t (BFS, t is an obstacle).
        self.approach = [self._distances(t) for t in range(self.size)]
        # Observation features that depend only on the cell, per seat frame, precomputed so
        # that `step` only fills numbers in.
        self.cell_features = [
            [self._cell_features(x, seat) for x in range(self.size)] for seat in range(2)
        ]

    def _step(self, x: int, d: int) -> int:
        r, c = divmod(x, self.width)
        r, c = r + _DELTAS[d][0], c + _DELTAS[d][1]
        if not (0 <= r < self.height and 0 <= c < self.width):
            return -1
        y = r * self.width + c
        return -1 if y in self.walls else y

    def _ray(self, x: int, d: int, shot_range: int) -> tuple[int, ...]:
        cells = []
        for _ in range(shot_range):
            x = self._step(x, d)
            if x < 0:
                break
            cells.append(x)
        return tuple(cells)

    def _distances(self, target: int) -> tuple[int, ...]:
        far = 10 * self.size
        dist = [far] * self.size
        queue: deque[int] = deque()
        for x in self.lined_up[target]:
            dist[x] = 0
            queue.append(x)
        while queue:
            x = queue.popleft()
            for y in self.neighbour[x]:
                if y >= 0 and y != target and dist[y] > dist[x] + 1:
                    dist[y] = dist[x] + 1
                    queue.append(y)
        return tuple(dist)

    def _cell_features(self, x: int, seat: int) -> tuple[float, ...]:
        """(row, col) in [-1, 1] and the 4 neighbours blocked, in seat `seat`'s frame."""
        seen = self.mirror(x) if seat else x
        r, c = divmod(seen, self.width)
        blocked = [float(self._step(seen, d) < 0) for d in range(4)]
        return (2.0 * r / (self.height - 1) - 1.0, 2.0 * c / (self.width - 1) - 1.0, *blocked)

    def mirror(self, x: int) -> int:
        return self.size - 1 - x


@functools.lru_cache(maxsize=8)
def _arena(layout: tuple[str, ...], shot_range: int) -> _Arena:
    return _Arena(layout, shot_range)


def _check_layout(layout: Sequence[str]) -> tuple[str, ...]:
    layout = tuple(layout)
    if len(layout) < 3 or any(len(row) != len(layout[0]) for row in layout):
        raise ValueError("layout must be at least 3 rows of equal length")
    if any(ch not in ".#" for row in layout for ch in row):
        raise ValueError("layout may only hold '.' (floor) and '#' (wall)")
    turned = tuple(row[::-1] for row in reversed(layout))
    if turned != layout:
        # Seat 1 plays in the turned frame; an asymmetric arena would favour one seat.
        raise ValueError("layout must be point-symmetric (equal to itself turned 180 degrees)")
    return layout


class DuelEnv(MultiAgentEnv):
    """Two agents duel on a grid; see the module docstring for the rules.

    Observation of a seat (float32, 24 values, in that seat's frame, all in [-1, 1]):
    own (row, col) scaled; opponent (row, col) minus own, divided by the arena size; own and
    opponent health fractions; own facing one-hot (up, down, left, right); opponent facing
    one-hot; own and opponent cooldown fractions; opponent in my line of fire; me in the
    opponent's line of fire; lined up (some direction has a clear shot at the opponent); own
    4 neighbours blocked by wall or edge; fraction of the time limit left.

    Rewards per seat: +1 win, -1 loss, 0 draw, plus the seat's shaping coefficients ``hit``
    (per shot landed) and ``hurt`` (per shot taken). ``infos[i]["win"]`` on the last step.
    """

    num_agents = 2
    reward_shaping_defaults = {"hit": 0.1, "hurt": -0.1}

    def __init__(
        self,
        *,
        layout: Sequence[str] = DEFAULT_LAYOUT,
        health: int = DEFAULT_HEALTH,
        shot_range: int = DEFAULT_SHOT_RANGE,
        cooldown: int = DEFAULT_COOLDOWN,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        if health < 1 or shot_range < 1 or cooldown < 1 or max_steps < 1:
            raise ValueError("health, shot_range, cooldown and max_steps must all be >= 1")
        self.arena = _arena(_check_layout(layout), int(shot_range))
        self.max_health = int(health)
        self.cooldown = int(cooldown)
        self.max_steps = int(max_steps)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(OBS_SIZE,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(NUM_ACTIONS)
        self._rng = np.random.default_rng()
        self._starts = self._start_cells()
        # World-frame state, plain Python ints: NumPy scalars would make each step slower.
        self.positions = [0, 0]
        self.facings = [D_DOWN, D_UP]
        self.health = [self.max_health] * 2
        self.cooldowns = [0, 0]
        self.steps = 0
        self._over = True
        self._last_obs: list[np.ndarray] = [self.observation_space.low.copy()] * 2

    # --- MultiAgentEnv --------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> tuple[list[np.ndarray], list[dict[str, Any]]]:
        """New match: random start cells (seat 0 near the top, seat 1 near the bottom) and
        facings; `seed` restarts the env's random stream, None continues it."""
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        starts = self._starts
        first, second = self._rng.integers(len(starts), size=2)
        facing = self._rng.integers(4, size=2)
        self.set_state(
            positions=(starts[first], self.arena.mirror(starts[second])),
            facings=(int(facing[0]), int(facing[1])),
        )
        return self._last_obs, [{}, {}]

    def step(self, actions: Sequence[Any]) -> MultiAgentStep:
        """Apply both seats' actions (in their own frames) at once: shots, then moves."""
        if self._over:
            # The runtime resets after the episode; until then report the finished state.
            return (
                self._last_obs,
                np.zeros(2),
                np.ones(2, dtype=bool),
                np.ones(2, dtype=bool),
                [{}, {}],
            )
        world = [self._world_action(seat, actions[seat]) for seat in (0, 1)]
        hits = self._shoot(world)
        if hits[0] or hits[1]:
            self.health[1] -= hits[0]
            self.health[0] -= hits[1]
        dead = (self.health[0] <= 0, self.health[1] <= 0)
        if not (dead[0] or dead[1]):
            self._move(world)
        for seat in (0, 1):
            if self.cooldowns[seat] > 0:
                self.cooldowns[seat] -= 1
        self.steps += 1
        return self._outcome(hits, dead)

    # --- state access (the bot, tests and scenarios) --------------------------------------------
    def set_state(
        self,
        *,
        positions: Sequence[int],
        facings: Sequence[int],
        health: Sequence[int] | None = None,
        cooldowns: Sequence[int] | None = None,
        steps: int = 0,
    ) -> list[np.ndarray]:
        """Put the match in a given state (world frame: cells ``row * width + col``, facing
        0 up, 1 down, 2 left, 3 right); returns the observations of both seats."""
        positions = [int(p) for p in positions]
        if positions[0] == positions[1] or any(p not in self.arena.free for p in positions):
            raise ValueError(f"positions {positions} must be two different free cells")
        self.positions = positions
        self.facings = [int(f) for f in facings]
        self.health = [int(h) for h in health] if health is not None else [self.max_health] * 2
        self.cooldowns = [int(c) for c in cooldowns] if cooldowns is not None else [0, 0]
        self.steps = int(steps)
        self._over = False
        self._last_obs = [self._observe(0), self._observe(1)]
        return self._last_obs

    def cell(self, row: int, col: int) -> int:
        """The cell index of (row, col) in the world frame (seat 0's frame)."""
        return row * self.arena.width + col

    def in_line_of_fire(self, shooter: int) -> bool:
        """Would a shot of seat `shooter` hit the opponent now (cooldown aside)?"""
        ray = self.arena.ray_set[self.positions[shooter]][self.facings[shooter]]
        return self.positions[1 - shooter] in ray

    def render_text(self) -> str:
        """The arena as text (world frame): 'A'/'B' are seats 0/1, arrows in `facing` order."""
        arrows = "^v<>"
        grid = [list(row) for row in _layout_rows(self.arena)]
        for seat, mark in ((0, "A"), (1, "B")):
            r, c = divmod(self.positions[seat], self.arena.width)
            grid[r][c] = mark
        lines = ["".join(row) for row in grid]
        status = " ".join(
            f"{mark}{arrows[self.facings[s]]} hp={self.health[s]} cd={self.cooldowns[s]}"
            for s, mark in ((0, "A"), (1, "B"))
        )
        return "\n".join(lines + [f"t={self.steps} {status}"])

    # --- rules ----------------------------------------------------------------------------------
    def _world_action(self, seat: int, action: Any) -> int:
        a = int(action)
        if not 0 <= a < NUM_ACTIONS:
            raise ValueError(f"action {action!r} of seat {seat} is not in 0..{NUM_ACTIONS - 1}")
        return _MIRROR_ACTION[a] if seat else a

    def _shoot(self, world: list[int]) -> tuple[int, int]:
        # Both shots are decided from the positions at the start of the turn, so the order of
        # the seats does not matter and both can hit each other in the same turn.
        hits = [0, 0]
        for seat in (0, 1):
            if world[seat] == SHOOT and self.cooldowns[seat] == 0:
                # +1 because every cooldown is decremented at the end of this very turn.
                self.cooldowns[seat] = self.cooldown + 1
                hits[seat] = int(self.in_line_of_fire(seat))
        return hits[0], hits[1]

    def _move(self, world: list[int]) -> None:
        targets = list(self.positions)
        for seat in (0, 1):
            a = world[seat]
            if UP <= a <= RIGHT:
                direction = a - UP
                self.facings[seat] = direction  # turning happens even when the step is blocked
                nxt = self.arena.neighbour[self.positions[seat]][direction]
                if nxt >= 0:
                    targets[seat] = nxt
        # Nobody enters the other's cell or the cell the other enters (no swaps, no stacking),
        # which treats both seats alike.
        moved = [
            targets[s] != self.positions[s]
            and targets[s] != self.positions[1 - s]
            and targets[s] != targets[1 - s]
            for s in (0, 1)
        ]
        for seat in (0, 1):
            if moved[seat]:
                self.positions[seat] = targets[seat]

    def _outcome(self, hits: tuple[int, int], dead: tuple[bool, bool]) -> MultiAgentStep:
        rewards = np.zeros(2)
        for seat in (0, 1):
            dealt, taken = hits[seat], hits[1 - seat]
            if dealt or taken:
                shaping = self.reward_shaping(seat)
                rewards[seat] += shaping["hit"] * dealt + shaping["hurt"] * taken
        terminated = dead[0] or dead[1]
        truncated = not terminated and self.steps >= self.max_steps
        infos: list[dict[str, Any]] = [{}, {}]
        if terminated or truncated:
            self._over = True
            # Both dead in the same turn, or time out: a draw.
            score0 = 0.5 if dead[0] == dead[1] else float(dead[1])
            for seat, score in ((0, score0), (1, 1.0 - score0)):
                infos[seat]["win"] = score
                rewards[seat] += 2.0 * score - 1.0
        self._last_obs = [self._observe(0), self._observe(1)]
        done_t = np.full(2, terminated)
        done_tr = np.full(2, truncated)
        return self._last_obs, rewards, done_t, done_tr, infos

    def _observe(self, seat: int) -> np.ndarray:
        arena, other = self.arena, 1 - seat
        me, op = self.positions[seat], self.positions[other]
        my_facing, op_facing = self.facings[seat], self.facings[other]
        features = arena.cell_features[seat][me]
        if seat:  # seat 1 sees the arena turned 180 degrees
            me, op = arena.mirror(me), arena.mirror(op)
            my_facing, op_facing = _OPPOSITE_DIR[my_facing], _OPPOSITE_DIR[op_facing]
        my_r, my_c = divmod(me, arena.width)
        op_r, op_c = divmod(op, arena.width)
        obs = np.zeros(OBS_SIZE, dtype=np.float32)
        obs[0], obs[1] = features[0], features[1]
        obs[2] = (op_r - my_r) / (arena.height - 1)
        obs[3] = (op_c - my_c) / (arena.width - 1)
        obs[4] = max(self.health[seat], 0) / self.max_health
        obs[5] = max(self.health[other], 0) / self.max_health
        obs[6 + my_facing] = 1.0
        obs[10 + op_facing] = 1.0
        obs[14] = self.cooldowns[seat] / self.cooldown
        obs[15] = self.cooldowns[other] / self.cooldown
        obs[16] = self.in_line_of_fire(seat)
        obs[17] = self.in_line_of_fire(other)
        obs[18] = self.positions[seat] in arena.lined_up[self.positions[other]]
        obs[19:23] = features[2:]
        obs[23] = 1.0 - self.steps / self.max_steps
        return obs

    def _start_cells(self) -> list[int]:
        rows = min(START_ROWS, self.arena.height // 2)
        return [x for x in self.arena.free if x < rows * self.arena.width]


def _layout_rows(arena: _Arena) -> list[str]:
    return [
        "".join("#" if r * arena.width + c in arena.walls else "." for c in range(arena.width))
        for r in range(arena.height)
    ]


class ScriptedDuelBot:
    """An opponent of fixed skill: with probability `skill` it plays a simple plan, otherwise
    a uniformly random action.

    The plan: shoot when the opponent is in the line of fire (wait aiming while cooling down);
    when lined up with a clear shot but facing elsewhere, step towards the opponent (which turns
    it); otherwise take a shortest path to the nearest cell lined up with the opponent. It never
    dodges, which a learner can exploit. Deterministic given its Generator.
    """

    def __init__(
        self, skill: float = DEFAULT_BOT_SKILL, rng: np.random.Generator | None = None
    ) -> None:
        if not 0.0 <= skill <= 1.0:
            raise ValueError(f"skill must be in [0, 1], got {skill}")
        self.skill = float(skill)
        self.rng = rng if rng is not None else np.random.default_rng()

    def act(self, env: DuelEnv, seat: int) -> int:
        """The action of seat `seat` in `env`'s current state, in that seat's frame."""
        if self.skill < 1.0 and self.rng.random() >= self.skill:
            return int(self.rng.integers(NUM_ACTIONS))
        world = self.plan(env, seat)
        return _MIRROR_ACTION[world] if seat else world

    @staticmethod
    def plan(env: DuelEnv, seat: int) -> int:
        """The planned action of seat `seat`, in the world frame."""
        arena = env.arena
        me, op = env.positions[seat], env.positions[1 - seat]
        if env.in_line_of_fire(seat):
            return SHOOT if env.cooldowns[seat] == 0 else NOOP
        if me in arena.lined_up[op]:
            # Lined up facing elsewhere: step towards the opponent (turning); the step keeps
            # the line, or is blocked by the opponent and only turns.
            return UP + _direction_towards(arena.width, me, op)
        dist = arena.approach[op]
        best, best_dist = NOOP, dist[me]
        for direction, nxt in enumerate(arena.neighbour[me]):
            if nxt >= 0 and nxt != op and dist[nxt] < best_dist:
                best, best_dist = UP + direction, dist[nxt]
        return best


def _direction_towards(width: int, source: int, target: int) -> int:
    """Direction from `source` to `target`, which share a row or a column."""
    (sr, sc), (tr, tc) = divmod(source, width), divmod(target, width)
    if sc == tc:
        return D_DOWN if tr > sr else D_UP
    return D_RIGHT if tc > sc else D_LEFT


class DuelVsBotEnv(gym.Env):
    """The duel as a single-agent gymnasium env: the agent plays seat 0, a `ScriptedDuelBot`
    seat 1.

    The game is the same from both seats (seat 1 plays in the turned frame), so the agent needs
    no seat swapping. Reward is seat 0's (win/loss +-1 plus shaping); ``info["win"]`` (1.0 win,
    0.5 draw, 0.0 loss) is set on the last step, for evaluation against the bot.
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        *,
        bot_skill: float = DEFAULT_BOT_SKILL,
        render_mode: str | None = None,
        **duel_kwargs: Any,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} not in {self.metadata['render_modes']}")
        self.render_mode = render_mode
        self.duel = DuelEnv(**duel_kwargs)
        self.bot = ScriptedDuelBot(bot_skill)
        self.observation_space = self.duel.observation_space
        self.action_space = self.duel.action_space

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is not None:
            # Separate streams for the game and the bot, both fixed by the one seed.
            game_seq, bot_seq = np.random.SeedSequence(seed).spawn(2)
            self.bot.rng = np.random.default_rng(bot_seq)
            observations, _ = self.duel.reset(seed=int(game_seq.generate_state(1)[0]))
        else:
            observations, _ = self.duel.reset()
        return observations[0], {}

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        bot_action = self.bot.act(self.duel, 1)
        observations, rewards, terminated, truncated, infos = self.duel.step((action, bot_action))
        return (
            observations[0],
            float(rewards[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            infos[0],
        )

    def render(self) -> str | None:
        return self.duel.render_text() if self.render_mode == "ansi" else None


def make_duel(context: EnvContext) -> DuelEnv:
    """Factory of the two-player game (register it with ``multi_agent=True``)."""
    del context  # seeding happens through reset(seed=...), which the runtime calls
    return DuelEnv()


def make_duel_vs_bot(context: EnvContext) -> gym.Env:
    """Factory of the single-agent game against `ScriptedDuelBot`."""
    return DuelVsBotEnv(render_mode=context.render_mode)
