"""Stand-in Unity players for tests: launch keywords, random actions, a scene that fails on cue."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

import numpy as np
from ports import free_base_port

from unity_sb3.wrappers.vec_env import UnityVecEnv

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def player_kwargs(tmp_path: Path, **extra) -> dict:
    kwargs = {
        "transport": "player",
        "base_port": free_base_port(),
        "find_free_port": True,
        "timeout_wait": 30,
        "num_agents": 3,
        "log_folder": str(tmp_path),
    }
    kwargs.update(extra)
    return kwargs


def random_actions(venv: UnityVecEnv, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (venv.num_envs, *venv.action_space.shape)).astype(np.float32)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


# A scene file the stand-in player serves: Ball3D that fails at Unity step ``fail_at`` by
# raising (the player exits with code 1) or by sending a NaN observation for one agent.
FAULTY_SCENE = textwrap.dedent(
    """
    import numpy as np
    from unity_sb3.scenes import make_scene


    def faulty(seed=0, fail_at=3, mode="raise", num_agents=3):
        env = make_scene("Ball3D", seed=seed, num_agents=num_agents)
        step, get_steps = env.step, env.get_steps
        count = [0]

        def failing_step():
            count[0] += 1
            if mode == "raise" and count[0] >= fail_at:
                raise RuntimeError("scripted scene failure at step %d" % count[0])
            step()

        def poisoned_get_steps(name):
            dec, term = get_steps(name)
            if mode in ("nan", "inf") and count[0] >= fail_at and len(dec):
                dec.obs[0][len(dec) - 1, 1] = np.nan if mode == "nan" else np.inf
            return dec, term

        env.step, env.get_steps = failing_step, poisoned_get_steps
        return env
    """
)


def faulty_factory(tmp_path: Path, base_port: int, **params):
    """A factory for ``UnityVecEnv`` that launches the faulty scene in a stand-in player."""
    from unity_sb3.scenes.player.launcher import write_launcher
    from unity_sb3.unity.connect import LocalUnityEnvironment

    scene_file = tmp_path / "faulty_scene.py"
    scene_file.write_text(FAULTY_SCENE)
    launcher = write_launcher(f"{scene_file}:faulty", tmp_path / "build", scene_params=params)

    def factory():
        return LocalUnityEnvironment(
            str(launcher),
            base_port=base_port,
            find_free_port=True,
            timeout_wait=30,
            log_folder=str(tmp_path),
            no_graphics=True,
        )

    return factory
