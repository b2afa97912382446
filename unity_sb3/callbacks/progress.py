"""A live progress line during training."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback


class LiveProgressCallback(BaseCallback):
    """A tqdm progress bar over timesteps with the mean episode reward and length.

    :param total_timesteps: the length of the bar (``learn``'s ``total_timesteps``).
    :param refresh_every: update the text every this many calls (each call = one vector step).
    :param postfix: more text for the line, asked at each refresh (e.g.
        :meth:`~unity_sb3.callbacks.self_play.SelfPlayCallback.progress_text`, the self-play ELO).
    """

    def __init__(
        self,
        total_timesteps: int,
        refresh_every: int = 20,
        verbose: int = 0,
        postfix: Callable[[], str] | None = None,
    ) -> None:
        super().__init__(verbose)
        self.total_timesteps = total_timesteps
        self.refresh_every = refresh_every
        self.postfix = postfix
        self.bar = None
        self._start = 0

    def _on_training_start(self) -> None:
        from tqdm.auto import tqdm

        self._start = self.model.num_timesteps
        self.bar = tqdm(total=self.total_timesteps, initial=0, unit="step", dynamic_ncols=True)

    def _on_step(self) -> bool:
        assert self.bar is not None
        self.bar.n = min(self.model.num_timesteps - self._start, self.total_timesteps)
        if self.n_calls % self.refresh_every == 0:
            parts = []
            episodes = self.model.ep_info_buffer
            if episodes:
                rewards = np.array([e["r"] for e in episodes])
                lengths = np.array([e["l"] for e in episodes])
                parts.append(f"mean reward {rewards.mean():.2f}  mean length {lengths.mean():.0f}")
            if self.postfix is not None:
                parts.append(self.postfix())
            if parts:
                self.bar.set_postfix_str("  ".join(parts))
            self.bar.refresh()
        return True

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.n = min(self.model.num_timesteps - self._start, self.total_timesteps)
            self.bar.close()
            self.bar = None
