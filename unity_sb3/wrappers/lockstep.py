"""``LockstepUnity``: several behaviors of one scene trained at once, each through its own ``UnityVecEnv``.

ML-Agents trains every behavior of a scene at once (one trainer each) and the teams of one
behavior with one policy. Here one model per trained behavior steps the same Unity instances in
lockstep (DESIGN 6)::

    from unity_sb3 import PPO, POCA
    from unity_sb3.wrappers.lockstep import LockstepUnity

    unity = LockstepUnity("/builds/StrikersVsGoalie.x86_64")
    strikers = unity.vec_env("Striker?team=0")    # a UnityVecEnv over the strikers only
    goalies = unity.vec_env("Goalie?team=1")
    # each model learns in its own thread (unity_sb3.MultiBehaviorTrainer does this for you)

Each view is a plain :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` over one proxy ``BaseEnv``
per instance (as ``RayUnityVecEnv`` is ``UnityVecEnv`` over a proxy), so it has all of
``UnityVecEnv``'s semantics: slots that follow agents, inactive slots, masks, groups, terminal
observations. The proxies meet at a barrier per instance (see
:mod:`unity_sb3.wrappers._lockstep_barrier`): the real ``env.step()`` runs once every view with
an agent asking has called ``step()``; every agent that asked gets exactly one action (its
view's, else its behavior's answerer's, else zeros) and no other agent gets one.

Names: a view is asked for by a real behavior name (``"Striker?team=0"``) or by a base name
(``"Tennis"``) that stands for every team of that name (they must share one spec); a base name
with a single team is that team's real name. A base-name view owns the agents of the *learning
team* (:meth:`LockstepUnity.set_learning_team`, 0 by default; ``None`` for every team, one model
playing all teams as ML-Agents trains them without self-play); a real-name view owns every agent
of its behavior, until ``set_learning_team`` is called for its base name: from then on it owns
them only while its team is the learning team (so the asymmetric self-play case, one view per
behavior, works with the same call). Ownership is per agent and fixed when its episode starts:
an agent keeps its owner until its episode ends, so a team change rebinds slots at episode
boundaries only. Agents no view owns are answered by :meth:`LockstepUnity.set_answerer`'s
function for their behavior (a ghost, a frozen policy), zeros by default.

Threads: each view is stepped by its own thread (one learner each). A view that waits longer
than ``step_timeout`` for the others raises an error naming the views that never arrived; a view
whose learner finished is :meth:`~LockstepUnity.detach`-ed (the barrier stops waiting for it); a
crash in one learner should :meth:`~LockstepUnity.abort` the others, which then raise instead of
waiting forever.

Added to the agreed interface: :meth:`LockstepUnity.attach` (re-attach a detached view, for a
second ``learn``), :attr:`LockstepUnity.views`, :attr:`LockstepUnity.unity_steps` (real steps
per instance), :attr:`LockstepUnity.unity_envs`, :class:`UnityLockstepError` (what a view raises
when aborted, detached, timed out or closed), :class:`UnityLockstepCrash` (what a view raises when
the instance crashed in a step another view ran) and :func:`behavior_dir`.

Restarts: a view made with ``restart_on_crash=True`` re-opens a crashed instance (once for all
views; every view's live agents end as interrupted), when the instances were given as target
strings or factories. Give it to every view or to none: a view without it raises the crash.
Views do not take ``other_behaviors`` (use ``set_answerer``) or ``open_kwargs`` (give them to
``LockstepUnity``).
"""

from __future__ import annotations

import contextlib
import re
import threading
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.validation import close_matches
from unity_sb3.wrappers._lockstep_barrier import (
    Answerer,
    InstanceBarrier,
    UnityLockstepCrash,
    UnityLockstepError,
    ViewState,
)
from unity_sb3.wrappers._lockstep_proxy import ProxySource
from unity_sb3.wrappers.behavior import split_behavior_name
from unity_sb3.wrappers.instances import EnvSource, open_source
from unity_sb3.wrappers.vec_env import UnityVecEnv

from mlagents_envs.base_env import BaseEnv  # isort: skip

__all__ = ["LockstepUnity", "UnityLockstepCrash", "UnityLockstepError", "behavior_dir"]

_REFUSED_VIEW_KWARGS = {
    "other_behaviors": "agents no view owns are answered by LockstepUnity.set_answerer(behavior, fn)",
    "open_kwargs": "pass open_kwargs to LockstepUnity, which opens the instances",
}


def behavior_dir(behavior: str) -> str:
    """A directory name for a behavior: ``"Striker?team=0"`` -> ``"Striker_team=0"`` (no ``?`` in paths)."""
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", behavior)


def _layout(spec: Any) -> tuple[Any, ...]:
    """A spec without its sensor names: the teams of one behavior may name their sensors apart
    (SoccerTwos' Blue/PurpleRayPerceptionSensor) and still share one policy, as in ML-Agents."""
    observations = tuple(
        (tuple(o.shape), tuple(o.dimension_property), o.observation_type) for o in spec.observation_specs
    )
    return observations, spec.action_spec


class LockstepUnity:
    """The Unity instance(s) that several :class:`UnityVecEnv` views (one per trained behavior) step in lockstep.

    :param env: a ``BaseEnv``, a target string for :func:`unity_sb3.open.open_unity` (a build path,
        ``"editor"`` or an embedded scene name), a factory returning a ``BaseEnv``, or a list of those
        (one Unity instance each; instance ``i`` of strings opens with ``worker_id=i``).
    :param open_kwargs: keyword arguments for ``open_unity`` (strings only).
    :param step_timeout: seconds a view waits at the barrier for the other views before it raises
        :class:`UnityLockstepError` naming those that never arrived. A view waits while the others'
        learners update their models, so this must exceed the longest update.
    """

    def __init__(
        self,
        env: EnvSource | Sequence[EnvSource],
        *,
        open_kwargs: dict[str, Any] | None = None,
        step_timeout: float = 600.0,
    ) -> None:
        if not step_timeout > 0:
            raise ValueError(f"step_timeout must be > 0 seconds, got {step_timeout}")
        sources = [env] if isinstance(env, (str, BaseEnv)) or callable(env) else list(env)
        if not sources:
            raise UnityConfigurationError(
                "LockstepUnity needs at least one Unity environment, got an empty list"
            )
        self.open_kwargs = dict(open_kwargs or {})
        self.step_timeout = float(step_timeout)
        self.closed = False
        self._lock = threading.Lock()
        self._views: dict[str, ViewState] = {}  # view name -> state (attached or detached)
        self._venvs: dict[str, UnityVecEnv] = {}
        self._answerers: dict[str, Answerer] = {}
        self._learning: dict[str, int | None] = {}  # base name -> learning team (None: all), when set
        envs: list[BaseEnv] = []
        try:
            for i, source in enumerate(sources):
                envs.append(self._open(source, i))
            specs = envs[0].behavior_specs
            self._specs = {name: specs[name] for name in specs}
            for i, other in enumerate(envs[1:], start=1):
                theirs = {name: other.behavior_specs[name] for name in other.behavior_specs}
                if theirs != self._specs:
                    raise UnityConfigurationError(
                        f"Unity worker {i} has behaviors {sorted(theirs)} with other specs than worker 0 "
                        f"({sorted(self._specs)}); all instances must run the same scene"
                    )
        except BaseException:
            for opened, source in zip(envs, sources):
                if not isinstance(source, BaseEnv):
                    with contextlib.suppress(Exception):
                        opened.close()
            raise
        if not self._specs:
            raise UnityConfigurationError(
                "the Unity scene declares no behaviors; check that it has an Agent with a BehaviorParameters component"
            )
        self._barriers = [
            InstanceBarrier(
                e,
                i,
                self._specs,
                self._owner_for,
                self._parked,
                self._answerers,
                self.step_timeout,
                reopen=None if isinstance(source, BaseEnv) else partial(self._open, source, i, restart=True),
            )
            for i, (e, source) in enumerate(zip(envs, sources))
        ]

    def _open(self, source: EnvSource, worker_id: int, restart: bool = False) -> BaseEnv:
        return open_source(source, worker_id, self.open_kwargs, restart=restart)

    # ------------------------------------------------------------------ names
    @property
    def behavior_names(self) -> list[str]:
        """The scene's real behavior names (``"Tennis?team=0"``, ...)."""
        return list(self._specs)

    @property
    def base_names(self) -> list[str]:
        """The behavior names without ``?team=``, each once, in the scene's order."""
        return list(dict.fromkeys(split_behavior_name(n)[0] for n in self._specs))

    @staticmethod
    def team_of(name: str) -> int:
        """The team of a real behavior name (``"Tennis?team=1"`` -> 1; no ``?team=`` -> 0)."""
        return split_behavior_name(name)[1]

    def _teams(self, base: str) -> list[str]:
        named = [n for n in self._specs if split_behavior_name(n)[0] == base]
        return sorted(named, key=self.team_of)

    # ------------------------------------------------------------------ views
    def vec_env(self, behavior: str, **unity_vec_env_kwargs: Any) -> UnityVecEnv:
        """A :class:`UnityVecEnv` whose slots are the agents of ``behavior`` that this view owns.

        :param behavior: a real behavior name, or a base name standing for all its teams (their
            agents of the learning team become the slots).
        :param unity_vec_env_kwargs: ``UnityVecEnv``'s keyword arguments (``num_slots``,
            ``add_group_reward``, ``visual``, ``restart_on_crash``, ...), except ``other_behaviors``
            and ``open_kwargs``.
        :return: the view; its ``close()`` detaches it.
        """
        self._check_open()
        for key, why in _REFUSED_VIEW_KWARGS.items():
            if key in unity_vec_env_kwargs:
                raise UnityConfigurationError(f"LockstepUnity.vec_env does not take {key}=: {why}")
        fixed = [b.worker_id for b in self._barriers if b.reopen is None]
        if unity_vec_env_kwargs.get("restart_on_crash") and fixed:
            raise UnityConfigurationError(
                f"restart_on_crash=True needs every instance to be re-openable, but Unity worker(s) {fixed} "
                "were given as BaseEnv objects; give LockstepUnity target strings or factories"
            )
        view = self._new_view(behavior)
        sources = [ProxySource(barrier, barrier.add_view(view)) for barrier in self._barriers]
        try:
            venv = UnityVecEnv(sources, view.name, **unity_vec_env_kwargs)
        except BaseException:
            with self._lock:
                self._views.pop(view.name, None)
            for barrier in self._barriers:
                barrier.remove_view(view)
            raise
        finally:
            view.constructing = False
        view.venv = venv
        self._venvs[view.name] = venv
        return venv

    def _new_view(self, behavior: str) -> ViewState:
        if behavior in self._specs:
            behaviors, by_base = (behavior,), False
        elif behavior in self.base_names:
            behaviors = tuple(self._teams(behavior))
            by_base = len(behaviors) > 1
            if not by_base:
                behavior = behaviors[0]
        else:
            names = [*self._specs, *self.base_names]
            close = close_matches(behavior, names, cutoff=0.5, ignore_case=True)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnityConfigurationError(
                f"unknown behavior {behavior!r}; the scene has {self.behavior_names} "
                f"(base names {self.base_names}){hint}"
            )
        spec = self._specs[behaviors[0]]
        for other in behaviors[1:]:
            if _layout(self._specs[other]) != _layout(spec):
                raise UnityConfigurationError(
                    f"the teams of {behavior!r} have different specs ({behaviors[0]!r}: {spec}, {other!r}: "
                    f"{self._specs[other]}); one view needs one spec: ask for each team by its full name"
                )
        with self._lock:
            for other in self._views.values():
                if other.detached:
                    continue
                shared = set(other.behaviors) & set(behaviors)
                if shared:
                    raise UnityConfigurationError(
                        f"behavior(s) {sorted(shared)} already belong to the view {other.name!r}; "
                        "an agent has one owner: close or detach that view first"
                    )
            old = self._views.get(behavior)
            if old is not None and not old.detached:  # pragma: no cover - caught by the overlap above
                raise UnityConfigurationError(f"there is already a view {behavior!r}")
            view = ViewState(behavior, behaviors, spec, by_base, constructing=True)
            self._views[behavior] = view
        return view

    @property
    def views(self) -> dict[str, UnityVecEnv]:
        """Every view made by :meth:`vec_env`, by name (detached ones too)."""
        return dict(self._venvs)

    def _view_of(self, view: VecEnv | str) -> ViewState:
        if isinstance(view, str):
            state = self._views.get(view)
        else:
            while isinstance(view, VecEnvWrapper):  # VecMonitor, VecNormalize, ...
                view = view.venv
            state = next((self._views[n] for n, v in self._venvs.items() if v is view), None)
        if state is None:
            raise UnityConfigurationError(
                f"{view!r} is not a view of this LockstepUnity; its views are {sorted(self._venvs)}"
            )
        return state

    def detach(self, view: VecEnv | str) -> None:
        """The view's learner has finished: the barrier stops waiting for it and its agents are
        answered by their behavior's answerer (zeros by default). Stepping it again raises.

        :param view: the view (or a ``VecEnvWrapper`` around it), or its name.
        """
        state = self._view_of(view)
        if state.detached:
            return
        state.detached = True
        for barrier in self._barriers:
            barrier.detach(state)

    def attach(self, view: VecEnv | str) -> None:
        """Attach a detached view again: it owns agents that start an episode from now on; the
        agents it owned when it was detached end their episodes for it (interrupted)."""
        state = self._view_of(view)
        self._check_open()
        with self._lock:
            for other in self._views.values():
                if other is not state and not other.detached and set(other.behaviors) & set(state.behaviors):
                    raise UnityConfigurationError(
                        f"cannot attach view {state.name!r}: view {other.name!r} owns its behaviors now"
                    )
            state.detached = False
        for barrier in self._barriers:
            barrier.notify()

    # ------------------------------------------------------------------ ownership
    def set_answerer(self, behavior: str, answerer: Answerer | None) -> None:
        """Who answers the agents of ``behavior`` that no view owns (ghosts, frozen policies).

        :param behavior: a real behavior name, or a base name (each of its teams).
        :param answerer: ``answerer(behavior_name, decision_steps) -> ActionTuple | None`` for the
            agents in ``decision_steps`` (only those no view owns); ``None`` (as function or
            result) answers them with zeros. Called in the thread that runs the Unity step.
        """
        names = [behavior] if behavior in self._specs else self._teams(behavior)
        if not names:
            raise UnityConfigurationError(
                f"unknown behavior {behavior!r}; the scene has {self.behavior_names}"
            )
        for name in names:
            if answerer is None:
                self._answerers.pop(name, None)
            else:
                self._answerers[name] = answerer

    def set_learning_team(self, base_name: str, team: int | None) -> None:
        """The team of ``base_name`` whose agents go to the view from their next episode on.

        Agents of the learning team that start an episode after this call are the view's; every
        agent keeps its owner until its episode ends (no slot is rebound mid-episode).

        :param base_name: a name without ``?team=`` (a real name is read as its base name).
        :param team: the learning team; ``None``: every team (one model plays all teams, as
            ML-Agents trains a behavior's teams without self-play). Set it before making the view
            so that the agents asking at the first reset follow it.
        """
        base = split_behavior_name(base_name)[0]
        if base not in self.base_names:
            raise UnityConfigurationError(f"unknown base name {base_name!r}; the scene has {self.base_names}")
        self._learning[base] = None if team is None else int(team)
        for barrier in self._barriers:
            barrier.notify()

    def learning_team(self, base_name: str) -> int | None:
        """The learning team of ``base_name`` (0 until :meth:`set_learning_team` is called; ``None``: every team)."""
        return self._learning.get(split_behavior_name(base_name)[0], 0)

    def _eligible(self, view: ViewState, behavior: str) -> bool:
        base, team = split_behavior_name(behavior)
        if view.by_base or base in self._learning:
            learning = self._learning.get(base, 0)
            return learning is None or team == learning
        return True

    def _owner_for(self, behavior: str) -> ViewState | None:
        for view in list(self._views.values()):
            if not view.detached and behavior in view.behaviors:
                return view if self._eligible(view, behavior) else None
        return None

    def _parked(self, view: ViewState) -> bool:
        return not any(self._eligible(view, b) for b in view.behaviors)

    # ------------------------------------------------------------------ lifetime
    def abort(self, exc: BaseException) -> None:
        """Wake every waiting view with ``exc`` (as the cause of a :class:`UnityLockstepError`);
        every later step or reset of any view raises it too. A crash in one learner thread must
        not leave the others waiting."""
        for barrier in self._barriers:
            barrier.abort(exc)

    @property
    def unity_steps(self) -> list[int]:
        """Real Unity steps taken so far, per instance."""
        return [barrier.unity_steps for barrier in self._barriers]

    @property
    def unity_envs(self) -> list[BaseEnv]:
        """The real ``BaseEnv`` of each instance."""
        return [barrier.env for barrier in self._barriers]

    def close(self) -> None:
        """Close every view and every Unity instance; calling it again does nothing."""
        if self.closed:
            return
        self.closed = True
        self.abort(UnityLockstepError("the LockstepUnity was closed"))
        for venv in self._venvs.values():
            with contextlib.suppress(Exception):
                venv.close()
        for barrier in self._barriers:
            try:
                barrier.env.close()
            except Exception as exc:  # keep closing the others
                warnings.warn(f"closing Unity worker {barrier.worker_id} failed: {exc}", stacklevel=2)

    def _check_open(self) -> None:
        if self.closed:
            raise UnityLockstepError("this LockstepUnity is closed; create a new one")

    def __enter__(self) -> LockstepUnity:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
