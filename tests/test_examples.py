"""The scripts in ``examples/`` run as they are, with tiny budgets.

Most are imported and run through their ``main(argv)`` in this process (cheap: torch and SB3 are
already imported); two run as real subprocesses (``python examples/NAME.py``), one of them through
the stand-in Unity player over gRPC.
"""

from __future__ import annotations

import importlib.util
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from gymnasium import spaces

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(p.stem for p in EXAMPLES.glob("*.py"))


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_script(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # torch: one thread, the machines have 2 cores
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=EXAMPLES.parent
    )


def test_every_example_is_listed_in_the_readme():
    readme = (EXAMPLES / "README.md").read_text()
    assert len(SCRIPTS) == 10
    for name in SCRIPTS:
        assert f"python examples/{name}.py" in readme, name


@pytest.mark.parametrize("name", SCRIPTS)
def test_help(name, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load(name).main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"python examples/{name}.py" in out  # the module docstring is the description
    assert "--timesteps" in out


def test_ppo_ball3d_through_the_player_as_a_script(tmp_path):
    """The full path a Unity build takes: a separate process speaking the ML-Agents protocol."""
    save = tmp_path / "ball3d"
    result = run_script(
        "examples/ppo_ball3d.py",
        "--player",
        *("--timesteps", "96", "--n-steps", "8", "--eval-episodes", "2", "--save-path", str(save)),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "12 slots" in result.stdout
    assert f"saved to {save}.zip; mean reward over 2 episodes" in result.stdout
    assert (tmp_path / "ball3d.zip").is_file()


def test_maskable_ppo_gridworld(tmp_path, capsys):
    mean = load("maskable_ppo_gridworld").main(
        ["--timesteps", "36", "--n-steps", "4", "--eval-episodes", "2", "--save-path", str(tmp_path / "m")]
    )
    out = capsys.readouterr().out
    assert "one row per slot" in out and "Dict(" in out
    assert -2.0 <= mean <= 1.0  # -0.01 per step, +1 / -1 at a goal
    assert (tmp_path / "m.zip").is_file()


def test_poca_escape(tmp_path, capsys):
    outcomes = load("poca_escape").main(
        [
            *("--timesteps", "24", "--n-steps", "8", "--num-agents", "3"),
            *("--eval-steps", "120", "--save-path", str(tmp_path / "p")),
        ]
    )
    # 120 steps > max_steps (100): every group episode of the single room has ended at least once
    for escapes, episodes in outcomes.values():
        assert episodes >= 1 and 0 <= escapes <= episodes
    assert "group success rate:" in capsys.readouterr().out
    assert (tmp_path / "p.zip").is_file()


@pytest.mark.parametrize("curiosity", [True, False], ids=["curiosity", "plain"])
def test_curiosity_pyramids(tmp_path, curiosity):
    from unity_sb3 import PPO

    args = ["--timesteps", "48", "--n-steps", "6", "--room-size", "5", "--save-path", str(tmp_path / "c")]
    success = load("curiosity_pyramids").main(args + ([] if curiosity else ["--no-curiosity"]))
    assert math.isnan(success) or 0.0 <= success <= 1.0
    model = PPO.load(tmp_path / "c.zip", device="cpu")
    assert (model.signals is not None and "curiosity" in model.signals) is curiosity


def test_bc_then_ppo_records_the_expert(tmp_path, capsys):
    demo = tmp_path / "expert.demo"
    scores = load("bc_then_ppo").main(
        [
            *("--record-to", str(demo), "--demo-records", "240", "--pretrain-epochs", "2"),
            *("--timesteps", "48", "--n-steps", "4", "--max-steps", "100", "--eval-episodes", "2"),
            *("--save-path", str(tmp_path / "b")),
        ]
    )
    assert demo.is_file() and "240 records" in capsys.readouterr().out
    assert list(scores) == ["untrained", "after BC", "after PPO + BC", "exported ONNX"]
    assert all(0.0 <= s <= 0.1 * 100 / 5 + 1e-3 for s in scores.values())  # perfect score: 2.0
    assert (tmp_path / "b.onnx").is_file()


def test_bc_then_ppo_learns_from_unitys_own_trained_policy(tmp_path, capsys):
    teacher = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "models" / "3DBall.onnx"
    if not teacher.is_file():
        pytest.skip(f"Unity's 3DBall.onnx not found at {teacher} (shared/ must sit beside the checkout)")
    demo = tmp_path / "unity.demo"
    scores = load("bc_then_ppo").main(
        [
            *("--teacher", str(teacher), "--record-to", str(demo), "--demo-records", "600"),
            *("--pretrain-epochs", "30", "--timesteps", "48", "--n-steps", "4", "--max-steps", "100"),
            *("--eval-episodes", "12", "--save-path", str(tmp_path / "b")),
        ]
    )
    assert "600 records" in capsys.readouterr().out
    # Unity's policy keeps every ball up (2.0 per 100-step episode); its clone does better than untrained
    assert scores["after BC"] > scores["untrained"] and scores["exported ONNX"] > scores["untrained"]


def test_bc_then_ppo_with_a_unity_recording(demo_dir, tmp_path, capsys):
    scores = load("bc_then_ppo").main(
        [
            *("--demo", str(demo_dir / "Expert3DBall.demo"), "--pretrain-epochs", "1"),
            *("--timesteps", "48", "--n-steps", "4", "--max-steps", "100", "--eval-episodes", "2"),
            *("--save-path", str(tmp_path / "b")),
        ]
    )
    assert "3DBallLearning" in capsys.readouterr().out
    assert len(scores) == 4 and (tmp_path / "b.zip").is_file() and (tmp_path / "b.onnx").is_file()


def test_hallway_imitation_records_the_expert_and_trains_with_memory_gail_and_bc(tmp_path, capsys):
    demo = tmp_path / "ExpertHallway.demo"
    result = load("hallway_imitation").main(
        [
            *("--record-to", str(demo), "--demo-episodes", "3", "--timesteps", "1024"),
            *("--eval-episodes", "8", "--save-path", str(tmp_path / "h")),
        ]
    )
    out = capsys.readouterr().out
    assert demo.is_file() and "agent episodes: 3 (3 terminal" in out
    assert 0.0 <= result["success"] <= 1.0 and "trained policy: success" in out
    from unity_sb3 import RecurrentPPO

    model = RecurrentPPO.load(tmp_path / "h.zip")
    assert set(model.reward_signals) == {"extrinsic", "gail"} and model.behavioral_cloning is not None
    assert model.policy.memory_size == 256 and model.time_horizon == 64


def test_connect_unity_build_missing_build_fails_clearly(tmp_path):
    missing = tmp_path / "builds" / "MyGame.x86_64"
    result = run_script("examples/connect_unity_build.py", str(missing), "--timeout", "5")
    assert result.returncode == 1
    assert "UnityExecutableNotFoundError" in result.stderr and str(missing) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["Ball3D", "--timesteps", "0", "--env-param", "mass=2", "--time-scale", "5"],
            0,
            "12 agents -> 12 slots",
        ),
        (["Ball3D", "--timesteps", "0", "--behavior", "Nope"], 1, "behavior 'Nope' not found"),
    ],
    ids=["embedded_scene", "unknown_behavior"],
)
def test_connect_unity_build_in_process(args, code, message, capsys):
    assert load("connect_unity_build").main(args) == code
    captured = capsys.readouterr()
    assert message in captured.out + captured.err


