"""Matches between players on a competitive Unity scene: wins, draws, losses and the win rate.

A *player* answers every agent of one team. Pit a trained model against random play, a scripted
player, an older checkpoint or a self-play snapshot::

    from unity_sb3 import PPO
    from unity_sb3.scenes import make_scene
    from unity_sb3.selfplay.matches import play_matches

    env = make_scene("Tennis", num_agents=4)
    model = PPO.load("results/Tennis_ppo/Tennis/model.zip")
    result = play_matches(env, {0: model, 1: "random"}, episodes=100)
    print(result)           # team 0: 81 wins, 3 draws, 16 losses in 100 games (win rate 0.81)

A game's result is read as ML-Agents' ELO reads it (:func:`~unity_sb3.selfplay.elo.result_from_reward`):
the sign of the counted team's last reward of the episode plus its group reward; an episode
interrupted by ``max_steps`` with nothing at stake is a draw. A team of several agents in one
group (SoccerTwos' two players) plays one game per group episode, counted once; agents outside a
group count one game each (Tennis: one per court).

The players see exactly what a learner's :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` gives
its model (:class:`~unity_sb3.spaces.BehaviorSpaces`), with the ``VecNormalize`` statistics the
model was trained with when given (:func:`policy_player`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mlagents_envs.base_env import ActionTuple, BaseEnv, BehaviorSpec, DecisionSteps
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy

from unity_sb3.episodes import Answer, play
from unity_sb3.selfplay.elo import DRAW, LOSS, WIN, result_from_reward
from unity_sb3.selfplay.ghost import GhostPolicy, normalizer_weights
from unity_sb3.spaces import BehaviorSpaces
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.behavior import split_behavior_name

__all__ = [
    "MatchResult",
    "Player",
    "play_matches",
    "policy_player",
    "random_player",
    "scripted_player",
    "view_spec",
]

#: ``"random"``, ``"expert"`` (the scene's scripted player), an answer function, or an SB3 model/policy
Player = str | Answer | Any


@dataclass
class MatchResult:
    """The games of one team: how many it won, drew and lost.

    :param team: the team the results are counted for.
    :param results: each game's result in the order the games ended: 1 win, 0.5 draw, 0 loss.
    :param unity_steps: Unity steps played.
    """

    team: int
    results: list[float] = field(default_factory=list)
    unity_steps: int = 0

    @property
    def games(self) -> int:
        return len(self.results)

    @property
    def wins(self) -> int:
        return sum(r == WIN for r in self.results)

    @property
    def draws(self) -> int:
        return sum(r == DRAW for r in self.results)

    @property
    def losses(self) -> int:
        return sum(r == LOSS for r in self.results)

    @property
    def win_rate(self) -> float:
        """Wins per game (draws count as not won); ``nan`` before any game."""
        return self.wins / self.games if self.games else float("nan")

    @property
    def score(self) -> float:
        """ELO's expected-score scale: (wins + draws / 2) per game; ``nan`` before any game."""
        return float(np.mean(self.results)) if self.results else float("nan")

    def __str__(self) -> str:
        return (
            f"team {self.team}: {self.wins} wins, {self.draws} draws, {self.losses} losses in "
            f"{self.games} games (win rate {self.win_rate:.2f})"
        )


