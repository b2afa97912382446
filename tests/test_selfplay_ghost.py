"""GhostPolicy: a frozen policy copy that answers Unity's DecisionSteps as the learner's view would."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy

import unity_sb3.unity  # noqa: F401  (protobuf compat before mlagents_envs)
from unity_sb3.algorithms.poca.policies import POCAPolicy
from unity_sb3.selfplay import GhostPolicy
from unity_sb3.spaces import BehaviorSpaces

from mlagents_envs.base_env import (  # isort: skip
    ActionSpec,
    BehaviorSpec,
    DecisionSteps,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

NONE, TE = DimensionProperty.NONE, DimensionProperty.TRANSLATIONAL_EQUIVARIANCE


def behavior_spaces(action: ActionSpec, image: bool = False) -> BehaviorSpaces:
    specs = [ObservationSpec((4,), (NONE,), ObservationType.DEFAULT, "vector")]
    if image:
        specs.append(ObservationSpec((36, 36, 3), (TE, TE, NONE), ObservationType.DEFAULT, "camera"))
    return BehaviorSpaces(BehaviorSpec(specs, action))


def steps(
    spaces: BehaviorSpaces, n: int, masks: list[np.ndarray] | None = None, seed: int = 0
) -> DecisionSteps:
    rng = np.random.default_rng(seed)
    obs = [rng.uniform(0, 1, (n, *s.shape)).astype(np.float32) for s in spaces.obs_specs]
    return DecisionSteps(
        obs, np.zeros(n, np.float32), np.arange(n), masks, np.zeros(n, np.int32), np.zeros(n, np.float32)
    )


def policy_for(kind, spaces: BehaviorSpaces):
    return kind(spaces.observation_space, spaces.action_space, lambda _: 3e-4)


def test_observations_are_converted_as_the_view_converts_them():
    spaces = behavior_spaces(ActionSpec.create_continuous(2), image=True)
    policy = policy_for(MultiInputActorCriticPolicy, spaces)
    ghost = GhostPolicy(policy, spaces, deterministic=True)
    decision = steps(spaces, 5)
    expected, _ = policy.predict(spaces.observations(decision.obs), deterministic=True)
    actions = ghost("Tennis?team=1", decision)
    np.testing.assert_allclose(actions.continuous, np.clip(expected, -1, 1), rtol=1e-6)
    assert actions.continuous.shape == (5, 2) and actions.discrete.shape == (5, 0)
    assert ghost.decisions == 5


def test_ghost_is_frozen_and_takes_a_snapshots_weights():
    spaces = behavior_spaces(ActionSpec.create_continuous(2))
    policy = policy_for(ActorCriticPolicy, spaces)
    ghost = GhostPolicy(policy, spaces, deterministic=True)
    snapshot = {k: v.clone() for k, v in policy.state_dict().items()}
    before = ghost.act(steps(spaces, 3)).continuous
    with th.no_grad():
        for p in policy.parameters():
            p.add_(0.5)  # training goes on
    np.testing.assert_array_equal(ghost.act(steps(spaces, 3)).continuous, before)
    ghost.load_weights(policy.state_dict())
    assert not np.array_equal(ghost.act(steps(spaces, 3)).continuous, before)
    ghost.load_weights(snapshot)
    np.testing.assert_array_equal(ghost.act(steps(spaces, 3)).continuous, before)
    assert all(not p.requires_grad for p in ghost.policy.parameters())


def only_allowed(branches: tuple[int, ...], allowed: tuple[int, ...], n: int) -> list[np.ndarray]:
    """ML-Agents' masks (True = NOT allowed) leaving one action per branch."""
    masks = []
    for size, keep in zip(branches, allowed):
        mask = np.ones((n, size), dtype=bool)
        mask[:, keep] = False
        masks.append(mask)
    return masks


@pytest.mark.parametrize("kind", [ActorCriticPolicy, MaskableActorCriticPolicy, POCAPolicy])
@pytest.mark.parametrize("branches", [(5,), (3, 4)])
def test_discrete_masks_are_respected_whatever_the_policy(kind, branches):
    spaces = behavior_spaces(ActionSpec.create_discrete(branches))
    ghost = GhostPolicy(policy_for(kind, spaces), spaces)
    allowed = tuple(size - 1 for size in branches)
    actions = ghost.act(steps(spaces, 200, only_allowed(branches, allowed, 200)))
    assert actions.discrete.shape == (200, len(branches))
    assert (actions.discrete == np.array(allowed)).all()


def test_ghost_samples_by_default():
    spaces = behavior_spaces(ActionSpec.create_discrete((6,)))
    ghost = GhostPolicy(policy_for(ActorCriticPolicy, spaces), spaces)
    decision = steps(spaces, 1)
    seen = {int(ghost.act(decision).discrete[0, 0]) for _ in range(60)}
    assert len(seen) > 1  # the same observation, different actions: deterministic=False


