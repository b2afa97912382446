"""Unity's learning tests for memory, entity lists, goal signals and hybrid actions, at Unity's budgets.

Each test is one of Unity's ``ml-agents/mlagents/trainers/tests/torch_entities/test_simple_rl.py``
or ``test_hybrid.py``: the same trainer settings (Unity's dummy configs evolved the same way, given
as an ML-Agents trainer config and mapped as ``unity-sb3 train --config`` maps it), the same scene
(:mod:`goal_line`'s re-creations of ``simple_test_envs.py``), the same budget (``max_steps``
agent-steps), the same check (the mean of the last 5 episode rewards of training above 0.9) and the
same training seed (1337, or the test's own). One case per capability runs by default; the others
are marked ``slow`` (``make test-slow``). How often each case passes over other seeds, side by side
with ML-Agents' trainer, is measured by ``benchmarks/unity_learning_tests.py`` (RESULTS.md).
"""

from __future__ import annotations

import pytest
from goal_line import BEHAVIOR, TEAM_BEHAVIOR, GoalLine, GoalLineTeam
from unity_learning import evolve, processed_reward, train_on

from unity_sb3.algorithms.ppo.hybrid import HybridActorCriticPolicy

SEED = 1337  # check_environment_trains' training seed
THRESHOLD = 0.9
ACTIONS = [pytest.param(False, id="continuous"), pytest.param(True, id="discrete")]
#: Unity's test_recurrent_ppo / test_recurrent_poca settings
RECURRENT_ON_POLICY = {
    "hyperparameters": {"learning_rate": 1.0e-3, "batch_size": 64, "buffer_size": 128},
    "network_settings": {"memory": {"memory_size": 16}},
    "max_steps": 6000,
}


#: Unity's test_recurrent_sac / test_hybrid_recurrent_sac settings
RECURRENT_SAC = {
    "hyperparameters": {
        "batch_size": 256,
        "learning_rate": 3e-4,
        "buffer_init_steps": 1000,
        "steps_per_update": 2,
    },
    "network_settings": {"memory": {"memory_size": 16, "sequence_length": 16}},
    "max_steps": 4000,
}


def _slow_unless(default: bool, *values):
    """``pytest.param(*values)``, marked slow unless ``default``."""
    return pytest.param(*values, marks=() if default else pytest.mark.slow)


@pytest.mark.parametrize(
    "discrete", [_slow_unless(True, False), _slow_unless(False, True)], ids=["continuous", "discrete"]
)
def test_recurrent_ppo(discrete: bool) -> None:
    scene = GoalLine(discrete=discrete, seed=SEED, show_steps=2)
    model = train_on(scene, BEHAVIOR, evolve("ppo", **RECURRENT_ON_POLICY), SEED)
    assert type(model).__name__ == "RecurrentPPO" and model.policy.memory_size == 16
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
def test_memory_environment_needs_memory() -> None:
    """The control: the same PPO without memory does not pass the memory test (the goal is gone after 3 steps)."""
    scene = GoalLine(seed=SEED, show_steps=2)
    settings = evolve("ppo", **{**RECURRENT_ON_POLICY, "network_settings": {}})
    assert type(train_on(scene, BEHAVIOR, settings, SEED)).__name__ == "PPO"
    assert processed_reward(scene.final_rewards[-50:]) < THRESHOLD
    late = scene.final_rewards[-200:]
    assert sum(r > 0 for r in late) / len(late) < 0.8  # without memory it guesses half the episodes wrong