def random_player(spec: BehaviorSpec, seed: int | None = None) -> Answer:
    """Uniformly random actions for behavior spec ``spec``: continuous in [-1, 1], discrete among the
    allowed (unmasked) ones."""
    rng = np.random.default_rng(seed)

    def answer(behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        n = len(decision_steps)
        action_spec = spec.action_spec
        continuous = rng.uniform(-1.0, 1.0, (n, action_spec.continuous_size)).astype(np.float32)
        discrete = np.zeros((n, len(action_spec.discrete_branches)), dtype=np.int32)
        masks = decision_steps.action_mask
        for b, size in enumerate(action_spec.discrete_branches):
            allowed = np.ones((n, size), dtype=bool)
            if masks is not None and masks[b] is not None:
                allowed = ~np.asarray(masks[b], dtype=bool)
                allowed[~allowed.any(axis=1)] = True  # a fully masked branch: anything goes
            weights = allowed / allowed.sum(axis=1, keepdims=True)
            discrete[:, b] = [rng.choice(size, p=w) for w in weights]
        return ActionTuple(continuous=continuous, discrete=discrete)

    return answer


def scripted_player(env: BaseEnv) -> Answer:
    """The scene's scripted player (its ``expert_actions``) as an answer function.

    :raises UnityConfigurationError: ``env`` has no scripted player (a build, or a scene without one);
        raised here, or at the first answer for a scene whose ``expert_actions`` is the placeholder.
    """
    missing = (
        f"{type(env).__name__} has no scripted player (expert_actions); play 'random', an ONNX model "
        "or a trained model instead"
    )
    expert = getattr(env, "expert_actions", None)
    if expert is None:
        raise UnityConfigurationError(missing)

    def scripted(behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
        try:
            return expert(behavior_name, decision_steps)
        except NotImplementedError:  # EmbeddedScene's placeholder
            raise UnityConfigurationError(missing) from None

    return scripted


def policy_player(
    model: Any,
    spec: BehaviorSpec,
    *,
    vec_normalize: Any | None = None,
    weights: Mapping[str, Any] | None = None,
    deterministic: bool = True,
) -> GhostPolicy:
    """A player from an SB3 model (or its policy) for agents of behavior spec ``spec``.

    :param model: an SB3 algorithm or ``BasePolicy`` trained on a ``UnityVecEnv`` of this behavior.
    :param spec: the spec of the view the model learned on (:func:`view_spec`).
    :param vec_normalize: the ``VecNormalize`` the model was trained under (its observation
        statistics are applied), or ``None``.
    :param weights: other weights of the same policy to play with (a self-play snapshot: they may
        carry their own normalizer statistics), or ``None`` for the model's own.
    :param deterministic: take the most likely action (an evaluation) or sample (as in training).
    :return: the player, an answer function.
    """
    policy = getattr(model, "policy", model)
    ghost = GhostPolicy(policy, BehaviorSpaces(spec, hybrid="box"), deterministic=deterministic)
    if weights is not None:
        ghost.load_weights(weights)
    elif vec_normalize is not None:
        ghost.load_weights({**policy.state_dict(), **normalizer_weights(vec_normalize)})
    return ghost


def view_spec(env: BaseEnv, behavior_name: str) -> BehaviorSpec:
    """The spec a learner's view of ``behavior_name`` was built from: its lowest team's (a base-name
    view of ``LockstepUnity`` converts every team's observations with it; the teams may name their
    sensors apart, as SoccerTwos' Blue/Purple sensors, so a model reads them by position)."""
    base = split_behavior_name(behavior_name)[0]
    teams = sorted(
        (split_behavior_name(n)[1], n) for n in env.behavior_specs if split_behavior_name(n)[0] == base
    )
    return env.behavior_specs[teams[0][1] if teams else behavior_name]


def _answer_for(player: Player, env: BaseEnv, name: str, seed: int | None, deterministic: bool) -> Answer:
    spec = env.behavior_specs[name]
    if isinstance(player, str):
        if player == "random":
            return random_player(spec, seed)
        if player == "expert":
            return scripted_player(env)
        raise ValueError(f"unknown player {player!r}: use 'random', 'expert', a model or an answer function")
    if isinstance(player, (BaseAlgorithm, BasePolicy)):
        return policy_player(player, view_spec(env, name), deterministic=deterministic)
    if callable(player):
        return player
    raise TypeError(
        f"a player must be 'random', 'expert', an SB3 model or a function, got {type(player).__name__}"
    )


def play_matches(
    env: BaseEnv,
    players: Mapping[int, Player],
    episodes: int,
    *,
    team: int | None = None,
    seed: int | None = 0,
    deterministic: bool = True,
    max_unity_steps: int | None = None,
) -> MatchResult:
    """Play ``episodes`` games between ``players`` and count the results of ``team``.

    :param env: a competitive scene or build (a ``BaseEnv`` with ``?team=N`` behaviors); it is
        reset once, never closed.
    :param players: team -> its player: ``"random"``, ``"expert"`` (the scene's ``expert_actions``),
        an SB3 model or policy (see :func:`policy_player` for ``VecNormalize`` statistics and
        snapshots), or ``answer(behavior_name, decision_steps) -> ActionTuple`` (an answer with an
        ``end_episodes(agent_ids)`` method, as :class:`~unity_sb3.export.onnx_policy.OnnxPlayer`, is told
        which of its agents' episodes ended). Every team of the scene needs one; a player answers every
        behavior of its team.
    :param episodes: games to count (> 0).
    :param team: the team whose results are counted (default: the first key of ``players``).
    :param seed: seed of the random players.
    :param deterministic: models take their most likely action (``False``: they sample).
    :param max_unity_steps: stop with a ``RuntimeError`` after this many Unity steps without
        ``episodes`` games (``None``: no limit).
    :return: the counted team's :class:`MatchResult`.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes <= 0:
        raise ValueError(f"episodes must be a whole number of games > 0, got {episodes!r}")
    if not players:
        raise ValueError("players must map at least one team to its player")
    team = next(iter(players)) if team is None else int(team)
    names = list(env.behavior_specs)
    team_of = {name: split_behavior_name(name)[1] for name in names}
    missing = sorted(set(team_of.values()) - set(players))
    if missing or team not in set(team_of.values()):
        raise ValueError(
            f"the scene's behaviors are {names} (teams {sorted(set(team_of.values()))}); players must "
            f"give one for every team (missing {missing}) and team {team} must be one of them"
        )
    answers = {
        name: _answer_for(
            players[team_of[name]], env, name, None if seed is None else seed + i, deterministic
        )
        for i, name in enumerate(names)
    }
    result = MatchResult(team)
    env.reset()
    for unity_steps, batches in enumerate(play(env, answers)):
        if max_unity_steps is not None and unity_steps >= max_unity_steps:
            raise RuntimeError(
                f"only {result.games} of {episodes} games ended in {max_unity_steps} Unity steps; "
                "raise max_unity_steps or check that the scene ends its episodes"
            )
        result.unity_steps = unity_steps + 1
        for name, _, terminal in batches:
            if len(terminal) and team_of[name] == team:
                _record(terminal, name, result)
        if result.games >= episodes:
            break
    del result.results[episodes:]
    return result


def _record(terminal: Any, name: str, result: MatchResult) -> None:
    """Add each game that ended for the counted team in ``terminal`` (a group's once)."""
    rewards = np.asarray(terminal.reward, dtype=np.float64)
    groups = np.asarray(terminal.group_id, dtype=np.int64)
    group_rewards = np.asarray(terminal.group_reward, dtype=np.float64)
    seen: set[tuple[str, int]] = set()
    for i in range(len(rewards)):
        if groups[i] != 0:
            if (name, int(groups[i])) in seen:
                continue
            seen.add((name, int(groups[i])))
        result.results.append(result_from_reward(rewards[i], group_rewards[i]))
