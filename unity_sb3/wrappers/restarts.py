"""Restarting a crashed Unity instance, within a rate limit."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from mlagents_envs.exception import UnityActionException, UnityException

from unity_sb3.unity.errors import UnityConfigurationError, UnityProcessError
from unity_sb3.wrappers.instances import _copy, _Instance, _kill_if_hung, _row, _StepResult, _str_or_none


class RestartMixin:
    """UnityVecEnv's restart policy: a crashed instance restarts within the rate limit, else the error."""

    # ------------------------------------------------------------------ crashes
    def _guard(self, inst: _Instance, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; return (not raise) a Unity crash so the caller can restart or report it."""
        try:
            return fn()
        except UnityActionException:
            raise
        except (UnityException, TimeoutError, ConnectionError, EOFError) as exc:
            return exc

    def _crash_error(self, inst: _Instance, exc: BaseException, detail: str) -> UnityProcessError:
        exit_code = getattr(exc, "exit_code", None)
        process = getattr(inst.env, "process", None)
        if exit_code is None and process is not None:
            exit_code = process.poll()
        error = UnityProcessError(
            inst.worker_id,
            detail=f"{detail}: {type(exc).__name__}: {exc}",
            exit_code=exit_code,
            log_path=getattr(exc, "log_path", None) or _str_or_none(getattr(inst.env, "log_path", None)),
        )
        error.__cause__ = exc
        return error

    def _restart_or_raise(self, inst: _Instance, exc: BaseException) -> _StepResult:
        if not self.restart_on_crash:
            raise self._crash_error(
                inst,
                exc,
                "crashed or stopped answering (pass restart_on_crash=True to re-open it automatically)",
            )
        last = exc
        _kill_if_hung(inst.env, exc)
        while self.max_restarts < 0 or inst.restarts < self.max_restarts:
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
                terminal = {local: _row(self._obs_buf, inst.start + local) for local in range(inst.n)}
                terminal = {k: _copy(v) for k, v in terminal.items()}
                self._reset_instance(inst)
            except (UnityException, TimeoutError, ConnectionError, EOFError) as again:
                if isinstance(again, UnityConfigurationError):
                    raise
                last = again
                _kill_if_hung(inst.env, again)
                continue
            n = inst.n
            limit = "no limit" if self.max_restarts < 0 else f"at most {self.max_restarts}"
            warnings.warn(
                f"UnityVecEnv: Unity worker {inst.worker_id} crashed ({type(exc).__name__}: {exc}); "
                f"restarted it ({inst.restarts} of {limit})",
                stacklevel=3,
            )
            return _StepResult(
                np.zeros(n, np.float32),
                np.zeros(n, np.float32),
                np.ones(n, bool),
                np.ones(n, bool),
                terminal,
                restarted=True,
            )
        raise self._crash_error(inst, last, f"crashed again after {self.max_restarts} restarts")

    def _rate_limited(self, inst: _Instance) -> str | None:
        """Why the next restart of ``inst`` is refused by the rate limit, or ``None``."""
        if self.restarts_rate_limit_n < 0:
            return None
        cutoff = time.monotonic() - self.restarts_rate_limit_period_s
        inst.restart_times = [t for t in inst.restart_times if t > cutoff]
        if len(inst.restart_times) < self.restarts_rate_limit_n:
            return None
        return (
            f"crashed again after {len(inst.restart_times)} restart(s) within "
            f"{self.restarts_rate_limit_period_s:g} s (restarts_rate_limit_n={self.restarts_rate_limit_n}, "
            f"restarts_rate_limit_period_s={self.restarts_rate_limit_period_s:g}); a scene that crashes this "
            "often needs fixing (see its log), or raise the limits"
        )

    @property
    def restart_counts(self) -> list[int]:
        """How many times each Unity instance was restarted (one entry per instance)."""
        return [inst.restarts for inst in self._instances]
