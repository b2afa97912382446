"""Every wrapper and algorithm over "third-party" ``BaseEnv``s (DESIGN 4.2: any conforming BaseEnv works).

``mlagents_envs`` types ``DecisionSteps`` / ``TerminalSteps`` fields as numpy arrays but does not
enforce it, and real producers differ: Unity's ``rpc_utils`` gives ``group_id`` as a list;
ML-Agents' own ``simple_test_envs.MultiAgentEnvironment`` builds whole batches from Python lists
(of numpy scalars), sends no observation arrays at all when nobody asks, puts every discrete
branch's mask in one array and reuses agent ids; ``mock_brain`` gives masks as nested lists;
other envs use int64 ids and float64 rewards. And Unity itself never reuses an id, even after a
reset with a seed.

:class:`ThirdPartyEnv` re-emits an embedded scene in one of those styles, optionally with the
structural quirks real scenes have: steps where nobody asks, agents that appear mid-episode,
agents that change group mid-episode, ids that reuse or (by default) keep growing across resets.
Every wrapper runs over the matrix: ``UnityVecEnv`` (and its results equal those of the plain
array scene), ``UnityGymEnv`` under gymnasium's and SB3's ``check_env``, ``UnityParallelEnv``
under ``parallel_api_test``, ``UnityAECEnv`` under ``api_test``; and ``unity_sb3.PPO`` and POCA
train on it for a few hundred steps.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from pettingzoo.test import api_test, parallel_api_test
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import unity_sb3  # noqa: F401  (protobuf compat before mlagents_envs)
from unity_sb3.scenes import make_scene
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers._steps import ARRAY_STEPS, StepReader
from unity_sb3.wrappers.gym_env import UnityGymEnv
from unity_sb3.wrappers.pettingzoo_env import UnityAECEnv, UnityParallelEnv
from unity_sb3.wrappers.vec_env import UnityVecEnv

from mlagents_envs.base_env import (  # isort: skip
    ActionTuple,
    BaseEnv,
    BehaviorMapping,
    DecisionSteps,
    TerminalSteps,
)

STYLES = ("arrays", "lists", "tuples", "wide", "mlagents")
#: agents per scene, small so that every case stays fast (Escape: one group of three)
AGENTS = {"Ball3D": 3, "GridWorld": 2, "Escape": 3}
PARAMS = {
    "Ball3D": {"max_steps": 200},
    "GridWorld": {"max_steps": 30, "image_size": 8},
    "Escape": {"max_steps": 40},
}


# ---------------------------------------------------------------------- styles
def restyle(
    style: str,
    obs: list[np.ndarray],
    reward: np.ndarray,
    agent_id: np.ndarray,
    group_id: np.ndarray,
    group_reward: np.ndarray,
    mask: list[np.ndarray] | None = None,
    interrupted: np.ndarray | None = None,
) -> dict[str, Any]:
    """The fields of one batch the way a given kind of ``BaseEnv`` builds them.

    - ``arrays``: what ``mlagents_envs`` documents (float32 rewards, int32 ids, bool masks);
    - ``lists``: Python lists of Python scalars everywhere, observations and masks as nested lists;
    - ``tuples``: tuples of numpy scalars, masks as a tuple of arrays;
    - ``wide``: int64 ids and groups, float64 rewards and observations, no masks (``None``);
    - ``mlagents``: ``MultiAgentEnvironment``'s: lists of numpy scalars, no observation arrays
      when the batch is empty, all branches' masks side by side in one array.
    """
    n = len(agent_id)
    if style == "arrays":
        out = dict(
            obs=obs,
            reward=reward,
            agent_id=agent_id.astype(np.int32),
            group_id=group_id.astype(np.int32),
            group_reward=group_reward,
            mask=mask,
            interrupted=interrupted,
        )
    elif style == "lists":
        out = dict(
            obs=[o.tolist() for o in obs],
            reward=reward.tolist(),
            agent_id=agent_id.tolist(),
            group_id=group_id.tolist(),
            group_reward=group_reward.tolist(),
            mask=None if mask is None else [m.tolist() for m in mask],
            interrupted=None if interrupted is None else interrupted.tolist(),
        )
    elif style == "tuples":
        out = dict(
            obs=list(obs),
            reward=tuple(reward),
            agent_id=tuple(agent_id.astype(np.int32)),
            group_id=tuple(group_id),
            group_reward=tuple(group_reward),
            mask=None if mask is None else tuple(mask),
            interrupted=None if interrupted is None else tuple(interrupted),
        )
    elif style == "wide":
        out = dict(
            obs=[o.astype(np.float64) for o in obs],
            reward=reward.astype(np.float64),
            agent_id=agent_id.astype(np.int64),
            group_id=group_id.astype(np.int64),
            group_reward=group_reward.astype(np.float64),
            mask=None,
            interrupted=interrupted,
        )
    elif style == "mlagents":
        out = dict(
            obs=list(obs) if n else [],
            reward=list(reward),
            agent_id=[int(a) for a in agent_id],
            group_id=[int(g) for g in group_id],
            group_reward=list(group_reward),
            mask=None if mask is None or not n else [np.concatenate(mask, axis=1)],
            interrupted=None if interrupted is None else [bool(i) for i in interrupted],
        )
    else:
        raise ValueError(style)
    return out


class ThirdPartyEnv(BaseEnv):
    """An embedded scene re-emitted as another ``BaseEnv`` would (see the module docstring).

    The scene runs with stable agent ids internally (one per agent, ``0..n-1``); this env gives
    the ids out itself: a new one for every episode from a counter that never restarts (Unity),
    or the stable ones (``reuse_ids``, like ML-Agents' ``MultiAgentEnvironment``).

    :param scene: embedded scene name.
    :param style: how the batches are built, see :func:`restyle`.
    :param reuse_ids: give every agent the same id in every episode.
    :param empty_every: every ``empty_every``-th ``step()`` is a Unity step where nobody asks
        (empty batches; the scene does not advance). 0: never.
    :param spawn_at: the last ``hidden`` agents only appear at this step of every episode
        (mid-episode); 0: all agents are there from the reset.
    :param regroup_every: agents change group id every ``regroup_every`` steps. 0: never.
    :param params: scene parameters.
    """

    def __init__(
        self,
        scene: str,
        *,
        style: str = "arrays",
        reuse_ids: bool = False,
        empty_every: int = 0,
        spawn_at: int = 0,
        hidden: int = 1,
        regroup_every: int = 0,
        seed: int = 0,
        **params: Any,
    ) -> None:
        self.inner = make_scene(scene, seed=seed, stable_agent_ids=True, **{**PARAMS[scene], **params})
        self.name = next(iter(self.inner.behavior_specs))
        self.spec = self.inner.behavior_specs[self.name]
        self.style = style
        self.reuse_ids = reuse_ids
        self.empty_every = empty_every
        self.spawn_at = spawn_at
        self.hidden = hidden
        self.regroup_every = regroup_every
        self.t = 0
        self._next_id = 7  # never restarts, like Unity's
        self._ids: dict[int, int] = {}
        self._rows = np.zeros(0, dtype=np.int64)  # rows of the inner DecisionSteps we emitted
        self._inner_n = 0
        self._steps: tuple[DecisionSteps, TerminalSteps] | None = None
        self._answered = True
        self.unanswered = 0
        self.ids_given: set[int] = set()

    # ------------------------------------------------------------------ BaseEnv
    @property
    def behavior_specs(self) -> BehaviorMapping:
        return self.inner.behavior_specs

    def reseed(self, seed: int) -> None:
        self.inner.reseed(seed)

    def reset(self) -> None:
        self.inner.reset()
        self.t = 0
        self._ids = {k: self._new_id(k) for k in range(self.inner.num_agents)}
        self._emit()

    def step(self) -> None:
        if self._rows.size and not self._answered:
            self.unanswered += 1
        self.t += 1
        if self.empty_every and self.t % self.empty_every == 0:
            self._emit_empty()
            return
        self.inner.step()
        self._emit()

    def close(self) -> None:
        self.inner.close()

    def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
        assert behavior_name == self.name and self._steps is not None
        return self._steps

    def set_actions(self, behavior_name: str, action: ActionTuple) -> None:
        n = len(self._rows)
        action = self.spec.action_spec._validate_action(action, n, behavior_name)
        self._answered = True
        if n == 0:
            return
        full = self.spec.action_spec.empty_action(self._inner_n)
        full.continuous[self._rows] = action.continuous
        full.discrete[self._rows] = action.discrete
        self.inner.set_actions(self.name, full)

    def set_action_for_agent(self, behavior_name: str, agent_id: int, action: ActionTuple) -> None:
        raise NotImplementedError("the wrappers set whole batches")

    # ------------------------------------------------------------------ internals
    def _new_id(self, k: int) -> int:
        if self.reuse_ids:
            return k
        self._next_id += 1
        self.ids_given.add(self._next_id)
        return self._next_id

    def _hidden(self) -> set[int]:
        if not self.spawn_at or self.t >= self.spawn_at:
            return set()
        n = self.inner.num_agents
        return set(range(n - self.hidden, n))

    def _groups(self, agents: np.ndarray, groups: np.ndarray) -> np.ndarray:
        groups = np.asarray(groups, dtype=np.int64)
        if not self.regroup_every:
            return groups
        phase = self.t // self.regroup_every
        return np.where(groups > 0, groups + 10 * (phase % 2), 1 + (agents + phase) % 2)

    def _emit(self) -> None:
        dec, term = self.inner.get_steps(self.name)
        hidden = self._hidden()
        # terminals first: an agent in both batches ended an episode and started the next
        t_agents = np.asarray(term.agent_id, dtype=np.int64)
        t_keep = np.array([k not in hidden for k in t_agents.tolist()], dtype=bool)
        t_ids = np.array([self._ids[k] for k in t_agents.tolist()], dtype=np.int64)
        for k in t_agents.tolist():
            self._ids[k] = self._new_id(k)
        d_agents = np.asarray(dec.agent_id, dtype=np.int64)
        d_keep = np.array([k not in hidden for k in d_agents.tolist()], dtype=bool)
        d_ids = np.array([self._ids[k] for k in d_agents.tolist()], dtype=np.int64)
        rows = np.flatnonzero(d_keep)
        mask = None if dec.action_mask is None else [m[rows] for m in dec.action_mask]
        d = restyle(
            self.style,
            [o[rows] for o in dec.obs],
            dec.reward[rows],
            d_ids[rows],
            self._groups(d_agents[rows], np.asarray(dec.group_id)[rows]),
            dec.group_reward[rows],
            mask,
        )
        t_rows = np.flatnonzero(t_keep)
        t = restyle(
            self.style,
            [o[t_rows] for o in term.obs],
            term.reward[t_rows],
            t_ids[t_rows],
            self._groups(t_agents[t_rows], np.asarray(term.group_id)[t_rows]),
            term.group_reward[t_rows],
            interrupted=term.interrupted[t_rows],
        )
        self._publish(d, t, rows, len(dec))

    def _emit_empty(self) -> None:
        obs = [np.zeros((0, *o.shape), dtype=np.float32) for o in self.spec.observation_specs]
        nothing, ids = np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int64)
        d = restyle(self.style, obs, nothing, ids, ids, nothing)
        t = restyle(self.style, obs, nothing, ids, ids, nothing, interrupted=np.zeros(0, dtype=bool))
        self._publish(d, t, ids, 0)

    def _publish(self, d: dict[str, Any], t: dict[str, Any], rows: np.ndarray, inner_n: int) -> None:
        self._rows, self._inner_n = rows, inner_n
        self._answered = False
        self._steps = (
            DecisionSteps(d["obs"], d["reward"], d["agent_id"], d["mask"], d["group_id"], d["group_reward"]),
            TerminalSteps(
                t["obs"], t["reward"], t["interrupted"], t["agent_id"], t["group_id"], t["group_reward"]
            ),
        )


# ---------------------------------------------------------------------- the matrix
#: case name -> (scene, ThirdPartyEnv options); every case but the reuse ones gives growing ids
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "Ball3D-lists": ("Ball3D", {"style": "lists"}),
    "Ball3D-tuples": ("Ball3D", {"style": "tuples"}),
    "Ball3D-wide": ("Ball3D", {"style": "wide"}),
    "Ball3D-mlagents": ("Ball3D", {"style": "mlagents"}),
    "GridWorld-lists": ("GridWorld", {"style": "lists"}),
    "GridWorld-wide-no-masks": ("GridWorld", {"style": "wide"}),
    "GridWorld-mlagents": ("GridWorld", {"style": "mlagents"}),
    "Escape-tuples": ("Escape", {"style": "tuples"}),
    "Ball3D-empty-steps": ("Ball3D", {"style": "lists", "empty_every": 3}),
    "Escape-empty-steps": ("Escape", {"style": "mlagents", "empty_every": 4}),
    "Ball3D-spawn-mid-episode": ("Ball3D", {"style": "lists", "spawn_at": 4}),
    "GridWorld-spawn-mid-episode": ("GridWorld", {"style": "mlagents", "spawn_at": 3}),
    "Ball3D-regroup": ("Ball3D", {"style": "tuples", "regroup_every": 3}),
    "Escape-regroup": ("Escape", {"style": "lists", "regroup_every": 5}),
    "Ball3D-reused-ids": ("Ball3D", {"style": "mlagents", "reuse_ids": True}),
    "Escape-reused-ids": ("Escape", {"style": "wide", "reuse_ids": True}),
}


def make(case: str, **overrides: Any) -> ThirdPartyEnv:
    scene, options = CASES[case]
    return ThirdPartyEnv(scene, num_agents=AGENTS[scene], **{**options, **overrides})


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def random_slot_actions(venv: UnityVecEnv) -> np.ndarray:
    return np.stack([venv.action_space.sample() for _ in range(venv.num_envs)])


def space_contains_batch(venv: UnityVecEnv, obs: Any) -> bool:
    space = venv.observation_space
    if isinstance(obs, dict):
        return all(space[k].contains(v[i]) for k, v in obs.items() for i in range(venv.num_envs))
    return all(space.contains(o) for o in obs)


@pytest.mark.parametrize("case", list(CASES))
def test_vec_env_runs_and_answers_every_request(case):
    env = make(case)
    venv = UnityVecEnv(env, num_slots=AGENTS[CASES[case][0]])
    venv.action_space.seed(0)
    venv.reset()
    if CASES[case][1].get("spawn_at"):
        assert not venv.active_mask.all()  # the late agent's slot waits for it
    dones = 0
    groups: set[int] = set()
    was_active = np.zeros(venv.num_envs, dtype=bool)
    for _ in range(120):
        obs, rewards, done, infos = venv.step(random_slot_actions(venv))
        assert space_contains_batch(venv, obs)
        assert rewards.dtype == np.float32 and np.isfinite(rewards).all()
        for d, info in zip(done, infos):
            assert isinstance(info["group_id"], int) and isinstance(info["group_reward"], float)
            assert isinstance(info["active"], bool)
            if d:
                assert "terminal_observation" in info
            groups.add(info["group_id"])
        dones += int(done.sum())
        was_active |= venv.active_mask
    assert dones > 0
    assert was_active.all()  # every slot got an agent, including the one that came late
    assert env.unanswered == 0
    if CASES[case][1].get("regroup_every"):
        assert len(groups) > 1
    venv.close()


@pytest.mark.parametrize("style", [s for s in STYLES if s != "arrays"])
@pytest.mark.parametrize("scene", list(AGENTS))
def test_vec_env_gives_the_same_results_whatever_the_field_types(scene, style):
    """Lists, tuples, int64/float64 or ML-Agents' test-env batches: the same slots, step for step."""
    reference = UnityVecEnv(ThirdPartyEnv(scene, num_agents=AGENTS[scene]))
    styled = UnityVecEnv(ThirdPartyEnv(scene, num_agents=AGENTS[scene], style=style))
    reference.action_space.seed(1)
    assert_same(reference.reset(), styled.reset())
    for _ in range(60):
        actions = random_slot_actions(reference)
        a = reference.step(actions)
        b = styled.step(actions)
        assert_same(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])
        for x, y in zip(a[3], b[3]):
            assert_same(x, y)
        if style != "wide":  # "wide" sends no masks
            np.testing.assert_array_equal(reference.action_masks(), styled.action_masks())


