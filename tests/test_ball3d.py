"""Ball3D against Unity's 3DBall: its own trained policy, a real recording, and the C# rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple

from unity_sb3.scenes import make_scene
from unity_sb3.scenes.ball3d import Ball3D, rotation_matrices

BEHAVIOR = "3DBall?team=0"
MODEL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "models" / "3DBall.onnx"


def unity_policy():
    """Unity's trained 3DBall policy (deterministic actions), or skip with the reason."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (pip install onnxruntime)")
    if not MODEL.is_file():
        pytest.skip(f"Unity's 3DBall.onnx not found at {MODEL} (shared/ must sit beside the checkout)")
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return lambda obs: session.run(["deterministic_continuous_actions"], {"obs_0": obs})[0]


def play(env: Ball3D, policy, steps: int) -> tuple[list[float], int]:
    """Episode returns of every agent episode that ends within ``steps`` steps, and how many were lost."""
    env.reset()
    running: dict[int, float] = {}
    returns, lost = [], 0
    for _ in range(steps):
        decision, terminal = env.get_steps(BEHAVIOR)
        for agent, reward in zip(terminal.agent_id.tolist(), terminal.reward.tolist()):
            returns.append(running.pop(agent, 0.0) + reward)
        lost += int((~terminal.interrupted).sum())
        for agent, reward in zip(decision.agent_id.tolist(), decision.reward.tolist()):
            running[agent] = running.get(agent, 0.0) + reward
        if len(decision):
            env.set_actions(BEHAVIOR, ActionTuple(continuous=policy(decision.obs[0])))
        env.step()
    return returns, lost


def place(env: Ball3D, q: list[float], pos: list[float], vel: list[float] | None = None) -> None:
    """Put every cube at rotation ``q`` (x, y, z, w) and every ball at ``pos`` with velocity ``vel``."""
    env._q[:] = np.asarray(q, dtype=np.float64)[:, None]
    env._rot[:] = rotation_matrices(env._q)
    env._pos[:] = np.asarray(pos, dtype=np.float64)[:, None]
    env._vel[:] = np.asarray(vel or [0.0, 0.0, 0.0], dtype=np.float64)[:, None]
    env._spin[:] = 0.0


def step_with(env: Ball3D, action: list[float], times: int = 1):
    """Send ``action`` to every deciding agent ``times`` times; the last (DecisionSteps, TerminalSteps)."""
    for _ in range(times):
        decision, _ = env.get_steps(BEHAVIOR)
        env.set_actions(BEHAVIOR, ActionTuple(continuous=np.tile(np.float32(action), (len(decision), 1))))
        env.step()
    return env.get_steps(BEHAVIOR)


def test_unity_policy_keeps_every_ball_up():
    """Unity's own policy, unchanged, does here what it does in Unity: no ball falls."""
    policy = unity_policy()
    env = make_scene("Ball3D", seed=3, max_steps=1000)  # 200 decisions per episode: perfect = 20
    returns, lost = play(env, policy, 420)
    assert len(returns) >= 24
    assert lost == 0
    assert np.mean(returns) >= 0.98 * 20


def test_random_play_loses_balls():
    rng = np.random.default_rng(0)
    env = make_scene("Ball3D", seed=3, max_steps=1000)
    returns, lost = play(env, lambda obs: rng.uniform(-1, 1, (len(obs), 2)).astype(np.float32), 200)
    assert lost == len(returns) > 24 and np.mean(returns) < 3.0


