"""MA-POCA (Cohen et al. 2021, arXiv 2111.05992) as an SB3 ``OnPolicyAlgorithm``.

The environment is an SB3 ``VecEnv`` whose slots are agents (``unity_sb3.UnityVecEnv``, or a
PettingZoo ``ParallelEnv`` through :class:`~unity_sb3.wrappers.pettingzoo_vec_env.PettingZooVecEnv`). Each
step, POCA reads from ``infos[i]``:

- ``group_id`` (0 = no group: the agent is a group of one) and ``instance`` when present:
  slots sharing ``(instance, group_id)`` at a step form a group, whatever its size;
- ``group_reward``: counted once per agent per step, on top of the individual rewards. When
  the env also adds it into each reward (its ``add_group_reward`` attribute is True, as
  ``UnityVecEnv(add_group_reward=True)``'s), POCA subtracts it back out first: the reward
  sharing sums *individual* rewards over the group, so a group reward left inside them would
  count once per living member (and count less after a death);
- ``active`` (default True): False marks a placeholder step; it never enters a loss. A
  groupmate that is alive but not deciding this step stays in the critic and the baseline
  with its last observation and action (see :mod:`.buffers`);
- ``TimeLimit.truncated`` and ``terminal_observation`` at episode ends.
Action masks come from ``env_method("action_masks")`` (sb3-contrib's convention) when the env
has them and the action space is discrete or hybrid (a ``Tuple(Box, MultiDiscrete)``, as
``UnityVecEnv(..., hybrid="tuple")`` gives; its actions go to the env as that Tuple and are stored
flat, continuous then branch indices). Targets and losses: see :mod:`.buffers` and
:meth:`POCA.train`.
"""

from __future__ import annotations

import warnings
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import (
    ConstantSchedule,
    FloatSchedule,
    LinearSchedule,
    explained_variance,
    obs_as_tensor,
)
from stable_baselines3.common.vec_env import VecEnv, VecEnvWrapper, VecNormalize
from torch.nn import functional as F

from unity_sb3.algorithms.action_masks import MaskReader, mask_reader
from unity_sb3.algorithms.advantages import check_time_horizon, horizon_cuts
from unity_sb3.algorithms.distributions import hybrid_env_actions
from unity_sb3.algorithms.poca.buffers import POCARolloutBuffer
from unity_sb3.algorithms.poca.networks import GroupCriticBody
from unity_sb3.algorithms.poca.policies import CnnPolicy, MlpPolicy, MultiInputPolicy, POCAPolicy
from unity_sb3.slots import (
    TERMINAL_OBSERVATION,
    active_mask,
    group_ids,
    group_rewards,
    mark_inactive_aware,
    reset_infos_of,
)

SelfPOCA = TypeVar("SelfPOCA", bound="POCA")

#: smallest ``batch_size`` whose critic passes split rows by group size (GroupCriticBody.split_by_size):
#: measured on CPU, one pass per size is faster from about 64-128 rows (2-3 entities), slower below
SPLIT_BY_SIZE_MIN_BATCH = 128

# ML-Agents' linear schedule floors (trainers/poca/optimizer_torch.py, DecayedValue min values).
_SCHEDULE_FLOORS = {"learning_rate": 1e-10, "clip_range": 0.1, "ent_coef": 1e-5}


def _make_schedule(value: float | Schedule, kind: str, schedule: str) -> Schedule:
    if callable(value):
        return FloatSchedule(value)
    if schedule == "linear":
        return FloatSchedule(LinearSchedule(float(value), _SCHEDULE_FLOORS[kind], 1.0))
    return FloatSchedule(ConstantSchedule(float(value)))


def _find_attr(env: VecEnv, name: str, default: Any = None) -> Any:
    """An attribute of the innermost VecEnv (through VecEnvWrappers), without per-slot lookups."""
    while True:
        if name in vars(env):
            return vars(env)[name]
        if hasattr(type(env), name):
            return getattr(env, name)
        if isinstance(env, VecEnvWrapper):
            env = env.venv
        else:
            return default


