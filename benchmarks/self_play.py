"""Self-play on the built-in duel: a population trains against itself, measured against a bot.

A population of `--num_policies` policies (with PBT unless `--no_pbt`) trains on `duel`, where
both seats are played by policies of the population (and, with `--num_frozen_opponents`, by
frozen snapshots of them). The scripted bot is never seen in training. Every `--eval_every`
env steps each policy plays 100 matches against `duel_vs_bot`'s bot; the win rates go to a CSV
and a PNG plot (win rate over env steps, one line per policy, random policy's for reference).

    python benchmarks/self_play.py --env_steps 3000000 --out docs/self_play
"""

from __future__ import annotations

import argparse
import csv
import time
from pathlib import Path

from sampleforge import APPO
from sampleforge.envs import env_info, resolve_env
from sampleforge.evaluation import LocalPolicy
from sampleforge.evaluation.matches import play_matches


def win_rates(algo: APPO, matches: int) -> dict[int, float]:
    """Each policy's share of wins in `matches` matches against the duel's scripted bot."""
    bot, info = resolve_env("duel_vs_bot"), env_info("duel_vs_bot")
    out = {}
    for p, weights in algo.get_parameters().items():
        policy = LocalPolicy.build(
            algo.cfg, info.observation_space, info.action_space, state_dict=weights
        )
        out[p] = play_matches(policy, bot, matches=matches, seed=1000).wins
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--env_steps", type=int, default=3_000_000)
    parser.add_argument("--eval_every", type=int, default=250_000)
    parser.add_argument("--num_policies", type=int, default=4)
    parser.add_argument("--num_frozen_opponents", type=int, default=2)
    parser.add_argument("--no_pbt", action="store_true")
    parser.add_argument("--matches", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--serial_mode",
        action="store_true",
        help="all components in one process (fastest on 2 cores)",
    )
    parser.add_argument("--out", default="self_play", help="CSV and PNG path, without suffix")
    parser.add_argument("--train_dir", default="train_dir")
    args = parser.parse_args()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    algo = APPO(
        "duel",
        num_policies=args.num_policies,
        with_pbt=not args.no_pbt,
        pbt_period_env_steps=max(args.eval_every, 100_000),
        num_frozen_opponents=args.num_frozen_opponents,
        seed=args.seed,
        serial_mode=args.serial_mode,
        device="cpu",
        train_dir=args.train_dir,
        preset="duel",
    )
    started = time.monotonic()
    with algo:
        while algo.env_steps < args.env_steps:
            if algo.train(args.eval_every).stopped_because == "interrupted":
                break  # Ctrl-C / SIGTERM: keep what was measured so far
            rates = win_rates(algo, args.matches)
            row = {
                "env_steps": algo.env_steps,
                "seconds": round(time.monotonic() - started, 1),
                **{f"policy_{p}": r for p, r in rates.items()},
            }
            rows.append(row)
            print(row, flush=True)
    if not rows:
        return
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    _plot(rows, out.with_suffix(".png"), args.num_policies)
    print(f"wrote {out.with_suffix('.csv')} and {out.with_suffix('.png')}")


def _plot(rows, path: Path, num_policies: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    steps = [r["env_steps"] / 1e6 for r in rows]
    for p in range(num_policies):
        ax.plot(steps, [100 * r[f"policy_{p}"] for r in rows], marker="o", label=f"policy {p}")
    ax.axhline(80, color="gray", linestyle="--", linewidth=1, label="80% target")
    ax.axhline(0.25, color="black", linestyle=":", linewidth=1, label="random policy (0.25%)")
    ax.set_xlabel("env steps (millions, both seats)")
    ax.set_ylabel("wins vs scripted bot (%)")
    ax.set_ylim(0, 100)
    ax.set_title("Self-play on duel: win rate against a bot never seen in training")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
