"""Self-play settings as ML-Agents' trainer YAML writes them (a behavior's ``self_play:`` section).

The keys, defaults and meanings are ML-Agents' ``SelfPlaySettings`` (``mlagents/trainers/settings.py``):

- ``save_steps``: learner steps between two snapshots of the learning policy;
- ``team_change``: learner steps between two changes of the learning team (default
  ``5 * save_steps``);
- ``swap_steps``: ghost steps (decisions taken by the frozen opponents) between two draws of the
  opponent snapshot;
- ``window``: how many snapshots are kept (a ring; the oldest is overwritten);
- ``play_against_latest_model_ratio``: the probability that a draw picks the latest policy
  rather than a uniformly chosen snapshot;
- ``initial_elo``: the starting ELO of the policy and of every snapshot slot.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from unity_sb3 import validation

__all__ = ["SELF_PLAY_KEYS", "SelfPlayConfigError", "SelfPlaySettings"]

#: the keys of ML-Agents' ``self_play`` section, in its order
SELF_PLAY_KEYS = (
    "save_steps",
    "team_change",
    "swap_steps",
    "window",
    "play_against_latest_model_ratio",
    "initial_elo",
)


class SelfPlayConfigError(ValueError):
    """A ``self_play`` setting is invalid (the message names the key and what to change)."""


@dataclass
class SelfPlaySettings:
    """ML-Agents' ghost-trainer settings, checked.

    :param save_steps: learner steps (the model's ``num_timesteps``) between snapshots, > 0.
    :param team_change: learner steps between changes of the learning team, > 0; ``None`` means
        ML-Agents' default, ``5 * save_steps``.
    :param swap_steps: ghost steps (agent decisions answered by the frozen opponent) between
        opponent draws, > 0.
    :param window: how many snapshots are kept, >= 1.
    :param play_against_latest_model_ratio: probability in [0, 1] of facing the latest policy
        at a draw (otherwise a snapshot drawn uniformly from the window).
    :param initial_elo: the starting ELO rating (ML-Agents: 1200, chess's convention).
    """

    save_steps: int = 20000
    team_change: int | None = None
    swap_steps: int = 2000
    window: int = 10
    play_against_latest_model_ratio: float = 0.5
    initial_elo: float = 1200.0
    where: str = field(default="self_play", repr=False, compare=False)

    def __post_init__(self) -> None:
        self.save_steps = self._count("save_steps", self.save_steps, 1)
        if self.team_change is None:
            self.team_change = 5 * self.save_steps
        self.team_change = self._count("team_change", self.team_change, 1)
        self.swap_steps = self._count("swap_steps", self.swap_steps, 1)
        self.window = self._count("window", self.window, 1)
        self.play_against_latest_model_ratio = validation.number(
            self.play_against_latest_model_ratio,
            f"{self.where}.play_against_latest_model_ratio",
            low=0.0,
            high=1.0,
            text=True,
            error=SelfPlayConfigError,
        )
        self.initial_elo = validation.number(
            self.initial_elo, f"{self.where}.initial_elo", text=True, error=SelfPlayConfigError
        )

    def _count(self, key: str, value: Any, low: int) -> int:
        return validation.number(
            value, f"{self.where}.{key}", low=low, integer=True, text=True, error=SelfPlayConfigError
        )

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None, where: str = "self_play") -> SelfPlaySettings:
        """Read a ``self_play`` section (missing keys take ML-Agents' defaults).

        :param config: the section, e.g. ``{"save_steps": 50000, "team_change": 200000}``; ``None``
            (an empty YAML section) gives the defaults.
        :param where: where the section is, for messages (``"behaviors.SoccerTwos.self_play"``).
        :raises SelfPlayConfigError: an unknown key (with a did-you-mean) or a bad value.
        """
        validation.check_keys(config, SELF_PLAY_KEYS, where, SelfPlayConfigError)
        return cls(**dict(config or {}), where=where)

    def as_dict(self) -> dict[str, Any]:
        """The settings as the ``self_play`` section would write them (``team_change`` resolved)."""
        values = asdict(self)
        values.pop("where")
        return values
