"""RayUnityVecEnv: the same trajectories as UnityVecEnv, actor restarts, PPO, close.

One local Ray instance is shared by the whole module (its start-up is the slow part) and one
pair of 2-instance Ball3D envs (Ray and threads) by the tests that step Ball3D.
"""

from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

ray = pytest.importorskip("ray", reason="RayUnityVecEnv needs the 'ray' extra (pip install 'unity_sb3[ray]')")

sys.path.insert(0, str(Path(__file__).resolve().parent))

from unity_sb3.scenes import scripted as scripted_env  # noqa: E402
from unity_sb3.scenes.scripted import ScriptedAgent, ScriptedBehavior, ScriptedEnv  # noqa: E402

from mlagents_envs.base_env import ActionSpec  # noqa: E402  # isort: skip

from unity_sb3.open import open_unity  # noqa: E402
from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError  # noqa: E402
from unity_sb3.wrappers.ray_vec_env import RayUnityVecEnv  # noqa: E402
from unity_sb3.wrappers.vec_env import UnityVecEnv  # noqa: E402

BALL = {"transport": "inprocess", "num_agents": 4}
ACTOR = {"num_cpus": 0.1}  # the test Ray instance has 2 CPUs; several actors must fit


@pytest.fixture(scope="module", autouse=True)
def ray_instance(tmp_path_factory):
    # the scripted env and this module are not importable in Ray workers: ship them by value
    ray.cloudpickle.register_pickle_by_value(scripted_env)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # pytest-xdist workers share the parent of their base temp dirs: one Ray start at a time
    start_lock = FileLock(tmp_path_factory.getbasetemp().parent / "ray_start.lock")
    for attempt in range(3):
        try:
            with start_lock:
                ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception as exc:
            # Ray gives its raylet 30 s to register and its GCS a while to write its port file; in
            # fresh-clone CI runs each once did not come up in time (no raylet log at all; a loaded
            # box with two pytest workers starting Ray at once): start it again
            if attempt == 2 or "timed out" not in str(exc).lower():
                raise
            ray.shutdown()
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def ball_pair():
    """Ball3D twice (4 agents each) in Ray actors and in UnityVecEnv's threads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ray_venv = RayUnityVecEnv(
            "Ball3D", num_instances=2, open_kwargs=BALL, restart_on_crash=True, restart_backoff=0.0, **ACTOR
        )
    venv = UnityVecEnv(["Ball3D", "Ball3D"], open_kwargs=BALL)
    yield ray_venv, venv
    ray_venv.close()
    venv.close()


def random_actions(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.uniform(-1.0, 1.0, size=(n, 2)).astype(np.float32)


def assert_same(x, y, message: str) -> None:
    if isinstance(x, dict):
        assert x.keys() == y.keys(), message
        for key in x:
            np.testing.assert_array_equal(x[key], y[key], err_msg=f"{message} [{key!r}]")
    else:
        np.testing.assert_array_equal(x, y, err_msg=message)


def assert_same_step(a: tuple, b: tuple, step: int) -> None:
    for x, y, name in zip(a[:3], b[:3], ("obs", "reward", "done")):
        assert_same(x, y, f"{name} differ at step {step}")
    for i, (ia, ib) in enumerate(zip(a[3], b[3])):
        assert ia.keys() == ib.keys(), (step, i)
        for key in ia:
            assert_same(ia[key], ib[key], f"infos[{i}][{key!r}] at step {step}")


# ---------------------------------------------------------------------- bad input (no actors)
@pytest.mark.parametrize(
    ("env", "kwargs", "match"),
    [
        (open_unity, {"num_instances": 0}, "num_instances must be >= 1"),
        (["Ball3D", "Ball3D"], {"num_instances": 2}, "repeats a single env"),
        ([], {}, "at least one"),
        ([3], {}, "instance 0 is a int"),
    ],
)
def test_bad_sources_get_a_clear_error(env, kwargs, match):
    with pytest.raises(UnityConfigurationError, match=match):
        RayUnityVecEnv(env, **kwargs)


def test_a_base_env_object_cannot_move_into_an_actor():
    with pytest.raises(UnityConfigurationError, match="not a BaseEnv object"):
        RayUnityVecEnv(ScriptedEnv([ScriptedAgent()]))


# ---------------------------------------------------------------------- equivalence
def test_same_trajectories_as_unity_vec_env(ball_pair):
    ray_venv, venv = ball_pair
    assert ray_venv.num_envs == venv.num_envs == 8
    assert ray_venv.observation_space == venv.observation_space
    for v in ball_pair:
        v.seed(11)
    np.testing.assert_array_equal(ray_venv.reset(), venv.reset())
    rng = np.random.default_rng(0)
    dones = 0
    for step in range(300):
        actions = random_actions(rng, venv.num_envs)
        a, b = ray_venv.step(actions), venv.step(actions)
        assert_same_step(a, b, step)
        dones += int(a[2].sum())
    assert dones > 0  # episodes ended, with terminal observations compared above
    assert len({env.actor_pid for env in ray_venv.ray_envs}) == 2  # two actor processes


def _mask(k: int, t: int) -> list[np.ndarray]:
    first = np.zeros(3, dtype=bool)
    first[k % 3] = True  # True = NOT allowed
    return [first, np.array([False, t % 2 == 1])]


def _scripted(crash_at: int | None) -> ScriptedEnv:
    agents = [
        ScriptedAgent(period=2, start=0, group_id=1, group_reward=0.5),
        ScriptedAgent(period=2, start=1, group_id=1, group_reward=0.5),  # out of phase: inactive slots
        ScriptedAgent(episode_length=3, respawn_delay=2, new_id_each_episode=True, interrupted=True),
        ScriptedAgent(episode_length=4, episodes=1),  # dies without replacement
    ]
    # 4 x 64x64x3 float32 images: big enough for Ray's object store (read-only, zero-copy arrays)
    behavior = ScriptedBehavior(
        agents, action_spec=ActionSpec(0, (3, 2)), mask_fn=_mask, visual_shape=(64, 64, 3)
    )
    return ScriptedEnv(behavior, crash_at=crash_at)


def test_inactive_slots_masks_groups_images_and_a_unity_crash_match_unity_vec_env():
    # instance 1's Unity crashes at its 7th step (inside a live actor): both re-open it
    factories = [functools.partial(_scripted, None), functools.partial(_scripted, 7)]
    kwargs = {"num_slots": 8, "restart_on_crash": True, "restart_backoff": 0.0, "max_idle_steps": 20}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ray_venv = RayUnityVecEnv(factories, **kwargs, **ACTOR)
        venv = UnityVecEnv(factories, **kwargs)
        try:
            assert_same(ray_venv.reset(), venv.reset(), "reset observations")
            rng = np.random.default_rng(1)
            inactive = restarted = 0
            for step in range(12):
                masks = venv.action_masks()
                np.testing.assert_array_equal(ray_venv.action_masks(), masks)
                actions = np.stack([rng.integers(0, 3, 8), rng.integers(0, 2, 8)], axis=1)
                a, b = ray_venv.step(actions), venv.step(actions)
                assert_same_step(a, b, step)
                inactive += sum(not info["active"] for info in a[3])
                restarted += sum(info.get("restarted", False) for info in a[3])
            assert inactive > 0 and restarted == 4
            assert ray_venv._sources[1].actors_created == 1  # re-opened inside the same actor
        finally:
            ray_venv.close()
            venv.close()


# ---------------------------------------------------------------------- actor restarts
def _wait_until_gone(pid: int, timeout: float = 60.0) -> None:
    """Wait for a (local) actor process to exit."""
    import os
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError(f"actor process {pid} still alive {timeout:g} s after ray.kill")


def test_killed_actor_is_restarted_and_stepping_continues(ball_pair):
    ray_venv, _ = ball_pair
    ray_venv.reset()
    rng = np.random.default_rng(2)
    for _ in range(3):
        last, *_ = ray_venv.step(random_actions(rng, 8))
    old_pid = ray_venv.ray_envs[1].actor_pid
    ray.kill(ray_venv.actors[1], no_restart=False)
    _wait_until_gone(old_pid)  # ray.kill is asynchronous: on a busy machine a step could still get through
    with pytest.warns(UserWarning, match="worker 1 crashed"):
        obs, _reward, done, infos = ray_venv.step(random_actions(rng, 8))
    assert done.tolist() == [False] * 4 + [True] * 4
    assert [info.get("restarted", False) for info in infos] == [False] * 4 + [True] * 4
    assert all(infos[i]["TimeLimit.truncated"] for i in range(4, 8))
    np.testing.assert_array_equal(infos[5]["terminal_observation"], last[5])
    # Ray restarted the same actor (a new process), where the env was opened and reset afresh
    assert ray_venv._sources[1].actors_created == 1
    assert ray_venv.ray_envs[1].actor_pid != old_pid
    fresh = open_unity("Ball3D", worker_id=1, **BALL)
    fresh.reset()
    np.testing.assert_array_equal(obs[4:], fresh.get_steps(next(iter(fresh.behavior_specs)))[0].obs[0])
    fresh.close()
    for _ in range(5):
        _, _, done, infos = ray_venv.step(random_actions(rng, 8))
        assert not any(info.get("restarted", False) for info in infos)


def test_without_restart_a_dead_actor_is_an_error_naming_its_worker(ball_pair):
    ray_venv, _ = ball_pair
    ray_venv.reset()
    ray_venv.restart_on_crash = False
    try:
        old_pid = ray_venv.ray_envs[0].actor_pid
        ray.kill(ray_venv.actors[0], no_restart=False)
        _wait_until_gone(old_pid)
        with pytest.raises(UnityProcessError, match=r"Unity worker 0:.*Ray actor") as info:
            ray_venv.step(np.zeros((8, 2), np.float32))
        assert info.value.worker_id == 0
    finally:
        ray_venv.restart_on_crash = True
    with pytest.warns(UserWarning, match="worker 0 crashed"):
        ray_venv.reset()  # the instance is re-opened in its restarted actor


def test_ppo_trains_through_ray_and_survives_a_killed_actor(ball_pair):
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback

    ray_venv, _ = ball_pair

    class KillOnce(BaseCallback):
        restarted = 0

        def _on_step(self) -> bool:
            if self.n_calls == 20:
                ray.kill(ray_venv.actors[0], no_restart=False)
            self.restarted += sum(info.get("restarted", False) for info in self.locals["infos"])
            return True

    callback = KillOnce()
    model = PPO("MlpPolicy", ray_venv, n_steps=32, batch_size=64, n_epochs=2, seed=0, device="cpu")
    before = [p.detach().clone() for p in model.policy.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.learn(total_timesteps=3 * 32 * 8, callback=callback)
    assert model.num_timesteps >= 3 * 32 * 8
    assert callback.restarted == 4
    assert any(
        not np.array_equal(a.numpy(), b.detach().numpy()) for a, b in zip(before, model.policy.parameters())
    )


# ---------------------------------------------------------------------- close
def test_close_kills_the_actors_and_is_idempotent(ball_pair):
    ray_venv, _ = ball_pair
    actors = ray_venv.actors
    ray_venv.close()
    ray_venv.close()
    assert ray_venv.closed
    for actor in actors:
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(actor.reset.remote(), timeout=30)
    with pytest.raises(RuntimeError, match="closed"):
        ray_venv.step(np.zeros((8, 2), np.float32))


# ---------------------------------------------------------------------- the proxy as a BaseEnv
def test_proxy_behaves_like_the_env_in_the_actor():
    from mlagents_envs.base_env import ActionTuple
    from mlagents_envs.exception import UnityActionException

    from unity_sb3.wrappers.ray_actor import RayActorSource

    kwargs = {"transport": "inprocess", "num_agents": 3, "seed": 4}
    source = RayActorSource("Ball3D", worker_id=0, open_kwargs=kwargs, actor_options=ACTOR)
    local = open_unity("Ball3D", **kwargs)
    try:
        proxy = source()
        name = next(iter(local.behavior_specs))
        assert proxy.behavior_specs[name] == local.behavior_specs[name]
        with pytest.raises(KeyError):
            proxy.get_steps(name)  # nothing reported before the first reset, as UnityEnvironment
        proxy.reset()
        local.reset()
        rng = np.random.default_rng(3)
        for _ in range(20):
            dec, _ = local.get_steps(name)
            actions = ActionTuple(continuous=rng.uniform(-1, 1, (len(dec), 2)).astype(np.float32))
            for env in (proxy, local):
                env.set_actions(name, actions)
                if len(dec):  # a ball that fell between decisions gives a step with terminals only
                    env.set_action_for_agent(
                        name, int(dec.agent_id[0]), ActionTuple(continuous=np.ones((1, 2)))
                    )
                env.step()
            (d1, t1), (d2, t2) = proxy.get_steps(name), local.get_steps(name)
            for a, b in ((d1, d2), (t1, t2)):
                np.testing.assert_array_equal(a.agent_id, b.agent_id)
                np.testing.assert_array_equal(a.obs[0], b.obs[0])
                np.testing.assert_array_equal(a.reward, b.reward)
        with pytest.raises(UnityActionException, match="does not correspond"):
            proxy.get_steps("Nope?team=0")
        with pytest.raises(UnityActionException):  # validated locally, nothing is sent
            proxy.set_actions(name, ActionTuple(continuous=np.zeros((7, 2), np.float32)))
        proxy.reseed(5)  # a method of the remote scene, forwarded
        with pytest.raises(AttributeError):
            proxy.no_such_method()
        proxy.close()
        proxy.close()
        with pytest.raises(UnityProcessError, match="closed"):
            proxy.step()
    finally:
        local.close()
        source.kill()
