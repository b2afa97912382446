"""Self-play as ML-Agents' ghost trainer, as an SB3 callback on a lockstep view.

The learner trains on its :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` view of a
``LockstepUnity`` (``lockstep.vec_env(behavior)``); the agents no view owns are answered by
frozen copies of the learner (:class:`~unity_sb3.selfplay.ghost.GhostPolicy`) through
``lockstep.set_answerer``. The callback reads finished episodes from the learner's
``dones``/``rewards``/``infos`` for the ELO, applies the ghost trainer's rules each step
(:class:`~unity_sb3.selfplay.controller.SelfPlayBehavior`), logs ``Self-play/ELO`` and saves the
pool and ELO beside each checkpoint.

Symmetric (one behavior, several teams: Tennis, SoccerTwos)::

    lockstep = LockstepUnity("Tennis")
    model = PPO("MlpPolicy", lockstep.vec_env("Tennis"))
    self_play = SelfPlayCallback(lockstep, "Tennis", {"save_steps": 50000, "team_change": 100000})
    model.learn(1_000_000, callback=self_play)

The learning team changes every ``team_change`` learner steps (``set_learning_team``: agents
rebind at their episode boundaries); the same model plays every team, the other team is answered by
snapshots of it.

Asymmetric (two behaviors with their own models, one team each: StrikersVsGoalie)::

    callbacks = self_play_callbacks(lockstep, {"Striker": striker_settings, "Goalie": goalie_settings})

gives one callback per behavior sharing one :class:`GhostController`. Only one behavior learns
at a time: ``set_learning_team`` parks the view of the other (its agents go to snapshots of its
model from their next episode; its learner waits inside ``step()``, its ``num_timesteps`` still)
until its team learns again.

Differences from ML-Agents: ML-Agents resets the whole environment when the learning team changes;
here agents change hands at their own episode ends, so the agents of the old learning team finish
their episodes with the learning policy. Step counts are the models' ``num_timesteps`` (slot
steps), as the rest of unity-sb3 counts ML-Agents' steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from mlagents_envs.base_env import ActionTuple, DecisionSteps
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecNormalize

from unity_sb3.selfplay.controller import GhostController, SelfPlayBehavior
from unity_sb3.selfplay.ghost import GhostPolicy, normalizer_weights
from unity_sb3.selfplay.settings import SelfPlaySettings
from unity_sb3.selfplay.snapshots import save_state_atomic

__all__ = ["ELO_TAG", "SelfPlayCallback", "self_play_callbacks", "self_play_state_path"]

#: ML-Agents' TensorBoard tag of the learner's rating
ELO_TAG = "Self-play/ELO"
#: suffix of the self-play state saved beside a checkpoint (pruned with it)
STATE_SUFFIX = ".selfplay.pt"


def self_play_state_path(checkpoint: str | Path) -> Path:
    """Where the self-play state of ``checkpoint_<n>_steps.zip`` goes: ``checkpoint_<n>_steps.selfplay.pt``."""
    checkpoint = Path(checkpoint)
    stem = checkpoint.stem if checkpoint.suffix == ".zip" else checkpoint.name
    return checkpoint.with_name(stem + STATE_SUFFIX)


class SelfPlayCallback(BaseCallback):
    """ML-Agents' ghost trainer for one behavior's model (see the module doc).

    :param lockstep: the ``LockstepUnity`` the model's env is a view of (uses ``behavior_names``,
        ``team_of``, ``set_answerer`` and ``set_learning_team``).
    :param behavior: the behavior the model learns: a base name (``"Tennis"``: every team of it) or
        a real name (``"Goalie?team=1"``).
    :param settings: ``SelfPlaySettings``, a ``self_play`` mapping, or ``None`` for ML-Agents' defaults.
    :param controller: a controller shared with the other behaviors' callbacks (asymmetric games;
        see :func:`self_play_callbacks`); ``None`` makes one of its own.
    :param seed: seed of the opponent draws.
    :param deterministic: ghosts take their most likely action (ML-Agents' ghosts sample: ``False``).
    """

    def __init__(
        self,
        lockstep: Any,
        behavior: str,
        settings: SelfPlaySettings | Mapping[str, Any] | None = None,
        *,
        controller: GhostController | None = None,
        seed: int | None = None,
        deterministic: bool = False,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if not isinstance(settings, SelfPlaySettings):
            settings = SelfPlaySettings.from_mapping(settings, where=f"{behavior}.self_play")
        self.lockstep = lockstep
        self.behavior = behavior
        self.base_name = behavior.partition("?")[0]
        self.real_names = _real_names(lockstep, behavior)
        self.team_of_name = {name: int(lockstep.team_of(name)) for name in self.real_names}
        self.controller = controller if controller is not None else GhostController()
        self.state = SelfPlayBehavior(
            behavior, sorted(set(self.team_of_name.values())), settings, self.controller, seed
        )
        self.deterministic = deterministic
        self._view: VecEnv | None = None
        self._normalize: VecNormalize | None = None
        self._seen_team = self.controller.learning_team
        self._period_elos: list[float] = []

    # ------------------------------------------------------------------ what others read
    @property
    def settings(self) -> SelfPlaySettings:
        return self.state.settings

    @property
    def elo(self) -> float:
        """The learning policy's ELO (ML-Agents' ``Self-play/ELO``)."""
        return self.state.elo

    @property
    def is_learning(self) -> bool:
        """Whether this behavior's model learns now (always, in a symmetric game)."""
        return self.state.is_learning

    def summary_elo(self) -> float | None:
        """The mean ELO after each game since the last call (ML-Agents' summary), or ``None`` when no
        game ended; for ``SummaryCallback(elo=...)``."""
        values, self._period_elos = self._period_elos, []
        return float(np.mean(values)) if values else None

    def progress_text(self) -> str:
        """Text for the progress bar's postfix (``LiveProgressCallback(postfix=...)``)."""
        return f"ELO {self.elo:.1f}"

    # ------------------------------------------------------------------ SB3 hooks
    def _on_training_start(self) -> None:
        self._view = self.training_env.unwrapped
        spaces = getattr(self._view, "spaces", None)
        if spaces is None:
            raise TypeError(
                f"SelfPlayCallback needs the model's env to be a UnityVecEnv view of the lockstep "
                f"(lockstep.vec_env({self.behavior!r})), got {type(self._view).__name__}"
            )
        self._normalize = _find_vec_normalize(self.training_env)
        for team in self.state.teams:
            if team not in self.state.ghosts:
                self.state.ghosts[team] = GhostPolicy(
                    self.model.policy, spaces, deterministic=self.deterministic
                )
        for name, team in self.team_of_name.items():
            self.lockstep.set_answerer(name, self._answerer(team))
        self.state.bind(lambda: int(self.model.num_timesteps), self._weights)
        with self.controller.lock:
            self.state.finished = False  # a second learn() takes its turns again
            self.state.start()
            self._seen_team = self.controller.learning_team
            self._apply_learning_team()

    def _on_step(self) -> bool:
        if self.state.is_learning:
            self._record_results()
        with self.controller.lock:
            for behavior in self.controller.behaviors:  # ML-Agents advances every ghost trainer
                behavior.advance()
            if self.controller.learning_team != self._seen_team:
                self._seen_team = self.controller.learning_team
                self._apply_learning_team()
        return True

    def _on_training_end(self) -> None:
        with self.controller.lock:
            self.state.finished = True
            # a behavior still training must not stay parked behind a learner that has ended
            if self.state.is_learning and any(not b.finished for b in self.controller.behaviors):
                self.controller.change_training_team(int(self.model.num_timesteps))
                self._seen_team = self.controller.learning_team
                self._apply_learning_team()

    # ------------------------------------------------------------------ internals
    def _weights(self) -> dict[str, Any]:
        """A snapshot: the policy's weights and, under ``VecNormalize``, its observation statistics
        (ML-Agents' snapshots hold the policy's normalizer)."""
        weights = dict(self.model.policy.state_dict())
        if self._normalize is not None:
            weights.update(normalizer_weights(self._normalize))
        return weights

    def _answerer(self, team: int) -> Any:
        def answer(behavior_name: str, decision_steps: DecisionSteps) -> ActionTuple:
            return self.state.ghosts[team](behavior_name, decision_steps)

        return answer

    def _apply_learning_team(self) -> None:
        """Give the lockstep the controller's learning team for every behavior of the controller.

        Symmetric: the view of the base name takes the learning team's agents at their next episode.
        Asymmetric: the view of a behavior whose team does not learn is parked (its agents go to its
        ghost from their next episode; its learner waits inside ``step()``) until its team learns.
        """
        for behavior in self.controller.behaviors:
            self.lockstep.set_learning_team(behavior.name.partition("?")[0], self.controller.learning_team)

    def _record_results(self) -> None:
        dones = np.asarray(self.locals.get("dones", ()), dtype=bool)
        if not dones.any():
            return
        infos = self.locals.get("infos") or [{}] * len(dones)
        if self._normalize is not None:
            rewards = np.asarray(self._normalize.get_original_reward(), dtype=np.float64)
        else:
            rewards = np.asarray(self.locals["rewards"], dtype=np.float64)
        # the group reward counts once: the view may have added it to the reward already
        group_included = bool(getattr(self._view, "add_group_reward", False))
        for i in np.flatnonzero(dones):
            if not infos[i].get("active", True):
                continue
            group = 0.0 if group_included else float(infos[i].get("group_reward", 0.0))
            elo = self.state.record_episode(float(rewards[i]), group)
            self.logger.record_mean(ELO_TAG, elo)
            self._period_elos.append(elo)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The controller and every behavior's pool, ELO and counters."""
        with self.controller.lock:
            return {
                "format": 1,
                "controller": self.controller.state_dict(),
                "behaviors": {b.name: b.state_dict() for b in self.controller.behaviors},
            }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`; behaviors of the saved run not in this one are an error."""
        with self.controller.lock:
            mine = {b.name: b for b in self.controller.behaviors}
            unknown = sorted(set(state["behaviors"]) - set(mine))
            if unknown:
                raise ValueError(
                    f"the saved self-play state holds behaviors {unknown} that this run does not train "
                    f"(it trains {sorted(mine)})"
                )
            for name, saved in state["behaviors"].items():
                mine[name].load_state_dict(saved)
            self.controller.load_state_dict(state["controller"])
            self._seen_team = self.controller.learning_team

    def save(self, path: str | Path) -> Path:
        """Write :meth:`state_dict` to ``path`` atomically."""
        return save_state_atomic(self.state_dict(), path)

    def on_checkpoint(self, checkpoint: Path) -> None:
        """``AtomicCheckpointCallback(on_save=...)``: the state beside the checkpoint (pruned with it)."""
        self.save(self_play_state_path(checkpoint))

    def restore(self, path: str | Path) -> None:
        """Restore from a checkpoint (``checkpoint_<n>_steps.zip``: its ``.selfplay.pt`` companion) or
        a state file; call before ``learn``.

        :raises FileNotFoundError: no self-play state beside that checkpoint.
        """
        import torch as th

        path = Path(path)
        state_path = self_play_state_path(path) if path.suffix == ".zip" else path
        if not state_path.is_file():
            raise FileNotFoundError(
                f"no self-play state at {state_path}: the checkpoint was saved without SelfPlayCallback."
                "on_checkpoint, so the snapshot pool and ELO cannot be restored"
            )
        self.load_state_dict(th.load(state_path, map_location="cpu", weights_only=True))


def self_play_callbacks(
    lockstep: Any,
    settings: Mapping[str, SelfPlaySettings | Mapping[str, Any] | None],
    *,
    seed: int | None = None,
    deterministic: bool = False,
    verbose: int = 0,
) -> dict[str, SelfPlayCallback]:
    """One :class:`SelfPlayCallback` per behavior, sharing one controller (asymmetric games).

    :param settings: behavior name -> its ``self_play`` settings; the first behavior learns first.
    :param seed: seed of the draws (behavior ``i`` uses ``seed + i``).
    :return: behavior name -> the callback to pass to that behavior's model's ``learn``.
    """
    if not settings:
        raise ValueError("self_play_callbacks needs at least one behavior")
    controller = GhostController()
    return {
        name: SelfPlayCallback(
            lockstep,
            name,
            value,
            controller=controller,
            seed=None if seed is None else seed + i,
            deterministic=deterministic,
            verbose=verbose,
        )
        for i, (name, value) in enumerate(settings.items())
    }


def _real_names(lockstep: Any, behavior: str) -> list[str]:
    names = list(lockstep.behavior_names)
    if behavior in names:
        return [behavior]
    found = [name for name in names if name.partition("?")[0] == behavior]
    if not found:
        raise ValueError(
            f"no behavior {behavior!r} in the scene; its behaviors are {', '.join(names) or 'none'} "
            "(give a full name or the name without ?team=)"
        )
    return found


def _find_vec_normalize(env: VecEnv) -> VecNormalize | None:
    while isinstance(env, VecEnvWrapper):
        if isinstance(env, VecNormalize):
            return env
        env = env.venv
    return None
