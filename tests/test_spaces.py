"""BehaviorSpaces: BehaviorSpec <-> gymnasium spaces, observation/action/mask conversion (DESIGN 4.1)."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import unity_sb3.unity  # noqa: F401  (protobuf compat before mlagents_envs)
from unity_sb3.spaces import (
    BehaviorSpaces,
    box_to_discrete,
    discrete_to_box,
    observation_keys,
    zeros_like_space,
)

from mlagents_envs.base_env import (  # isort: skip
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
)

NONE = DimensionProperty.NONE
TE = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE
VAR = DimensionProperty.VARIABLE_SIZE


def vector(
    size: int, name: str = "vector", kind: ObservationType = ObservationType.DEFAULT
) -> ObservationSpec:
    return ObservationSpec((size,), (NONE,), kind, name)


def hwc(h: int, w: int, c: int, name: str = "camera") -> ObservationSpec:
    return ObservationSpec((h, w, c), (TE, TE, NONE), ObservationType.DEFAULT, name)


def chw(c: int, h: int, w: int, name: str = "camera") -> ObservationSpec:
    return ObservationSpec((c, h, w), (NONE, TE, TE), ObservationType.DEFAULT, name)


def spec(*obs: ObservationSpec, action: ActionSpec | None = None) -> BehaviorSpec:
    return BehaviorSpec(list(obs), action or ActionSpec(2, ()))


# ---------------------------------------------------------------------- observations
def test_single_vector_observation_is_a_float_box():
    s = BehaviorSpaces(spec(vector(8)))
    assert s.observation_space == spaces.Box(-np.inf, np.inf, (8,), np.float32)
    batch = np.arange(16, dtype=np.float64).reshape(2, 8)
    out = s.observations([batch])
    assert out.dtype == np.float32 and out.shape == (2, 8)


@pytest.mark.parametrize(
    ("obs_spec", "unity_shape"),
    [(hwc(4, 5, 3), (2, 4, 5, 3)), (chw(3, 4, 5), (2, 3, 4, 5))],
    ids=["hwc", "chw"],
)
@pytest.mark.parametrize(
    ("visual", "shape", "dtype"),
    [
        ("uint8", (3, 4, 5), np.uint8),
        ("float", (3, 4, 5), np.float32),
        ("uint8_hwc", (4, 5, 3), np.uint8),
        ("float_hwc", (4, 5, 3), np.float32),
    ],
)
def test_visual_observation_layouts(obs_spec, unity_shape, visual, shape, dtype):
    s = BehaviorSpaces(spec(obs_spec), visual=visual)
    space = s.observation_space
    assert space.shape == shape and space.dtype == dtype
    rng = np.random.default_rng(0)
    images = rng.random(unity_shape).astype(np.float32)
    out = s.observations([images])
    assert out.shape == (2, *shape) and out.dtype == dtype
    assert space.contains(out[0])
    # channel 1 of agent 0, pixel (row 2, col 3), wherever Unity put the channels
    pixel = images[0, 2, 3, 1] if obs_spec.shape[2] == 3 else images[0, 1, 2, 3]
    got = out[0, 1, 2, 3] if shape[0] == 3 else out[0, 2, 3, 1]
    if dtype == np.uint8:
        assert got == round(pixel * 255)
    else:
        assert got == pytest.approx(pixel)
    back = s.to_unity_observations(out)[0]
    assert back.shape == unity_shape
    np.testing.assert_allclose(back, images, atol=0.5 / 255 + 1e-6)


def test_sb3_sees_uint8_channel_first_images():
    from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first

    space = BehaviorSpaces(spec(hwc(36, 36, 3))).observation_space
    assert is_image_space(space) and is_image_space_channels_first(space)
    last = BehaviorSpaces(spec(hwc(36, 36, 3)), visual="uint8_hwc").observation_space
    assert is_image_space(last) and not is_image_space_channels_first(last)


def test_uint8_images_warn_once_when_values_leave_0_1_and_float_keeps_them():
    """Unity's learning-test scenes draw images of -1 and +1: uint8 clips them, so it says so."""
    import warnings

    behavior = spec(chw(3, 8, 8), vector(2))
    inside = [np.random.default_rng(0).random((2, 3, 8, 8), dtype=np.float32), np.zeros((2, 2), np.float32)]
    outside = [np.full((2, 3, 8, 8), -1.0, np.float32), np.zeros((2, 2), np.float32)]
    uint8 = BehaviorSpaces(behavior)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uint8.observations(inside)  # [0, 1]: no warning
    with pytest.warns(UserWarning, match=r"'camera' holds values from -1 to -1: uint8 images keep \[0, 1\]"):
        assert (uint8.observations(outside)["camera"] == 0).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uint8.observations(outside)  # once only
        floats = BehaviorSpaces(behavior, visual="float").observations(outside)
    assert (floats["camera"] == -1.0).all()


