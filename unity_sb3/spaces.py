"""Unity ``BehaviorSpec`` <-> gymnasium spaces, and the conversions between them.

Observations (DESIGN 4.1):

- one observation spec -> ``Box(float32)`` in Unity's shape;
- a visual (3-D) observation -> ``Box(uint8)`` channel-first in [0, 255] by default, so SB3
  recognises it as an image (``visual="float"`` keeps Unity's float32 values in [0, 1], in
  channel-first order too; ``"uint8_hwc"`` / ``"float_hwc"`` give channel-last images, e.g. for
  code that applies SB3's ``VecTransposeImage`` itself);
- a 2-D variable-length observation (a ``BufferSensor``: ``(max_entities, features)``) ->
  ``Box(float32)`` of that shape; Unity zero-pads the unused rows, so a row of zeros means "no
  entity". :class:`unity_sb3.networks.extractors.UnityMultiInputExtractor` reads it as entities
  with ML-Agents' attention (SB3's own extractors flatten it);
- a goal-signal observation is an ordinary ``Box`` under its own key;
- several specs -> a ``Dict`` keyed by each spec's name (``obs_i`` when unnamed or repeated),
  or one flat ``Box`` when all specs are 1-D and ``flatten=True``.

Actions:

- continuous only -> ``Box(-1, 1, (c,), float32)`` (values are clipped to [-1, 1] before they
  reach Unity, as ML-Agents' trainers do);
- one discrete branch -> ``Discrete(n)``; several -> ``MultiDiscrete``;
- hybrid (continuous and discrete) -> chosen by ``hybrid``:
  ``"dict"`` (default): ``Dict({"continuous": Box, "discrete": MultiDiscrete})``;
  ``"tuple"``: ``Tuple((Box, MultiDiscrete))``;
  ``"box"``: one ``Box(-1, 1, (c + k,))`` whose last ``k`` entries each pick a discrete branch's
  action by splitting [-1, 1] into equal bins. SB3 algorithms take neither ``Dict`` nor
  ``Tuple`` actions, so ``UnityVecEnv`` uses ``"box"`` for hybrid behaviors.

Action masks: ML-Agents gives one ``(n_agents, branch_size)`` boolean array per branch with True
meaning *not allowed*; sb3-contrib and PettingZoo want one flat vector per agent with True (or 1)
meaning *allowed*. :meth:`BehaviorSpaces.action_masks` converts.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from gymnasium import spaces
from mlagents_envs.base_env import ActionSpec, ActionTuple, BehaviorSpec, ObservationSpec

from unity_sb3.unity.compat import channel_axis

VisualMode = Literal["uint8", "float", "uint8_hwc", "float_hwc"]
VISUAL_MODES = ("uint8", "float", "uint8_hwc", "float_hwc")
HybridMode = Literal["dict", "tuple", "box"]

CONTINUOUS_KEY = "continuous"
DISCRETE_KEY = "discrete"


def is_visual(spec: ObservationSpec) -> bool:
    """Whether an observation spec is a visual (3-D) observation."""
    return len(spec.shape) == 3


def observation_keys(specs: Sequence[ObservationSpec]) -> list[str]:
    """Unique, readable keys for a behavior's observations: the spec name, else ``obs_i``."""
    keys: list[str] = []
    for i, spec in enumerate(specs):
        name = (spec.name or "").strip()
        keys.append(name if name and name not in keys else f"obs_{i}")
    # a later unnamed ``obs_i`` could collide with an earlier spec literally named ``obs_i``
    if len(set(keys)) != len(keys):
        keys = [f"obs_{i}" for i in range(len(specs))]
    return keys


#: how many batches of each uint8 image behavior are checked for values off [0, 1]
_RANGE_CHECKS = 100
# the continuous action bounds as float32 arrays: ufuncs take them ~0.25 us faster than Python floats
# (the same float32 values either way)
_LOW, _HIGH = np.array(-1.0, np.float32), np.array(1.0, np.float32)


