"""Model arguments (``unity_sb3.config.model_args``): a misspelt hyperparameter gets a did-you-mean."""

from __future__ import annotations

import pytest

from unity_sb3.wrappers.vec_env import UnityVecEnv


@pytest.mark.parametrize(
    ("algo", "key", "close"),
    [
        ("ppo", "learning_rat", "learning_rate"),
        ("sac", "gradient_step", "gradient_steps"),
        ("poca", "n_epoch", "n_epochs"),
    ],
)
def test_misspelt_hyperparameter_gets_a_did_you_mean(algo, key, close):
    from unity_sb3.config.model_args import prepare_model_args

    venv = UnityVecEnv("Escape" if algo == "poca" else "Ball3D", open_kwargs={})
    try:
        with pytest.raises(
            ValueError, match=rf"Unknown hyperparameter '{key}' for {algo}.*Did you mean '{close}'"
        ):
            prepare_model_args(algo, "MlpPolicy", {key: 1, "seed": 0}, venv)
        _, kwargs = prepare_model_args(algo, "MlpPolicy", {close: 1, "seed": 0}, venv)
        assert kwargs == {close: 1, "seed": 0}
    finally:
        venv.close()


@pytest.mark.parametrize("algo", ["ppo", "sac", "poca"])
def test_variable_length_observations_get_entity_attention_by_default(algo: str) -> None:
    from unity_sb3.config.model_args import prepare_model_args
    from unity_sb3.networks.extractors import UnityMultiInputExtractor

    env = UnityVecEnv("Sorter", open_kwargs={"transport": "inprocess", "num_agents": 2})
    try:
        _, kwargs = prepare_model_args(algo, "MultiInputPolicy", {}, env)
        assert kwargs["policy_kwargs"]["features_extractor_class"] is UnityMultiInputExtractor
        # an extractor the user names is kept
        from stable_baselines3.common.torch_layers import CombinedExtractor

        _, kwargs = prepare_model_args(
            algo, "auto", {"policy_kwargs": {"features_extractor_class": CombinedExtractor}}, env
        )
        assert kwargs["policy_kwargs"]["features_extractor_class"] is CombinedExtractor
    finally:
        env.close()


def test_flat_observations_keep_sb3s_extractor() -> None:
    from unity_sb3.config.model_args import prepare_model_args

    env = UnityVecEnv("GridWorld", open_kwargs={"transport": "inprocess", "num_agents": 1})
    try:
        _, kwargs = prepare_model_args("ppo", "MultiInputPolicy", {}, env)
        assert "features_extractor_class" not in (kwargs.get("policy_kwargs") or {})
    finally:
        env.close()