def test_several_observations_make_a_dict_keyed_by_name():
    goal = vector(3, "goal", ObservationType.GOAL_SIGNAL)
    buffer = ObservationSpec((5, 4), (VAR, NONE), ObservationType.DEFAULT, "entities")
    s = BehaviorSpaces(spec(vector(8), hwc(4, 4, 1), goal, buffer))
    space = s.observation_space
    assert isinstance(space, spaces.Dict)
    assert sorted(space.spaces) == ["camera", "entities", "goal", "vector"]  # gymnasium sorts keys
    assert space["goal"].shape == (3,)
    # a variable-length (BufferSensor) observation is a zero-padded float Box (max_entities, features)
    assert space["entities"] == spaces.Box(-np.inf, np.inf, (5, 4), np.float32)
    batch = [np.ones((2, 8)), np.full((2, 4, 4, 1), 0.5), np.zeros((2, 3)), np.ones((2, 5, 4))]
    out = s.observations(batch)
    assert out["camera"].shape == (2, 1, 4, 4) and out["camera"].dtype == np.uint8
    assert space.contains({k: v[0] for k, v in out.items()})
    back = s.to_unity_observations(out)
    assert [b.shape for b in back] == [(2, 8), (2, 4, 4, 1), (2, 3), (2, 5, 4)]


@pytest.mark.parametrize(
    ("names", "keys"),
    [
        (["a", "b"], ["a", "b"]),
        (["", "b"], ["obs_0", "b"]),
        (["a", "a"], ["a", "obs_1"]),
        (["obs_1", ""], ["obs_0", "obs_1"]),  # a literal name colliding with a generated key
    ],
)
def test_observation_keys_are_unique(names, keys):
    assert observation_keys([vector(1, n) for n in names]) == keys


def test_flatten_concatenates_vectors_and_refuses_images():
    s = BehaviorSpaces(spec(vector(3, "a"), vector(2, "b")), flatten=True)
    assert s.observation_space.shape == (5,)
    out = s.observations([np.ones((2, 3)), np.zeros((2, 2))])
    assert out.tolist() == [[1, 1, 1, 0, 0]] * 2
    back = s.to_unity_observations(out)
    assert [b.shape for b in back] == [(2, 3), (2, 2)]
    with pytest.raises(ValueError, match="flatten=True needs every observation to be 1-D"):
        BehaviorSpaces(spec(vector(3), hwc(4, 4, 3)), flatten=True)


def test_wrong_number_of_observation_arrays_is_an_error():
    with pytest.raises(ValueError, match="expected 2 observation arrays, got 1"):
        BehaviorSpaces(spec(vector(3, "a"), vector(2, "b"))).observations([np.ones((1, 3))])


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"visual": "rgb"}, "visual must be"), ({"hybrid": "x"}, "hybrid")]
)
def test_bad_options_are_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BehaviorSpaces(spec(vector(1)), **kwargs)


