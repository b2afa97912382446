"""Absorbing a wrapper step's terminal batches together ends the same slots the same way as absorbing
them one after the other (``unity_sb3.wrappers._terminals``), whatever the batches hold: agents with
and without slots, an agent in two batches, many or few slots per batch, observations of different
dtypes from batch to batch, dict observations, rewards of -0.0 and NaN."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from unity_sb3.spaces import BehaviorSpaces
from unity_sb3.wrappers._terminals import absorb_terminals, put_placeholders
from unity_sb3.wrappers.instances import Instance

from mlagents_envs.base_env import (  # isort: skip
    ActionSpec,
    BehaviorSpec,
    DimensionProperty,
    ObservationSpec,
    ObservationType,
    TerminalSteps,
)

N_SLOTS = 12


def _spec(visual: bool) -> BehaviorSpec:
    specs = [ObservationSpec((3,), (DimensionProperty.NONE,), ObservationType.DEFAULT, "vector")]
    if visual:
        te = DimensionProperty.TRANSLATIONAL_EQUIVARIANCE
        specs.append(
            ObservationSpec((2, 2, 1), (te, te, DimensionProperty.NONE), ObservationType.DEFAULT, "cam")
        )
    return BehaviorSpec(specs, ActionSpec(1, ()))


def _instance(rng: np.random.Generator) -> Instance:
    inst = Instance(worker_id=0, source=None, env=None, start=3)  # type: ignore[arg-type]
    inst.allocate(N_SLOTS)
    bound = rng.random(N_SLOTS) < 0.8
    inst.agent[:] = 100 + np.arange(N_SLOTS)
    inst.bound[:] = bound
    inst.had_agent[:] = True
    inst.slot_of = {100 + s: s for s in np.flatnonzero(bound).tolist()}
    inst.all_bound = bool(bound.all())
    inst.group_id[:] = rng.integers(0, 3, N_SLOTS)
    return inst


def _batch(rng: np.random.Generator, spec: BehaviorSpec) -> TerminalSteps:
    n = int(rng.integers(1, 7))
    ids = rng.choice(np.arange(95, 100 + N_SLOTS + 5), size=n, replace=False)  # some without a slot
    obs = []
    for o in spec.observation_specs:
        dtype = np.float64 if rng.random() < 0.2 else np.float32  # a BaseEnv may send either
        obs.append(rng.random((n, *o.shape)).astype(dtype))
    reward = rng.choice(np.array([0.5, -0.0, 0.0, np.nan, -1.25], np.float32), n)
    group_id = rng.integers(0, 4, n).astype(np.int64 if rng.random() < 0.2 else np.int32)
    return TerminalSteps(
        obs,
        reward,
        rng.random(n) < 0.5,
        ids.astype(np.int32),
        group_id,
        rng.choice(np.array([0.0, -0.0, 0.25], np.float32), n),
    )


def _absorb(inst, batches, spaces, obs_buf, together: bool):
    results = (
        np.zeros(N_SLOTS, np.float32),
        np.zeros(N_SLOTS, np.float32),
        np.zeros(N_SLOTS, bool),
        np.zeros(N_SLOTS, bool),
        {},
    )
    for part in [batches] if together else [[b] for b in batches]:
        absorb_terminals(inst, part, spaces, *results)
    put_placeholders(inst, obs_buf, results[-1], results[-1])  # as the wrapper writes them
    return results


def _same(a, b) -> None:
    if isinstance(a, dict):
        assert list(a) == list(b) or sorted(a) == sorted(b)
        for k in a:
            _same(a[k], b[k])
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("visual", [False, True])
@pytest.mark.parametrize("seed", range(40))
def test_batches_absorbed_together_end_the_slots_as_one_after_the_other(seed, visual):
    rng = np.random.default_rng(seed)
    spec = _spec(visual)
    spaces = BehaviorSpaces(spec)
    batches = [_batch(rng, spec) for _ in range(int(rng.integers(1, 6)))]
    start = _instance(rng)
    buf = spaces.empty_observations(N_SLOTS + 5)
    outputs, states, bufs = [], [], []
    for together in (True, False):
        inst, obs_buf = copy.deepcopy(start), copy.deepcopy(buf)
        outputs.append(_absorb(inst, batches, spaces, obs_buf, together))
        states.append(inst)
        bufs.append(obs_buf)
    (r1, g1, d1, t1, o1), (r2, g2, d2, t2, o2) = outputs
    for a, b in [(r1, r2), (g1, g2), (d1, d2), (t1, t2)]:
        _same(a, b)
    assert sorted(o1) == sorted(o2)
    for slot in o1:
        _same(o1[slot], o2[slot])
    _same(bufs[0], bufs[1])
    one, other = states
    assert one.slot_of == other.slot_of
    _same(one.bound, other.bound)
    _same(one.group_id, other.group_id)
    assert one.all_bound == other.all_bound
