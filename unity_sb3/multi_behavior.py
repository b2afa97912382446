"""``MultiBehaviorTrainer``: one model per behavior of a scene, all learning at once in lockstep.

What ``mlagents-learn`` does with a YAML that names several behaviors, in SB3's style::

    from unity_sb3 import POCA, PPO, MultiBehaviorTrainer

    trainer = MultiBehaviorTrainer(
        "/builds/StrikersVsGoalie.x86_64",
        {
            "Striker?team=0": lambda env: POCA("MlpPolicy", env),
            "Goalie?team=1": lambda env: PPO("MlpPolicy", env),
        },
    )
    trainer.learn(500_000)                  # or {"Striker?team=0": 500_000, "Goalie?team=1": 200_000}
    trainer.save("results/run")             # results/run/Striker_team=0/model.zip, ...
    trainer.close()

Each behavior gets a :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` view of a shared
:class:`~unity_sb3.wrappers.lockstep.LockstepUnity` (wrapped in ``VecMonitor``), its model
from its factory, and its own learner thread in :meth:`MultiBehaviorTrainer.learn`. A learner
that finishes detaches its view (its agents are then answered by the answerer of their behavior,
zeros by default); one that raises aborts the others, and ``learn`` re-raises its error with a
note naming the behavior.

Threads and torch: the learners share the process's torch thread pool, so ``learn`` sets
``torch.set_num_threads(torch_threads)`` (1 by default: several learners each using every core
would only fight over them; the setting is process-wide, restored afterwards). The GIL is
released in torch's kernels and in Unity's gRPC exchange, which is where the time goes.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import MaybeCallback
from stable_baselines3.common.vec_env import VecEnv, VecMonitor

from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers.lockstep import EnvSource, LockstepUnity, behavior_dir
from unity_sb3.wrappers.vec_env import UnityVecEnv

__all__ = ["MultiBehaviorTrainer"]

ModelFactory = Callable[[VecEnv], BaseAlgorithm]


class MultiBehaviorTrainer:
    """Several behaviors of one scene, one model each, trained at once on the same Unity instances.

    :param env: a :class:`~unity_sb3.wrappers.lockstep.LockstepUnity` (kept open by :meth:`close`
        only if the trainer made it), or what ``LockstepUnity`` opens: a ``BaseEnv``, a target
        string for ``open_unity``, a factory, or a list of those (one instance each).
    :param behaviors: behavior name (real, ``"Striker?team=0"``, or base, ``"Tennis"`` for all its
        teams) -> factory that builds the model from the behavior's ``VecEnv``
        (e.g. ``lambda env: PPO("MlpPolicy", env)``).
    :param callbacks: behavior name -> SB3 callback (or list of callbacks) used in every :meth:`learn`.
    :param view_kwargs: behavior name -> ``UnityVecEnv`` keyword arguments for its view
        (``num_slots``, ``add_group_reward``, ...).
    :param lockstep_kwargs: keyword arguments for ``LockstepUnity`` when the trainer makes it
        (``open_kwargs``, ``step_timeout``).
    :param monitor: wrap each view in ``VecMonitor`` (episode rewards and lengths in the logs).
    """

    def __init__(
        self,
        env: LockstepUnity | EnvSource | list[EnvSource],
        behaviors: Mapping[str, ModelFactory],
        *,
        callbacks: Mapping[str, MaybeCallback] | None = None,
        view_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
        lockstep_kwargs: Mapping[str, Any] | None = None,
        monitor: bool = True,
    ) -> None:
        if not behaviors:
            raise UnityConfigurationError("MultiBehaviorTrainer needs at least one behavior -> model factory")
        for what, mapping in (("callbacks", callbacks), ("view_kwargs", view_kwargs)):
            unknown = sorted(set(mapping or {}) - set(behaviors))
            if unknown:
                raise UnityConfigurationError(
                    f"{what} names behaviors {unknown} that are not trained; the trained ones are {list(behaviors)}"
                )
        self._owns_lockstep = not isinstance(env, LockstepUnity)
        self.lockstep = LockstepUnity(env, **dict(lockstep_kwargs or {})) if self._owns_lockstep else env
        self.callbacks = dict(callbacks or {})
        self.views: dict[str, UnityVecEnv] = {}
        self.envs: dict[str, VecEnv] = {}
        self.models: dict[str, BaseAlgorithm] = {}
        try:
            for name in behaviors:
                view = self.lockstep.vec_env(name, **dict((view_kwargs or {}).get(name, {})))
                self.views[name] = view
                self.envs[name] = VecMonitor(view) if monitor else view
            for name, factory in behaviors.items():
                model = factory(self.envs[name])
                if not isinstance(model, BaseAlgorithm):
                    raise UnityConfigurationError(
                        f"the factory of behavior {name!r} returned {type(model).__name__}, not an SB3 algorithm"
                    )
                self.models[name] = model
        except BaseException:
            self.close()
            raise

    def learn(
        self,
        total_timesteps: int | Mapping[str, int],
        callback: MaybeCallback | Mapping[str, MaybeCallback] = None,
        *,
        log_interval: int = 1,
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
        torch_threads: int | None = 1,
    ) -> MultiBehaviorTrainer:
        """Run every model's ``learn`` in its own thread until each has its timesteps.

        :param total_timesteps: steps per model (SB3's count: slots x vector steps), one number for
            all or one per behavior (a behavior left out does not learn; its agents are answered
            by its answerer, zeros by default).
        :param callback: behavior -> SB3 callback (or list), added to the ``callbacks`` given to the
            constructor; a plain function may serve every model, a ``BaseCallback`` object only one.
        :param log_interval: SB3's ``log_interval``.
        :param reset_num_timesteps: SB3's ``reset_num_timesteps`` (``True`` also resets Unity once).
        :param progress_bar: one SB3 progress bar per model.
        :param torch_threads: ``torch.set_num_threads`` while learning (process-wide); ``None`` leaves it.
        :return: self.
        """
        steps = self._per_behavior(total_timesteps, "total_timesteps")
        learners = [name for name in self.models if name in steps]
        if isinstance(callback, Mapping):
            self._per_behavior(callback, "callback")
        elif len(learners) > 1 and any(isinstance(cb, BaseCallback) for cb in _as_list(callback)):
            raise UnityConfigurationError(
                "an SB3 callback object belongs to one model, but this learn() runs "
                f"{len(learners)}; give one per behavior: callback={{behavior: callback, ...}}"
            )
        for name in learners:
            self.lockstep.attach(self.views[name])
        for name in self.models:
            if name not in steps:
                self.lockstep.detach(self.views[name])
        errors: dict[str, BaseException] = {}

        def run(name: str) -> None:
            try:
                self.models[name].learn(
                    int(steps[name]),
                    callback=self._callbacks(name, callback),
                    log_interval=log_interval,
                    tb_log_name=behavior_dir(name),
                    reset_num_timesteps=reset_num_timesteps,
                    progress_bar=progress_bar,
                )
            except BaseException as exc:
                if not errors:
                    self.lockstep.abort(exc)
                errors.setdefault(name, exc)
            finally:
                with contextlib.suppress(Exception):
                    self.lockstep.detach(self.views[name])

        threads = [
            threading.Thread(target=run, args=(n,), name=f"learner-{n}", daemon=True) for n in learners
        ]
        with _torch_threads(torch_threads):
            for thread in threads:
                thread.start()
            try:
                for thread in threads:
                    thread.join()
            except BaseException as exc:  # Ctrl-C: stop the learners instead of leaving them stepping
                self.lockstep.abort(exc)
                raise
        if errors:
            first = next(iter(errors))  # the first to fail; the others were aborted by it
            exc = errors[first]
            note = f"raised by the learner of behavior {first!r} (MultiBehaviorTrainer)"
            if hasattr(exc, "add_note"):  # Python >= 3.11
                exc.add_note(note)
                raise exc
            raise RuntimeError(f"{note}: {type(exc).__name__}: {exc}") from exc
        return self

    def _per_behavior(self, value: Any, what: str) -> dict[str, Any]:
        if isinstance(value, Mapping):
            unknown = sorted(set(value) - set(self.models))
            if unknown:
                raise UnityConfigurationError(
                    f"{what} names behaviors {unknown} that are not trained; the trained ones are {list(self.models)}"
                )
            return dict(value)
        return dict.fromkeys(self.models, value)

    def _callbacks(self, name: str, extra: MaybeCallback | Mapping[str, MaybeCallback]) -> MaybeCallback:
        parts: list[Any] = []
        for cb in (self.callbacks.get(name), extra.get(name) if isinstance(extra, Mapping) else extra):
            if cb is None:
                continue
            parts.extend(_as_list(cb))
        return parts or None

    def save(self, path: str | Path) -> list[Path]:
        """Save every model as ``path/<behavior>/model.zip`` (``?`` in names -> ``_``, see ``behavior_dir``).

        :return: the paths written.
        """
        written = []
        for name, model in self.models.items():
            target = Path(path) / behavior_dir(name) / "model.zip"
            target.parent.mkdir(parents=True, exist_ok=True)
            model.save(target)
            written.append(target)
        return written

    def load(self, path: str | Path, **load_kwargs: Any) -> MultiBehaviorTrainer:
        """Replace every model by the one saved under ``path/<behavior>/model.zip``, bound to its view.

        :param load_kwargs: more keyword arguments for each algorithm's ``load`` (``device``, ...).
        :return: self.
        """
        missing = [n for n in self.models if not (Path(path) / behavior_dir(n) / "model.zip").is_file()]
        if missing:
            raise FileNotFoundError(
                f"no saved model for behavior(s) {missing} under {path} (expected <behavior>/model.zip, "
                "as MultiBehaviorTrainer.save writes)"
            )
        for name, model in list(self.models.items()):
            target = Path(path) / behavior_dir(name) / "model.zip"
            self.models[name] = type(model).load(target, env=self.envs[name], **load_kwargs)
        return self

    def close(self) -> None:
        """Close the views, and the Unity instances when the trainer opened them."""
        for env in self.envs.values():
            with contextlib.suppress(Exception):
                env.close()
        if self._owns_lockstep:
            self.lockstep.close()


def _as_list(callback: Any) -> list[Any]:
    if callback is None:
        return []
    return list(callback) if isinstance(callback, list) else [callback]


@contextlib.contextmanager
def _torch_threads(n: int | None):
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)