# ---------------------------------------------------------------------- actions
@pytest.mark.parametrize(
    ("action", "hybrid", "expected"),
    [
        (ActionSpec(3, ()), "dict", spaces.Box(-1, 1, (3,), np.float32)),
        (ActionSpec(0, (5,)), "dict", spaces.Discrete(5)),
        (ActionSpec(0, (3, 2)), "dict", spaces.MultiDiscrete([3, 2])),
        (ActionSpec(0, ()), "dict", spaces.Box(-1, 1, (0,), np.float32)),
        (
            ActionSpec(2, (3,)),
            "dict",
            spaces.Dict(
                {"continuous": spaces.Box(-1, 1, (2,), np.float32), "discrete": spaces.MultiDiscrete([3])}
            ),
        ),
        (
            ActionSpec(2, (3,)),
            "tuple",
            spaces.Tuple((spaces.Box(-1, 1, (2,), np.float32), spaces.MultiDiscrete([3]))),
        ),
        (ActionSpec(2, (3, 4)), "box", spaces.Box(-1, 1, (4,), np.float32)),
    ],
)
def test_action_spaces(action, hybrid, expected):
    assert BehaviorSpaces(spec(vector(1), action=action), hybrid=hybrid).action_space == expected


def test_continuous_actions_are_clipped_and_checked():
    s = BehaviorSpaces(spec(vector(1), action=ActionSpec(2, ())))
    out = s.to_unity_actions(np.array([[2.0, -3.0], [0.5, 0.0]]), 2)
    assert out.continuous.dtype == np.float32
    assert out.continuous.tolist() == [[1.0, -1.0], [0.5, 0.0]]
    assert out.discrete.shape == (2, 0)
    with pytest.raises(ValueError, match="NaN or infinite"):
        s.to_unity_actions(np.array([[np.nan, 0.0]]), 1)
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(2, 2\)"):
        s.to_unity_actions(np.zeros(3), 2)


def test_discrete_actions_are_validated():
    s = BehaviorSpaces(spec(vector(1), action=ActionSpec(0, (3, 2))))
    out = s.to_unity_actions(np.array([[2, 1], [0, 0]]), 2)
    assert out.discrete.dtype == np.int32 and out.discrete.tolist() == [[2, 1], [0, 0]]
    assert s.to_unity_actions(np.array([[2.0, 1.0]]), 1).discrete.tolist() == [[2, 1]]
    with pytest.raises(ValueError, match="out of range for branch 1"):
        s.to_unity_actions(np.array([[0, 2]]), 1)
    with pytest.raises(ValueError, match="whole numbers"):
        s.to_unity_actions(np.array([[0.5, 1.0]]), 1)
    with pytest.raises(ValueError, match="must be integers"):
        s.to_unity_actions(np.array([["a", "b"]]), 1)
    single = BehaviorSpaces(spec(vector(1), action=ActionSpec(0, (4,))))
    assert single.to_unity_actions(np.array([3, 1]), 2).discrete.tolist() == [[3], [1]]


def test_hybrid_actions_each_mode():
    action = ActionSpec(1, (3,))
    as_dict = BehaviorSpaces(spec(vector(1), action=action), hybrid="dict")
    out = as_dict.to_unity_actions({"continuous": [[0.5]], "discrete": [[2]]}, 1)
    assert out.continuous.tolist() == [[0.5]] and out.discrete.tolist() == [[2]]
    with pytest.raises(ValueError, match="dict with keys"):
        as_dict.to_unity_actions([[0.5, 2]], 1)
    as_tuple = BehaviorSpaces(spec(vector(1), action=action), hybrid="tuple")
    out = as_tuple.to_unity_actions(([[0.5]], [[1]]), 1)
    assert out.discrete.tolist() == [[1]]
    as_box = BehaviorSpaces(spec(vector(1), action=action), hybrid="box")
    out = as_box.to_unity_actions(np.array([[0.5, -1.0], [0.5, 0.0], [0.5, 1.0]]), 3)
    assert out.discrete[:, 0].tolist() == [0, 1, 2]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.integers(0, 3),
    st.sampled_from(["dict", "tuple", "box"]),
    st.integers(1, 4),
    st.integers(0, 2**31 - 1),
)
def test_actions_round_trip(branches, continuous, hybrid, n, seed):
    s = BehaviorSpaces(spec(vector(1), action=ActionSpec(continuous, tuple(branches))), hybrid=hybrid)
    rng = np.random.default_rng(seed)
    cont = rng.uniform(-1, 1, (n, continuous)).astype(np.float32)
    disc = np.stack([rng.integers(0, b, n) for b in branches], axis=1)
    batch = s.from_unity_actions(cont, disc)
    out = s.to_unity_actions(batch, n)
    np.testing.assert_allclose(out.continuous, cont, atol=1e-6)
    np.testing.assert_array_equal(out.discrete, disc)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), st.integers(0, 2**31 - 1))
