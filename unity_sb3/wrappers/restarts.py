"""Restarting a crashed Unity instance, within a rate limit: the one :class:`RestartPolicy`."""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from mlagents_envs.exception import UnityActionException, UnityException

from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError
from unity_sb3.validation import is_int, is_number
from unity_sb3.wrappers._terminals import copy_obs, take_row
from unity_sb3.wrappers.instances import Instance, StepResult, kill_if_hung, str_or_none

#: the restart settings as ``unity-sb3 train``, a flat config and UnityVecEnv name them
RESTART_SETTINGS = ("max_restarts", "restarts_rate_limit_n", "restarts_rate_limit_period_s")


@dataclass(frozen=True)
class RestartPolicy:
    """When a crashed Unity instance may be re-opened (ML-Agents' meaning and defaults).

    :param max_restarts: restarts allowed per instance over its lifetime (ML-Agents'
        ``max_lifetime_restarts``); -1 for no limit.
    :param rate_limit_n: restarts allowed per instance within any ``rate_limit_period_s``
        seconds (ML-Agents' ``restarts_rate_limit_n``); -1 for no rate limit.
    :param rate_limit_period_s: the window of ``rate_limit_n``, in seconds.
    """

    max_restarts: int = 10
    rate_limit_n: int = 1
    rate_limit_period_s: float = 60.0

    @staticmethod
    def check_setting(
        name: str,
        value: Any,
        where: str | None = None,
        error: type[Exception] = UnityConfigurationError,
        *,
        convert: bool = False,
    ) -> int | float:
        """One restart setting checked (the one check of all three), converted.

        :param name: one of :data:`RESTART_SETTINGS`.
        :param value: the user's value.
        :param where: how the message names the setting (e.g. ``"max_restarts in run.yml"``);
            default ``name``.
        :param error: the exception class to raise.
        :param convert: the Python API: counts go through ``int()`` (``2.0`` is 2) instead of
            having to be whole numbers as in a file or on the command line.
        :return: an ``int`` count, or the period as a ``float``.
        """
        where = where or name
        if name == "restarts_rate_limit_period_s":
            if not is_number(value):
                raise error(f"{where} must be a number of seconds, got {value!r}.")
            if not 0 < value < math.inf:
                raise error(f"{where} must be a positive number of seconds, got {value!r}.")
            return float(value)
        if name not in RESTART_SETTINGS:
            raise ValueError(f"{name!r} is not a restart setting ({', '.join(RESTART_SETTINGS)}).")
        if convert:
            try:
                value = int(value)
            except (TypeError, ValueError, OverflowError):
                raise error(
                    f"{where} must be a whole number >= 0, or -1 for no limit; got {value!r}."
                ) from None
            if value < -1:
                raise error(f"{where} must be >= 0, or -1 for no limit; got {value}.")
            return value
        if not is_int(value) or value < -1:
            raise error(f"{where} must be a whole number >= 0, or -1 for no limit; got {value!r}.")
        return int(value)

    def check(
        self, error: type[Exception] = UnityConfigurationError, *, convert: bool = False
    ) -> RestartPolicy:
        """This policy with each setting checked and converted (see :meth:`check_setting`)."""
        values = zip(RESTART_SETTINGS, (self.max_restarts, self.rate_limit_n, self.rate_limit_period_s))
        return RestartPolicy(
            *(self.check_setting(name, value, error=error, convert=convert) for name, value in values)
        )

    def within_lifetime(self, restarts: int) -> bool:
        """Whether an instance restarted ``restarts`` times may restart once more."""
        return self.max_restarts < 0 or restarts < self.max_restarts

    def recent(self, history: Sequence[float], now: float) -> list[float]:
        """The restart times of ``history`` (seconds, ``time.monotonic()``) inside the window ending at ``now``."""
        cutoff = now - self.rate_limit_period_s
        return [t for t in history if t > cutoff]

    def allows(self, history: Sequence[float], now: float) -> bool:
        """Whether the rate limit allows one more restart at ``now`` after the restarts at ``history``."""
        return self.rate_limit_n < 0 or len(self.recent(history, now)) < self.rate_limit_n

    def refusal(self, history: Sequence[float], now: float) -> str:
        """Why the rate limit refuses a restart at ``now`` (for the crash error)."""
        return (
            f"crashed again after {len(self.recent(history, now))} restart(s) within "
            f"{self.rate_limit_period_s:g} s (restarts_rate_limit_n={self.rate_limit_n}, "
            f"restarts_rate_limit_period_s={self.rate_limit_period_s:g}); a scene that crashes this "
            "often needs fixing (see its log), or raise the limits"
        )


