"""Configuration: shipped hyperparameters, the ML-Agents trainer YAML mapping, model arguments, validation helpers."""