def test_box_bins_round_trip(branches, seed):
    rng = np.random.default_rng(seed)
    choices = np.stack([rng.integers(0, b, 5) for b in branches], axis=1)
    np.testing.assert_array_equal(box_to_discrete(discrete_to_box(choices, branches), branches), choices)
    values = rng.uniform(-1, 1, (5, len(branches)))
    picked = box_to_discrete(values, branches)
    assert np.all(picked >= 0) and np.all(picked < np.asarray(branches))


# ---------------------------------------------------------------------- masks
def test_masks_are_inverted_and_concatenated():
    s = BehaviorSpaces(spec(vector(1), action=ActionSpec(0, (3, 2))))
    assert s.mask_size == 5
    unity = [
        np.array([[True, False, False], [False, False, True]]),
        np.array([[False, True], [False, False]]),
    ]
    masks = s.action_masks(unity, 2)
    assert masks.dtype == bool
    assert masks.tolist() == [[False, True, True, True, False], [True, True, False, True, True]]
    assert s.action_masks(None, 2).all() and s.action_masks(None, 2).shape == (2, 5)
    assert s.action_masks([], 1).shape == (1, 5)


def test_zeros_like_space_and_empty_observations():
    space = spaces.Dict(
        {
            "a": spaces.Box(0, 255, (2, 3), np.uint8),
            "b": spaces.Tuple((spaces.Box(-1, 1, (1,)), spaces.Discrete(3))),
        }
    )
    zeros = zeros_like_space(space, 4)
    assert zeros["a"].shape == (4, 2, 3) and zeros["a"].dtype == np.uint8
    assert zeros["b"][0].shape == (4, 1) and zeros["b"][1].shape == (4,)
    s = BehaviorSpaces(spec(vector(3, "a"), hwc(2, 2, 3)))
    empty = s.empty_observations(2)
    assert empty["camera"].shape == (2, 3, 2, 2)


# ---------------------------------------------------------------------- property-based: random specs
VISUAL_DIMS = {
    "hwc": (
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
        DimensionProperty.NONE,
    ),
    "chw": (
        DimensionProperty.NONE,
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
        DimensionProperty.TRANSLATIONAL_EQUIVARIANCE,
    ),
}


@st.composite
def observation_specs(draw) -> list[ObservationSpec]:
    specs = []
    for i in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            shape: tuple[int, ...] = (draw(st.integers(1, 6)),)
            dims = (DimensionProperty.NONE,)
        else:
            layout = draw(st.sampled_from(["hwc", "chw"]))
            h, w, c = draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.integers(1, 4))
            shape = (h, w, c) if layout == "hwc" else (c, h, w)
            dims = VISUAL_DIMS[layout]
        name = draw(st.sampled_from(["", "ray", "camera", f"obs_{i}"]))
        specs.append(ObservationSpec(shape, dims, ObservationType.DEFAULT, name))
    return specs