class RestartMixin:
    """UnityVecEnv's restarts: a crashed instance restarts as ``self.restart_policy`` allows, else the error."""

    restart_policy: RestartPolicy

    # ------------------------------------------------------------------ crashes
    def _guard(self, inst: Instance, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; return (not raise) a Unity crash so the caller can restart or report it."""
        try:
            return fn()
        except UnityActionException:
            raise
        except (UnityException, TimeoutError, ConnectionError, EOFError) as exc:
            return exc

    def _crash_error(self, inst: Instance, exc: BaseException, detail: str) -> UnityProcessError:
        exit_code = getattr(exc, "exit_code", None)
        process = getattr(inst.env, "process", None)
        if exit_code is None and process is not None:
            exit_code = process.poll()
        error = UnityProcessError(
            inst.worker_id,
            detail=f"{detail}: {type(exc).__name__}: {exc}",
            exit_code=exit_code,
            log_path=getattr(exc, "log_path", None) or str_or_none(getattr(inst.env, "log_path", None)),
        )
        error.__cause__ = exc
        return error

    def _restart_or_raise(self, inst: Instance, exc: BaseException) -> StepResult:
        if not self.restart_on_crash:
            raise self._crash_error(
                inst,
                exc,
                "crashed or stopped answering (pass restart_on_crash=True to re-open it automatically)",
            )
        last = exc
        kill_if_hung(inst.env, exc)
        while self.restart_policy.within_lifetime(inst.restarts):
            refused = self._rate_limited(inst)
            if refused:
                raise self._crash_error(inst, last, refused)
            wait = min(self.restart_backoff * (2**inst.restarts - 1), 60.0)
            inst.restarts += 1
            inst.restart_times.append(time.monotonic())
            if wait > 0:
                time.sleep(wait)
            with contextlib.suppress(Exception):  # the crashed instance may not close cleanly
                inst.env.close()
            try:
                assert inst.source is not None
                inst.env = self._open(inst.source, inst.worker_id, restart=True)
                spec = inst.env.behavior_specs.get(self.behavior_name)
                if spec != self.behavior_spec:
                    raise UnityConfigurationError(
                        f"Unity worker {inst.worker_id} came back with behavior spec {spec}, expected {self.behavior_spec}"
                    )
                terminal = {local: take_row(self._obs_buf, inst.start + local) for local in range(inst.n)}
                terminal = {k: copy_obs(v) for k, v in terminal.items()}
                self._reset_instance(inst)
            except (UnityException, TimeoutError, ConnectionError, EOFError) as again:
                if isinstance(again, UnityConfigurationError):
                    raise
                last = again
                kill_if_hung(inst.env, again)
                continue
            n = inst.n
            limit = "no limit" if self.max_restarts < 0 else f"at most {self.max_restarts}"
            warnings.warn(
                f"UnityVecEnv: Unity worker {inst.worker_id} crashed ({type(exc).__name__}: {exc}); "
                f"restarted it ({inst.restarts} of {limit})",
                stacklevel=3,
            )
            return StepResult(
                np.zeros(n, np.float32),
                np.zeros(n, np.float32),
                np.ones(n, bool),
                np.ones(n, bool),
                terminal,
                inst.rows >= 0,
                restarted=True,
            )
        raise self._crash_error(inst, last, f"crashed again after {self.max_restarts} restarts")

    def _rate_limited(self, inst: Instance) -> str | None:
        """Why the next restart of ``inst`` is refused by the rate limit, or ``None``."""
        now = time.monotonic()
        inst.restart_times = self.restart_policy.recent(inst.restart_times, now)
        if self.restart_policy.allows(inst.restart_times, now):
            return None
        return self.restart_policy.refusal(inst.restart_times, now)

    @property
    def max_restarts(self) -> int:
        """Restarts allowed per instance over its lifetime (-1: no limit)."""
        return self.restart_policy.max_restarts

    @property
    def restarts_rate_limit_n(self) -> int:
        """Restarts allowed per instance within ``restarts_rate_limit_period_s`` (-1: no rate limit)."""
        return self.restart_policy.rate_limit_n

    @property
    def restarts_rate_limit_period_s(self) -> float:
        """The window of the rate limit, in seconds."""
        return self.restart_policy.rate_limit_period_s

    @property
    def restart_counts(self) -> list[int]:
        """How many times each Unity instance was restarted (one entry per instance)."""
        return [inst.restarts for inst in self._instances]