@pytest.mark.slow
@pytest.mark.parametrize("discrete", ACTIONS)
def test_recurrent_poca(discrete: bool) -> None:
    scene = GoalLine(discrete=discrete, seed=SEED, show_steps=2)
    model = train_on(scene, BEHAVIOR, evolve("poca", **RECURRENT_ON_POLICY), SEED)
    assert type(model).__name__ == "RecurrentPOCA"
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.parametrize("discrete", ACTIONS)
def test_recurrent_poca_on_a_team(discrete: bool) -> None:
    """Unity's multi-agent case: 500 steps of a team with memory, no threshold ("the LSTM doesn't crash")."""
    scene = GoalLineTeam(2, discrete=discrete, seed=SEED)
    model = train_on(scene, TEAM_BEHAVIOR, evolve("poca", **{**RECURRENT_ON_POLICY, "max_steps": 500}), SEED)
    assert type(model).__name__ == "RecurrentPOCA" and model.num_timesteps >= 500
    assert len(scene.final_rewards) > 0


@pytest.mark.slow
@pytest.mark.parametrize("discrete", ACTIONS)
def test_recurrent_sac(discrete: bool) -> None:
    scene = GoalLine(discrete=discrete, seed=SEED, show_steps=2, step_size=0.5 if discrete else 0.2)
    settings = evolve("sac", **RECURRENT_SAC)
    model = train_on(scene, BEHAVIOR, settings, SEED)
    assert model.policy.memory_size == 16
    assert processed_reward(scene.final_rewards) > THRESHOLD


#: (num_vis, num_vector, num_var_len): Unity's grid; the goal signal is observation 0 (a vector, else
#: the image, else an entity list, which ML-Agents does not condition on)
OBSERVATIONS = [(vis, vec, var) for vis in (0, 1) for vec in (0, 1) for var in (1, 2)]
_DEFAULT_VAR_LEN = {((1, 0, 1), False), ((0, 0, 2), True)}  # an image goal; an entity-list goal


def _grid(observations: tuple[int, int, int]) -> dict:
    """Scene arguments of one point of Unity's grid, the goal signal being observation 0."""
    num_visual, num_vector, num_var_len = observations
    return dict(
        seed=SEED, num_visual=num_visual, num_vector=num_vector, num_var_len=num_var_len, goal_indices=(0,)
    )


@pytest.mark.parametrize(
    ("observations", "discrete"),
    [
        _slow_unless((obs, discrete) in _DEFAULT_VAR_LEN, obs, discrete)
        for obs in OBSERVATIONS
        for discrete in (False, True)
    ],
    ids=[
        f"vis{v}-vec{n}-var{e}-{'discrete' if d else 'continuous'}"
        for v, n, e in OBSERVATIONS
        for d in (0, 1)
    ],
)
def test_var_len_obs_and_goal_ppo(observations: tuple[int, int, int], discrete: bool) -> None:
    scene = GoalLine(discrete=discrete, **_grid(observations))
    settings = evolve(
        "ppo", hyperparameters={"learning_rate": 3.0e-4}, network_settings={"goal_conditioning_type": "hyper"}
    )
    model = train_on(scene, BEHAVIOR, settings, SEED)
    extractor = model.policy.features_extractor
    assert extractor.attention is not None  # the entity lists are attended over
    num_visual, num_vector, _ = observations
    assert (extractor.conditioning is not None) == (num_vector + num_visual > 0)  # vector or image goals
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize("num_var_len", [1, 2])
@pytest.mark.parametrize("discrete", ACTIONS)
def test_var_len_obs_sac(discrete: bool, num_var_len: int) -> None:
    scene = GoalLine(discrete=discrete, seed=SEED, num_vector=0, num_var_len=num_var_len)
    settings = evolve("sac", hyperparameters={"batch_size": 16, "learning_rate": 3e-4})
    model = train_on(scene, BEHAVIOR, settings, SEED)
    assert model.policy.actor.features_extractor.attention is not None
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize(
    "observations", OBSERVATIONS, ids=[f"vis{v}-vec{n}-var{e}" for v, n, e in OBSERVATIONS]
)
def test_var_len_obs_and_goal_poca(observations: tuple[int, int, int]) -> None:
    scene = GoalLineTeam(2, discrete=True, **_grid(observations))
    settings = evolve(
        "poca",
        hyperparameters={"learning_rate": 3.0e-4},
        network_settings={"goal_conditioning_type": "hyper"},
        max_steps=25000,
    )
    train_on(scene, TEAM_BEHAVIOR, settings, SEED)
    assert processed_reward(scene.final_rewards) > THRESHOLD


