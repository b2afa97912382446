"""Fingerprints of everything ``UnityVecEnv`` shows its user, over many scenes and scripts.

A trace runs one scenario (a scene or a scripted env, its parameters, a seed for the actions) for
a number of wrapper steps and hashes every output in order: observations, rewards, dones, every
info dict (keys, value types, values; terminal observations and truncation flags included), the
active mask, which agent each slot holds, the action masks, and for scripted envs every action
each agent received. Two versions of the wrapper that give the same fingerprint for a scenario
behave the same there, down to the bytes and the Python types.

``tests/data/vec_env_fingerprints.json`` holds the fingerprints the wrapper gave before its
per-Unity-step bookkeeping was deferred to once per wrapper step (2026-11-26, recorded at
2927f63); ``tests/test_vec_env_fingerprints.py`` checks the current wrapper against them.
Record again (only when a scene's dynamics changed on purpose, never to make a wrapper change
pass) with ``python tests/vec_env_traces.py --record``.
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent
FINGERPRINTS = ROOT / "data" / "vec_env_fingerprints.json"

from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedBehavior, ScriptedEnv  # noqa: E402
from unity_sb3.wrappers.vec_env import UnityVecEnv  # noqa: E402

from mlagents_envs.base_env import ActionSpec  # isort: skip  # noqa: E402


class _Hasher:
    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, value: Any) -> None:
        h = self._h
        if isinstance(value, np.ndarray):
            h.update(f"nd{value.dtype.str}{value.shape}".encode())
            h.update(np.ascontiguousarray(value).tobytes())
        elif isinstance(value, dict):
            h.update(f"dict{len(value)}".encode())
            for k in value:  # insertion order is part of what a user sees
                h.update(repr(k).encode())
                self.add(value[k])
        elif isinstance(value, list | tuple):
            h.update(f"{type(value).__name__}{len(value)}".encode())
            for v in value:
                self.add(v)
        elif isinstance(value, np.generic):
            h.update(f"np{value.dtype.str}".encode() + value.tobytes())
        else:
            h.update(f"{type(value).__name__}:{value!r}".encode())

    def hexdigest(self) -> str:
        return self._h.hexdigest()[:16]


def _random_scripts(seed: int) -> tuple[list[ScriptedAgent], int | None]:
    """Agents dying, changing ids, reappearing, out of phase, in groups (like the property test)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 7))
    agents = []
    for _ in range(n):
        agents.append(
            ScriptedAgent(
                period=int(rng.integers(1, 4)),
                start=int(rng.integers(0, 3)),
                episode_length=None if rng.random() < 0.2 else int(rng.integers(1, 7)),
                episodes=None if rng.random() < 0.5 else int(rng.integers(1, 4)),
                respawn_delay=int(rng.integers(0, 4)),
                interrupted=bool(rng.random() < 0.5),
                new_id_each_episode=bool(rng.random() < 0.5),
                reward=float(rng.choice([1.0, 0.1, -0.3])),
                group_id=int(rng.integers(0, 3)),
                group_reward=float(rng.choice([0.0, 0.0, 0.25])),
            )
        )
    agents[0].start = 0  # someone asks at reset
    slots = rng.integers(1, n + 2)
    return agents, None if rng.random() < 0.4 else int(slots)


def _scripted(seed: int, visual: bool, discrete: bool) -> Callable[[], tuple[Any, UnityVecEnv]]:
    def make() -> tuple[Any, UnityVecEnv]:
        agents, num_slots = _random_scripts(seed)
        spec = ActionSpec(1, (3, 2)) if discrete else ActionSpec(2, ())
        mask_fn = (lambda k, t: [np.arange(3) == (k + t) % 3, np.zeros(2, bool)]) if discrete else None
        behavior = ScriptedBehavior(
            agents, action_spec=spec, visual_shape=(4, 4, 3) if visual else None, mask_fn=mask_fn
        )
        env = ScriptedEnv(behavior, strict=True, list_group_ids=seed % 2 == 0)
        venv = UnityVecEnv(env, num_slots=num_slots, max_idle_steps=30, add_group_reward=seed % 3 == 0)
        return env, venv

    return make


def _scripted_pair(seed: int) -> Callable[[], tuple[Any, UnityVecEnv]]:
    def make() -> tuple[Any, UnityVecEnv]:
        envs = [ScriptedEnv(_random_scripts(seed + 1000 * k)[0], strict=True) for k in range(2)]
        counts = [len(e.behaviors[next(iter(e.behaviors))].agents) for e in envs]
        return envs, UnityVecEnv(envs, num_slots=counts, max_idle_steps=30)

    return make


