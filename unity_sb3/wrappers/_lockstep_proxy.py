"""A lockstep view's ``BaseEnv`` on one Unity instance, and the factory ``UnityVecEnv`` opens it with."""

from __future__ import annotations

from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.wrappers._lockstep_barrier import InstanceBarrier, ProxyState
from unity_sb3.wrappers._lockstep_batches import put_actions

from mlagents_envs.base_env import (  # isort: skip
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    DecisionSteps,
    TerminalSteps,
)


class LockstepProxy(BaseEnv):
    """One view's ``BaseEnv`` on one instance: its behavior, its agents, the shared barrier.

    Public attributes the real env has and ``BaseEnv`` lacks (``unity_sb3_channels``,
    ``process``, ...) are the real env's; ``reseed`` waits for the next real reset, so ``UnityVecEnv.get_attr`` / ``env_method`` reach them.
    ``close()`` detaches the view (the real env is closed by its ``LockstepUnity``).
    """

    def __init__(self, barrier: InstanceBarrier, state: ProxyState) -> None:
        self._barrier = barrier
        self._state = state

    @property
    def state(self) -> ProxyState:
        """The barrier's bookkeeping of this view on this instance."""
        return self._state

    @property
    def behavior_specs(self) -> BehaviorMapping:
        view = self._state.view
        return BehaviorMapping({view.name: view.spec})

    @property
    def worker_id(self) -> int:
        return self._barrier.worker_id

    def step(self) -> None:
        self._barrier.step(self._state)

    def reset(self) -> None:
        self._barrier.reset(self._state)

    def close(self) -> None:
        venv = self._state.view.venv
        if venv is not None and not getattr(venv, "closed", True):
            return  # its UnityVecEnv restarts a crashed instance: the view stays attached
        self._state.view.detached = True
        self._barrier.detach(self._state.view)

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        return self._barrier.get_steps(self._state, behavior_name)

    def reseed(self, seed: int) -> None:
        """Seed the real env (when it has ``reseed``) at its next real reset; re-seeding it now would
        change the scene under the other views."""
        self._barrier.reseed(seed)

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        self._barrier.set_actions(self._state, behavior_name, action)

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        dec, _ = self.get_steps(behavior_name)
        where = np.flatnonzero(dec.agent_id == agent_id)
        if len(where) == 0:
            raise KeyError(f"agent {agent_id} of {behavior_name!r} is not asking for a decision in this view")
        spec = self._state.view.spec.action_spec
        one = spec._validate_action(action, 1, behavior_name)
        state = self._state
        full = spec.empty_action(len(dec))
        if state.action_round == state.seen and state.actions:  # keep the agents set before
            start = 0
            for real, n in state.parts:
                part = state.actions.get(real)
                if part is not None:
                    put_actions(full, np.arange(start, start + n), part)
                start += n
        put_actions(full, where[:1], one)
        self.set_actions(behavior_name, full)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._barrier.env, name)


class ProxySource:
    """A view's factory for one instance, for ``UnityVecEnv``: its proxy first; after a crash, the
    proxy of the restarted instance (what ``restart_on_crash`` calls).

    :param barrier: the instance.
    :param state: the view's bookkeeping there (from ``InstanceBarrier.add_view``).
    """

    def __init__(self, barrier: InstanceBarrier, state: ProxyState) -> None:
        self._barrier = barrier
        self._state = state
        self._opened = False

    def __call__(self) -> LockstepProxy:
        if self._opened:
            self._barrier.restart(self._state)
        self._opened = True
        return LockstepProxy(self._barrier, self._state)