@pytest.mark.parametrize("bad", ["mass", "=2", "mass=heavy"])
def test_connect_unity_build_rejects_bad_env_params(bad, capsys):
    with pytest.raises(SystemExit) as exit_info:
        load("connect_unity_build").main(["Ball3D", "--env-param", bad])
    assert exit_info.value.code == 2
    assert "--env-param" in capsys.readouterr().err


def test_connect_unity_build_trains_briefly(tmp_path):
    args = ["Ball3D", "--timesteps", "24", "--n-steps", "2", "--save-path", str(tmp_path / "m")]
    assert load("connect_unity_build").main(args) == 0
    assert (tmp_path / "m.zip").is_file()


def test_selfplay_tennis(tmp_path, capsys):
    results = load("selfplay_tennis").main(
        [
            *("--timesteps", "256", "--courts", "2", "--n-steps", "64", "--save-steps", "100"),
            *("--summary-freq", "128", "--games", "4", "--save-path", str(tmp_path / "t")),
        ]
    )
    out = capsys.readouterr().out
    assert "Tennis. Step: 256." in out and "ELO:" in out  # the ELO as mlagents-learn prints it
    assert out.count("against random play, team") == 2
    assert results["elo"] > 0 and all(0.0 <= results[f"team {t}"] <= 1.0 for t in (0, 1))
    assert (tmp_path / "t.zip").is_file() and (tmp_path / "t_vecnormalize.pkl").is_file()


def test_soccer_poca_selfplay(tmp_path, capsys):
    results = load("soccer_poca_selfplay").main(
        [
            *("--timesteps", "128", "--fields", "1", "--max-steps", "100", "--n-steps", "32"),
            *(
                "--save-steps",
                "50",
                "--summary-freq",
                "64",
                "--games",
                "2",
                "--save-path",
                str(tmp_path / "s"),
            ),
        ]
    )
    out = capsys.readouterr().out
    assert "SoccerTwos. Step: 128." in out and "ELO after 128 steps" in out
    assert out.count("against a random team, team") == 2
    assert all(0.0 <= results[f"team {t}"] <= 1.0 for t in (0, 1))
    assert (tmp_path / "s.zip").is_file()


def test_pettingzoo_escape(capsys):
    results = load("pettingzoo_escape").main(["--episodes", "2", "--timesteps", "24", "--n-steps", "8"])
    assert set(results) == {"random", "expert", "POCA"}
    # the scripted expert always escapes, giving up exactly one agent per episode
    assert results["expert"] == (2, 2)
    assert "episodes escaped" in capsys.readouterr().out


class _GroupRewardParallelEnv:
    """Two agents; one step ends the episode with a group reward of 1 and no individual reward."""

    possible_agents = ["a", "b"]

    def __init__(self) -> None:
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> spaces.Box:
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Discrete:
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions):
        obs = {a: np.zeros(2, np.float32) for a in self.agents}
        infos = {a: {"group_reward": 1.0, "group_id": 1} for a in self.agents}
        ended = dict.fromkeys(self.agents, True)
        self.agents = []
        return obs, dict.fromkeys(obs, 0.0), ended, dict.fromkeys(obs, False), infos

    def close(self) -> None:
        pass


def test_pettingzoo_adapter_passes_group_rewards_on():
    """What pettingzoo_escape.py relies on: Escape's reward is all group reward, and POCA must see it."""
    from unity_sb3.wrappers.pettingzoo_vec_env import PettingZooVecEnv

    venv = PettingZooVecEnv(_GroupRewardParallelEnv())
    venv.reset()
    _, rewards, dones, infos = venv.step(np.zeros(2, dtype=int))
    assert dones.all() and rewards.tolist() == [0.0, 0.0]
    assert [info["group_reward"] for info in infos] == [1.0, 1.0]