def test_episode_start_layout():
    """``OnEpisodeBegin``: tilt within 10 degrees per axis, ball 4 above at (U(-1.5, 1.5), 4, U(-1.5, 1.5)), still."""
    env = make_scene("Ball3D", seed=0, num_agents=64)
    env.reset()
    obs = env.get_steps(BEHAVIOR)[0].obs[0]
    assert obs.shape == (64, 8) and obs.dtype == np.float32
    assert np.abs(obs[:, 0:2]).max() <= np.sin(np.radians(5.0)) + 1e-6  # quaternion z, x
    np.testing.assert_array_equal(obs[:, 3], 4.0)
    assert np.abs(obs[:, [2, 4]]).max() <= 1.5 and np.abs(obs[:, [2, 4]]).min() >= 0.0
    np.testing.assert_array_equal(obs[:, 5:], 0.0)
    q = env._q  # a rotation about x then about the new z: (sa cb, -sa sb, ca sb, ca cb)
    np.testing.assert_allclose(q[1], -q[0] * q[2] / q[3], atol=1e-12)


def test_turns_compose_about_the_cube_own_axes():
    """``Rotate(z, 2a)`` then ``Rotate(x, 2b)`` every physics step: 5 steps from level at action (1, 1)."""
    env = make_scene("Ball3D", seed=0, num_agents=2)
    env.reset()
    place(env, [0, 0, 0, 1], [0, 3, 0])
    decision, _ = step_with(env, [1.0, 1.0])
    half = np.radians(1.0)
    turn = np.array(
        [np.cos(half) * np.sin(half), np.sin(half) ** 2, np.sin(half) * np.cos(half), np.cos(half) ** 2]
    )
    q = np.array([0.0, 0.0, 0.0, 1.0])
    for _ in range(5):  # q = q * turn
        x, y, z, w = q
        tx, ty, tz, tw = turn
        q = np.array(
            [
                w * tx + x * tw + y * tz - z * ty,
                w * ty - x * tz + y * tw + z * tx,
                w * tz + x * ty - y * tx + z * tw,
                w * tw - x * tx - y * ty - z * tz,
            ]
        )
    np.testing.assert_allclose(decision.obs[0][:, 0], q[2], atol=1e-6)
    np.testing.assert_allclose(decision.obs[0][:, 1], q[0], atol=1e-6)


@pytest.mark.parametrize("action", [1.0, -1.0])
def test_tilt_stops_at_quaternion_limit(action):
    """A turn is applied only while the quaternion component is below 0.25 in its direction."""
    env = make_scene("Ball3D", seed=0, num_agents=1, max_steps=0)
    env.reset()
    place(env, [0, 0, 0, 1], [0, 3, 0])
    env._pos[1] = 50.0  # keep the ball away: only the cube matters here
    decision, _ = step_with(env, [action, 0.0], times=8)
    qz = decision.obs[0][0, 0] * action
    assert 0.25 <= qz <= 0.25 + np.sin(np.radians(1.0))
    decision, _ = step_with(env, [action, 0.0], times=2)
    assert decision.obs[0][0, 0] * action == pytest.approx(qz)
    decision, _ = step_with(env, [-action, 0.0])  # the other way is always free
    assert decision.obs[0][0, 0] * action < qz - 0.05


def test_ball_rests_on_the_top_face():
    """A ball dropped on a level cube settles at 2.5 (half the cube) + 0.5 (radius) above its centre."""
    env = make_scene("Ball3D", seed=0, num_agents=3)
    env.reset()
    place(env, [0, 0, 0, 1], [0.5, 4.0, -1.0])
    decision, terminal = step_with(env, [0.0, 0.0], times=20)
    assert len(terminal) == 0
    obs = decision.obs[0]
    np.testing.assert_allclose(obs[:, 2:5], [[0.5, 3.0, -1.0]] * 3, atol=0.01)
    np.testing.assert_allclose(obs[:, 5:8], 0.0, atol=0.05)
    np.testing.assert_allclose(decision.reward, 0.1)


