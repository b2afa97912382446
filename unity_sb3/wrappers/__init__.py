"""Wrappers exposing a Unity behavior as an SB3 VecEnv, a gymnasium Env or a PettingZoo env."""