def _crashing(seed: int, crash_in: str) -> Callable[[], tuple[Any, UnityVecEnv]]:
    """A scripted env that crashes mid-run (in a wrapper step's idle Unity steps or at its decision
    step) and is restarted: the slots' terminal observations come from the observation buffer."""

    def make() -> tuple[Any, UnityVecEnv]:
        agents, _ = _random_scripts(seed)
        made: list[ScriptedEnv] = []

        def factory() -> ScriptedEnv:
            crash_at = 7 + seed % 5 if not made else None
            made.append(ScriptedEnv(agents, strict=True, crash_at=crash_at, crash_in=crash_in))
            return made[-1]

        venv = UnityVecEnv(
            factory, num_slots=len(agents), max_idle_steps=30, restart_on_crash=True, restart_backoff=0.0
        )
        return made, venv

    return make


def _scene(name: str, **params: Any) -> Callable[[], tuple[Any, UnityVecEnv]]:
    def make() -> tuple[Any, UnityVecEnv]:
        from unity_sb3.open import open_unity

        add_group_reward = params.pop("add_group_reward", False)
        env = open_unity(name, transport="inprocess", **params)
        return env, UnityVecEnv(env, add_group_reward=add_group_reward)

    return make


def scenarios() -> dict[str, tuple[Callable[[], tuple[Any, UnityVecEnv]], int]]:
    """name -> (factory of ``(env or envs, venv)``, wrapper steps)."""
    out: dict[str, tuple[Callable[[], tuple[Any, UnityVecEnv]], int]] = {}
    for seed in range(60):
        out[f"scripted-{seed}"] = (_scripted(seed, visual=seed % 5 == 1, discrete=seed % 4 == 2), 40)
    for seed in range(6):
        out[f"scripted-pair-{seed}"] = (_scripted_pair(seed), 30)
    for seed in range(8):
        out[f"scripted-crash-{seed}"] = (_crashing(seed, "step" if seed % 2 else "get_steps"), 25)
    out["Ball3D-12"] = (_scene("Ball3D", num_agents=12, seed=1), 300)
    out["Ball3D-256"] = (_scene("Ball3D", num_agents=256, seed=2), 150)
    out["Ball3D-64-stable-ids"] = (_scene("Ball3D", num_agents=64, seed=3, stable_agent_ids=True), 150)
    out["Ball3D-40-period-3-max-30"] = (
        _scene("Ball3D", num_agents=40, seed=4, decision_period=3, max_steps=30),
        150,
    )
    out["Escape"] = (_scene("Escape", seed=5, add_group_reward=True), 200)
    out["GridWorld"] = (_scene("GridWorld", num_agents=5, seed=6), 120)
    out["Basic"] = (_scene("Basic", num_agents=7, seed=7), 120)
    return out


def _outputs(env: Any, venv: UnityVecEnv, steps: int, seed: int) -> Iterator[Any]:
    rng = np.random.default_rng(seed)
    venv.action_space.seed(seed)
    masks = venv.spaces.mask_size > 0
    obs = venv.reset()
    yield obs, venv.reset_infos, venv.active_mask, venv.slot_agent_ids()
    for _ in range(steps):
        if masks:
            yield venv.action_masks()
        if rng.random() < 0.1:  # now and then the same action for every slot
            actions = np.stack([venv.action_space.sample()] * venv.num_envs)
        else:
            actions = np.stack([venv.action_space.sample() for _ in range(venv.num_envs)])
        try:
            obs, reward, done, infos = venv.step(actions)
        except Exception as error:  # e.g. every agent left: the same error, the same message
            yield type(error).__name__, str(error)
            break
        yield obs, reward, done, infos, venv.active_mask, venv.slot_agent_ids()
    for e in env if isinstance(env, list) else [env]:
        if isinstance(e, ScriptedEnv):
            for name, per_agent in e.received.items():
                for k, received in per_agent.items():
                    yield name, k, [(r.step, r.agent_id, r.continuous, r.discrete) for r in received]
            yield e.unanswered


def fingerprint(name: str) -> str:
    """The fingerprint of scenario ``name`` with the ``UnityVecEnv`` imported here."""
    make, steps = scenarios()[name]
    hasher = _Hasher()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env, venv = make()
        try:
            for out in _outputs(env, venv, steps, seed=sum(map(ord, name))):
                hasher.add(out)
        finally:
            venv.close()
    return hasher.hexdigest()


def recorded() -> dict[str, str]:
    return json.loads(FINGERPRINTS.read_text())["fingerprints"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python tests/vec_env_traces.py --record")
    prints = {name: fingerprint(name) for name in scenarios()}
    FINGERPRINTS.write_text(json.dumps({"fingerprints": prints}, indent=1) + "\n")
    print(f"wrote {len(prints)} fingerprints to {FINGERPRINTS}")