def assert_same(a: Any, b: Any) -> None:
    """Equal observations (arrays or dicts of arrays) or info values."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for key in a:
            assert_same(a[key], b[key])
    else:
        np.testing.assert_array_equal(a, b)


def gym_env(case: str) -> UnityGymEnv:
    return UnityGymEnv(make(case), agent_index=0)


@pytest.mark.parametrize("case", list(CASES))
def test_gym_env_passes_gymnasium_and_sb3_checkers(case):
    """Includes gymnasium's step determinism check, which compares infos of two seeded resets:
    the ids keep growing, so they must stay out of info."""
    gym_check_env(gym_env(case), skip_render_check=True)
    sb3_check_env(gym_env(case))
    env = gym_env(case)
    env.reset(seed=3)
    first = env.agent_id
    env.reset(seed=3)
    assert CASES[case][1].get("reuse_ids") or env.agent_id != first  # a seeded reset, yet a new id
    for _ in range(80):
        _, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert isinstance(reward, float) and "agent_id" not in info
        if terminated or truncated:
            env.reset()
    assert env.unity_env.unanswered == 0


@pytest.mark.parametrize("case", list(CASES))
def test_pettingzoo_api_tests(case):
    parallel_api_test(UnityParallelEnv(make(case)), num_cycles=60)
    api_test(UnityAECEnv(make(case)), num_cycles=60)


def test_pettingzoo_names_stay_readable_and_finished_agents_are_not_revived():
    env = UnityParallelEnv(make("Ball3D-spawn-mid-episode", max_steps=25))
    env.reset(seed=0)
    assert env.agents == ["3DBall_0", "3DBall_1"]  # the third platform is not there yet
    finished: set[str] = set()
    spawned = False
    for _ in range(40):
        _, _, terminations, truncations, _ = env.step({a: env.action_space(a).sample() for a in env.agents})
        assert not finished & set(env.agents)
        finished |= {a for a in terminations if terminations[a] or truncations[a]}
        spawned |= "3DBall_2" in env.agents
        if not env.agents:
            break
    assert spawned and finished
    env.reset(seed=0)
    assert env.agents == ["3DBall_0", "3DBall_1"]  # the same names every episode


# ---------------------------------------------------------------------- algorithms
TRAIN_CASES = ["Ball3D-lists", "Ball3D-spawn-mid-episode", "Escape-regroup", "Escape-empty-steps"]


@pytest.mark.parametrize("case", TRAIN_CASES)
def test_ppo_trains(case):
    from unity_sb3 import PPO

    venv = UnityVecEnv(make(case), num_slots=AGENTS[CASES[case][0]])
    model = PPO(
        "MlpPolicy", venv, n_steps=32, batch_size=48, n_epochs=1, policy_kwargs={"net_arch": [16]}, seed=0
    )
    model.learn(300)
    assert model.num_timesteps >= 300
    assert venv.unity_envs[0].unanswered == 0


POCA_SMALL = dict(
    n_steps=32, batch_size=48, n_epochs=1, policy_kwargs=dict(net_arch=[16], critic_embed_dim=8), seed=0
)


@pytest.mark.parametrize("case", TRAIN_CASES)
def test_poca_trains_on_unity_vec_env(case):
    from unity_sb3 import POCA

    venv = UnityVecEnv(make(case), num_slots=AGENTS[CASES[case][0]])
    model = POCA("MlpPolicy", venv, **POCA_SMALL).learn(300)
    assert model.num_timesteps >= 300
    assert np.isfinite(model.rollout_buffer.returns).all()
    assert venv.unity_envs[0].unanswered == 0


@pytest.mark.parametrize(
    "case", ["Escape-tuples", "Escape-regroup", "Ball3D-reused-ids", "Ball3D-spawn-mid-episode"]
)
def test_poca_trains_through_pettingzoo(case):
    from unity_sb3.algorithms.poca import POCA
    from unity_sb3.wrappers.pettingzoo_vec_env import PettingZooVecEnv

    # max_agents: possible_agents (PettingZooVecEnv's slots) must include agents that come later
    env = UnityParallelEnv(make(case), action_masks=False, max_agents=AGENTS[CASES[case][0]])
    model = POCA("MlpPolicy", PettingZooVecEnv(env), **POCA_SMALL).learn(300)
    assert model.num_timesteps >= 300
    assert np.isfinite(model.rollout_buffer.returns).all()


def test_pettingzoo_slots_too_few_for_a_late_agent_is_explained():
    from unity_sb3.wrappers.pettingzoo_vec_env import PettingZooVecEnv

    venv = PettingZooVecEnv(UnityParallelEnv(make("Ball3D-spawn-mid-episode"), action_masks=False))
    venv.reset()
    with pytest.raises(RuntimeError, match="max_agents"):
        for _ in range(10):
            venv.step(np.zeros((venv.num_envs, 2), dtype=np.float32))


# ---------------------------------------------------------------------- the normaliser itself
def reader_and_steps(scene: str = "GridWorld") -> tuple[StepReader, DecisionSteps, TerminalSteps]:
    env = make_scene(scene, num_agents=2, **PARAMS[scene])
    env.reset()
    name = next(iter(env.behavior_specs))
    decisions, terminals = env.get_steps(name)
    return StepReader(name, env.behavior_specs[name]), decisions, terminals


def test_batches_already_in_array_form_pass_through_untouched():
    reader, decisions, terminals = reader_and_steps()
    out = reader.normalize(decisions, terminals)
    assert out[0] is decisions
    assert len(terminals) == 0  # empty batches become one shared empty batch
    assert out[1] is reader.normalize(decisions, terminals)[1]


@pytest.mark.parametrize("declared", [True, False])
def test_an_env_declaring_array_steps_is_read_without_checks(declared):
    """``ARRAY_STEPS``: the batches of an env that declares them in array form (the embedded scenes do,
    tests/test_scenes.py checks each) pass as they are; any other env's are checked and converted."""
    reader, d, t = reader_and_steps()
    listed = DecisionSteps(d.obs, d.reward, d.agent_id, d.action_mask, d.group_id.tolist(), d.group_reward)

    class Env:
        def get_steps(self, behavior_name: str) -> tuple[DecisionSteps, TerminalSteps]:
            return listed, t

    env = Env()
    setattr(env, ARRAY_STEPS, declared)
    decisions, terminals = reader.read(env)  # type: ignore[arg-type]
    assert (decisions is listed) == declared and (terminals is t) == declared
    assert declared or isinstance(decisions.group_id, np.ndarray)


