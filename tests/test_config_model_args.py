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
