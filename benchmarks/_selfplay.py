"""Shared pieces of the self-play benchmarks: games between players on an embedded scene, win rates.

A *player* is what answers one team's agents: ``player(behavior_name, decision_steps) -> ActionTuple``
(the lockstep's answerer signature). :func:`frozen_player` is a trained policy frozen with its
``VecNormalize`` statistics (a :class:`~unity_sb3.selfplay.ghost.GhostPolicy`), :func:`random_player`
uniform random play. :func:`play_matches` pits two players on a fresh scene, each on both sides, and
counts games as ML-Agents' ghost trainer reads them: the sign of the player's final reward plus its
group reward (> 0 a win, < 0 a loss, 0 a draw; an interrupted game is a draw).
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# isort: off
import unity_sb3  # noqa: F401  (first: makes mlagents_envs import on protobuf >= 4)

# isort: on
from mlagents_envs.base_env import ActionTuple, BehaviorSpec, DecisionSteps
from stable_baselines3.common.callbacks import BaseCallback

from unity_sb3.scenes import make_scene
from unity_sb3.selfplay.elo import result_from_reward
from unity_sb3.selfplay.ghost import GhostPolicy, normalizer_weights
from unity_sb3.selfplay.snapshots import copy_weights

Player = Callable[[str, DecisionSteps], ActionTuple]


@dataclass
class MatchResult:
    """Games of ``player`` against ``opponent``, counted from the player's side.

    :param wins: games the player won (final reward + group reward > 0).
    :param losses: games it lost (< 0).
    :param draws: games with 0 (Tennis never has any; a SoccerTwos game interrupted at ``max_steps``).
    """

    wins: int = 0
    losses: int = 0
    draws: int = 0
    per_side: dict[int, list[int]] = field(default_factory=dict)  # team -> [wins, losses, draws]

    @property
    def games(self) -> int:
        return self.wins + self.losses + self.draws

    @property
    def win_rate(self) -> float:
        """Wins / games (draws count as games not won); NaN when no game ended."""
        return self.wins / self.games if self.games else float("nan")

    @property
    def score(self) -> float:
        """ML-Agents' result averaged over games (win 1, draw 0.5, loss 0)."""
        return (self.wins + 0.5 * self.draws) / self.games if self.games else float("nan")

    def as_dict(self) -> dict[str, Any]:
        return {
            "wins": self.wins,
            "losses": self.losses,
            "draws": self.draws,
            "games": self.games,
            "win_rate": self.win_rate,
            "score": self.score,
        }


