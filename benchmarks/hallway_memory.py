"""Memory vs no memory on the Hallway scene (ML-Agents' Hallway: the symbol is seen only near the start).

Each (policy, seed) trains through ``UnityVecEnv`` on an embedded Hallway (8 hallways) and records,
over the episodes that end in the last 20% of training, the success rate (the right goal touched:
the episode return is > 0 exactly then, since the step costs of an episode sum to less than 1 and
the wrong goal gives -0.1), the same per shown symbol (``SymbolTally``), and the mean return.
``memory`` is sb3-contrib's ``RecurrentPPO`` (an LSTM, what ML-Agents' ``network_settings.memory``
maps to today); ``no_memory`` is
``unity_sb3.PPO`` with the same layers, rollout and optimisation settings; ``ppo_memory`` is the
project's ``unity_sb3.RecurrentPPO`` (ML-Agents' memory_size 128, sequence_length 64); ``sac_memory`` and
``sac_no_memory`` are ``unity_sb3.SAC`` with and without memory at Unity's config/sac/Hallway.yaml
settings (:data:`SAC_SETTINGS`; ``--set`` replaces them for those policies). A policy without memory
can still reach the goals but, there, cannot tell which one is right: 50% is its ceiling unless it
carries the symbol in where it walks.

    python benchmarks/hallway_memory.py                          # 3 seeds x 2 policies
    python benchmarks/hallway_memory.py --steps 50000 --seeds 0 --policies memory
    # the shipped ppo_memory settings (unity_sb3/config/hyperparams/ppo_memory.yml) against PPO:
    python benchmarks/hallway_memory.py --policies ppo_memory no_memory --steps 300000 \
        --move-step 3 --max-steps 600 --fixed-goals --jobs 2 \
        --set batch_size=128 n_epochs=3 ent_coef=0.03 "net_arch=[128,128]"

``--move-step`` sets the kinematic scene's pace (units per forward decision; the benchmark's
default 2.0; Unity's rigid body, ``--motion rigid_body``, walks ~3.7 once up to speed) and
``--max-steps`` the episodes (Unity's 3000, the benchmark 1200: 200 decisions, the expert needs
about 30) so that runs fit a small budget; ``--fixed-goals`` keeps the
goals on their sides (the scene's ``shuffle_goals=False``: a T-maze, the symbol alone names the
side; Unity shuffles them, so the policy must match the remembered symbol to the goal it sees);
``--set`` replaces training settings of every policy (``net_arch``, ``activation_fn`` (tanh, silu,
relu) and ``time_horizon`` for ``ppo_memory`` and ``no_memory``; ``memory_size``,
``sequence_length`` and ``post_memory_arch`` for ``ppo_memory``; ``lin_<start>_<end>`` makes
``learning_rate``, ``clip_range`` or ``ent_coef`` a linear schedule over the run, as ML-Agents' over
``max_steps``).
Unity's config/ppo/Hallway.yaml in full at its 10M budget:

    python benchmarks/hallway_memory.py --policies ppo_memory --seeds 0 --steps 10000000 \
        --move-step 3 --max-steps 600 --window 100000 --progress --set batch_size=128 n_epochs=3 \
        "net_arch=[128,128]" activation_fn=silu time_horizon=64 learning_rate=lin_3e-4_1e-10 \
        clip_range=lin_0.2_0.1 ent_coef=lin_0.03_1e-5

Writes ``benchmarks/results/<--name>.json`` (default ``hallway_memory``); ``--progress`` prints each
run's success per ``--window`` as training goes (overall, per shown symbol, and how often the rays
saw the symbol), so a run cut short still leaves its curve in the log.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
import yaml
from sb3_contrib import RecurrentPPO as ContribRecurrentPPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecMonitor

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table, write_results
from _curves import EpisodeRecorder, run_tasks, windowed_mean

from unity_sb3 import PPO, SAC, RecurrentPPO, UnityVecEnv
from unity_sb3.config.model_args import resolve_schedule
from unity_sb3.scenes import make_scene
from unity_sb3.scenes.hallway import MOTIONS, RAY_ANGLES, RAY_FEATURES, SYMBOL_O, SYMBOL_X

POLICIES = ("memory", "no_memory", "ppo_memory", "sac_memory", "sac_no_memory")
#: ``--set activation_fn=...`` of the dense layers (SB3's default tanh; ML-Agents' network body: silu)
ACTIVATIONS: dict[str, type[th.nn.Module]] = {"tanh": th.nn.Tanh, "silu": th.nn.SiLU, "relu": th.nn.ReLU}
#: shared by both policies (the shipped ``unity_sb3/Hallway-v0`` entry of recurrent_ppo.yml)
SETTINGS: dict[str, Any] = {
    "n_steps": 128,
    "batch_size": 256,
    "n_epochs": 4,
    "learning_rate": 3e-4,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ent_coef": 0.01,
}


#: ``sac_memory`` / ``sac_no_memory``: Unity's config/sac/Hallway.yaml as the project's ML-Agents mapping
#: gives it on 8 slots (steps_per_update 10 -> one gradient step per VecEnv step of 8 agent-steps;
#: init_entcoef 0.1 -> a learned coefficient from 0.1); hidden layers 2 x 128, memory 128 / 64
SAC_SETTINGS: dict[str, Any] = {
    "learning_rate": 3e-4,
    "batch_size": 512,
    "buffer_size": 200_000,
    "learning_starts": 0,
    "tau": 0.005,
    "gamma": 0.99,
    "ent_coef": "auto_0.1",
    "train_freq": 1,
    "gradient_steps": 1,
    "net_arch": [128, 128],
}


def make_model(
    policy: str, env, seed: int, settings: dict[str, Any] | None = None
) -> ContribRecurrentPPO | RecurrentPPO | PPO | SAC:
    """sb3-contrib's ``RecurrentPPO`` (LSTM of 64 after a 128 layer), the project's ``RecurrentPPO``
    (ML-Agents' memory: 128 floats, sequences of 64) or ``PPO``, with the same settings.

    :param settings: replaces :data:`SETTINGS` (``memory_size`` / ``sequence_length`` apply to
        ``ppo_memory`` only, ``net_arch`` to ``ppo_memory`` and ``no_memory``).
    """
    settings = dict(SETTINGS if settings is None else settings)
    memory = {
        "memory_size": settings.pop("memory_size", 128),
        "sequence_length": settings.pop("sequence_length", 64),
    }
    net_arch = settings.pop("net_arch", None)
    activation = ACTIVATIONS[settings.pop("activation_fn", "tanh")]
    post_memory_arch = settings.pop("post_memory_arch", None)
    if policy in ("sac_memory", "sac_no_memory"):
        sac_kwargs: dict[str, Any] = {"activation_fn": activation, "net_arch": net_arch or [128, 128]}
        if policy == "sac_memory":
            sac_kwargs.update(memory)
        name = "MultiInputLstmPolicy" if policy == "sac_memory" else "MultiInputPolicy"
        return SAC(name, env, seed=seed, policy_kwargs=sac_kwargs, **settings)
    if policy == "ppo_memory":
        policy_kwargs: dict[str, Any] = {"activation_fn": activation}
        if net_arch is not None:
            policy_kwargs["net_arch"] = net_arch
        if post_memory_arch is not None:
            policy_kwargs["post_memory_arch"] = post_memory_arch
        return RecurrentPPO(
            "MultiInputLstmPolicy", env, seed=seed, **memory, policy_kwargs=policy_kwargs, **settings
        )
    if policy == "memory":
        return ContribRecurrentPPO(
            "MultiInputLstmPolicy",
            env,
            seed=seed,
            policy_kwargs={"net_arch": [128], "lstm_hidden_size": 64},
            **settings,
        )
    arch = [128, 64] if net_arch is None else net_arch
    return PPO(
        "MultiInputPolicy",
        env,
        seed=seed,
        policy_kwargs={"net_arch": arch, "activation_fn": activation},
        **settings,
    )


def hallway_scene(seed: int, motion: str, move_step: float, **params: Any) -> Any:
    """An in-process Hallway; ``move_step`` is passed only to the kinematic motion (the rigid body
    has Unity's pace and refuses it)."""
    pace = {"move_step": move_step} if motion == "kinematic" else {}
    return make_scene("Hallway", seed=seed, motion=motion, **pace, **params)


def hook_scene(scene: Any, observed: Any, began: Any, ending: Any) -> None:
    """Benchmark instrumentation on the in-process Hallway scene: ``observed(idx, rays)`` after each
    observation (rays ``(len(idx), rays, features)``), ``began(idx)`` after each episode start and
    ``ending(idx)`` before each episode end, while the scene's state still describes the episode."""
    frame, begin, end = scene._frame, scene._on_episode_begin, scene._on_episode_end

    def on_frame(idx: np.ndarray) -> list[np.ndarray]:
        obs = frame(idx)  # this decision's sensors, before stacking
        observed(idx, obs[0].reshape(len(idx), len(RAY_ANGLES), RAY_FEATURES))
        return obs

    def on_episode_begin(idx: np.ndarray) -> None:
        begin(idx)
        began(idx)

    def on_episode_end(idx: np.ndarray, interrupted: np.ndarray) -> None:
        ending(idx)
        end(idx, interrupted)

    scene._frame, scene._on_episode_begin = on_frame, on_episode_begin
    scene._on_episode_end = on_episode_end


class SymbolTally:
    """Which symbol each ended episode showed, whether the rays ever saw it, and whether the episode
    ended at the right goal (:func:`hook_scene`, reading the scene's ``_selection`` / ``_right``): a
    plateau near 0.75 may be one symbol solved and the other guessed, which the overall success rate
    cannot tell apart, and a symbol the policy's path never shows cannot be remembered.

    :param scene: the embedded Hallway scene.
    :param clock: the current training step (read at each episode end).
    """

    SYMBOLS = ("O", "X")  # the scene's selection 0 and 1

    def __init__(self, scene: Any, clock: Any) -> None:
        self.ends: list[tuple[int, int, bool, bool]] = []  # (training step, symbol, right goal, seen)
        self.seen = np.zeros(scene.num_agents, dtype=bool)  # the shown symbol was in a ray this episode

        def observed(idx: np.ndarray, rays: np.ndarray) -> None:
            self.seen[idx] |= rays[:, :, [SYMBOL_O, SYMBOL_X]].any(axis=(1, 2))

        def began(idx: np.ndarray) -> None:
            self.seen[idx] = False

        def ending(idx: np.ndarray) -> None:
            step = clock()
            for symbol, right, seen in zip(
                scene._selection[idx].tolist(), scene._right[idx].tolist(), self.seen[idx].tolist()
            ):
                self.ends.append((step, symbol, right, seen))

        hook_scene(scene, observed, began, ending)

    def success_after(self, step: int) -> dict[str, float]:
        """Success rate (and ``<symbol> seen``: share of episodes whose rays saw the symbol) per shown
        symbol over the episodes that ended after ``step``."""
        return self.success_between(step, float("inf"))

    def success_between(self, low: float, high: float) -> dict[str, float]:
        """As :meth:`success_after`, over the episodes that ended in steps ``(low, high]``."""
        out = {}
        for k, name in enumerate(self.SYMBOLS):
            mine = [(right, seen) for t, symbol, right, seen in self.ends if low < t <= high and symbol == k]
            out[name] = float(np.mean([r for r, _ in mine])) if mine else float("nan")
            out[f"{name} seen"] = float(np.mean([s for _, s in mine])) if mine else float("nan")
        return out


class WindowPrinter(BaseCallback):
    """Prints the success rate (return > 0) of the episodes that ended in each ``window`` of steps."""

    def __init__(
        self, recorder: EpisodeRecorder, window: int, label: str, symbols: SymbolTally | None = None
    ) -> None:
        super().__init__()
        self.recorder, self.window, self.label, self.symbols = recorder, window, label, symbols
        self.printed = 0  # windows printed so far
        self.start = time.perf_counter()

    def _on_step(self) -> bool:
        while self.num_timesteps >= (self.printed + 1) * self.window:
            low, high = self.printed * self.window, (self.printed + 1) * self.window
            inside = [r for t, r in self.recorder.episodes if low < t <= high]
            success = float(np.mean([r > 0 for r in inside])) if inside else float("nan")
            by_symbol = ""
            if self.symbols is not None:
                shown = self.symbols.success_between(low, high)
                by_symbol = " (" + ", ".join(f"{k} {v:.2f}" for k, v in shown.items()) + ")"
            print(
                f"{self.label} {high}: success {success:.2f}{by_symbol} over {len(inside)} episodes "
                f"({time.perf_counter() - self.start:.0f} s)",
                flush=True,
            )
            self.printed += 1
        return True


def run(
    policy: str,
    seed: int,
    steps: int,
    move_step: float,
    max_steps: int,
    window: int,
    num_agents: int = 8,
    settings: dict[str, Any] | None = None,
    shuffle_goals: bool = True,
    progress: bool = False,
    save_dir: str | None = None,
    observation_stacks: int = 1,
    motion: str = "kinematic",
) -> dict[str, Any]:
    th.set_num_threads(1)
    scene = hallway_scene(
        seed,
        motion,
        move_step,
        max_steps=max_steps,
        num_agents=num_agents,
        shuffle_goals=shuffle_goals,
        observation_stacks=observation_stacks,
    )
    env = VecMonitor(UnityVecEnv(scene))
    model = make_model(policy, env, seed, settings)
    symbols = SymbolTally(scene, lambda: model.num_timesteps)
    recorder = EpisodeRecorder()
    start = time.perf_counter()
    callbacks: list[BaseCallback] = [recorder]
    if progress:
        callbacks.append(WindowPrinter(recorder, window, f"{policy} seed {seed}", symbols))
    model.learn(steps, callback=callbacks)
    elapsed = time.perf_counter() - start
    if save_dir is not None:  # for looking at what the policy does afterwards
        model.save(Path(save_dir) / f"{policy}_seed{seed}")
    env.close()
    tail = [r for t, r in recorder.episodes if t > 0.8 * steps]
    successes = [(t, float(r > 0)) for t, r in recorder.episodes]
    return {
        "policy": policy,
        "seed": seed,
        "steps": steps,
        "episodes": len(recorder.episodes),
        "success_rate": float(np.mean([r > 0 for r in tail])) if tail else float("nan"),
        "success_by_symbol": symbols.success_after(int(0.8 * steps)),
        "final_return": float(np.mean(tail)) if tail else float("nan"),
        "success_curve": windowed_mean(successes, steps, window),
        "seconds": round(elapsed, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=50_000, help="training steps per run (all agents)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--policies", nargs="+", default=["memory", "no_memory"], choices=POLICIES)
    parser.add_argument("--move-step", type=float, default=2.0, help="Hallway move_step (units per decision)")
    parser.add_argument(
        "--max-steps", type=int, default=1200, help="Hallway max_steps (academy steps; Unity: 3000)"
    )
    parser.add_argument(
        "--fixed-goals",
        action="store_true",
        help="Hallway shuffle_goals=False: symbol_O_Goal always on the right (a T-maze; Unity shuffles)",
    )
    parser.add_argument(
        "--num-agents", type=int, default=8, help="Hallway num_agents (hallways, one agent each)"
    )
    parser.add_argument(
        "--stacks",
        type=int,
        default=1,
        help="Hallway observation_stacks (default 1: single frames, as every run in RESULTS.md before "
        "2026-11-27 21:00 UTC; the prefab and the scene's default stack 3)",
    )
    parser.add_argument(
        "--motion",
        choices=MOTIONS,
        default="kinematic",
        help="Hallway motion (default kinematic, with --move-step: every run in RESULTS.md before "
        "2026-11-28; rigid_body is Unity's physics and pace, the scene's default, and ignores --move-step)",
    )
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="override a training setting of every policy (YAML values), e.g. n_epochs=8 net_arch=[64,64] "
        "memory_size=64 activation_fn=silu time_horizon=64 post_memory_arch=[128] (memory_size, "
        "sequence_length, post_memory_arch: ppo_memory only; activation_fn and time_horizon: ppo_memory "
        "and no_memory)",
    )
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (one CPU thread each)")
    parser.add_argument("--window", type=int, default=10_000, help="steps per point of the curve")
    parser.add_argument(
        "--progress", action="store_true", help="print each run's success per --window while it trains"
    )
    parser.add_argument("--name", default="hallway_memory", help="stem of the results JSON")
    parser.add_argument("--save-dir", help="save each trained model there as <policy>_seed<seed>.zip")
    args = parser.parse_args(argv)

    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            parser.error(f"--set takes KEY=VALUE, got {item!r}")
        # "lin_<start>_<end>" (learning_rate, clip_range, ent_coef): ML-Agents' linear schedules
        overrides[key] = resolve_schedule(yaml.safe_load(value))
    if overrides.get("activation_fn", "tanh") not in ACTIVATIONS:
        parser.error(
            f"--set activation_fn takes one of {', '.join(ACTIVATIONS)}, got {overrides['activation_fn']!r}"
        )

    def settings_of(policy: str) -> dict[str, Any]:
        return {**(SAC_SETTINGS if policy.startswith("sac") else SETTINGS), **overrides}

    settings = settings_of(args.policies[0])  # the first policy's, as the summary reports them
    tasks = [
        (
            p,
            seed,
            args.steps,
            args.move_step,
            args.max_steps,
            args.window,
            args.num_agents,
            settings_of(p),
            not args.fixed_goals,
            args.progress,
            args.save_dir,
            args.stacks,
            args.motion,
        )
        for p in args.policies
        for seed in args.seeds
    ]
    rows = run_tasks(run, tasks, args.jobs)
    for row in rows:
        print(
            f"{row['policy']:>9} seed {row['seed']}: success {row['success_rate']:.2f} (symbol "
            + ", ".join(f"{k} {v:.2f}" for k, v in row["success_by_symbol"].items())
            + f"), return {row['final_return']:.2f} ({row['episodes']} episodes, {row['seconds']} s)",
            flush=True,
        )
    summary = []
    for policy in args.policies:
        mine = [r for r in rows if r["policy"] == policy]
        success = [r["success_rate"] for r in mine]
        summary.append(
            {
                "policy": policy,
                "seeds": len(mine),
                "success rate (mean)": float(np.mean(success)),
                "min": float(np.min(success)),
                "max": float(np.max(success)),
                "return (mean)": float(np.mean([r["final_return"] for r in mine])),
                "seconds per run": float(np.mean([r["seconds"] for r in mine])),
            }
        )
    print_table(
        summary,
        ["policy", "seeds", "success rate (mean)", "min", "max", "return (mean)", "seconds per run"],
        title=f"Hallway (motion {args.motion}, move_step {args.move_step}, max_steps {args.max_steps}, shuffle_goals "
        f"{not args.fixed_goals}, observation_stacks {args.stacks}), {args.steps} steps per run, "
        f"settings {settings}; success = right goal, "
        "over the episodes of the last 20% of training",
    )
    path = write_results(args.name, rows, summary=summary, settings=vars(args))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
