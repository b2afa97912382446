"""A PettingZoo ``ParallelEnv`` as an SB3 VecEnv whose slots are agents, the form POCA trains on.

Slots follow UnityVecEnv's conventions (DESIGN 4.2): each live agent holds a slot; an agent
that terminates or truncates ends its slot's episode (``done=True``, ``terminal_observation``,
``TimeLimit.truncated``) and the slot stays *inactive* (placeholder observation,
``infos[i]["active"] = False``, its action dropped) until the whole PettingZoo episode ends,
when the env is reset and every slot gets an agent of the new episode. Agents that appear
mid-episode take a free slot. ``infos[i]`` carries ``group_id`` (from ``group_fn``, else the
env's own ``infos[agent]["group_id"]`` as ``UnityParallelEnv`` reports it, else 1; 0 = no group), ``group_reward`` (the env's ``infos[agent]["group_reward"]``, as ``UnityParallelEnv`` reports it;
0 when absent: plain PettingZoo has no group reward), ``active`` and ``agent``.
Observations in PettingZoo's ``{"observation", "action_mask"}`` form are unpacked: the slot
observation is ``"observation"`` and the masks are served by ``action_masks()`` /
``env_method("action_masks")`` (True = allowed), as sb3-contrib expects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env.base_vec_env import VecEnv, VecEnvIndices, VecEnvStepReturn

from unity_sb3.slots import ACTIVE, GROUP_ID, GROUP_REWARD, TERMINAL_OBSERVATION


def _is_masked_dict(space: spaces.Space) -> bool:
    return isinstance(space, spaces.Dict) and set(space.spaces) == {"observation", "action_mask"}


class PettingZooVecEnv(VecEnv):
    """Agents of a PettingZoo ``ParallelEnv`` as the slots of an SB3 VecEnv.

    :param env: the ParallelEnv; every agent must share one observation and one action space.
    :param group_fn: ``agent_name -> group id``; return 0 for an agent without a group (a
        group of one). Default: the ``group_id`` the env reports in its infos (Unity groups
        through ``UnityParallelEnv``), and group 1 for agents it reports none for.
    :param num_slots: number of slots (default ``len(env.possible_agents)``); more live agents
        than slots at once is an error.
    """

    def __init__(
        self,
        env: Any,
        group_fn: Callable[[str], int] | None = None,
        num_slots: int | None = None,
    ) -> None:
        self.env = env
        self.group_fn = group_fn
        self._env_groups: dict[str, int] = {}
        agents = list(env.possible_agents)
        if not agents:
            raise ValueError("The ParallelEnv has no possible_agents; cannot size the VecEnv.")
        obs_space = env.observation_space(agents[0])
        act_space = env.action_space(agents[0])
        for agent in agents[1:]:
            if env.observation_space(agent) != obs_space or env.action_space(agent) != act_space:
                raise ValueError(
                    f"Agent {agent!r} has other spaces than {agents[0]!r}; POCA's shared actor needs one "
                    "observation space and one action space (wrap the env to pad them, e.g. SuperSuit's "
                    "pad_observations_v0 / pad_action_space_v0)."
                )
        self._masked = _is_masked_dict(obs_space)
        slot_obs_space = obs_space["observation"] if self._masked else obs_space
        self._mask_dim = int(np.prod(obs_space["action_mask"].shape)) if self._masked else 0
        n = len(agents) if num_slots is None else int(num_slots)
        if n < 1:
            raise ValueError(f"num_slots must be >= 1, got {num_slots}.")
        self.render_mode = None
        super().__init__(n, slot_obs_space, act_space)
        self._slot_agent: list[str | None] = [None] * n
        self._obs = self._placeholder_batch()
        self._masks = np.ones((n, self._mask_dim), dtype=bool)
        self._actions: np.ndarray | None = None
        self.reset_infos: list[dict[str, Any]] = [{} for _ in range(n)]

    # ------------------------------------------------------------- helpers

    def _placeholder_batch(self) -> Any:
        space = self.observation_space
        if isinstance(space, spaces.Dict):
            return {k: np.zeros((self.num_envs, *s.shape), dtype=s.dtype) for k, s in space.spaces.items()}
        return np.zeros((self.num_envs, *space.shape), dtype=space.dtype)

    def _write_obs(self, slot: int, raw: Any) -> Any:
        obs = raw["observation"] if self._masked else raw
        if self._masked:
            self._masks[slot] = np.asarray(raw["action_mask"], dtype=bool).reshape(-1)
        if isinstance(self._obs, dict):
            for key in self._obs:
                self._obs[key][slot] = obs[key]
        else:
            self._obs[slot] = obs
        return obs

    def _clear_slot(self, slot: int) -> None:
        self._slot_agent[slot] = None
        if isinstance(self._obs, dict):
            for key in self._obs:
                self._obs[key][slot] = 0
        else:
            self._obs[slot] = 0
        self._masks[slot] = True

    def _info(self, slot: int) -> dict[str, Any]:
        agent = self._slot_agent[slot]
        if agent is None:
            return {ACTIVE: False, GROUP_ID: 0, GROUP_REWARD: 0.0, "agent": None}
        return {ACTIVE: True, GROUP_ID: self._group(agent), GROUP_REWARD: 0.0, "agent": agent}

    def _group(self, agent: str) -> int:
        if self.group_fn is not None:
            return int(self.group_fn(agent))
        return self._env_groups.get(agent, 1)

    def _note_groups(self, env_infos: dict[str, Any]) -> None:
        for agent, info in env_infos.items():
            if isinstance(info, dict) and GROUP_ID in info:
                self._env_groups[agent] = int(info[GROUP_ID])

    def _assign(self, observations: dict[str, Any]) -> None:
        """Give every live agent without a slot a free one and store its observation."""
        held = {agent: slot for slot, agent in enumerate(self._slot_agent) if agent is not None}
        for agent, raw in observations.items():
            if agent in held:
                continue
            free = [slot for slot, a in enumerate(self._slot_agent) if a is None]
            if not free:
                raise RuntimeError(
                    f"Agent {agent!r} appeared but all {self.num_envs} slots are taken; pass a larger "
                    "num_slots to PettingZooVecEnv (or size the env's possible_agents for agents that "
                    "appear later, e.g. UnityParallelEnv(..., max_agents=...))."
                )
            self._slot_agent[free[0]] = agent
            self._write_obs(free[0], raw)

    def _copy_obs(self) -> Any:
        if isinstance(self._obs, dict):
            return {key: value.copy() for key, value in self._obs.items()}
        return self._obs.copy()

    def _reset_env(self) -> None:
        seed = self._seeds[0] if self._seeds else None
        options = self._options[0] if self._options else {}
        observations, env_infos = self.env.reset(seed=seed, options=options or None)
        self._env_groups = {}
        self._note_groups(env_infos)
        self._reset_seeds()
        for slot in range(self.num_envs):
            self._clear_slot(slot)
        self._assign(observations)
        self.reset_infos = [self._info(slot) for slot in range(self.num_envs)]

    # ------------------------------------------------------------ VecEnv API

    def reset(self) -> Any:
        self._reset_env()
        self._reset_options()
        return self._copy_obs()

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def step_wait(self) -> VecEnvStepReturn:
        assert self._actions is not None, "step_async must be called before step_wait"
        actions = {
            agent: self._actions[slot] for slot, agent in enumerate(self._slot_agent) if agent is not None
        }
        if isinstance(self.action_space, spaces.Discrete):
            actions = {agent: int(np.asarray(a).reshape(-1)[0]) for agent, a in actions.items()}
        observations, rewards, terminations, truncations, env_infos = self.env.step(actions)
        self._note_groups(env_infos)
        n = self.num_envs
        step_rewards = np.zeros(n, dtype=np.float32)
        dones = np.zeros(n, dtype=bool)
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        for slot, agent in enumerate(self._slot_agent):
            if agent is None:
                infos[slot] = self._info(slot)
                continue
            step_rewards[slot] = float(rewards.get(agent, 0.0))
            terminated = bool(terminations.get(agent, False))
            truncated = bool(truncations.get(agent, False))
            info = {**env_infos.get(agent, {}), **self._info(slot)}
            info[GROUP_REWARD] = float(env_infos.get(agent, {}).get(GROUP_REWARD, 0.0))
            if terminated or truncated or agent not in observations:
                dones[slot] = True
                info["TimeLimit.truncated"] = truncated and not terminated
                if agent in observations:
                    raw = observations[agent]
                    info[TERMINAL_OBSERVATION] = raw["observation"] if self._masked else raw
                self._clear_slot(slot)
            else:
                self._write_obs(slot, observations[agent])
            infos[slot] = info
        live = {a: o for a, o in observations.items() if not (terminations.get(a) or truncations.get(a))}
        if not self.env.agents or not live:
            self._reset_env()  # the PettingZoo episode is over: every slot gets a new agent
        else:
            self._assign(live)
        for slot in range(n):
            # active / group_id / agent describe the agent behind the returned observation
            infos[slot].update({k: v for k, v in self._info(slot).items() if k != GROUP_REWARD})
        return self._copy_obs(), step_rewards, dones, infos

    def action_masks(self) -> np.ndarray:
        """(num_envs, sum of branch sizes) bool, True = allowed; all True for inactive slots."""
        if not self._masked:
            raise AttributeError(
                "This ParallelEnv has no action masks (no {'observation', 'action_mask'} obs)."
            )
        return self._masks.copy()

    def close(self) -> None:
        self.env.close()

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        if attr_name == "action_masks":
            method = self.action_masks if self._masked else None
            if method is None:
                raise AttributeError("This ParallelEnv has no action masks.")
            return [method for _ in self._get_indices(indices)]
        value = getattr(self.env, attr_name)
        return [value for _ in self._get_indices(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: VecEnvIndices = None, **method_kwargs: Any
    ) -> list[Any]:
        slots = list(self._get_indices(indices))
        if method_name == "action_masks":
            masks = self.action_masks()
            return [masks[slot] for slot in slots]
        result = getattr(self.env, method_name)(*method_args, **method_kwargs)
        return [result for _ in slots]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: VecEnvIndices = None) -> list[bool]:
        return [False for _ in self._get_indices(indices)]

    def get_images(self) -> Sequence[np.ndarray | None]:
        return [None for _ in range(self.num_envs)]