def random_player(spec: BehaviorSpec, seed: int = 0) -> Player:
    """Uniform random play: continuous actions in [-1, 1], every allowed discrete choice equally likely."""
    rng = np.random.default_rng(seed)

    def play(behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        n = len(decision_steps)
        continuous = rng.uniform(-1.0, 1.0, (n, spec.action_spec.continuous_size)).astype(np.float32)
        branches = spec.action_spec.discrete_branches
        discrete = np.zeros((n, len(branches)), dtype=np.int32)
        masks = decision_steps.action_mask
        for b, size in enumerate(branches):
            allowed = np.ones((n, size), dtype=bool) if masks is None else ~np.asarray(masks[b], dtype=bool)
            scores = rng.random((n, size)) * allowed
            discrete[:, b] = scores.argmax(axis=1)
        return ActionTuple(continuous=continuous, discrete=discrete)

    return play


def policy_weights(model: Any, vec_normalize: Any = None) -> dict[str, Any]:
    """A frozen copy of ``model``'s policy weights, with ``vec_normalize``'s statistics when given."""
    weights = dict(model.policy.state_dict())
    if vec_normalize is not None:
        weights.update(normalizer_weights(vec_normalize))
    return copy_weights(weights)


def frozen_player(
    model: Any, spaces: Any, weights: Mapping[str, Any] | None = None, *, deterministic: bool = False
) -> Player:
    """``model``'s policy acting with ``weights`` (default: its current weights, not normalized).

    :param spaces: the ``BehaviorSpaces`` of the view the model trained on (``view.spaces``).
    :param weights: from :func:`policy_weights` or a snapshot of the self-play pool.
    :param deterministic: the most likely action (``False``: sample, as ML-Agents' policies act in training).
    """
    # A trained policy can hold tensors of its last training step's graph (SB3 keeps the last action
    # distribution on the policy), which the ghost's deep copy refuses: act with a reloaded copy.
    buffer = io.BytesIO()
    model.save(buffer)
    buffer.seek(0)
    model = type(model).load(buffer, device="cpu")
    ghost = GhostPolicy(model.policy, spaces, deterministic=deterministic)
    if weights is not None:
        ghost.load_weights(weights)
    return ghost


def play_matches(
    scene: str,
    player: Player,
    opponent: Player,
    games: int,
    *,
    seed: int = 0,
    max_decisions: int = 200_000,
    **scene_params: Any,
) -> MatchResult:
    """Play ``games`` games (at least) of ``player`` against ``opponent`` on a fresh embedded scene.

    The player takes team 0 for the first half of the games and team 1 for the second, each half on
    a newly reset scene; every area of the scene plays at once.

    :param scene: an embedded scene with two teams of one behavior (``"Tennis"``, ``"SoccerTwos"``).
    :param games: games to count (finished games; the areas still playing when it is reached are dropped).
    :param seed: the scene's seed (the second half uses ``seed + 1``).
    :param max_decisions: a bound on the scene steps of each half, so a scene where no game ends stops.
    :param scene_params: scene parameters (``num_agents``, ``max_steps``...).
    """
    result = MatchResult()
    for side in (0, 1):
        wanted = games // 2 if side == 0 else games - games // 2
        counts = _play_side(scene, player, opponent, side, wanted, seed + side, max_decisions, scene_params)
        result.per_side[side] = counts
        result.wins += counts[0]
        result.losses += counts[1]
        result.draws += counts[2]
    return result


def _play_side(
    scene: str,
    player: Player,
    opponent: Player,
    side: int,
    games: int,
    seed: int,
    max_decisions: int,
    scene_params: Mapping[str, Any],
) -> list[int]:
    env = make_scene(scene, seed=seed, **scene_params)
    names = list(env.behavior_specs)
    teams = {name: int(name.rpartition("=")[2]) for name in names}
    counts = [0, 0, 0]  # wins, losses, draws of the player
    try:
        env.reset()
        for _ in range(max_decisions):
            for name in names:
                decision_steps, terminal_steps = env.get_steps(name)
                if teams[name] == side and len(terminal_steps):
                    for reward in _game_rewards(terminal_steps):
                        outcome = result_from_reward(reward)
                        counts[0 if outcome == 1.0 else 1 if outcome == 0.0 else 2] += 1
                if len(decision_steps):
                    answer = player if teams[name] == side else opponent
                    env.set_actions(name, answer(name, decision_steps))
            if sum(counts) >= games:
                break
            env.step()
    finally:
        env.close()
    return counts


def _game_rewards(terminal_steps: Any) -> list[float]:
    """One final reward (reward + group reward) per game that ended: agents of one group count once."""
    rewards = np.asarray(terminal_steps.reward, dtype=np.float64)
    group_rewards = np.asarray(terminal_steps.group_reward, dtype=np.float64)
    group_ids = np.asarray(terminal_steps.group_id)
    seen: set[int] = set()
    out = []
    for i, agent in enumerate(np.asarray(terminal_steps.agent_id)):
        key = int(group_ids[i]) if group_ids[i] else -1 - int(agent)
        if key in seen:
            continue
        seen.add(key)
        out.append(float(rewards[i] + group_rewards[i]))
    return out


class EloRecorder(BaseCallback):
    """Records ``(num_timesteps, ELO)`` of a :class:`SelfPlayCallback` every ``every`` learner steps,
    and keeps a frozen copy of the policy (with its ``VecNormalize`` statistics) at ``snapshot_at``.

    :param self_play: the run's self-play callback (its ``elo``).
    :param every: learner steps between two records.
    :param snapshot_at: learner step after which the earlier policy is kept (``None``: none).
    :param vec_normalize: the model's ``VecNormalize``, whose statistics go with the snapshot.
    :param verbose: 1 prints each record (ELO as it goes).
    """

    def __init__(
        self,
        self_play: Any,
        every: int,
        snapshot_at: int | None = None,
        vec_normalize: Any = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        self.self_play = self_play
        self.every = every
        self.snapshot_at = snapshot_at
        self.vec_normalize = vec_normalize
        self.points: list[tuple[int, float]] = []
        self.snapshot: dict[str, Any] | None = None
        self.snapshot_step: int | None = None
        self._next = every

    def _on_step(self) -> bool:
        if self.snapshot_at is not None and self.snapshot is None and self.num_timesteps >= self.snapshot_at:
            self.snapshot = policy_weights(self.model, self.vec_normalize)
            self.snapshot_step = int(self.num_timesteps)
        if self.num_timesteps >= self._next:
            self.points.append((int(self.num_timesteps), float(self.self_play.elo)))
            self._next += self.every
            if self.verbose:
                print(f"step {self.num_timesteps:>8}  ELO {self.self_play.elo:8.1f}", flush=True)
        return True
