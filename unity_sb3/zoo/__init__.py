"""RL Zoo bridge: ``python -m unity_sb3.zoo train|enjoy ...`` runs rl-zoo3 on Unity scenes.

It is rl-zoo3's own ``train`` / ``enjoy`` (same flags, same ``logs/<algo>/<env>_<n>/`` layout)
with three additions:

- **Algorithms.** ``rl_zoo3.utils.ALGOS`` gains ``poca``, ``maskable_ppo`` and
  ``recurrent_ppo`` (an alias of RL Zoo's ``ppo_lstm``); ``ppo`` and ``sac`` become the
  project's classes, so ``reward_signals:`` and ``behavioral_cloning:`` keys in a
  hyperparameter file work. ``-optimize`` has samplers for all of them.
- **Environments.** For ``unity_sb3/<Scene>-v0`` ids (and ``unity_sb3/Unity-v0`` with
  ``--env-kwargs target:"'path/to/build'"`` for a Unity build or ``"'editor'"``), the
  environment is ONE :class:`~unity_sb3.wrappers.vec_env.UnityVecEnv` whose slots are all
  agents of the behavior, instead of ``n_envs`` copies of a single-agent gym env. ``n_envs``
  in a hyperparameter file is the number of Unity instances. ``--env-kwargs`` go to
  ``UnityVecEnv`` (``behavior_name``, ``num_slots``, ``visual``, ``flatten_obs``, ``hybrid``,
  ``add_group_reward``, ``restart_on_crash``, ...) or else to
  :func:`~unity_sb3.open.open_unity` (``transport``, ``time_scale`` via
  ``engine_settings``, ``environment_parameters``, scene parameters such as ``num_agents``).
  ``open_kwargs:`` in a hyperparameter file (the key ``unity-sb3 train`` reads) is merged
  into them. A curriculum in ``environment_parameters`` advances during training, as with
  ``unity-sb3 train`` (a ``CurriculumCallback``), and the evaluation envs follow its lessons;
  the lessons training ended at are saved as ``curriculum.json`` beside ``config.yml``, those of
  each checkpoint beside it (``rl_model_<steps>_steps.curriculum.json``), and ``enjoy`` opens the
  scene at the lessons of the model it loads.
- **Hyperparameters.** For Unity ids the default ``--conf-file`` is
  ``unity_sb3/config/hyperparams/<algo>.yml``. Frequencies RL Zoo counts in ``VecEnv`` steps
  (``--eval-freq``, ``--save-freq``, optimisation evaluations) are converted back to agent
  steps, the unit of ``n_timesteps``.

Everything else (``--eval-freq``, ``-optimize``, ``--storage``, ``plot_train``, ...) is
rl-zoo3's. ``enjoy`` runs the saved model on a fresh ``UnityVecEnv`` and reports the mean
episode reward over all slots (Unity draws its own window; there is no Python viewer).
"""

from __future__ import annotations

from typing import Any

import unity_sb3  # noqa: F401  (protobuf compat and gymnasium ids)
from unity_sb3.config.hyperparams import HYPERPARAMS_DIR as HYPERPARAMS_DIR
from unity_sb3.zoo.commands import USAGE as USAGE
from unity_sb3.zoo.commands import enjoy, main, train
from unity_sb3.zoo.envs import BUILD_ID, is_unity_id, make_unity_vec_env
from unity_sb3.zoo.envs import UNITY_PREFIX as UNITY_PREFIX
from unity_sb3.zoo.envs import VEC_ENV_KEYS as VEC_ENV_KEYS
from unity_sb3.zoo.registration import ZOO_ALGORITHMS as ZOO_ALGORITHMS
from unity_sb3.zoo.registration import register
from unity_sb3.zoo.samplers import OFF_POLICY as OFF_POLICY
from unity_sb3.zoo.samplers import ON_POLICY as ON_POLICY
from unity_sb3.zoo.samplers import convert_unity_params as convert_unity_params
from unity_sb3.zoo.samplers import sample_unity_params

__all__ = [
    "BUILD_ID",
    "UnityExperimentManager",  # built lazily by __getattr__: rl_zoo3 imports optuna
    "enjoy",
    "is_unity_id",
    "main",
    "make_unity_vec_env",
    "register",
    "sample_unity_params",
    "train",
]


def __getattr__(name: str) -> Any:
    if name == "UnityExperimentManager":
        from unity_sb3.zoo.experiment_manager import UnityExperimentManager as cls

        globals()[name] = cls
        return cls
    raise AttributeError(f"module 'unity_sb3.zoo' has no attribute {name!r}")
