"""Models saved before the redesign (issue 15, commit 84313bc) load and act the same after it.

No model zips are kept in git. The models are built by the code of the commit before the move
(``cb9047b``): its ``unity_sb3/`` is extracted with ``git archive`` into a temporary directory and
a subprocess with that directory on ``PYTHONPATH`` trains tiny models for a few steps, saves them,
and records what they do on fixed observations (actions, intrinsic rewards). The current code
then loads each zip and must give the same answers. SB3 pickles the policy class and the features
extractor by module path (``unity_sb3.networks.UnityMultiInputExtractor``,
``unity_sb3.algorithms.poca.policies.POCAMultiInputPolicy``); the reward signals and the BC term
come back from torch state dicts.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from unity_sb3 import POCA, PPO, SAC, UnityVecEnv

ROOT = Path(__file__).resolve().parent.parent
BEFORE_THE_MOVE = "cb9047b"

# Runs with the old package on PYTHONPATH (old module paths: unity_sb3.envs, unity_sb3.unity.demo).
BUILD = """
import sys
from pathlib import Path

import numpy as np
import torch

torch.set_num_threads(1)
old, out = Path(sys.argv[1]).resolve(), Path(sys.argv[2])
import unity_sb3

assert Path(unity_sb3.__file__).resolve().is_relative_to(old), f"imported {unity_sb3.__file__}, not {old}"
from unity_sb3 import POCA, PPO, SAC, UnityVecEnv
from unity_sb3.envs import make_scene
from unity_sb3.networks import UnityMultiInputExtractor
from unity_sb3.unity.demo import record_demo


def record(model, name, obs, **extra):
    model.save(out / f"{name}.zip")
    actions, _ = model.predict(obs, deterministic=True)
    if not isinstance(obs, dict):
        obs = {"obs": obs}
    np.savez(out / f"{name}.npz", actions=actions, **{f"obs.{k}": v for k, v in obs.items()}, **extra)


scene = make_scene("Ball3D", seed=0, num_agents=2)
behavior = next(iter(scene.behavior_specs))
demo = str(out / "Ball3D.demo")
record_demo(scene, behavior, lambda s: scene.expert_actions(behavior, s), demo, n_episodes=1)
scene.close()
tiny = {"network_settings": {"hidden_units": 8, "num_layers": 1}}
env = UnityVecEnv("Ball3D", open_kwargs={"num_agents": 2, "seed": 0})
obs = env.reset()
next_obs = obs + 0.1
ppo = PPO(
    "MlpPolicy", env, n_steps=8, batch_size=16, n_epochs=1, policy_kwargs={"net_arch": [8]}, seed=0,
    reward_signals={
        "extrinsic": {},
        "curiosity": {"strength": 0.02, **tiny},
        "gail": {"strength": 0.01, "demo_path": demo, **tiny},
    },
    behavioral_cloning={"demo_path": demo, "strength": 0.5},
).learn(16)
actions, _ = ppo.predict(obs, deterministic=True)
rewards = ppo.intrinsic_rewards(obs, actions, next_obs)
record(ppo, "ppo_signals_bc", obs, next_obs=next_obs, **{f"reward.{k}": v for k, v in rewards.items()})
sac = SAC(
    "MlpPolicy", env, learning_starts=4, buffer_size=64, batch_size=8, policy_kwargs={"net_arch": [8]}, seed=0,
    reward_signals={"extrinsic": {}, "curiosity": tiny}, behavioral_cloning={"demo_path": demo},
).learn(8)
actions, _ = sac.predict(obs, deterministic=True)
rewards = sac.intrinsic_rewards(obs, actions, next_obs)
record(sac, "sac_signals_bc", obs, next_obs=next_obs, **{f"reward.{k}": v for k, v in rewards.items()})
env.close()