def test_no_agents_get_an_empty_action_tuple():
    spaces = behavior_spaces(ActionSpec.create_discrete((3,)))
    ghost = GhostPolicy(policy_for(ActorCriticPolicy, spaces), spaces)
    empty = ghost.act(steps(spaces, 0))
    assert empty.discrete.shape == (0, 1) and empty.continuous.shape == (0, 0)


def test_a_policy_of_another_space_is_refused():
    spaces = behavior_spaces(ActionSpec.create_continuous(2))
    other = behavior_spaces(ActionSpec.create_continuous(3))
    with pytest.raises(ValueError, match="action space"):
        GhostPolicy(policy_for(ActorCriticPolicy, other), spaces)


def test_a_recurrent_policy_is_refused_with_the_reason():
    from sb3_contrib.common.recurrent.policies import RecurrentActorCriticPolicy

    spaces = behavior_spaces(ActionSpec.create_continuous(2))
    with pytest.raises(ValueError, match="recurrent"):
        GhostPolicy(policy_for(RecurrentActorCriticPolicy, spaces), spaces)


def test_snapshot_normalizer_statistics_normalize_the_ghosts_observations():
    from types import SimpleNamespace

    from stable_baselines3.common.running_mean_std import RunningMeanStd

    from unity_sb3.selfplay.ghost import normalizer_weights

    spaces = behavior_spaces(ActionSpec.create_continuous(2))
    policy = policy_for(ActorCriticPolicy, spaces)
    rms = RunningMeanStd(shape=(4,))
    rms.mean, rms.var = np.array([0.5, 0.1, 0.0, 2.0]), np.array([0.04, 1.0, 4.0, 0.25])
    live = SimpleNamespace(norm_obs=True, obs_rms=rms, clip_obs=1.5, epsilon=1e-8)
    ghost = GhostPolicy(policy, spaces, deterministic=True)
    ghost.load_weights({**policy.state_dict(), **normalizer_weights(live)})
    decision = steps(spaces, 6)
    normalized = np.clip((decision.obs[0] - rms.mean) / np.sqrt(rms.var + 1e-8), -1.5, 1.5).astype(np.float32)
    expected, _ = policy.predict(normalized, deterministic=True)
    np.testing.assert_allclose(ghost.act(decision).continuous, np.clip(expected, -1, 1), rtol=1e-5)
    rms.mean = rms.mean + 3.0  # the learner's statistics move on; the snapshot's do not
    np.testing.assert_allclose(ghost.act(decision).continuous, np.clip(expected, -1, 1), rtol=1e-5)
    assert normalizer_weights(SimpleNamespace(norm_obs=False)) == {}


def test_a_hybrid_behavior_as_one_box_ignores_masks_as_its_learner_does():
    spec = BehaviorSpec(
        [ObservationSpec((4,), (NONE,), ObservationType.DEFAULT, "vector")], ActionSpec(2, (3,))
    )
    spaces = BehaviorSpaces(spec, hybrid="box")
    ghost = GhostPolicy(policy_for(ActorCriticPolicy, spaces), spaces)
    actions = ghost.act(steps(spaces, 4, only_allowed((3,), (1,), 4)))
    assert actions.continuous.shape == (4, 2) and actions.discrete.shape == (4, 1)


@pytest.mark.parametrize(
    "action",
    [ActionSpec.create_continuous(2), ActionSpec.create_discrete((3, 2))],
    ids=["gaussian", "branches"],
)
def test_a_policy_that_has_trained_can_be_frozen(action):
    # a training step leaves its action distribution, tensors of an autograd graph, on the policy
    spaces = behavior_spaces(action)
    policy = policy_for(ActorCriticPolicy, spaces)
    obs = th.as_tensor(spaces.observations(steps(spaces, 4).obs))
    policy.get_distribution(obs).log_prob(th.zeros((4, *spaces.action_space.shape))).sum().backward()
    ghost = GhostPolicy(policy, spaces, deterministic=True)
    actions = ghost("b", steps(spaces, 3))
    assert len(actions.continuous if action.continuous_size else actions.discrete) == 3


def test_a_poca_policy_that_has_trained_can_be_frozen():
    # POCA keeps one distribution per branch on the policy (action_dist.distributions)
    spaces = behavior_spaces(ActionSpec.create_discrete((3, 3)))
    policy = policy_for(POCAPolicy, spaces)
    obs = th.as_tensor(spaces.observations(steps(spaces, 4).obs))
    policy.get_distribution(obs).log_prob(th.zeros((4, 2))).sum().backward()
    actions = GhostPolicy(policy, spaces, deterministic=True)("b", steps(spaces, 3))
    assert actions.discrete.shape == (3, 2)
