"""Ball3D's optimised step against its plain form: the same trajectories bit for bit.

``Ball3D._physics_step``, ``_act``, ``_advance``, ``_observe`` and ``_on_episode_begin`` are written
for speed (in-place numpy calls on preallocated buffers, fewer calls per physics step). ``PlainBall3D``
below keeps them as they were before that work (commit 4a1263b), written for reading; seeded runs of
both must give identical observations, rewards, ids and interruptions, byte for byte, over random,
scripted and noisy actions, several agent counts and parameters (both run on the same numpy, so the
comparison holds on any machine). On this project's machine the runs also hash to the values recorded
from the plain code before the change (``RECORDED``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from mlagents_envs.base_env import ActionTuple
from mlagents_envs.side_channel.stats_side_channel import StatsAggregationMethod
from recorded_floats import computes_as_recorded

from unity_sb3.scenes.ball3d import (
    ANGULAR_DRAG,
    BIAS,
    BOUNCE_THRESHOLD,
    BOUNCINESS,
    CONTACT_OFFSET,
    DEG_PER_ACTION,
    DT,
    FRAME_ROWS,
    FRICTION,
    HALF,
    IDLE,
    LOST_BELOW,
    LOST_SIDE,
    MAX_ANGULAR_VELOCITY,
    MAX_DEPENETRATION,
    QUAT_LIMIT,
    RAD,
    START_HEIGHT,
    Ball3D,
    cross,
    interval_turn,
    rotation_matrices,
    sphere_box_contact,
    turn,
    turn_factors,
)


class PlainBall3D(Ball3D):
    """Ball3D with the plain step of commit 4a1263b (the reference of the optimised one)."""

    def _on_episode_begin(self, idx: np.ndarray) -> None:
        m = idx.size
        rng = self._rng
        frame = np.zeros((FRAME_ROWS, m))
        frame[3] = 1.0
        frame[4:] = rotation_matrices(frame[:4]).reshape(9, m)
        for axis in (0, 2):  # Rotate(x, U(-10, 10)) then Rotate(z, U(-10, 10))
            angle = rng.uniform(-10.0, 10.0, size=m) * RAD
            half, full = (np.sin(angle / 2), np.cos(angle / 2)), (np.sin(angle), np.cos(angle))
            turn(frame, turn_factors(half, full, axis), axis)
        self._frame[:, idx] = frame
        self._pos[0, idx] = rng.uniform(-1.5, 1.5, size=m)
        self._pos[1, idx] = START_HEIGHT
        self._pos[2, idx] = rng.uniform(-1.5, 1.5, size=m)
        self._vel[:, idx] = 0.0
        mass = self._param("mass", m)
        scale = self._param("scale", m)
        radius = 0.5 * np.maximum(scale, 1e-3)
        self._radius[idx] = radius
        self._fall[idx] = self._param("gravity", m) * DT
        for value in mass:
            self.stat("Environment/BallMass", float(value), StatsAggregationMethod.AVERAGE)
        for value in scale:
            self.stat("Environment/BallScale", float(value), StatsAggregationMethod.AVERAGE)

    def _advance(self, max_substeps: int) -> int:
        # the action holds for the whole interval: its turns' sines and cosines too
        angle = DEG_PER_ACTION * RAD * np.clip(self._cont_action.T.astype(np.float64), -1.0, 1.0)
        sines = (np.sin(angle / 2), np.cos(angle / 2), np.sin(angle), np.cos(angle))
        # Fast path: no cube can reach the quaternion limit within the interval (a step moves a
        # component by less than 0.02), so every step applies the same turn: one product.
        step = turns = None
        if np.abs(self._q[0:3:2]).max() + 0.02 * max_substeps < QUAT_LIMIT:
            step = interval_turn(*sines)
        else:
            s_half, c_half, s_full, c_full = sines
            factors = [
                turn_factors((s_half[col], c_half[col]), (s_full[col], c_full[col]), axis)
                for col, axis in ((0, 2), (1, 0))
            ]
            turns = (angle > 0, angle < 0, *factors)
        pos = self._pos
        steps_left = self.max_steps - int(self._step_count.max()) if self.max_steps > 0 else -1
        for k in range(1, max_substeps + 1):
            if step is None:
                self._act(turns)
            else:
                self._q[...] = np.einsum("ijn,jn->in", step[0], self._q)
                self._rot[...] = np.einsum("ijn,jkn->ikn", self._rot, step[1])
            # OnActionReceived's check, on the positions left by the last physics step
            side = np.abs(pos[0:3:2])
            worst = np.maximum(np.maximum(side[0], side[1]), LOST_SIDE + LOST_BELOW - pos[1])
            lost = np.flatnonzero(worst > LOST_SIDE) if worst.max() > LOST_SIDE else ()
            self._reward.fill(0.1)
            if len(lost):
                self._reward[lost] = -1.0
                self._finish(lost, False)
                self._start(lost)
            self._physics_step()
            self._step_count += 1
            steps_left -= 1
            if steps_left == 0 or (len(lost) and self.max_steps > 0):
                self._truncate_at_max_steps()
            if steps_left == 0 or len(lost):
                return k
        return max_substeps

    def _act(self, turns: tuple[np.ndarray, ...]) -> None:
        """``OnActionReceived``: turn about z, then about x, each within the quaternion limit.

        :param turns: whether each action turns up, whether down (shape (2, n) each), then the
            :func:`turn_factors` of the turns about z and about x.
        """
        up, down, *factors = turns
        q = self._q
        for col, axis in ((0, 2), (1, 0)):
            allowed = (up[col] & (q[axis] < QUAT_LIMIT)) | (down[col] & (q[axis] > -QUAT_LIMIT))
            keep, mix = factors[col]
            if not allowed.all():
                idle_keep, idle_mix = IDLE[axis]
                keep, mix = np.where(allowed, keep, idle_keep), np.where(allowed, mix, idle_mix)
            turn(self._frame, (keep, mix), axis)

    def _physics_step(self) -> None:
        """One PhysX step of every ball against its (already turned) cube."""
        pos, vel, spin, radius = self._pos, self._vel, self._spin, self._radius
        vel[1] -= self._fall
        spin *= 1.0 - ANGULAR_DRAG * DT
        rot = self._rot
        local = (rot * pos[:, None, :]).sum(axis=0)
        if np.abs(local[0:3:2]).max() <= HALF and local[1].min() > HALF:
            normal, sep = rot[:, 1], local[1] - (radius + HALF)  # every ball above its top face
        else:
            normal, sep = sphere_box_contact(pos, rot, radius)
        if sep.min() >= CONTACT_OFFSET:  # no ball touches
            pos += vel * DT
            return
        vn = (vel * normal).sum(axis=0)
        # kept velocity: no approach faster than closing the gap within the step (speculative
        # contact); a bounce only above the bounce threshold
        target = np.maximum(sep, 0.0) * (-1.0 / DT)
        if BOUNCINESS > 0:
            target = np.where((sep <= 0) & (vn < -BOUNCE_THRESHOLD), -BOUNCINESS * vn, target)
        jn = np.maximum(target - vn, 0.0)  # impulse per unit mass
        touching = sep < CONTACT_OFFSET
        if sep.max() >= CONTACT_OFFSET:
            jn *= touching
        # the velocity that moves the ball also pushes a penetration out (not kept)
        extra = None
        if sep.min() < 0:
            push = np.where(sep < 0, np.minimum(sep * (-BIAS / DT), MAX_DEPENETRATION), target)
            extra = np.maximum(push - vn, 0.0) * touching - jn
        vel += jn * normal
        # friction at the contact point (-r n from the centre): the impulse -2/7 of its slip
        # stops it (a sphere's 1/m + r^2/I = 7/(2m)), within the friction cone; the same impulse
        # turns the ball by (5 / 7r) n x slip
        slip = vel - cross(spin, normal) * radius
        slip -= (slip * normal).sum(axis=0) * normal
        scale = 2.0 / 7.0
        size = np.sqrt((slip * slip).sum(axis=0)) * scale
        limit = FRICTION * jn
        if (size > limit).any():
            scale = scale * np.minimum(1.0, limit / np.maximum(size, 1e-12))
        vel -= slip * scale
        spin += cross(normal, slip) * (scale * 2.5 / radius)
        speed2 = (spin * spin).sum(axis=0)
        if speed2.max() > MAX_ANGULAR_VELOCITY**2:
            spin *= np.minimum(1.0, MAX_ANGULAR_VELOCITY / np.sqrt(np.maximum(speed2, 1e-24)))
        if extra is None:
            pos += vel * DT
        else:
            pos += (vel + extra * normal) * DT

    def _observe(self, idx: np.ndarray) -> list[np.ndarray]:
        obs = np.empty((idx.size, 8), dtype=np.float32)
        obs[:, 0] = self._q[2, idx]
        obs[:, 1] = self._q[0, idx]
        obs[:, 2:5] = self._pos[:, idx].T
        obs[:, 5:8] = self._vel[:, idx].T
        return [obs]


def trajectory_hash(scene: type[Ball3D], policy: str, steps: int, **params) -> str:
    """sha256 of a seeded run: every step's observations, rewards, agent ids and interruptions."""
    env = scene(seed=3, **params)
    env.reset()
    name = env.behavior_name
    digest = hashlib.sha256()
    rng = np.random.default_rng(7)
    for _ in range(steps):
        decision, terminal = env.get_steps(name)
        for batch in (decision, terminal):
            for obs in batch.obs:
                digest.update(np.ascontiguousarray(obs).tobytes())
            digest.update(batch.reward.tobytes())
            digest.update(batch.agent_id.tobytes())
        digest.update(terminal.interrupted.tobytes())
        if policy == "random":  # beyond [-1, 1] too: the clamp
            action = rng.uniform(-1.3, 1.3, (len(decision), 2)).astype(np.float32)
        elif policy == "expert":
            action = env.expert_actions(name, decision).continuous
        else:  # the expert with noise: balls kept up, cubes at their tilt limits at times
            noise = rng.normal(0.0, 0.5, (len(decision), 2))
            action = (env.expert_actions(name, decision).continuous + noise).astype(np.float32)
        env.set_actions(name, ActionTuple(continuous=action))
        env.step()
    env.close()
    return digest.hexdigest()