env = UnityVecEnv("GridWorld", open_kwargs={"num_agents": 2, "seed": 0, "image_size": 16})
obs = env.reset()
extractor = {
    "features_extractor_class": UnityMultiInputExtractor,
    "features_extractor_kwargs": {"encoder": "fully_connected", "cnn_output_dim": 8},
    "net_arch": [8],
}
ppo = PPO("MultiInputPolicy", env, n_steps=8, batch_size=16, n_epochs=1, policy_kwargs=extractor, seed=0)
record(ppo.learn(16), "ppo_extractor", obs)
poca = POCA(
    "MultiInputPolicy", env, n_steps=8, batch_size=16, n_epochs=1, seed=0,
    policy_kwargs={**extractor, "critic_embed_dim": 8, "critic_n_heads": 2},
)
record(poca.learn(16), "poca_extractor", obs)
env.close()
"""


@pytest.fixture(scope="module")
def saved_before_the_move(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory of models (``<name>.zip``) and what they did (``<name>.npz``), by the old code."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed: the models are built by the code of the commit before the move")
    found = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{BEFORE_THE_MOVE}^{{commit}}"], capture_output=True
    )
    if found.returncode != 0:
        pytest.skip(
            f"commit {BEFORE_THE_MOVE} (before the move) is not in this checkout (a shallow clone or no .git); "
            "fetch the full history to run this test"
        )
    tmp = tmp_path_factory.mktemp("saved_before_the_move")
    old, out = tmp / "old", tmp / "out"
    old.mkdir()
    out.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", BEFORE_THE_MOVE, "unity_sb3"], capture_output=True, check=True
    )
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(old, filter="data")
    env = {**os.environ, "PYTHONPATH": str(old), "OMP_NUM_THREADS": "1"}
    build = subprocess.run(
        [sys.executable, "-c", BUILD, str(old), str(out)],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"the pre-move code failed to build the models:\n{build.stderr[-4000:]}"
    return out


def _observations(recorded: np.lib.npyio.NpzFile) -> np.ndarray | dict[str, np.ndarray]:
    obs = {key.split(".", 1)[1]: recorded[key] for key in recorded.files if key.startswith("obs.")}
    return obs["obs"] if list(obs) == ["obs"] else obs


@pytest.mark.parametrize(
    ("name", "algo", "scene", "signals"),
    [
        ("ppo_signals_bc", PPO, "Ball3D", {"extrinsic", "curiosity", "gail"}),
        ("sac_signals_bc", SAC, "Ball3D", {"extrinsic", "curiosity"}),
        ("ppo_extractor", PPO, "GridWorld", set()),
        ("poca_extractor", POCA, "GridWorld", set()),
    ],
)
def test_a_model_saved_before_the_move_loads_and_acts_the_same(
    saved_before_the_move: Path, name: str, algo: type, scene: str, signals: set[str]
) -> None:
    open_kwargs = {"num_agents": 2, "seed": 0} | ({"image_size": 16} if scene == "GridWorld" else {})
    env = UnityVecEnv(scene, open_kwargs=open_kwargs)
    try:
        model = algo.load(saved_before_the_move / f"{name}.zip", env=env)
        recorded = np.load(saved_before_the_move / f"{name}.npz")
        obs = _observations(recorded)
        actions, _ = model.predict(obs, deterministic=True)
        np.testing.assert_allclose(actions, recorded["actions"], rtol=1e-5, atol=1e-6)
        if scene == "GridWorld":
            assert type(model.policy.features_extractor).__name__ == "UnityMultiInputExtractor"
        if signals:
            assert set(model._heads) == signals
            assert model._bc is not None  # the BC term came back with the model
            rewards = model.intrinsic_rewards(obs, actions, recorded["next_obs"])
            assert set(rewards) == signals - {"extrinsic"}
            for signal, reward in rewards.items():  # the signals' networks came back, not fresh ones
                np.testing.assert_allclose(reward, recorded[f"reward.{signal}"], rtol=1e-5, atol=1e-7)
    finally:
        env.close()
