"""Registration of the project's algorithms, samplers and the build id with rl-zoo3 and gymnasium."""

from __future__ import annotations

from unity_sb3.zoo.envs import BUILD_ID
from unity_sb3.zoo.samplers import convert_unity_params, unity_sampler

#: the project's algorithms under the names RL Zoo's ``--algo`` takes
ZOO_ALGORITHMS = ("ppo", "sac", "poca", "maskable_ppo", "recurrent_ppo", "a2c", "td3", "tqc")


def register() -> None:
    """Add the project's algorithms, samplers and the build id to rl-zoo3 and gymnasium (idempotent)."""
    import gymnasium
    from rl_zoo3 import hyperparams_opt, utils

    from unity_sb3.algorithms.registry import algorithm_class

    for name in ZOO_ALGORITHMS:
        utils.ALGOS[name] = algorithm_class(name)
    hyperparams_opt.HYPERPARAMS_SAMPLER.setdefault("maskable_ppo", hyperparams_opt.sample_ppo_params)
    hyperparams_opt.HYPERPARAMS_SAMPLER.setdefault("recurrent_ppo", hyperparams_opt.sample_ppo_lstm_params)
    hyperparams_opt.HYPERPARAMS_SAMPLER.setdefault("poca", unity_sampler("poca"))
    for name in ("maskable_ppo", "recurrent_ppo"):
        hyperparams_opt.HYPERPARAMS_CONVERTER.setdefault(name, hyperparams_opt.convert_onpolicy_params)
    hyperparams_opt.HYPERPARAMS_CONVERTER.setdefault("poca", convert_unity_params)
    if BUILD_ID not in gymnasium.registry:
        # only so that RL Zoo's registry check passes; the bridge builds a UnityVecEnv itself
        gymnasium.register(id=BUILD_ID, entry_point="unity_sb3.wrappers.gym_env:UnityGymEnv")