def test_ball_rolls_down_a_tilted_cube():
    """On a cube tilted by 10 degrees about z, the ball rolls to -x at 5/7 g sin(10 degrees)."""
    env = make_scene("Ball3D", seed=0, num_agents=1)
    env.reset()
    angle = np.radians(10.0)
    normal = np.array([-np.sin(angle), np.cos(angle), 0.0])
    place(env, [0, 0, np.sin(angle / 2), np.cos(angle / 2)], list(3.0 * normal))
    before = step_with(env, [0.0, 0.0])[0].obs[0][0, 5:8]
    after = step_with(env, [0.0, 0.0], times=5)[0].obs[0][0, 5:8]
    slope = np.array([-np.cos(angle), -np.sin(angle), 0.0])  # downhill, along the face
    gain = (after - before) @ slope
    assert gain == pytest.approx(5 / 7 * 9.81 * np.sin(angle) * 0.5, rel=0.02)  # 25 steps = 0.5 s
    assert abs((after - before) @ normal) < 1e-3  # it stays on the face


@pytest.mark.parametrize(
    ("pos", "lost"),
    [
        ([2.9, 3.0, 0.0], False),
        ([3.05, 1.0, 0.0], True),
        ([0.0, 3.0, -3.05], True),
        ([0.0, -2.05, 0.0], True),
    ],
)
def test_ball_lost_rule(pos, lost):
    """-1 and the end of the episode when the ball is > 3 from the centre along x or z, or > 2 below it."""
    env = make_scene("Ball3D", seed=0, num_agents=2)
    env.reset()
    place(env, [0, 0, 0, 1], pos)
    decision, terminal = step_with(env, [0.0, 0.0])
    if lost:
        assert len(terminal) == 2 and not terminal.interrupted.any()
        np.testing.assert_allclose(terminal.reward, -1.0)
        np.testing.assert_array_equal(terminal.obs[0][:, 2:5], np.float32([pos, pos]))  # before physics
    else:
        assert len(terminal) == 0
        np.testing.assert_allclose(decision.reward, 0.1)


def test_mass_does_not_change_the_motion():
    runs = [
        list(play(make_scene("Ball3D", seed=2, mass=m), lambda o: -o[:, 2:4] * 0.0, 30)) for m in (0.3, 3.0)
    ]
    assert runs[0] == runs[1]


def test_one_decision_ahead_matches_unity_recording(demo_dir):
    """From each state of Unity's Expert3DBall.demo and its recorded action, the next state as Unity recorded it.

    The recording (a real 3DBall in Unity, 549 decisions) gives the cube's quaternion z and x, the
    ball's position and velocity; the rest is rebuilt (quaternion y from the x-then-z start, the
    spin of a rolling ball).
    """
    from unity_sb3.demos.reader import load_demo

    demo = load_demo(demo_dir / "Expert3DBall.demo")
    obs = demo.observations[0].astype(np.float64)
    act = demo.continuous_actions.astype(np.float64)
    n = len(obs) - 1
    env = make_scene("Ball3D", seed=0, num_agents=n)
    env.reset()
    qz, qx = obs[:n, 0], obs[:n, 1]
    qy = -qx * qz / np.sqrt(1 - qz**2 - qx**2)
    env._q[:] = [qx, qy, qz, np.sqrt(1 - qx**2 - qy**2 - qz**2)]
    env._rot[:] = rotation_matrices(env._q)
    env._pos[:] = obs[:n, 2:5].T
    env._vel[:] = obs[:n, 5:8].T
    up = env._rot[:, 1]
    env._spin[:] = np.cross(up.T, obs[:n, 5:8]).T / 0.5  # rolling: no slip at the contact
    env._cont_action[:] = act[:n]
    env._advance(5)
    predicted = np.concatenate([env._q[[2, 0]], env._pos, env._vel]).T
    error = np.sqrt(((predicted - obs[1:]) ** 2)[10:].mean(axis=0))  # after the first landing
    assert error[0:2].max() < 0.003  # quaternion z, x
    assert error[2:5].max() < 0.01  # position
    assert error[5] < 0.03 and error[7] < 0.03  # velocity along the face (x, z)
    assert error[6] < 0.15  # vertical velocity: landings after short hops shift by a step
