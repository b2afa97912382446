"""A Unity instance inside a Ray actor, and the ``BaseEnv`` proxy the learner talks to.

:class:`UnityActor` is a plain class made remote with ``ray.remote`` when an instance is
created: it opens its ``BaseEnv`` with :func:`unity_sb3.open.open_unity` (or a factory)
*inside* the actor, so a build or stand-in player runs on whichever node Ray's scheduler
picked. :class:`RayUnityEnv` is the learner-side ``BaseEnv``: ``set_actions`` is buffered
locally, and ``step()`` sends every buffered action and the step in one remote call whose
answer carries every behavior's ``DecisionSteps`` / ``TerminalSteps`` as numpy arrays (cached
for ``get_steps``). One round trip per step, no per-agent Python objects; arrays large enough
for Ray's object store arrive zero-copy (read-only).

:class:`RayActorSource` owns one actor. Called, it (re-)opens the Unity env in its actor and
returns a fresh proxy, which makes it a factory for ``UnityVecEnv``'s ``restart_on_crash``:
after a Unity crash inside a live actor the env is re-opened in place; after the actor died,
Ray restarts it (``max_restarts``) and ``open`` runs on the restarted actor (Ray retries it
there); an actor that is gone for good (restarts used up, node lost) or hung is replaced by a
new one.

Errors keep their meaning across the process boundary: a remote exception is re-raised as
itself (a Unity crash stays a ``UnityException``, bad actions a ``UnityActionException``); a
dead actor becomes :class:`~unity_sb3.unity.errors.UnityProcessError` and a call that takes
longer than ``call_timeout`` a :class:`~unity_sb3.unity.errors.UnityTimeoutError`, both naming
the worker id.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError, UnityTimeoutError

from mlagents_envs.base_env import (  # isort: skip
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    BehaviorSpec,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.exception import UnityActionException  # isort: skip

try:
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "Running Unity instances in Ray actors needs Ray: pip install 'unity_sb3[ray]' (or 'ray>=2.9')"
    ) from exc

__all__ = ["RayActorSource", "RayUnityEnv", "UnityActor", "collect_steps"]

#: seconds :meth:`RayActorSource.kill` waits for Ray to confirm an actor is dead
_KILL_WAIT = 10.0

ActorSource = str | Callable[[], BaseEnv]
#: behavior -> (continuous, discrete) actions for the agents of its last DecisionSteps
PackedActions = dict[str, tuple[np.ndarray, np.ndarray]]
#: behavior -> (DecisionSteps fields, TerminalSteps fields), in the constructors' order
PackedSteps = dict[str, tuple[tuple[Any, ...], tuple[Any, ...]]]


def _pack(dec: DecisionSteps, term: TerminalSteps) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    return (
        (list(dec.obs), dec.reward, dec.agent_id, dec.action_mask, dec.group_id, dec.group_reward),
        (list(term.obs), term.reward, term.interrupted, term.agent_id, term.group_id, term.group_reward),
    )


def _unpack(packed: tuple[tuple[Any, ...], tuple[Any, ...]]) -> tuple[DecisionSteps, TerminalSteps]:
    dec, term = packed
    return DecisionSteps(*dec), TerminalSteps(*term)


class UnityActor:
    """The body of the Ray actor holding one Unity instance (made remote by :class:`RayActorSource`).

    :param source: a target string for ``open_unity`` or a picklable factory returning a ``BaseEnv``.
    :param worker_id: the instance's worker id (``open_unity``'s port offset on its node).
    :param open_kwargs: keyword arguments for ``open_unity`` (target strings only).
    """

    def __init__(
        self, source: ActorSource, worker_id: int, open_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        self.source = source
        self.worker_id = worker_id
        self.open_kwargs = dict(open_kwargs or {})
        self.env: BaseEnv | None = None
        self._specs_sent = 0

    # Retried on the restarted actor when the actor dies while (or before) it runs: opening
    # is idempotent, unlike a step. Retried for as long as Ray is restarting the actor (a
    # fixed count ran out on a loaded machine before the restart finished); an actor that is
    # dead for good fails at once, and open_timeout bounds the wait.
    @ray.method(max_task_retries=-1)
    def open(self) -> dict[str, Any]:
        """(Re-)open the env, closing a previous one; return what the proxy needs to know."""
        self.close()
        if isinstance(self.source, str):
            from unity_sb3.open import open_unity

            env = open_unity(self.source, worker_id=self.worker_id, **self.open_kwargs)
        else:
            env = self.source()
            if not isinstance(env, BaseEnv):
                raise UnityConfigurationError(
                    f"the factory for Unity worker {self.worker_id} returned {type(env).__name__}, not a BaseEnv"
                )
        self.env = env
        specs = dict(env.behavior_specs)
        self._specs_sent = len(specs)
        methods = [
            name
            for name in dir(type(env))
            if not name.startswith("_")
            and callable(getattr(type(env), name, None))
            and not hasattr(BaseEnv, name)
        ]
        return {
            "behavior_specs": specs,
            "methods": methods,
            "node_ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
        }

    def reset(self) -> tuple[PackedSteps, dict[str, BehaviorSpec] | None]:
        env = self._env()
        env.reset()
        return self._steps(env)

    def step(self, actions: PackedActions) -> tuple[PackedSteps, dict[str, BehaviorSpec] | None]:
        """Set every behavior's actions, step once, return every behavior's steps."""
        env = self._env()
        for name, (continuous, discrete) in actions.items():
            env.set_actions(name, ActionTuple(continuous, discrete))
        env.step()
        return self._steps(env)

    def call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Call a public method of the env that ``BaseEnv`` does not define (e.g. ``reseed``)."""
        return getattr(self._env(), name)(*args, **kwargs)

    def close(self) -> None:
        env, self.env = self.env, None
        if env is not None:
            with contextlib.suppress(Exception):  # a crashed instance may not close cleanly
                env.close()

    def _env(self) -> BaseEnv:
        if self.env is None:
            raise UnityProcessError(self.worker_id, detail="its Ray actor has no open Unity env (call open)")
        return self.env

    def _steps(self, env: BaseEnv) -> tuple[PackedSteps, dict[str, BehaviorSpec] | None]:
        specs = env.behavior_specs
        steps: PackedSteps = {}
        for name in specs:
            try:
                steps[name] = _pack(*env.get_steps(name))
            except KeyError:  # registered, but no agent has reported yet
                continue
        new_specs = None
        if len(specs) != self._specs_sent:  # Unity registered a behavior since we last said
            new_specs = dict(specs)
            self._specs_sent = len(specs)
        return steps, new_specs