@st.composite
def action_specs(draw) -> ActionSpec:
    continuous = draw(st.integers(0, 3))
    branches = tuple(draw(st.lists(st.integers(1, 5), min_size=0 if continuous else 1, max_size=3)))
    return ActionSpec(continuous, branches)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=observation_specs(),
    visual=st.sampled_from(["uint8", "float", "uint8_hwc", "float_hwc"]),
    flatten=st.booleans(),
    n=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_observation_round_trip_for_random_specs(specs, visual, flatten, n, seed):
    all_vectors = all(len(s.shape) == 1 for s in specs)
    spec = BehaviorSpec(specs, ActionSpec(1, ()))
    if flatten and not all_vectors:
        with pytest.raises(ValueError, match="flatten=True needs every observation to be 1-D"):
            BehaviorSpaces(spec, visual=visual, flatten=True)
        return
    s = BehaviorSpaces(spec, visual=visual, flatten=flatten)
    rng = np.random.default_rng(seed)
    # Unity sends images in [0, 1]; multiples of 1/255 survive uint8 exactly (as PNG pixels do)
    unity = [
        (rng.integers(0, 256, (n, *sp.shape)) / 255.0).astype(np.float32)
        if len(sp.shape) == 3
        else rng.normal(size=(n, *sp.shape)).astype(np.float32)
        for sp in specs
    ]
    converted = s.observations(unity)
    for i in range(n):
        row = {k: v[i] for k, v in converted.items()} if isinstance(converted, dict) else converted[i]
        assert s.observation_space.contains(row), (s.observation_space, row)
    back = s.to_unity_observations(converted)
    assert len(back) == len(unity)
    for original, restored in zip(unity, back):
        assert restored.dtype == np.float32 and restored.shape == original.shape
        np.testing.assert_allclose(restored, original, atol=1e-6)


@settings(max_examples=80, deadline=None)
@given(
    action=action_specs(),
    hybrid=st.sampled_from(["dict", "tuple", "box"]),
    n=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
)
def test_action_round_trip_and_samples_for_random_specs(action, hybrid, n, seed):
    s = BehaviorSpaces(
        BehaviorSpec([ObservationSpec((2,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "")], action),
        hybrid=hybrid,
    )
    rng = np.random.default_rng(seed)
    cont = rng.uniform(-1, 1, (n, action.continuous_size)).astype(np.float32)
    disc = (
        np.stack([rng.integers(0, b, n) for b in action.discrete_branches], axis=1)
        if action.discrete_branches
        else np.zeros((n, 0), np.int64)
    )
    out = s.to_unity_actions(s.from_unity_actions(cont, disc), n)
    np.testing.assert_allclose(out.continuous, cont, atol=1e-6)
    np.testing.assert_array_equal(out.discrete, disc)
    # anything the space samples is a valid Unity action
    s.action_space.seed(seed)
    samples = [s.action_space.sample() for _ in range(n)]
    if isinstance(s.action_space, spaces.Dict):
        batch = {k: np.stack([x[k] for x in samples]) for k in s.action_space.spaces}
    elif isinstance(s.action_space, spaces.Tuple):
        batch = tuple(np.stack([x[j] for x in samples]) for j in range(2))
    else:
        batch = np.stack(samples)
    sent = s.to_unity_actions(batch, n)
    assert sent.continuous.shape == (n, action.continuous_size) and np.all(np.abs(sent.continuous) <= 1)
    assert sent.discrete.shape == (n, len(action.discrete_branches))
    assert np.all(
        (sent.discrete >= 0) & (sent.discrete < np.asarray(action.discrete_branches, dtype=np.int64))
    )


@settings(max_examples=80, deadline=None)
@given(
    branches=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    n=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
    no_mask=st.booleans(),
)
def test_masks_for_random_branches(branches, n, seed, no_mask):
    s = BehaviorSpaces(
        BehaviorSpec(
            [ObservationSpec((2,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "")],
            ActionSpec(0, tuple(branches)),
        )
    )
    rng = np.random.default_rng(seed)
    unity = None if no_mask else [rng.random((n, b)) < 0.4 for b in branches]  # True = NOT allowed
    flat = s.action_masks(unity, n)
    assert flat.shape == (n, sum(branches)) and flat.dtype == bool
    if unity is None:
        assert flat.all()
    else:
        offsets = np.cumsum([0, *branches])
        for k in range(len(branches)):
            np.testing.assert_array_equal(flat[:, offsets[k] : offsets[k + 1]], ~unity[k])
