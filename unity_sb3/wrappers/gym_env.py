"""``UnityGymEnv``: one agent of a Unity behavior as a ``gymnasium.Env``.

A Unity scene usually holds many agents (3DBall has 12); SB3 and most gymnasium code want
one. :class:`UnityGymEnv` follows a single agent and drives every other agent with a fixed
policy (``other_agents``). For training on all the agents of a scene at once use
:class:`unity_sb3.wrappers.vec_env.UnityVecEnv`, which maps each agent to a VecEnv slot.

Episode semantics (how Unity's auto-reset meets gymnasium's ``reset``):

- ``step(action)`` sends the action to the followed agent, then advances Unity until that
  agent asks for its next decision or ends its episode. Its rewards are summed over every
  Unity step in between (agents with a ``DecisionRequester`` period > 1); other agents that
  ask in between get their actions from ``other_agents``.
- The episode ends when the agent appears in ``TerminalSteps``: ``terminated`` unless Unity
  says ``interrupted`` (max step reached), which becomes ``truncated``.
- ``reset()`` after an episode end does not restart the whole scene: Unity has already
  restarted the agent (auto-reset), so the wrapper continues with the agent's successor (the
  same agent id if it asks again, else the first agent the wrapper has not seen yet, since
  Unity may give an agent a new id every episode), stepping Unity with ``other_agents``
  actions until one asks for a decision. ``env.reset()`` of the Unity scene is called only
  when needed: at the first reset, at ``reset(seed=...)``, at a reset in the middle of an
  episode, with ``reset(options={"hard_reset": True})``, or when no successor shows up
  within ``max_wait_steps`` Unity steps.
- Seeding: ``reset(seed=s)`` calls ``reseed(s)`` on scenes that offer it (the embedded
  scenes and the scripted test scenes) and then resets the scene, so seeded resets are
  reproducible. A real Unity build takes its seed once, at launch (``open_unity(...,
  seed=s)``); there the wrapper warns once and only seeds its own ``np_random``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np
from mlagents_envs.base_env import ActionTuple, BaseEnv, BehaviorSpec, DecisionSteps, TerminalSteps

import unity_sb3.unity  # noqa: F401  (protobuf compat before mlagents_envs)
from unity_sb3.slots import GROUP_ID, GROUP_REWARD
from unity_sb3.spaces import BehaviorSpaces, HybridMode, VisualMode, is_visual
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers._steps import StepReader
from unity_sb3.wrappers.behavior import choose_behavior

OtherAgents = Literal["zeros", "random"] | Callable[[str, DecisionSteps], ActionTuple]

#: Unity steps to wait for an agent to ask for a decision before giving up.
DEFAULT_MAX_WAIT_STEPS = 10_000


# ---------------------------------------------------------------------- helpers shared with pettingzoo_env
def open_base_env(env: BaseEnv | str, open_kwargs: Mapping[str, Any] | None) -> tuple[BaseEnv, bool]:
    """Return ``(base_env, opened_here)`` for a ``BaseEnv`` or an :func:`open_unity` target.

    :param env: a ``BaseEnv`` (a ``UnityEnvironment``, an embedded scene, ...) or a target string
        for :func:`unity_sb3.open.open_unity` (an embedded scene name, a build path, ...).
    :param open_kwargs: keyword arguments for ``open_unity``; only valid with a target string.
    """
    if isinstance(env, str):
        from unity_sb3.open import open_unity

        return open_unity(env, **dict(open_kwargs or {})), True
    if open_kwargs:
        raise UnityConfigurationError(
            "open_kwargs only apply when env is a target string for open_unity; "
            "this env is already open, so configure it where it was created"
        )
    missing = [
        m for m in ("behavior_specs", "get_steps", "set_actions", "step", "reset") if not hasattr(env, m)
    ]
    if missing:
        raise TypeError(
            f"env must be a mlagents_envs BaseEnv or a target string for open_unity, got {type(env).__name__} "
            f"(missing {missing})"
        )
    return env, False


def single_agent_variant(
    target: str, open_kwargs: Mapping[str, Any] | None
) -> tuple[dict[str, Any], int | None]:
    """How :class:`UnityGymEnv` opens an embedded scene by name: ``(open_kwargs, agent_index)``.

    A gym env is one agent, so an embedded scene (``"Ball3D"``, which has 12 platforms by
    default) is opened with ``num_agents=1`` unless ``open_kwargs`` sets ``num_agents``. A
    scene that cannot have a single agent (Escape: groups of 3) is opened as it is and the
    first agent is followed (``agent_index=0``), the others getting ``other_agents``' actions.
    Targets that are not embedded scenes (builds, the Editor) are left alone.
    """
    kwargs = dict(open_kwargs or {})
    if "num_agents" in kwargs:
        return kwargs, None
    try:
        from unity_sb3.scenes import scene_class

        cls = scene_class(target)
    except (ImportError, UnityConfigurationError):  # not an embedded scene
        return kwargs, None
    try:
        cls._validate_params({**{k: v for k, v in kwargs.items() if k in cls.PARAMS}, "num_agents": 1})
    except UnityConfigurationError:
        return kwargs, 0
    kwargs["num_agents"] = 1
    return kwargs, None


def subset_decision_steps(steps: DecisionSteps, rows: np.ndarray) -> DecisionSteps:
    """The rows ``rows`` (int indices or a bool mask) of a ``DecisionSteps``."""
    mask = None if steps.action_mask is None else [m[rows] for m in steps.action_mask]
    return DecisionSteps(
        [o[rows] for o in steps.obs],
        steps.reward[rows],
        steps.agent_id[rows],
        mask,
        np.asarray(steps.group_id, dtype=np.int32)[rows],
        steps.group_reward[rows],
    )


def image_to_rgb(image: np.ndarray, visual: VisualMode) -> np.ndarray:
    """A channel-first observation image -> ``(H, W, 3)`` uint8 for ``render()``.

    One channel is repeated to grey RGB; two are padded with zeros; more than three keep the first three.
    """
    img = np.asarray(image)
    if visual == "float" or img.dtype != np.uint8:
        img = np.clip(np.rint(img.astype(np.float32) * 255.0), 0, 255).astype(np.uint8)
    img = np.moveaxis(img, 0, -1)
    channels = img.shape[-1]
    if channels == 1:
        img = np.repeat(img, 3, axis=-1)
    elif channels == 2:
        img = np.concatenate([img, np.zeros_like(img[..., :1])], axis=-1)
    elif channels > 3:
        img = img[..., :3]
    return np.ascontiguousarray(img)


def first_visual_key(spaces: BehaviorSpaces) -> int | str | None:
    """Where the first visual observation sits in a converted observation: ``None`` when there
    is none, ``0`` when it is the whole observation, else its ``Dict`` key."""
    for i, spec in enumerate(spaces.obs_specs):
        if is_visual(spec):
            return 0 if len(spaces.obs_specs) == 1 else spaces.keys[i]
    return None


def row_of(batch: np.ndarray | dict[str, np.ndarray], row: int) -> np.ndarray | dict[str, np.ndarray]:
    """Row ``row`` of a converted observation batch (copied, so later steps cannot change it)."""
    if isinstance(batch, dict):
        return {k: np.array(v[row]) for k, v in batch.items()}
    return np.array(batch[row])


def check_action_tuple(action: Any, spec: BehaviorSpec, n: int, behavior_name: str) -> ActionTuple:
    """Validate what an ``other_agents`` callable returned for ``n`` agents."""
    if not isinstance(action, ActionTuple):
        raise TypeError(
            f"other_agents must return a mlagents_envs ActionTuple for behavior {behavior_name!r}, "
            f"got {type(action).__name__}"
        )
    c, k = spec.action_spec.continuous_size, len(spec.action_spec.discrete_branches)
    if action.continuous.shape != (n, c) and c:
        raise ValueError(
            f"other_agents returned continuous actions of shape {action.continuous.shape} for "
            f"{behavior_name!r}; expected {(n, c)} (one row per requesting agent)"
        )
    if action.discrete.shape != (n, k) and k:
        raise ValueError(
            f"other_agents returned discrete actions of shape {action.discrete.shape} for "
            f"{behavior_name!r}; expected {(n, k)} (one row per requesting agent)"
        )
    return action


# ---------------------------------------------------------------------- the env
class UnityGymEnv(gym.Env):
    """One agent of one Unity behavior as a ``gymnasium.Env`` (see the module docstring).

    :param env: a ``BaseEnv`` (``UnityEnvironment``, an embedded scene) or a target string for
        :func:`unity_sb3.open.open_unity` (e.g. ``"Ball3D"`` or a build path). An
        embedded scene named by a string opens with one agent (see :func:`single_agent_variant`);
        this is what the registered ids ``unity_sb3/<Scene>-v0`` do.
    :param behavior_name: the behavior to follow; ``None`` = the scene's only behavior.
    :param agent_index: which agent to follow when the behavior has several: its position
        among the agents that ask for a decision after a reset. ``None`` (default) refuses
        scenes with several agents, because the others would be driven by a fixed policy.
    :param other_agents: the actions of every agent the wrapper does not follow (including
        agents of other behaviors): ``"zeros"``, ``"random"`` (uniform, ignoring masks) or a
        callable ``(behavior_name, decision_steps) -> ActionTuple`` with one row per agent in
        ``decision_steps``.
    :param visual: ``"uint8"`` (channel-first images in [0, 255], what SB3's CNN policies
        expect) or ``"float"`` (channel-first float32 in [0, 1]).
    :param flatten_obs: concatenate several 1-D observations into one vector instead of a ``Dict``.
    :param hybrid: the action space of a hybrid (continuous + discrete) behavior: ``"dict"``,
        ``"tuple"`` or ``"box"`` (see :mod:`unity_sb3.spaces`).
    :param render_mode: ``None`` or ``"rgb_array"`` (the first visual observation of the agent
        as an ``(H, W, 3)`` uint8 image; needs a visual observation).
    :param open_kwargs: keyword arguments for ``open_unity`` when ``env`` is a string.
    :param max_wait_steps: Unity steps to wait for the agent to ask for a decision before
        raising (during ``step``) or resetting the scene (during ``reset``).
    :param close_env: close the Unity environment in :meth:`close` (default ``True``, as
        ML-Agents' own gym wrapper does).
    """

    metadata: dict[str, Any] = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(
        self,
        env: BaseEnv | str,
        behavior_name: str | None = None,
        *,
        agent_index: int | None = None,
        other_agents: OtherAgents = "zeros",
        visual: VisualMode = "uint8",
        flatten_obs: bool = False,
        hybrid: HybridMode = "dict",
        render_mode: str | None = None,
        open_kwargs: Mapping[str, Any] | None = None,
        max_wait_steps: int = DEFAULT_MAX_WAIT_STEPS,
        close_env: bool = True,
    ) -> None:
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if not (other_agents in ("zeros", "random") or callable(other_agents)):
            raise ValueError(
                f"other_agents must be 'zeros', 'random' or a callable (behavior_name, decision_steps) -> "
                f"ActionTuple, got {other_agents!r}"
            )
        if agent_index is not None and (not isinstance(agent_index, int | np.integer) or agent_index < 0):
            raise ValueError(f"agent_index must be a non-negative int or None, got {agent_index!r}")
        if max_wait_steps < 1:
            raise ValueError(f"max_wait_steps must be >= 1, got {max_wait_steps}")
        if isinstance(env, str) and agent_index is None:
            open_kwargs, agent_index = single_agent_variant(env, open_kwargs)
        self._env, opened = open_base_env(env, open_kwargs)
        self._close_env = close_env or opened
        self._closed = False
        try:
            self.behavior_name = choose_behavior(
                self._env.behavior_specs,
                behavior_name,
                "to follow (or use UnityParallelEnv for several behaviors at once)",
            )
            self._readers = {b: StepReader(b, spec) for b, spec in self._env.behavior_specs.items()}
            self._behaviors = list(self._readers)
            self._spec: BehaviorSpec = self._env.behavior_specs[self.behavior_name]
            self.spaces = BehaviorSpaces(self._spec, visual=visual, flatten=flatten_obs, hybrid=hybrid)
            self.observation_space = self.spaces.observation_space
            self.action_space = self.spaces.action_space
            self.render_mode = render_mode
            self._visual_key = first_visual_key(self.spaces)
            if render_mode == "rgb_array" and self._visual_key is None:
                raise UnityConfigurationError(
                    f"render_mode='rgb_array' needs a visual observation, but behavior {self.behavior_name!r} "
                    "has only vector observations; add a camera sensor or use render_mode=None"
                )
            self.agent_index = None if agent_index is None else int(agent_index)
            self._other_agents = other_agents
            self.max_wait_steps = int(max_wait_steps)
            self._agent_id: int | None = None
            self._episode_over = True
            self._pristine = False  # the scene was just reset and nothing stepped it since
            self._seed_warned = False
            self._seen_ids: set[int] = set()
            self._obs: Any = None
            self._mask: np.ndarray | None = None
            self._group_id = 0
            self._steps: dict[str, tuple[DecisionSteps, TerminalSteps]] = {}
            self._hard_reset(check_agents=True)
        except BaseException:
            if opened:
                self._env.close()
            raise

    # ------------------------------------------------------------------ properties
    @property
    def unity_env(self) -> BaseEnv:
        """The wrapped ``BaseEnv``."""
        return self._env

    @property
    def agent_id(self) -> int | None:
        """Unity's id of the agent currently followed (opaque; it changes when Unity starts a new
        episode or scene, and is never reused)."""
        return self._agent_id

    # ------------------------------------------------------------------ Unity plumbing
    def _read_steps(self) -> None:
        """Every behavior's steps, normalised to arrays (any ``BaseEnv``, DESIGN 4.2)."""
        self._steps = {b: self._readers[b].read(self._env) for b in self._behaviors}

    def _decisions(self) -> DecisionSteps:
        return self._steps[self.behavior_name][0]

    def _other_actions(self, behavior: str, steps: DecisionSteps) -> ActionTuple:
        spec = self._env.behavior_specs[behavior]
        n = len(steps)
        if self._other_agents == "zeros":
            return spec.action_spec.empty_action(n)
        if self._other_agents == "random":
            return spec.action_spec.random_action(n)
        return check_action_tuple(self._other_agents(behavior, steps), spec, n, behavior)

    def _send_actions(self, own_action: ActionTuple | None) -> None:
        """Answer every agent that asked for a decision: the followed one with ``own_action``
        (when it asked), the others from ``other_agents``."""
        for behavior in self._behaviors:
            dec = self._steps[behavior][0]
            n = len(dec)
            if n == 0:
                continue
            if behavior != self.behavior_name or own_action is None:
                self._env.set_actions(behavior, self._other_actions(behavior, dec))
                continue
            own_row = dec.agent_id_to_index[self._agent_id]
            if n == 1:
                self._env.set_actions(behavior, own_action)
                continue
            others = np.arange(n) != own_row
            rest = self._other_actions(behavior, subset_decision_steps(dec, others))
            full = self._spec.action_spec.empty_action(n)
            if full.continuous.shape[1]:
                full.continuous[others] = rest.continuous
                full.continuous[own_row] = own_action.continuous[0]
            if full.discrete.shape[1]:
                full.discrete[others] = rest.discrete
                full.discrete[own_row] = own_action.discrete[0]
            self._env.set_actions(behavior, full)

    def _advance(self) -> None:
        self._env.step()
        self._pristine = False
        self._read_steps()

    def _adopt(self, agent_id: int) -> None:
        """Follow ``agent_id``, which has just asked for a decision, from its current observation."""
        self._agent_id = int(agent_id)
        self._episode_over = False
        dec = self._decisions()
        self._seen_ids = {int(i) for i in dec.agent_id}
        row = dec.agent_id_to_index[self._agent_id]
        self._obs = row_of(self.spaces.observations([o[row : row + 1] for o in dec.obs]), 0)
        self._mask = self._mask_row(dec, row)
        self._group_id = int(dec.group_id[row])

    def _mask_row(self, dec: DecisionSteps, row: int) -> np.ndarray | None:
        if not self.spaces.branches:
            return None
        masks = None if dec.action_mask is None else [m[row : row + 1] for m in dec.action_mask]
        return self.spaces.action_masks(masks, 1)[0]

    def _hard_reset(self, check_agents: bool = False) -> None:
        self._env.reset()
        self._pristine = True
        self._read_steps()
        dec = self._decisions()
        n = len(dec)
        if n == 0:
            raise UnityConfigurationError(
                f"no agent of behavior {self.behavior_name!r} asked for a decision after a reset; "
                "check the scene's DecisionRequester components"
            )
        if check_agents and n > 1 and self.agent_index is None:
            raise UnityConfigurationError(
                f"behavior {self.behavior_name!r} has {n} agents, but UnityGymEnv follows a single agent. "
                "Use unity_sb3.UnityVecEnv to train on all of them (one VecEnv slot per agent), or pass "
                "agent_index= to follow one agent while other_agents drives the rest"
            )
        index = self.agent_index or 0
        if index >= n:
            raise UnityConfigurationError(
                f"agent_index={index} but behavior {self.behavior_name!r} has only {n} agents asking for "
                f"decisions after a reset; use 0..{n - 1}"
            )
        self._adopt(int(dec.agent_id[index]))

    def _find_successor(self) -> bool:
        """Continue from Unity's auto-reset; ``False`` when nothing asked within the wait budget."""
        for _ in range(self.max_wait_steps):
            dec = self._decisions()
            ids = [int(i) for i in dec.agent_id]
            if self._agent_id in ids:
                self._adopt(self._agent_id)
                return True
            fresh = [i for i in ids if i not in self._seen_ids]
            if fresh:
                self._adopt(fresh[0])
                return True
            self._send_actions(None)
            self._advance()
        return False

    # ------------------------------------------------------------------ gymnasium API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict]:
        """Start an episode; see the module docstring for when the Unity scene itself is reset.

        :param seed: reseeds the scene (``reseed``) and resets it; on a real Unity build, warns once.
        :param options: ``{"hard_reset": True}`` resets the Unity scene even between episodes.
        :return: ``(observation, info)``; ``info`` has ``group_id`` and ``group_reward`` (0.0). Unity's
            id of the agent is :attr:`agent_id`, not in ``info``: Unity never reuses an id, so it
            would differ between two resets with the same seed and break gymnasium's determinism check.
        """
        super().reset(seed=seed)
        self._check_open()
        forced = bool((options or {}).get("hard_reset", False))
        hard = forced or not self._episode_over
        if seed is not None:
            reseed = getattr(self._env, "reseed", None)
            if callable(reseed):
                reseed(int(seed))
                hard = True
            elif not self._seed_warned:
                self._seed_warned = True
                warnings.warn(
                    "this Unity environment takes its seed once, at launch (open_unity(..., seed=...)); "
                    "reset(seed=...) only seeds the wrapper's np_random",
                    stacklevel=2,
                )
        if forced or (hard and not (self._pristine and seed is None)):
            self._hard_reset()
        elif self._episode_over and not self._find_successor():
            warnings.warn(
                f"no agent of {self.behavior_name!r} asked for a decision within {self.max_wait_steps} Unity "
                "steps after the episode ended; resetting the scene",
                stacklevel=2,
            )
            self._hard_reset()
        return self._obs, {GROUP_ID: self._group_id, GROUP_REWARD: 0.0}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        """Act, then advance Unity until the agent asks again or its episode ends.

        :param action: one action in ``action_space``.
        :return: ``(obs, reward, terminated, truncated, info)``; ``reward`` is summed over the
            Unity steps taken; ``info`` has ``group_id``, ``group_reward`` (summed the same way),
            ``unity_steps`` and, at an episode end, ``interrupted`` (Unity's agent id is
            :attr:`agent_id`).
        """
        self._check_open()
        if self._episode_over:
            raise RuntimeError("the episode has ended: call reset() before step()")
        own = self.spaces.to_unity_actions(batch_of_one(action, self.action_space), 1)
        self._send_actions(own)
        reward = group_reward = 0.0
        agent = self._agent_id
        for unity_steps in range(1, self.max_wait_steps + 1):
            self._advance()
            dec, term = self._steps[self.behavior_name]
            if agent in term.agent_id_to_index:
                row = term.agent_id_to_index[agent]
                reward += float(term.reward[row])
                group_reward += float(term.group_reward[row])
                interrupted = bool(term.interrupted[row])
                self._obs = row_of(self.spaces.observations([o[row : row + 1] for o in term.obs]), 0)
                self._group_id = int(term.group_id[row])
                self._mask = None if self._mask is None else np.ones_like(self._mask)
                self._episode_over = True
                info = self._info(group_reward, unity_steps)
                info["interrupted"] = interrupted
                return self._obs, reward, not interrupted, interrupted, info
            if agent in dec.agent_id_to_index:
                row = dec.agent_id_to_index[agent]
                reward += float(dec.reward[row])
                group_reward += float(dec.group_reward[row])
                self._obs = row_of(self.spaces.observations([o[row : row + 1] for o in dec.obs]), 0)
                self._mask = self._mask_row(dec, row)
                self._group_id = int(dec.group_id[row])
                self._seen_ids.update(int(i) for i in dec.agent_id)
                return self._obs, reward, False, False, self._info(group_reward, unity_steps)
            self._seen_ids.update(int(i) for i in dec.agent_id)
            self._send_actions(None)
        raise RuntimeError(
            f"agent {agent} of {self.behavior_name!r} neither asked for a decision nor ended its episode within "
            f"{self.max_wait_steps} Unity steps; was it destroyed without EndEpisode()? (raise max_wait_steps "
            "for agents with very long decision periods)"
        )

    def _info(self, group_reward: float, unity_steps: int) -> dict[str, Any]:
        return {
            GROUP_ID: self._group_id,
            GROUP_REWARD: group_reward,
            "unity_steps": unity_steps,
        }

    def action_masks(self) -> np.ndarray:
        """Allowed actions of the agent's current decision, for sb3-contrib's MaskablePPO.

        :return: ``(sum(discrete_branches),)`` bool, True = allowed (ML-Agents' mask inverted);
            all True when the scene sets no mask; an empty array for continuous-only behaviors.
        """
        if self._mask is None:
            return np.ones(self.spaces.mask_size, dtype=bool)
        return self._mask.copy()

    def render(self) -> np.ndarray | None:
        """The agent's first visual observation as an ``(H, W, 3)`` uint8 image (``render_mode="rgb_array"``)."""
        if self.render_mode is None:
            gym.logger.warn(
                "render() called with render_mode=None; pass render_mode='rgb_array' to UnityGymEnv"
            )
            return None
        if self._obs is None:
            return None
        image = self._obs if self._visual_key == 0 else self._obs[self._visual_key]
        return image_to_rgb(image, self.spaces.visual)

    def close(self) -> None:
        """Close the Unity environment (when ``close_env``, or when this wrapper opened it). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._episode_over = True
        if self._close_env:
            self._env.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this UnityGymEnv is closed")

    def __repr__(self) -> str:
        return f"UnityGymEnv({self.behavior_name!r}, agent_index={self.agent_index})"


def batch_of_one(action: Any, space: gym.Space) -> Any:
    """Add the agent axis to one action so :meth:`BehaviorSpaces.to_unity_actions` takes it."""
    if isinstance(space, gym.spaces.Dict):
        return {k: batch_of_one(action[k], s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(batch_of_one(a, s) for a, s in zip(action, space.spaces))
    return np.asarray(action)[None]