class RayUnityEnv(BaseEnv):
    """Learner-side ``BaseEnv`` of a Unity instance living in a Ray actor.

    Made by :class:`RayActorSource`. Public methods of the remote env that ``BaseEnv`` lacks
    (``reseed`` of the embedded scenes, ...) are forwarded as remote calls; other attributes
    (side channels included) stay in the actor.

    :param actor: the actor handle.
    :param worker_id: the instance's worker id, used in error messages.
    :param info: what ``UnityActor.open`` returned.
    :param call_timeout: seconds to wait for a reset, a step or a forwarded call (``None``: no limit).
    """

    def __init__(
        self, actor: Any, worker_id: int, info: Mapping[str, Any], call_timeout: float | None
    ) -> None:
        self.actor = actor
        self.worker_id = worker_id
        self.node_ip: str = info["node_ip"]
        self.actor_pid: int = info["pid"]
        self.call_timeout = call_timeout
        self._specs: dict[str, BehaviorSpec] = dict(info["behavior_specs"])
        self._methods = frozenset(info["methods"])
        self._steps: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}
        self._actions: PackedActions = {}
        self._pending: Any = None
        self._ready: Any = None  # the pending step's answer, when :func:`collect_steps` fetched it
        #: set when the actor died, hung or its Unity crashed: ``close`` then leaves the actor alone
        self.crashed = False
        self.closed = False

    # ------------------------------------------------------------------ BaseEnv
    @property
    def behavior_specs(self) -> BehaviorMapping:
        return BehaviorMapping(self._specs)

    def reset(self) -> None:
        self._check_open()
        self._pending = self._ready = None  # actor calls run in order: the reset follows any step in flight
        self._actions = {}
        self._receive(self._get(self.actor.reset.remote()))

    def step(self) -> None:
        """Send the buffered actions and step: one round trip (or collect :meth:`submit_step`'s)."""
        self._check_open()
        if self._ready is not None:
            ready, self._ready = self._ready, None
            self._pending = None
            self._receive(ready)
            return
        if self._pending is None:
            self.submit_step()
        ref, self._pending = self._pending, None
        self._receive(self._get(ref))

    def submit_step(self) -> None:
        """Start the remote step now with the buffered actions; the next :meth:`step` collects it.

        Lets a caller start every instance's step before waiting for any of them.
        """
        self._check_open()
        if self._pending is not None:
            raise RuntimeError(
                f"Unity worker {self.worker_id}: a step is already in flight; call step() first"
            )
        actions, self._actions = self._actions, {}
        self._pending = self.actor.step.remote(actions)

    def clear_actions(self) -> None:
        """Forget the actions buffered since the last step."""
        self._actions = {}

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        self._check_behavior(behavior_name)
        if behavior_name not in self._steps:
            return
        spec = self._specs[behavior_name].action_spec
        n = len(self._steps[behavior_name][0])
        action = spec._validate_action(action, n, behavior_name)
        self._actions[behavior_name] = (action.continuous, action.discrete)

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        self._check_behavior(behavior_name)
        if behavior_name not in self._steps:
            return
        spec = self._specs[behavior_name].action_spec
        action = spec._validate_action(action, 1, behavior_name)
        dec = self._steps[behavior_name][0]
        index = np.flatnonzero(dec.agent_id == agent_id)
        if len(index) == 0:
            raise IndexError(
                f"agent {agent_id} of behavior {behavior_name!r} did not ask for a decision this step; "
                "only agents in the last DecisionSteps take actions"
            )
        if behavior_name not in self._actions:
            empty = spec.empty_action(len(dec))
            self._actions[behavior_name] = (empty.continuous, empty.discrete)
        continuous, discrete = self._actions[behavior_name]
        continuous = continuous.copy()  # may be the caller's array
        discrete = discrete.copy()
        continuous[index[0]] = action.continuous[0]
        discrete[index[0]] = action.discrete[0]
        self._actions[behavior_name] = (continuous, discrete)

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        self._check_behavior(behavior_name)
        return self._steps[behavior_name]  # KeyError: no agent of it has reported yet, as UnityEnvironment

    def close(self) -> None:
        """Close the Unity env in the actor (not the actor: its :class:`RayActorSource` owns it)."""
        if self.closed:
            return
        self.closed = True
        self._pending = self._ready = None
        if not self.crashed:
            with contextlib.suppress(Exception):
                ray.get(self.actor.close.remote(), timeout=self.call_timeout)

    # ------------------------------------------------------------------ forwarding
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self.__dict__.get("_methods", ()):
            raise AttributeError(
                f"{type(self).__name__!r} object (and its remote env) has no attribute {name!r}"
            )

        def remote_method(*args: Any, **kwargs: Any) -> Any:
            self._check_open()
            return self._get(self.actor.call.remote(name, args, kwargs))

        remote_method.__name__ = name
        return remote_method

    # ------------------------------------------------------------------ internals
    def _receive(self, result: tuple[PackedSteps, dict[str, BehaviorSpec] | None]) -> None:
        packed, new_specs = result
        if new_specs is not None:
            self._specs = dict(new_specs)
        self._steps = {name: _unpack(p) for name, p in packed.items()}

    def _get(self, ref: Any) -> Any:
        try:
            return ray.get(ref, timeout=self.call_timeout)
        except RayTaskError as err:  # the remote call raised: re-raise what it raised
            cause = err.cause if isinstance(err.cause, BaseException) else err
            if not isinstance(cause, UnityActionException):
                self.crashed = True
            raise cause from err
        except RayActorError as err:
            self.crashed = True
            raise UnityProcessError(
                self.worker_id,
                detail=f"its Ray actor (pid {self.actor_pid} on {self.node_ip}) died or became unreachable "
                f"({type(err).__name__}: {_first_line(err)})",
            ) from err
        except GetTimeoutError as err:
            self.crashed = True
            raise UnityTimeoutError(
                self.worker_id,
                float(self.call_timeout or 0.0),
                detail=f"(a call to its Ray actor on {self.node_ip}; raise call_timeout if the scene is that slow)",
            ) from err

    def _check_behavior(self, behavior_name: str) -> None:
        if behavior_name not in self._specs:
            raise UnityActionException(
                f"The group {behavior_name} does not correspond to an existing agent group in the environment"
            )

    def _check_open(self) -> None:
        if self.closed:
            raise UnityProcessError(self.worker_id, detail="this Ray Unity env is closed")