# ----------------------------------------------------- Unity's test_hybrid.py: continuous and discrete together

HYBRID_SIZES = [(1, 1), (2, 2), (1, 2), (2, 1)]


@pytest.mark.parametrize(
    "action_sizes",
    [_slow_unless(sizes == (1, 1), sizes) for sizes in HYBRID_SIZES],
    ids=[f"{c}c{d}d" for c, d in HYBRID_SIZES],
)
def test_hybrid_ppo(action_sizes: tuple[int, int]) -> None:
    scene = GoalLine(seed=SEED, action_sizes=action_sizes, step_size=0.8)
    settings = evolve(
        "ppo", hyperparameters={"batch_size": 64, "buffer_size": 1024, "learning_rate": 1e-3}, max_steps=20000
    )
    model = train_on(scene, BEHAVIOR, settings, SEED)
    assert isinstance(model.policy, HybridActorCriticPolicy)  # not the binned Box fallback
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize(("num_visual", "seed"), [(1, 1336), (2, 1338)])
def test_hybrid_visual_ppo(num_visual: int, seed: int) -> None:
    scene = GoalLine(seed=seed, action_sizes=(1, 1), num_vector=0, num_visual=num_visual)
    settings = evolve(
        "ppo", hyperparameters={"batch_size": 64, "buffer_size": 1024, "learning_rate": 1e-4}, max_steps=8000
    )
    train_on(scene, BEHAVIOR, settings, seed)
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
def test_hybrid_recurrent_ppo() -> None:
    scene = GoalLine(seed=SEED, action_sizes=(1, 1), step_size=0.5, show_steps=2)
    settings = evolve(
        "ppo",
        hyperparameters={"learning_rate": 1.0e-3, "batch_size": 64, "buffer_size": 512},
        network_settings={"memory": {"memory_size": 16}},
        max_steps=5000,
    )
    model = train_on(scene, BEHAVIOR, settings, SEED)
    assert type(model).__name__ == "RecurrentPPO" and model.policy.hybrid
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize("action_sizes", HYBRID_SIZES, ids=[f"{c}c{d}d" for c, d in HYBRID_SIZES])
def test_hybrid_sac(action_sizes: tuple[int, int]) -> None:
    scene = GoalLine(seed=SEED, action_sizes=action_sizes, step_size=0.8)
    settings = evolve(
        "sac",
        hyperparameters={"buffer_size": 50000, "batch_size": 256, "buffer_init_steps": 0},
        max_steps=8000,
    )
    train_on(scene, BEHAVIOR, settings, SEED)
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
@pytest.mark.parametrize(("num_visual", "seed"), [(1, 1337), (2, 1338)])
def test_hybrid_visual_sac(num_visual: int, seed: int) -> None:
    scene = GoalLine(seed=seed, action_sizes=(1, 1), num_vector=0, num_visual=num_visual)
    settings = evolve(
        "sac",
        hyperparameters={"buffer_size": 50000, "batch_size": 128, "learning_rate": 3.0e-4},
        max_steps=3000,
    )
    train_on(scene, BEHAVIOR, settings, seed)
    assert processed_reward(scene.final_rewards) > THRESHOLD


@pytest.mark.slow
def test_hybrid_recurrent_sac() -> None:
    scene = GoalLine(seed=1212, action_sizes=(1, 1), step_size=0.5, show_steps=2)
    settings = evolve("sac", **RECURRENT_SAC)
    model = train_on(scene, BEHAVIOR, settings, 1212)
    assert model.policy.memory_size == 16
    assert processed_reward(scene.final_rewards) > THRESHOLD