# (policy, steps, parameters) and the hash the plain code gave on this project's machine
# (x86_64 Linux, numpy 2.4) before the optimised step was written.
RECORDED = [
    ("random", 600, {}, "686179e3ef3fa3f5290cbce5a5d4f560980f75f84da822498b21c5f5445997c2"),
    ("expert", 600, {"max_steps": 500}, "c49de3ae8ae89a7ff51e3b1d51511a7868ca197b7b6feb1a2089cfef5878c1ec"),
    ("mixed", 600, {"num_agents": 64}, "a148bc77232d8843cfd4c598961573749e8ad01df5895df4302a5ec42de4a54b"),
    ("random", 200, {"num_agents": 256}, "1272d2918ba3061adfb3aaeafd2b719751233110c7d926f7e47f61ab10f48edb"),
    (
        "mixed",
        400,
        {"scale": 1.7, "gravity": 14.0, "decision_period": 3},
        "f1166c36147d5f95b02ee535450fb22cc2a8d9af8413142db2f212c0df6b91ac",
    ),
    (
        "random",
        300,
        {"max_steps": 0, "decision_period": 1, "num_agents": 5},
        "d260d9af9e826c78f01c770971ac1f185b3b6d31a37bfe421831cbeeb1e9362c",
    ),
]


@pytest.mark.parametrize(("policy", "steps", "params", "recorded"), RECORDED)
def test_optimised_step_matches_the_plain_one_bit_for_bit(policy, steps, params, recorded):
    fast = trajectory_hash(Ball3D, policy, steps, **params)
    assert fast == trajectory_hash(PlainBall3D, policy, steps, **params)
    if computes_as_recorded():
        assert fast == recorded