class POCA(OnPolicyAlgorithm):
    """Multi-Agent POsthumous Credit Assignment on SB3.

    A shared actor trained with PPO's clipped surrogate on advantages ``G - b``: TD(lambda)
    returns ``G`` of the centralised critic V(group observations), minus the per-agent
    counterfactual baseline b(own observation, groupmates' observations and actions).

    :param policy: ``"MlpPolicy"``, ``"CnnPolicy"``, ``"MultiInputPolicy"`` or a
        :class:`~unity_sb3.algorithms.poca.policies.POCAPolicy` subclass.
    :param env: a VecEnv whose slots are agents (or an env id / Gym env: then groups of one).
    :param learning_rate: initial learning rate, or a schedule of progress remaining (1 -> 0).
    :param n_steps: steps per slot per rollout (the rollout holds ``n_steps * n_envs`` rows).
    :param batch_size: minibatch size, in active agent transitions.
    :param n_epochs: passes over the rollout per update (ML-Agents' ``num_epoch``).
    :param gamma: discount per decision.
    :param gae_lambda: lambda of the TD(lambda) returns (ML-Agents' ``lambd``).
    :param clip_range: PPO clip (ML-Agents' ``epsilon``); also clips value and baseline updates.
    :param ent_coef: entropy bonus (ML-Agents' ``beta``).
    :param vf_coef: weight of the value losses: ``vf_coef * (value_loss + baseline_coef * baseline_loss)``.
    :param baseline_coef: relative weight of the baseline loss (ML-Agents uses 0.5).
    :param max_grad_norm: gradient clipping norm (None: no clipping, as ML-Agents).
    :param normalize_advantage: normalise advantages over the active transitions of each update.
    :param schedule: ``"linear"`` (ML-Agents' default: learning rate, clip range and entropy
        coefficient decay linearly to 1e-10, 0.1 and 1e-5 over ``total_timesteps``) or
        ``"constant"``. Callables given for those three are used as they are.
    :param share_rewards: each agent's reward includes its groupmates' individual rewards
        (ML-Agents' POCA does this); the group reward is always added.
    :param use_masking: use the env's action masks when it has them (discrete actions).
    :param time_horizon: ML-Agents' trajectory length, in decisions of one agent: every
        ``time_horizon`` decisions of an agent's episode end a trajectory, whose last return
        bootstraps from V at the agent's next decision (:mod:`.buffers`). ``None`` (default): returns
        run on to the episode's or the rollout's end.
    :param target_kl: stop an update's epochs early when the approximate KL exceeds it.
    :param stats_window_size: episodes averaged in the rollout logs.
    :param tensorboard_log: TensorBoard log directory (None: no TensorBoard).
    :param policy_kwargs: keyword arguments of the policy (see ``POCAPolicy``).
    :param verbose: 0 silent, 1 info, 2 debug.
    :param seed: random seed.
    :param device: torch device (``"auto"``, ``"cpu"``, ``"cuda"``).
    :param _init_setup_model: build the networks now.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "MlpPolicy": MlpPolicy,
        "CnnPolicy": CnnPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: POCAPolicy
    rollout_buffer: POCARolloutBuffer  # type: ignore[assignment]
    #: group codes kept between rollouts before unused ones are dropped (codes are never reused)
    max_group_codes: ClassVar[int] = 100_000

    def __init__(
        self,
        policy: str | type[POCAPolicy],
        env: GymEnv | str,
        learning_rate: float | Schedule = 3e-4,
        n_steps: int = 1024,
        batch_size: int = 256,
        n_epochs: int = 3,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        clip_range: float | Schedule = 0.2,
        ent_coef: float | Schedule = 5e-3,
        vf_coef: float = 0.5,
        baseline_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        normalize_advantage: bool = True,
        schedule: str = "linear",
        share_rewards: bool = True,
        use_masking: bool = True,
        time_horizon: int | None = None,
        target_kl: float | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "auto",
        _init_setup_model: bool = True,
    ):
        if schedule not in ("linear", "constant"):
            raise ValueError(f"schedule must be 'linear' or 'constant', got {schedule!r}.")
        if batch_size < 1 or n_steps < 1 or n_epochs < 1:
            raise ValueError(
                f"batch_size, n_steps and n_epochs must be >= 1 (got {batch_size}, {n_steps}, {n_epochs})."
            )
        for name, value in (("clip_range", clip_range), ("ent_coef", ent_coef)):
            if not callable(value) and float(value) < 0:
                raise ValueError(f"{name} must be >= 0, got {value}.")
        super().__init__(
            policy,
            env,
            learning_rate=learning_rate,
            n_steps=n_steps,
            gamma=gamma,
            gae_lambda=gae_lambda,
            ent_coef=ent_coef if not callable(ent_coef) else 0.0,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,  # type: ignore[arg-type]
            use_sde=False,
            sde_sample_freq=-1,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            policy_kwargs=policy_kwargs,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=False,
            supported_action_spaces=(spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.Tuple),
        )
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.clip_range = clip_range
        self.ent_coef_initial = ent_coef
        self.baseline_coef = baseline_coef
        self.normalize_advantage = normalize_advantage
        self.schedule = schedule
        self.share_rewards = share_rewards
        self.use_masking = use_masking
        self.time_horizon = check_time_horizon(time_horizon)
        self._chunk_steps = np.zeros(0, dtype=np.int64)  # decisions per slot in its current trajectory
        self.target_kl = target_kl
        self._last_infos: list[dict[str, Any]] | None = None
        self._group_codes: dict[tuple[Any, Any], int] = {}
        self._next_group_code = 0
        self._slot_instances: list[Any] = []
        if _init_setup_model:
            self._setup_model()

    # ----------------------------------------------------------------- set-up

    def _setup_lr_schedule(self) -> None:
        self.lr_schedule = _make_schedule(self.learning_rate, "learning_rate", self.schedule)

    def _make_rollout_buffer(
        self, buffer_class: type[POCARolloutBuffer] = POCARolloutBuffer, **kwargs: Any
    ) -> POCARolloutBuffer:
        """A rollout buffer of this algorithm's settings.

        :param buffer_class: ``POCARolloutBuffer`` or a subclass (a memory variant's).
        :param kwargs: the subclass's own arguments.
        """
        return buffer_class(
            self.n_steps,
            self.observation_space,
            self.action_space,
            device=self.device,
            gamma=self.gamma,
            gae_lambda=self.gae_lambda,
            n_envs=self.n_envs,
            share_rewards=self.share_rewards,
            normalize_advantage=self.normalize_advantage,
            **kwargs,
        )

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.rollout_buffer = self._make_rollout_buffer()
        self.policy = self.policy_class(  # type: ignore[assignment]
            self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
        )
        self.policy = self.policy.to(self.device)
        if isinstance(getattr(self.policy, "critic", None), GroupCriticBody):
            # below this minibatch size a padded critic pass is cheaper than one pass per group size
            self.policy.critic.split_by_size = self.batch_size >= SPLIT_BY_SIZE_MIN_BATCH
        self.clip_range_schedule = _make_schedule(self.clip_range, "clip_range", self.schedule)
        self.ent_coef_schedule = _make_schedule(self.ent_coef_initial, "ent_coef", self.schedule)

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            "_last_infos",
            "_group_codes",
            "_next_group_code",
            "_slot_instances",
        ]

    # ------------------------------------------------------------ collection

    def _group_key(self, slot: int, group_id: int, info: dict[str, Any]) -> int:
        if group_id == 0:
            return -(slot + 1)  # a group of one, never shared with another slot
        instance = info.get("instance", self._slot_instances[slot] if slot < len(self._slot_instances) else 0)
        key = (instance, group_id)
        code = self._group_codes.get(key)
        if code is None:
            code = self._group_codes[key] = self._next_group_code
            self._next_group_code += 1
        return code

    def _prune_group_codes(self, in_use: np.ndarray) -> None:
        """Between rollouts, forget the groups whose codes no slot uses any more.

        Codes come from a counter and are never given twice, so a group seen again after being
        forgotten gets a fresh code and can never share one with another group.

        :param in_use: group codes still referred to (the next rollout's first keys, carried mates).
        """
        if len(self._group_codes) <= self.max_group_codes:
            return
        keep = set(np.asarray(in_use).tolist())
        self._group_codes = {key: code for key, code in self._group_codes.items() if code in keep}

    def _slot_state(self, infos: list[dict[str, Any]] | None, n_envs: int) -> tuple[np.ndarray, np.ndarray]:
        """(active, group keys) of the slots' current observations, from the infos that came with them."""
        infos = infos if infos is not None else [{} for _ in range(n_envs)]
        ids = group_ids(infos).tolist()
        keys = np.array([self._group_key(i, ids[i], info) for i, info in enumerate(infos)], dtype=np.int64)
        return active_mask(infos), keys

    @staticmethod
    def _check_reward_path(env: VecEnv) -> None:
        """Refuse a reward normaliser above an env that adds group rewards into the rewards.

        POCA subtracts ``infos[i]["group_reward"]`` from such rewards; after ``VecNormalize``
        scaled them, the raw group reward in the infos no longer matches what is inside.
        """
        if not _find_attr(env, "add_group_reward", False):
            return
        layer: Any = env
        while isinstance(layer, VecEnvWrapper):
            if isinstance(layer, VecNormalize) and layer.norm_reward:
                raise ValueError(
                    "POCA cannot separate group rewards from individual rewards that VecNormalize has "
                    "normalised while the env adds the group reward into them (add_group_reward=True). "
                    "Build the env with add_group_reward=False (POCA reads infos['group_reward'] itself) "
                    "or use VecNormalize(norm_reward=False)."
                )
            layer = layer.venv

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ) -> tuple[int, BaseCallback]:
        must_reset = reset_num_timesteps or self._last_obs is None
        result = super()._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        assert self.env is not None
        self._check_reward_path(self.env)
        if must_reset or self._last_infos is None:
            self._last_infos = reset_infos_of(self.env)
            self.rollout_buffer.forget_waiting_mates()
        if must_reset or len(self._chunk_steps) != self.env.num_envs:
            self._chunk_steps = np.zeros(self.env.num_envs, dtype=np.int64)
        self._slot_instances = self._find_slot_instances(self.env)  # type: ignore[arg-type]
        mark_inactive_aware(self.env)  # POCA never trains on placeholder steps
        return result

    @staticmethod
    def _find_slot_instances(env: VecEnv) -> list[Any]:
        """Unity instance of each slot (``worker_id`` of UnityVecEnv slots), for infos without ``instance``."""
        try:
            if env.has_attr("worker_id"):
                return list(env.get_attr("worker_id"))
        except Exception:  # an env whose attribute lookup fails: treat as one instance
            pass
        return [0] * env.num_envs

    def _mask_reader(self, env: VecEnv) -> MaskReader | None:
        """What gives ``env``'s masks during one rollout, looked up once (None: no masks to apply)."""
        if not self.use_masking or isinstance(self.action_space, spaces.Box):
            return None
        return mask_reader(env)

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: RolloutBuffer,
        n_rollout_steps: int,
    ) -> bool:
        """Collect ``n_rollout_steps`` steps of every slot, then compute POCA's targets."""
        assert self._last_obs is not None, "No previous observation was provided"
        assert isinstance(rollout_buffer, POCARolloutBuffer), "POCA needs a POCARolloutBuffer"
        self.policy.set_training_mode(False)
        rollout_buffer.reset()
        callback.on_rollout_start()
        env_adds_group_reward = bool(_find_attr(env, "add_group_reward", False))
        active, keys = self._slot_state(self._last_infos, env.num_envs)
        self._prune_group_codes(np.concatenate([keys, rollout_buffer.waiting_mate_keys()]))
        n_steps = 0
        new_obs, dones = self._last_obs, np.zeros(env.num_envs, dtype=bool)
        read_masks = self._mask_reader(env)
        while n_steps < n_rollout_steps:
            action_masks = read_masks() if read_masks is not None else None
            with self._acting_mode():
                obs_tensor = obs_as_tensor(self._last_obs, self.device)  # type: ignore[arg-type]
                actions, log_probs = self._act(obs_tensor, action_masks, active)
            actions = actions.cpu().numpy()
            clipped_actions = actions
            if isinstance(self.action_space, spaces.Box):
                clipped_actions = np.clip(actions, self.action_space.low, self.action_space.high)
            elif isinstance(self.action_space, spaces.Tuple):
                clipped_actions = hybrid_env_actions(actions, self.action_space, env)

            new_obs, rewards, dones, infos = env.step(clipped_actions)
            self.num_timesteps += env.num_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            n_steps += 1

            rewards = np.asarray(rewards, dtype=np.float32)
            step_group_rewards = group_rewards(infos)
            if env_adds_group_reward:  # the env put it into every reward: keep the individual part
                rewards = rewards - step_group_rewards
            truncated = np.array([bool(info.get("TimeLimit.truncated", False)) for info in infos], dtype=bool)
            terminal = {
                i: infos[i][TERMINAL_OBSERVATION]
                for i in np.flatnonzero(dones)
                if infos[i].get(TERMINAL_OBSERVATION) is not None
            }
            rollout_buffer.add_step(
                self._last_obs,  # type: ignore[arg-type]
                actions,
                log_probs.cpu().numpy(),
                rewards,
                step_group_rewards,
                np.asarray(dones, dtype=bool),
                truncated,
                active,
                keys,
                episode_starts=self._last_episode_starts,
                action_masks=action_masks,
                terminal_observations=terminal,
                chunk_ends=horizon_cuts(self._chunk_steps, active, dones, self.time_horizon),
            )
            self._last_obs = new_obs  # type: ignore[assignment]
            self._last_episode_starts = dones
            self._last_infos = infos
            active, keys = self._slot_state(infos, env.num_envs)

        rollout_buffer.finalize(self.policy, new_obs, active, keys)  # type: ignore[arg-type]
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _acting_mode(self) -> Any:
        """Grad mode while collecting: ``inference_mode`` (nothing of acting is kept as a tensor; a
        memory variant, which keeps its memories for training, uses ``no_grad``)."""
        return th.inference_mode()

    def _act(
        self, obs: Any, action_masks: np.ndarray | None, active: np.ndarray
    ) -> tuple[th.Tensor, th.Tensor]:
        """Sample every slot's action while collecting (a memory variant carries its memories here).

        :param obs: the slots' observations as tensors.
        :param action_masks: (n_envs, sum of branches) True = allowed, or None.
        :param active: (n_envs,) bool, the slot holds a deciding agent.
        :return: actions (n_envs, *flat_action_shape) and their log-probabilities (n_envs,).
        """
        return self.policy(obs, action_masks=action_masks)

    # --------------------------------------------------------------- training

    def _evaluate_actions(self, batch: Any, actions: th.Tensor) -> tuple[th.Tensor, th.Tensor | None]:
        """Log-probabilities and entropies of a minibatch's actions under the current actor."""
        return self.policy.evaluate_actions(batch.observations, actions, action_masks=batch.action_masks)

    def _values_and_baselines(self, batch: Any) -> tuple[th.Tensor, th.Tensor]:
        """V of each minibatch row's group and its agent's baseline under the current critic."""
        return self.policy.predict_values_and_baselines(
            batch.observations,
            batch.mate_observations,
            batch.mate_actions,
            batch.mate_mask,
            batch.shared_values,
            batch.actions,
            batch.mate_positions,
        )

    def train(self) -> None:
        """PPO-style update: clipped surrogate on ``G - b``, clipped value and baseline losses, entropy bonus."""
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        clip_range = self.clip_range_schedule(self._current_progress_remaining)
        ent_coef = self.ent_coef_schedule(self._current_progress_remaining)
        self.ent_coef = ent_coef

        pg_losses: list[th.Tensor] = []
        value_losses: list[th.Tensor] = []
        baseline_losses: list[th.Tensor] = []
        entropy_losses: list[th.Tensor] = []
        clip_fractions: list[th.Tensor] = []
        approx_kl_divs: list[th.Tensor] = []
        loss = th.zeros(())
        continue_training = True
        n_active = int(self.rollout_buffer.active.sum())
        if n_active == 0:
            warnings.warn("POCA: no active agent step in this rollout; skipping the update.", stacklevel=2)
            return
        for _epoch in range(self.n_epochs):
            for batch in self.rollout_buffer.get(self.batch_size):
                actions = batch.actions
                if isinstance(self.action_space, spaces.Discrete):
                    actions = actions.long().flatten()
                elif isinstance(self.action_space, spaces.MultiDiscrete):
                    actions = actions.long()
                log_prob, entropy = self._evaluate_actions(batch, actions)
                values, baselines = self._values_and_baselines(batch)
                advantages = batch.advantages
                ratio = th.exp(log_prob - batch.old_log_prob)
                policy_loss = -th.min(
                    advantages * ratio, advantages * th.clamp(ratio, 1 - clip_range, 1 + clip_range)
                ).mean()
                value_loss = self._clipped_value_loss(values, batch.old_values, batch.returns, clip_range)
                baseline_loss = self._clipped_value_loss(
                    baselines, batch.old_baselines, batch.returns, clip_range
                )
                entropy_loss = -th.mean(entropy) if entropy is not None else -th.mean(-log_prob)
                loss = (
                    policy_loss
                    + self.vf_coef * (value_loss + self.baseline_coef * baseline_loss)
                    + ent_coef * entropy_loss
                )

                with th.no_grad():  # statistics, read out once after the update (.item() each is slow)
                    log_ratio = log_prob - batch.old_log_prob
                    ratio_minus_one = ratio.detach() - 1  # ratio is th.exp(log_ratio), the same numbers
                    approx_kl = th.mean(ratio_minus_one - log_ratio)
                    clip_fraction = th.mean((th.abs(ratio_minus_one) > clip_range).float())
                approx_kl_divs.append(approx_kl)
                pg_losses.append(policy_loss.detach())
                value_losses.append(value_loss.detach())
                baseline_losses.append(baseline_loss.detach())
                entropy_losses.append(entropy_loss.detach())
                clip_fractions.append(clip_fraction)
                if self.target_kl is not None and approx_kl.item() > 1.5 * self.target_kl:
                    continue_training = False
                    if self.verbose >= 1:
                        print(
                            f"Early stopping at epoch {_epoch} due to reaching max kl: {approx_kl.item():.2f}"
                        )
                    break

                self.policy.optimizer.zero_grad()
                loss.backward()
                if self.max_grad_norm is not None:
                    th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm, foreach=True)
                self.policy.optimizer.step()
            self._n_updates += 1
            if not continue_training:
                break

        active = self.rollout_buffer.active
        for name, values in (
            ("policy_loss", pg_losses),
            ("value_loss", value_losses),
            ("baseline_loss", baseline_losses),
            ("entropy_loss", entropy_losses),
            ("approx_kl", approx_kl_divs),
            ("clip_fraction", clip_fractions),
        ):  # the mean of the minibatches' numbers as Python floats, as .item() gives them
            self.logger.record(f"train/{name}", float(np.mean(th.stack(values).tolist())) if values else 0.0)
        self.logger.record("train/loss", loss.item())
        self.logger.record(
            "train/explained_variance",
            float(
                explained_variance(self.rollout_buffer.values[active], self.rollout_buffer.returns[active])
            ),
        )
        self.logger.record("train/value_mean", float(self.rollout_buffer.values[active].mean()))
        self.logger.record("train/baseline_mean", float(self.rollout_buffer.baselines[active].mean()))
        self.logger.record("train/active_fraction", float(active.mean()))
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/clip_range", clip_range)
        self.logger.record("train/ent_coef", ent_coef)
        if hasattr(self.policy, "log_std"):
            self.logger.record("train/std", th.exp(self.policy.log_std).mean().item())

    @staticmethod
    def _clipped_value_loss(
        predicted: th.Tensor, old: th.Tensor, returns: th.Tensor, clip_range: float
    ) -> th.Tensor:
        clipped = old + th.clamp(predicted - old, -clip_range, clip_range)
        return th.max(
            F.mse_loss(predicted, returns, reduction="none"), F.mse_loss(clipped, returns, reduction="none")
        ).mean()

    # ---------------------------------------------------------------- public

    def predict(  # type: ignore[override]
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
        action_masks: np.ndarray | None = None,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Actions of the shared actor for a batch of agents (or one agent).

        :param observation: (n_agents, *obs_shape), one observation, or a dict of those.
        :param deterministic: take the most likely action.
        :param action_masks: True = allowed, (n_agents, sum of branch sizes); None = no mask.
        :return: (actions, None).
        """
        return self.policy.predict(
            observation, state, episode_start, deterministic, action_masks=action_masks
        )

    def learn(  # type: ignore[override]
        self: SelfPOCA,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 1,
        tb_log_name: str = "POCA",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfPOCA:
        """Train for ``total_timesteps`` slot-steps (SB3 counting: ``n_envs`` per VecEnv step)."""
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )
