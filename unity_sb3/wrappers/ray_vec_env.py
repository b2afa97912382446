"""``RayUnityVecEnv``: ``UnityVecEnv`` with each Unity instance in a Ray actor, anywhere on a cluster.

A physics-heavy or visual scene runs out of one machine's cores long before the SB3 learner
is the bottleneck. Here every Unity instance (a build, or an embedded scene in-process or
behind the stand-in player) lives in its own Ray actor, placed by Ray's scheduler on any node
with the resources it asks for, and the learner sees one SB3 ``VecEnv`` whose slots are the
agents of all instances::

    import ray
    from stable_baselines3 import PPO
    from unity_sb3.wrappers.ray_vec_env import RayUnityVecEnv

    ray.init(address="auto")  # join the cluster started with `ray start --head` / `ray up`
    # ray.init()               # or a local Ray instance on this machine
    venv = RayUnityVecEnv(
        "/shared/builds/3DBall.x86_64",  # the path must exist on every node that may host an actor
        num_instances=16,
        num_cpus=2,                       # per actor: what one Unity instance needs
        restart_on_crash=True,            # a dead actor is restarted by Ray, its env re-opened
    )
    PPO("MlpPolicy", venv).learn(1_000_000)
    venv.close()                          # kills the actors

Design, and why:

- **Exactly ``UnityVecEnv``.** ``RayUnityVecEnv`` *is* a ``UnityVecEnv`` over
  :class:`~unity_sb3.wrappers.ray_actor.RayUnityEnv` proxies, so slots, inactive slots, masks,
  groups, idle steps and restarts follow DESIGN 4.2 through the very same code; nothing about
  agents is re-implemented on the far side.
- **One round trip per instance per step.** The proxy buffers ``set_actions`` and sends all
  behaviors' actions and the step in one actor call, which answers with every behavior's
  ``DecisionSteps`` / ``TerminalSteps`` as numpy arrays (Ray's pickle-5 serialisation: no
  per-agent Python objects; arrays big enough for the object store arrive zero-copy).
- **Asynchronous across actors.** :meth:`step_wait` first prepares every instance's actions
  (so a bad action raises before any instance stepped), then starts every actor's step, and
  only then collects them; the wall time of a step is the slowest instance's, not the sum.
  The actor runs the env in its own process, so unlike ``UnityVecEnv``'s threads this also
  spreads in-process embedded scenes (pure Python) over cores and nodes.
- **Restarts are Ray's, then ours.** Each actor is created with ``max_restarts`` (0 unless
  ``restart_on_crash``): when it dies Ray restarts it on a live node; the next step reports
  the death, ``UnityVecEnv``'s restart path re-opens the env in the restarted actor and resets
  it, and the instance's slots end their episodes as truncated with ``infos[i]["restarted"]``.
  A Unity crash inside a live actor is re-opened in place; an actor gone for good (restarts
  used up, node lost) or hung past ``call_timeout`` is replaced by a new one. ``max_restarts``
  bounds both, per instance.
- **Placement.** ``num_cpus``, ``num_gpus`` (rendering), ``resources`` (custom resources,
  e.g. ``{"unity_build": 1}`` on the nodes that have the build) and any other
  ``actor_options`` (``scheduling_strategy``, ``runtime_env``, ...) go to
  ``ray.remote(...).options``. Each instance opens with its own ``worker_id`` (its port
  offset) and moves to a free port when that one is taken, so several fit on one node.

Measured on a 2-core machine (``benchmarks/scale_out.py``): a Ray actor call costs the learner
about 1 ms of CPU and 2 ms of latency per instance step, about as much as the stand-in player's
gRPC exchange itself, so on one machine ``UnityVecEnv``'s threads are faster. Ray pays off when
the instances need more cores than the learner's machine has: slow (physics-heavy, visual)
scenes, or many of them, across nodes.

Side channels (engine settings, environment parameters, stats) live in the actors with
their envs: pass them as ``open_kwargs`` (``engine_settings=``, ``environment_parameters=``);
``get_attr("unity_sb3_channels")`` does not reach them. Public methods of the remote env that
``BaseEnv`` does not define (``reseed``, ...) are forwarded, so ``env_method`` and
``seed()`` work. ``ray.init`` is the caller's: the wrapper uses whatever Ray instance is
running (and lets ``ray`` start a local one if none is).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from unity_sb3.spaces import HybridMode, VisualMode
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.instances import slice_actions
from unity_sb3.wrappers.ray_actor import RayActorSource, RayUnityEnv, collect_steps
from unity_sb3.wrappers.vec_env import OtherBehaviors, UnityVecEnv

from mlagents_envs.base_env import BaseEnv  # isort: skip

__all__ = ["RayUnityVecEnv"]

RaySource = str | Callable[[], BaseEnv]


class RayUnityVecEnv(UnityVecEnv):
    """A :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` whose Unity instances live in Ray actors.

    :param env: a target string for :func:`unity_sb3.open.open_unity` (a build path,
        which must exist on the node running the actor, or an embedded scene name), a picklable
        factory returning a ``BaseEnv`` (called inside the actor), or a list of those (one
        instance each; instance ``i`` opens with ``worker_id=i``). ``BaseEnv`` objects cannot be
        moved into an actor.
    :param behavior_name: the behavior whose agents become slots; ``None`` takes the only one.
    :param num_instances: with a single ``env``, how many instances of it to run.
    :param num_cpus: CPUs Ray reserves for each actor (a Unity instance needs about one).
    :param num_gpus: GPUs Ray reserves for each actor (rendering visual observations).
    :param resources: custom Ray resources each actor needs, e.g. ``{"unity_build": 1}``.
    :param actor_options: more ``ray.remote(...).options`` for the actors (``scheduling_strategy``,
        ``runtime_env``, ``max_restarts``, ...); they override the arguments above.
    :param restart_on_crash: when an actor dies or its Unity crashes, restart it (Ray) and re-open
        and reset its env, reporting its slots as truncated with ``infos[i]["restarted"]``;
        otherwise raise an error naming the worker id.
    :param max_restarts: restarts per instance (also the actors' Ray ``max_restarts``).
    :param call_timeout: seconds to wait for one reset or step of an actor (``None``: no limit);
        an actor that takes longer counts as crashed.
    :param open_timeout: seconds to wait for an actor to be placed and its env opened.
    :param open_kwargs: keyword arguments for ``open_unity`` inside the actor (target strings only),
        e.g. ``{"transport": "player", "num_agents": 12}``. ``find_free_port`` defaults to True
        here: an actor's node may run other Unity instances on the same ports.
    :param num_slots: see ``UnityVecEnv``; the remaining keyword arguments too.
    """

    def __init__(
        self,
        env: RaySource | Sequence[RaySource],
        behavior_name: str | None = None,
        *,
        num_instances: int | None = None,
        num_cpus: float = 1.0,
        num_gpus: float = 0.0,
        resources: Mapping[str, float] | None = None,
        actor_options: Mapping[str, Any] | None = None,
        restart_on_crash: bool = False,
        max_restarts: int = 5,
        call_timeout: float | None = 600.0,
        open_timeout: float | None = 600.0,
        open_kwargs: dict[str, Any] | None = None,
        num_slots: int | Sequence[int] | None = None,
        visual: VisualMode = "uint8",
        flatten_obs: bool = False,
        hybrid: HybridMode = "box",
        add_group_reward: bool = False,
        other_behaviors: OtherBehaviors | None = None,
        max_idle_steps: int = 1000,
        restart_backoff: float = 1.0,
    ) -> None:
        import ray

        sources = _sources(env, num_instances)
        options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "num_gpus": num_gpus,
            "max_restarts": int(max_restarts) if restart_on_crash else 0,
        }
        if resources:
            options["resources"] = dict(resources)
        options.update(actor_options or {})
        open_kwargs = {"find_free_port": True, **(open_kwargs or {})}
        if not ray.is_initialized():
            ray.init()
        self._sources = [
            RayActorSource(
                source,
                worker_id=i,
                open_kwargs=open_kwargs if isinstance(source, str) else None,
                actor_options=options,
                call_timeout=call_timeout,
                open_timeout=open_timeout,
            )
            for i, source in enumerate(sources)
        ]
        self._killed = False
        self._call_timeout = call_timeout
        try:
            super().__init__(
                list(self._sources),
                behavior_name,
                num_slots=num_slots,
                visual=visual,
                flatten_obs=flatten_obs,
                hybrid=hybrid,
                add_group_reward=add_group_reward,
                restart_on_crash=restart_on_crash,
                max_restarts=max_restarts,
                other_behaviors=other_behaviors,
                max_idle_steps=max_idle_steps,
                restart_backoff=restart_backoff,
            )
        except BaseException:
            self._kill_actors()
            raise

    # ------------------------------------------------------------------ stepping
    def step_wait(self) -> VecEnvStepReturn:
        """Start every actor's step, then let ``UnityVecEnv`` collect them (one round trip each)."""
        self._check_open()
        instances = self._instances
        if self._actions is None or len(instances) == 1:
            return super().step_wait()
        try:
            for inst in instances:  # local only: validates and buffers, nothing is sent yet
                super()._send(inst, slice_actions(self._actions, inst.slots))
        except BaseException:
            for inst in instances:
                inst.env.clear_actions()
            raise
        for inst in instances:
            inst.env.submit_step()
        collect_steps([inst.env for inst in instances], self._call_timeout)
        self._presubmitted = True
        try:
            return super().step_wait()
        finally:
            self._presubmitted = False

    def _send(self, inst: Any, actions: Any) -> None:
        if getattr(self, "_presubmitted", False):
            return  # step_wait buffered and submitted this instance's actions already
        super()._send(inst, actions)

    # ------------------------------------------------------------------ actors
    @property
    def actors(self) -> list[Any]:
        """The Ray actor handle of each Unity instance (not per slot)."""
        return [source.actor for source in self._sources]

    @property
    def ray_envs(self) -> list[RayUnityEnv]:
        """The learner-side proxy of each Unity instance (``node_ip``, ``actor_pid``, ...)."""
        return [inst.env for inst in self._instances]

    def close(self) -> None:
        """Close every Unity env and kill every actor; calling it again does nothing."""
        try:
            super().close()
        finally:
            self._kill_actors()

    def _kill_actors(self) -> None:
        if getattr(self, "_killed", True):
            return
        self._killed = True
        for source in self._sources:
            source.kill()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _sources(env: RaySource | Sequence[RaySource], num_instances: int | None) -> list[RaySource]:
    if isinstance(env, BaseEnv):
        raise UnityConfigurationError(
            "RayUnityVecEnv opens each Unity instance inside a Ray actor, so it needs a target string for "
            "open_unity or a picklable factory returning a BaseEnv, not a BaseEnv object"
        )
    single = isinstance(env, str) or callable(env)
    sources: list[RaySource] = [env] if single else list(env)  # type: ignore[list-item]
    if not sources:
        raise UnityConfigurationError(
            "RayUnityVecEnv needs at least one Unity environment, got an empty list"
        )
    if num_instances is not None:
        if not single:
            raise UnityConfigurationError(
                f"num_instances={num_instances} repeats a single env; with a list of {len(sources)} envs leave it out"
            )
        if num_instances < 1:
            raise UnityConfigurationError(f"num_instances must be >= 1, got {num_instances}")
        sources = sources * int(num_instances)
    for i, source in enumerate(sources):
        if isinstance(source, BaseEnv) or not (isinstance(source, str) or callable(source)):
            raise UnityConfigurationError(
                f"instance {i} is a {type(source).__name__}; RayUnityVecEnv needs target strings or picklable "
                "factories returning a BaseEnv (the env is opened inside the Ray actor)"
            )
    return sources