class BehaviorSpaces:
    """The gymnasium view of one Unity behavior: spaces plus batch conversions both ways.

    :param spec: the behavior's ``BehaviorSpec``.
    :param visual: ``"uint8"`` (default): visual observations as channel-first uint8 images in
        [0, 255], so SB3 treats them as images; ``"float"``: channel-first float32 in [0, 1];
        ``"uint8_hwc"`` / ``"float_hwc"``: the same values, channel-last.
    :param flatten: concatenate all observations into one vector; only allowed when every
        observation is 1-D.
    :param hybrid: how a hybrid action spec is exposed: ``"dict"``, ``"tuple"`` or ``"box"``
        (see the module docstring).
    """

    def __init__(
        self,
        spec: BehaviorSpec,
        *,
        visual: VisualMode = "uint8",
        flatten: bool = False,
        hybrid: HybridMode = "dict",
    ) -> None:
        if visual not in VISUAL_MODES:
            raise ValueError(f"visual must be one of {VISUAL_MODES}, got {visual!r}")
        if hybrid not in ("dict", "tuple", "box"):
            raise ValueError(f"hybrid must be 'dict', 'tuple' or 'box', got {hybrid!r}")
        self.spec = spec
        self.visual = visual
        self.uint8_images = visual.startswith("uint8")
        self._range_checks_left = _RANGE_CHECKS  # uint8 images: batches still checked for values off [0, 1]
        self.channels_last = visual.endswith("_hwc")
        self.hybrid = hybrid
        self.obs_specs = list(spec.observation_specs)
        self.keys = observation_keys(self.obs_specs)
        if flatten and any(len(s.shape) != 1 for s in self.obs_specs):
            shapes = [tuple(s.shape) for s in self.obs_specs]
            raise ValueError(
                f"flatten=True needs every observation to be 1-D, but the shapes are {shapes}; "
                "use flatten=False to get a Dict observation space"
            )
        self.flatten = flatten or len(self.obs_specs) == 1
        self.channel_axes = [
            channel_axis(tuple(s.shape), tuple(s.dimension_property)) if is_visual(s) else None
            for s in self.obs_specs
        ]
        self.observation_space = self._make_observation_space()
        self.action_spec: ActionSpec = spec.action_spec
        self.continuous_size = int(self.action_spec.continuous_size)
        self.branches = tuple(int(b) for b in self.action_spec.discrete_branches)
        self.action_space = self._make_action_space()

    # ------------------------------------------------------------------ observations
    def _single_space(self, index: int) -> spaces.Box:
        spec = self.obs_specs[index]
        axis = self.channel_axes[index]
        if axis is None:
            return spaces.Box(-np.inf, np.inf, shape=tuple(int(d) for d in spec.shape), dtype=np.float32)
        shape = tuple(int(d) for d in spec.shape)
        chw = shape if axis == 0 else (shape[2], shape[0], shape[1])
        out = (chw[1], chw[2], chw[0]) if self.channels_last else chw
        if self.uint8_images:
            return spaces.Box(0, 255, shape=out, dtype=np.uint8)
        return spaces.Box(0.0, 1.0, shape=out, dtype=np.float32)

    def _make_observation_space(self) -> spaces.Space:
        singles = [self._single_space(i) for i in range(len(self.obs_specs))]
        if len(singles) == 1:
            return singles[0]
        if self.flatten:
            size = sum(int(s.shape[0]) for s in singles)
            return spaces.Box(-np.inf, np.inf, shape=(size,), dtype=np.float32)
        return spaces.Dict(dict(zip(self.keys, singles)))

    def _convert_one(self, index: int, batch: np.ndarray) -> np.ndarray:
        axis = self.channel_axes[index]
        if axis is None:
            return np.asarray(batch, dtype=np.float32)
        images = np.asarray(batch)
        if axis == 2 and not self.channels_last:  # (n, H, W, C) -> (n, C, H, W)
            images = np.moveaxis(images, -1, 1)
        elif axis == 0 and self.channels_last:  # (n, C, H, W) -> (n, H, W, C)
            images = np.moveaxis(images, 1, -1)
        if self.uint8_images:
            scaled = np.rint(images * 255.0)
            if self._range_checks_left:
                self._check_image_range(index, scaled)
            return np.clip(scaled, 0, 255).astype(np.uint8)
        return np.ascontiguousarray(images, dtype=np.float32)

    def _check_image_range(self, index: int, scaled: np.ndarray) -> None:
        """Warn once when an image holds values off [0, 1], which uint8 images clip (the first batches only)."""
        self._range_checks_left -= 1
        low, high = float(scaled.min()), float(scaled.max())
        if low >= 0 and high <= 255:
            return
        self._range_checks_left = 0
        warnings.warn(
            f"visual observation {self.keys[index]!r} holds values from {low / 255:.3g} to {high / 255:.3g}: "
            "uint8 images keep [0, 1] and clip the rest. Use visual='float' to give the policy the values "
            "as Unity sends them (what ML-Agents' trainer sees).",
            stacklevel=4,
        )

    def observations(self, obs: Sequence[np.ndarray]) -> np.ndarray | dict[str, np.ndarray]:
        """Convert Unity's per-spec observation batches to the observation space.

        :param obs: one array per observation spec, each ``(n_agents, *spec.shape)``, as in
            ``DecisionSteps.obs``.
        :return: ``(n_agents, *space.shape)`` array, or a dict of those for a Dict space.
        """
        if len(obs) != len(self.obs_specs):
            raise ValueError(f"expected {len(self.obs_specs)} observation arrays, got {len(obs)}")
        if len(obs) == 1:  # one observation spec (most behaviors): no list to build
            return self._convert_one(0, obs[0])
        converted = [self._convert_one(i, o) for i, o in enumerate(obs)]
        if self.flatten:
            return np.concatenate([c.reshape(c.shape[0], -1) for c in converted], axis=1)
        return dict(zip(self.keys, converted))

    def to_unity_observations(self, obs: np.ndarray | dict[str, np.ndarray]) -> list[np.ndarray]:
        """Inverse of :meth:`observations`: a batch in the space -> Unity's per-spec arrays (float32)."""
        if len(self.obs_specs) == 1:
            parts = [np.asarray(obs)]
        elif self.flatten:
            flat = np.asarray(obs)
            sizes = np.cumsum([int(s.shape[0]) for s in self.obs_specs])[:-1]
            parts = np.split(flat, sizes, axis=1)
        else:
            assert isinstance(obs, dict)
            parts = [np.asarray(obs[k]) for k in self.keys]
        result = []
        for i, part in enumerate(parts):
            axis = self.channel_axes[i]
            value = part.astype(np.float32)
            if axis is not None:
                if self.uint8_images:
                    value = value / 255.0
                if axis == 2 and not self.channels_last:
                    value = np.moveaxis(value, 1, -1)
                elif axis == 0 and self.channels_last:
                    value = np.moveaxis(value, -1, 1)
            result.append(np.ascontiguousarray(value, dtype=np.float32))
        return result

    def empty_observations(self, n: int) -> np.ndarray | dict[str, np.ndarray]:
        """Zero observations for ``n`` slots (placeholders for inactive slots)."""
        return zeros_like_space(self.observation_space, n)

    # ------------------------------------------------------------------ actions
    def _make_action_space(self) -> spaces.Space:
        c, branches = self.continuous_size, self.branches
        box = spaces.Box(-1.0, 1.0, shape=(c,), dtype=np.float32) if c else None
        if branches:
            disc: spaces.Space = (
                spaces.Discrete(branches[0]) if len(branches) == 1 else spaces.MultiDiscrete(branches)
            )
        else:
            disc = None  # type: ignore[assignment]
        if box is not None and disc is None:
            return box
        if disc is not None and box is None:
            return disc
        if disc is None and box is None:
            # a behavior with no actions (observer agents): one dummy continuous value
            return spaces.Box(-1.0, 1.0, shape=(0,), dtype=np.float32)
        if self.hybrid == "box":
            return spaces.Box(-1.0, 1.0, shape=(c + len(branches),), dtype=np.float32)
        multi = spaces.MultiDiscrete(branches)
        if self.hybrid == "tuple":
            return spaces.Tuple((box, multi))
        return spaces.Dict({CONTINUOUS_KEY: box, DISCRETE_KEY: multi})

    @property
    def is_hybrid(self) -> bool:
        return bool(self.continuous_size and self.branches)

    def _continuous(self, value: Any, n: int) -> np.ndarray:
        try:
            arr = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"continuous actions must be numbers, got {type(value).__name__} {_preview(value)} ({error})"
            ) from None
        if arr.shape != (n, self.continuous_size):
            arr = _reshape_or_raise(arr, (n, self.continuous_size), "continuous actions")
        # one reduction instead of an elementwise check: the sum is finite unless a value is not
        # (or finite values overflow float32, which the full check then clears)
        if not math.isfinite(np.add.reduce(arr, axis=None)) and not np.isfinite(arr).all():
            raise ValueError("continuous actions contain NaN or infinite values; check the policy's outputs")
        return np.minimum(np.maximum(arr, _LOW), _HIGH)

    def _discrete(self, value: Any, n: int) -> np.ndarray:
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
                raise ValueError(
                    f"discrete actions must be whole numbers, got {arr.dtype} values like {arr.ravel()[:4]}"
                )
        elif arr.dtype.kind not in "iub":
            raise ValueError(f"discrete actions must be integers, got dtype {arr.dtype}")
        arr = _reshape_or_raise(arr.astype(np.int64), (n, len(self.branches)), "discrete actions")
        high = np.asarray(self.branches)
        bad = (arr < 0) | (arr >= high)
        if np.any(bad):
            row, col = (int(x) for x in np.argwhere(bad)[0])
            raise ValueError(
                f"discrete action {int(arr[row, col])} for agent {row} is out of range for branch {col} "
                f"(size {self.branches[col]}); valid actions are 0..{self.branches[col] - 1}"
            )
        return arr.astype(np.int32)

    def to_unity_actions(self, actions: Any, n: int) -> ActionTuple:
        """Convert a batch of actions in the action space to Unity's ``ActionTuple``.

        :param actions: ``n`` actions stacked on the first axis (a dict/tuple of stacks for
            ``Dict``/``Tuple`` spaces).
        :param n: the number of agents the batch is for.
        :return: ``ActionTuple`` with ``continuous`` ``(n, c)`` float32 and ``discrete``
            ``(n, branches)`` int32.
        """
        c, k = self.continuous_size, len(self.branches)
        if c and not k:
            return ActionTuple(continuous=self._continuous(actions, n))
        cont = np.zeros((n, c), dtype=np.float32)
        disc = np.zeros((n, k), dtype=np.int32)
        if c and k:
            if self.hybrid == "box":
                arr = _reshape_or_raise(self._continuous_like(actions), (n, c + k), "hybrid actions")
                if not np.all(np.isfinite(arr)):  # NaN would pick a garbage branch value
                    raise ValueError(
                        "hybrid actions contain NaN or infinite values; check the policy's outputs"
                    )
                cont = self._continuous(arr[:, :c], n)
                disc = box_to_discrete(arr[:, c:], self.branches)
            elif self.hybrid == "tuple":
                cont, disc = self._continuous(actions[0], n), self._discrete(actions[1], n)
            else:
                if not isinstance(actions, dict) or set(actions) != {CONTINUOUS_KEY, DISCRETE_KEY}:
                    raise ValueError(
                        f"hybrid actions must be a dict with keys {CONTINUOUS_KEY!r} and {DISCRETE_KEY!r}"
                    )
                cont = self._continuous(actions[CONTINUOUS_KEY], n)
                disc = self._discrete(actions[DISCRETE_KEY], n)
        elif k:
            disc = self._discrete(actions, n)
        return ActionTuple(continuous=cont, discrete=disc)

    def _continuous_like(self, value: Any) -> np.ndarray:
        try:
            return np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"hybrid actions must be numbers, got {type(value).__name__} {_preview(value)} ({error})"
            ) from None

    def from_unity_actions(self, continuous: np.ndarray | None, discrete: np.ndarray | None) -> Any:
        """Inverse of :meth:`to_unity_actions`: Unity's action arrays -> a batch in the space."""
        c, k = self.continuous_size, len(self.branches)
        n = len(continuous) if continuous is not None and c else len(discrete) if discrete is not None else 0
        cont = np.asarray(continuous, dtype=np.float32).reshape(n, c) if c else None
        disc = np.asarray(discrete, dtype=np.int64).reshape(n, k) if k else None
        if c and k:
            if self.hybrid == "box":
                return np.concatenate([cont, discrete_to_box(disc, self.branches)], axis=1)
            if self.hybrid == "tuple":
                return (cont, disc)
            return {CONTINUOUS_KEY: cont, DISCRETE_KEY: disc}
        if c:
            return cont
        if k == 1:
            return disc[:, 0]
        if k:
            return disc
        return np.zeros((n, 0), dtype=np.float32)

    # ------------------------------------------------------------------ masks
    @property
    def mask_size(self) -> int:
        """Length of the flat action mask (sum of the discrete branch sizes)."""
        return int(sum(self.branches))

    def action_masks(self, unity_masks: Sequence[np.ndarray] | None, n: int) -> np.ndarray:
        """ML-Agents' per-branch masks (True = NOT allowed) -> flat masks (True = allowed).

        :param unity_masks: ``DecisionSteps.action_mask``: a list with one ``(n, branch_size)``
            bool array per branch, or ``None`` when the scene sets no mask.
        :param n: number of agents.
        :return: ``(n, sum(branches))`` bool array, True where the action is allowed.
        """
        if unity_masks is None or len(unity_masks) == 0:
            return np.ones((n, self.mask_size), dtype=bool)
        return ~np.concatenate([np.asarray(m, dtype=bool).reshape(n, -1) for m in unity_masks], axis=1)


