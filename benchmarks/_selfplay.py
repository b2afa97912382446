"""Shared pieces of the self-play benchmarks: the ELO over training, an earlier policy, games on both sides.

Games are played by the library (:func:`unity_sb3.selfplay.matches.play_matches`, as ``unity-sb3 eval
--opponent`` plays them): a game is won or lost as ML-Agents' ghost trainer reads it, by the sign of
the player's final reward plus its group reward (an interrupted game is a draw).
:func:`play_both_sides` plays half the games on each side, each half on a fresh scene.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3.scenes import make_scene
from unity_sb3.selfplay.ghost import normalizer_weights
from unity_sb3.selfplay.matches import MatchResult, play_matches
from unity_sb3.selfplay.snapshots import copy_weights


def policy_weights(model: Any, vec_normalize: Any = None) -> dict[str, Any]:
    """A frozen copy of ``model``'s policy weights, with ``vec_normalize``'s statistics when given
    (what a self-play snapshot holds; ``policy_player(..., weights=...)`` plays with it)."""
    weights = dict(model.policy.state_dict())
    if vec_normalize is not None:
        weights.update(normalizer_weights(vec_normalize))
    return copy_weights(weights)


def play_both_sides(
    scene: str, player: Any, opponent: Any, games: int, seed: int, **params: Any
) -> dict[str, Any]:
    """``games`` games of ``player`` against ``opponent``: half as team 0, half as team 1.

    :param scene: an embedded two-team scene (``"Tennis"``, ``"SoccerTwos"``).
    :param player: a player of :func:`~unity_sb3.selfplay.matches.play_matches` (``"random"``, an
        answer function such as ``policy_player(...)``).
    :param seed: the first half's scene seed (the second uses ``seed + 1``) and the random players' seed.
    :param params: scene parameters (``num_agents``, ``max_steps``...).
    :return: wins, losses, draws, games, win rate and score (win 1, draw 0.5) from the player's side.
    """
    results: list[float] = []
    for team in (0, 1):
        env = make_scene(scene, seed=seed + team, **params)
        try:
            wanted = games // 2 if team == 0 else games - games // 2
            results += play_matches(
                env, {team: player, 1 - team: opponent}, wanted, team=team, seed=seed
            ).results
        finally:
            env.close()
    total = MatchResult(team=0, results=results)
    return {
        "wins": total.wins,
        "losses": total.losses,
        "draws": total.draws,
        "games": total.games,
        "win_rate": total.win_rate,
        "score": total.score,
    }


class EloRecorder(BaseCallback):
    """Records ``(num_timesteps, ELO)`` of a :class:`SelfPlayCallback` every ``every`` learner steps,
    and keeps a frozen copy of the policy (with its ``VecNormalize`` statistics) at ``snapshot_at``.

    :param self_play: the run's self-play callback (its ``elo``).
    :param every: learner steps between two records.
    :param snapshot_at: learner step after which the earlier policy is kept (``None``: none).
    :param vec_normalize: the model's ``VecNormalize``, whose statistics go with the snapshot.
    :param verbose: 1 prints each record (ELO as it goes, with seconds since the first step).
    :param label: printed before each record (which run it is, when several run in parallel).
    """

    def __init__(
        self,
        self_play: Any,
        every: int,
        snapshot_at: int | None = None,
        vec_normalize: Any = None,
        verbose: int = 0,
        label: str = "",
    ) -> None:
        super().__init__(verbose)
        self.label = label
        self._start: float | None = None
        self.self_play = self_play
        self.every = every
        self.snapshot_at = snapshot_at
        self.vec_normalize = vec_normalize
        self.points: list[tuple[int, float]] = []
        self.snapshot: dict[str, Any] | None = None
        self.snapshot_step: int | None = None
        self._next = every

    def _on_step(self) -> bool:
        if self._start is None:
            self._start = time.perf_counter()
        if self.snapshot_at is not None and self.snapshot is None and self.num_timesteps >= self.snapshot_at:
            self.snapshot = policy_weights(self.model, self.vec_normalize)
            self.snapshot_step = int(self.num_timesteps)
        if self.num_timesteps >= self._next:
            self.points.append((int(self.num_timesteps), float(self.self_play.elo)))
            self._next += self.every
            if self.verbose:
                seconds = time.perf_counter() - self._start
                print(
                    f"{self.label}step {self.num_timesteps:>8}  ELO {self.self_play.elo:8.1f}  {seconds:6.0f} s",
                    flush=True,
                )
        return True


def scaled_self_play(timesteps: int, snapshots: int, saves_per_team_change: int) -> dict[str, Any]:
    """A scene's ``self_play`` section scaled to a run of ``timesteps``: about ``snapshots`` snapshots,
    a learning-team change every ``saves_per_team_change`` of them, ML-Agents' other values."""
    save = max(timesteps // snapshots, 1000)
    return {
        "save_steps": save,
        "team_change": saves_per_team_change * save,
        "swap_steps": 2000,
        "window": 10,
        "play_against_latest_model_ratio": 0.5,
        "initial_elo": 1200.0,
    }


def final_matches(
    scene: str, final: Any, earlier: Any, games: int, seed: int, **params: Any
) -> dict[str, Any]:
    """The final policy against random play and against ``earlier``, and random against random (the
    baseline), each :func:`play_both_sides` with its own seed (``seed``, ``seed + 2``, ``seed + 4``).

    :return: ``{"random": ..., "early": ..., "random_vs_random": ...}``, each a :func:`play_both_sides` result.
    """
    return {
        "random": play_both_sides(scene, final, "random", games, seed, **params),
        "early": play_both_sides(scene, final, earlier, games, seed + 2, **params),
        "random_vs_random": play_both_sides(scene, "random", "random", games, seed + 4, **params),
    }


def add_soccer_arguments(parser: argparse.ArgumentParser) -> None:
    """The SoccerTwos training and evaluation options both soccer benchmarks take (``set_defaults`` adapts them)."""
    parser.add_argument("--fields", type=int, default=4, help="SoccerTwos fields: 2 learning agents each")
    parser.add_argument(
        "--max-steps", type=int, default=2000, help="academy steps of a training game before a draw"
    )
    parser.add_argument("--ball-touch", type=float, default=0.0, help="the training scene's ball_touch")
    parser.add_argument("--n-steps", type=int, default=256, help="rollout length per slot")
    parser.add_argument("--learning-rate", type=float, default=3e-4)
    parser.add_argument("--games", type=int, default=48, help="games of each evaluation (half on each side)")
    parser.add_argument(
        "--eval-max-steps", type=int, default=5000, help="academy steps of an evaluation game (Unity's 5000)"
    )
    parser.add_argument("--jobs", type=int, default=1, help="seeds run in parallel processes")


def soccer_poca(env: Any, n_steps: int, learning_rate: float, seed: int | None = None) -> Any:
    """POCA with Unity's ``config/poca/SoccerTwos.yaml`` values scaled down: 3 epochs, beta 0.005, gamma
    0.99, lambda 0.95, not normalized, but 2 x 128 units and a batch of at most 1,024 agent-steps.

    :param env: the learning team's ``VecEnv`` (a ``LockstepUnity`` view, monitored).
    :param n_steps: rollout length per slot (agent-steps per update: ``n_steps * env.num_envs``).
    :param learning_rate: constant learning rate.
    :param seed: the model's seed (``None``: the global RNG state).
    """
    from unity_sb3 import POCA

    return POCA(
        "MultiInputPolicy",
        env,
        n_steps=n_steps,
        batch_size=min(1024, n_steps * env.num_envs),
        n_epochs=3,
        learning_rate=learning_rate,
        gamma=0.99,
        gae_lambda=0.95,
        ent_coef=0.005,
        clip_range=0.2,
        policy_kwargs=dict(net_arch=[128, 128]),
        device="cpu",
        seed=seed,
    )