def test_unity_list_group_ids_alone_are_converted():
    """A real build's batches (rpc_utils) have every field as an array except group_id."""
    reader, d, _ = reader_and_steps()
    unity_style = DecisionSteps(
        d.obs, d.reward, d.agent_id, d.action_mask, d.group_id.tolist(), d.group_reward
    )
    out = reader.decisions(unity_style)
    assert out.obs is d.obs and out.reward is d.reward and out.agent_id is d.agent_id
    assert isinstance(out.group_id, np.ndarray) and out.group_id.tolist() == d.group_id.tolist()


@pytest.mark.parametrize("style", STYLES)
def test_every_style_reads_as_the_same_arrays(style):
    reader, d, _ = reader_and_steps()
    fields = restyle(style, d.obs, d.reward, d.agent_id, d.group_id, d.group_reward, d.action_mask)
    out = reader.decisions(
        DecisionSteps(
            fields["obs"],
            fields["reward"],
            fields["agent_id"],
            fields["mask"],
            fields["group_id"],
            fields["group_reward"],
        )
    )
    for got, want in zip(out.obs, d.obs):
        np.testing.assert_array_equal(got, want)
    assert out.reward.dtype == np.float32 and out.group_reward.dtype == np.float32
    assert out.agent_id.dtype.kind == "i" and out.group_id.dtype.kind == "i"
    np.testing.assert_array_equal(out.agent_id, d.agent_id)
    if fields["mask"] is not None:
        assert [m.shape for m in out.action_mask] == [(2, 5)]
        np.testing.assert_array_equal(out.action_mask[0], d.action_mask[0])