def box_to_discrete(values: np.ndarray, branches: Sequence[int]) -> np.ndarray:
    """Map values in [-1, 1] to discrete choices: branch ``b`` splits [-1, 1] into ``b`` equal bins."""
    sizes = np.asarray(branches, dtype=np.int64)
    scaled = (np.clip(values, -1.0, 1.0) + 1.0) / 2.0 * sizes
    return np.minimum(np.floor(scaled).astype(np.int64), sizes - 1).astype(np.int32)


def discrete_to_box(choices: np.ndarray, branches: Sequence[int]) -> np.ndarray:
    """Inverse of :func:`box_to_discrete`: the centre of each choice's bin."""
    sizes = np.asarray(branches, dtype=np.float32)
    return ((np.asarray(choices, dtype=np.float32) + 0.5) / sizes * 2.0 - 1.0).astype(np.float32)


def zeros_like_space(space: spaces.Space, n: int) -> Any:
    """``n`` zero samples of a Box/Dict/Tuple/Discrete space, stacked on the first axis."""
    if isinstance(space, spaces.Dict):
        return {k: zeros_like_space(s, n) for k, s in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(zeros_like_space(s, n) for s in space.spaces)
    return np.zeros((n, *space.shape), dtype=space.dtype)


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _reshape_or_raise(arr: np.ndarray, shape: tuple[int, ...], what: str) -> np.ndarray:
    if arr.shape == shape:
        return arr
    if arr.size == int(np.prod(shape)) and (arr.ndim <= 1 or arr.shape[0] == shape[0]):
        return arr.reshape(shape)
    raise ValueError(f"{what} have shape {arr.shape}, expected {shape} (agents x action size)")