def collect_steps(envs: list[RayUnityEnv], timeout: float | None) -> None:
    """Fetch the answers of every env's submitted step in one ``ray.get``.

    Each env's next ``step()`` then only unpacks its answer. When any of them failed (or the
    wait timed out) nothing is fetched, and each env's ``step()`` waits for its own answer and
    reports its own error.
    """
    pending = [env for env in envs if env._pending is not None and env._ready is None]
    if not pending:
        return
    try:
        answers = ray.get([env._pending for env in pending], timeout=timeout)
    except Exception:
        return
    for env, answer in zip(pending, answers):
        env._ready = answer


class RayActorSource:
    """Owns the Ray actor of one Unity instance; calling it (re-)opens the env and returns a proxy.

    :param source: a target string for ``open_unity`` or a picklable factory returning a ``BaseEnv``.
    :param worker_id: the instance's worker id.
    :param open_kwargs: keyword arguments for ``open_unity`` (target strings only).
    :param actor_options: options for ``ray.remote(...).options`` (``num_cpus``, ``num_gpus``,
        ``resources``, ``max_restarts``, ``scheduling_strategy``, ``runtime_env``, ...).
    :param call_timeout: seconds to wait for a reset or step (``None``: no limit).
    :param open_timeout: seconds to wait for the actor to be placed and its env opened.
    """

    def __init__(
        self,
        source: ActorSource,
        worker_id: int,
        open_kwargs: Mapping[str, Any] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        call_timeout: float | None = 600.0,
        open_timeout: float | None = 600.0,
    ) -> None:
        if not (isinstance(source, str) or callable(source)) or isinstance(source, BaseEnv):
            raise UnityConfigurationError(
                f"Unity worker {worker_id}: a Ray actor opens its env itself, so pass a target string for "
                f"open_unity or a picklable factory returning a BaseEnv, not {type(source).__name__}"
            )
        if open_kwargs and not isinstance(source, str):
            raise UnityConfigurationError("open_kwargs apply to target strings only, not to factories")
        self.source = source
        self.worker_id = worker_id
        self.open_kwargs = dict(open_kwargs or {})
        self.actor_options = dict(actor_options or {})
        self.call_timeout = call_timeout
        self.open_timeout = open_timeout
        self.actor: Any = None
        #: actors created for this instance (a replacement when one was gone for good)
        self.actors_created = 0

    def __call__(self) -> RayUnityEnv:
        if self.actor is None:
            self._create()
        try:
            info = ray.get(self.actor.open.remote(), timeout=self.open_timeout)
        except (RayActorError, GetTimeoutError):
            # gone for good (restarts used up, node lost) or hung: let Ray place a new one
            self.kill()
            self._create()
            info = self._open_fresh()
        except RayTaskError as err:  # opening raised inside the actor (bad target, build crashed, ...)
            raise (err.cause if isinstance(err.cause, BaseException) else err) from err
        return RayUnityEnv(self.actor, self.worker_id, info, self.call_timeout)

    def _create(self) -> None:
        remote_cls = ray.remote(UnityActor).options(**self.actor_options)
        self.actor = remote_cls.remote(self.source, self.worker_id, self.open_kwargs)
        self.actors_created += 1

    def _open_fresh(self) -> dict[str, Any]:
        try:
            return ray.get(self.actor.open.remote(), timeout=self.open_timeout)
        except RayTaskError as err:
            raise (err.cause if isinstance(err.cause, BaseException) else err) from err
        except (RayActorError, GetTimeoutError) as err:
            raise UnityProcessError(
                self.worker_id,
                detail=f"a new Ray actor could not open it ({type(err).__name__}: {_first_line(err)}); "
                "does the cluster have the resources it asks for?",
            ) from err

    def kill(self) -> None:
        """Kill the actor for good (no Ray restart); calling it again does nothing."""
        actor, self.actor = self.actor, None
        if actor is None:
            return
        with contextlib.suppress(Exception):
            ray.kill(actor, no_restart=True)
        # ray.kill only asks: a call sent right after can still run on the live actor (it did on
        # a loaded CI machine). Wait, bounded, until the actor answers as dead.
        deadline = time.monotonic() + _KILL_WAIT
        while time.monotonic() < deadline:
            try:
                ray.get(actor.close.remote(), timeout=max(deadline - time.monotonic(), 0.1))
            except (RayActorError, GetTimeoutError):
                return
            except Exception:  # anything else: it is not answering normally either
                return
            time.sleep(0.05)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else ""