def test_empty_batches_without_observation_arrays():
    reader, _, _ = reader_and_steps()
    decisions = DecisionSteps([], [], [], None, [], [])
    terminals = TerminalSteps([], [], [], [], [], [])
    d, t = reader.normalize(decisions, terminals)
    assert len(d) == 0 and len(t) == 0
    assert [o.shape for o in d.obs] == [(0, 3, 8, 8), (0, 2)]


def test_missing_groups_read_as_no_group():
    reader, d, _ = reader_and_steps()
    out = reader.decisions(DecisionSteps(d.obs, d.reward.tolist(), d.agent_id, None, None, None))
    assert out.group_id.tolist() == [0, 0] and out.group_reward.tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    "change, match",
    [
        ({"reward": [1.0]}, "reward has 1 values but agent_id has 2"),
        ({"agent_id": [0.5, 1.0]}, "agent_id must hold whole numbers"),
        ({"agent_id": ["a", "b"]}, "agent_id must hold integers"),
        ({"obs": [np.zeros((2, 3, 8, 8))]}, "1 observation arrays for 2 observation specs"),
        (
            {"obs": [np.zeros((2, 3, 8, 8)), np.zeros((2, 3))]},
            r"observation 1 has shape \(2, 3\), expected \(2, 2\)",
        ),
        (
            {"action_mask": [np.zeros((2, 4), dtype=bool)]},
            r"covers 4 actions per agent, but the discrete branches \(5,\)",
        ),
        ({"reward": None}, "reward is None"),
    ],
)
def test_unreadable_batches_are_explained(change, match):
    reader, d, _ = reader_and_steps()
    fields = dict(
        obs=d.obs, reward=d.reward, agent_id=d.agent_id, action_mask=d.action_mask,
        group_id=d.group_id, group_reward=d.group_reward,
    )  # fmt: skip
    fields.update(change)
    with pytest.raises(UnityConfigurationError, match=match) as error:
        reader.decisions(DecisionSteps(**fields))
    assert "DecisionSteps of 'GridWorld?team=0'" in str(error.value)
