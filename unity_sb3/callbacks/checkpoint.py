"""SB3 callbacks used by the ``unity-sb3`` command (and usable from Python).

- :class:`LiveProgressCallback`: a progress bar with a live mean reward / episode length.
- :class:`AtomicCheckpointCallback`: periodic checkpoints written atomically, keep-last-N.
- :class:`SummaryCallback`: ML-Agents' ``summary_freq`` summary line and TensorBoard statistics.
"""

from __future__ import annotations

import json
import os
import re
import signal
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

CHECKPOINT_PATTERN = re.compile(r"^checkpoint_(\d+)_steps\.zip$")
#: attribute a saved replay buffer carries: the model's ``num_timesteps`` when it was saved
REPLAY_BUFFER_STEP = "unity_sb3_num_timesteps"


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive inside the block act when it ends (main thread only).

    An interrupt raised inside a library's file writer does not always surface as one: torch's zip
    writer turns it into a ``RuntimeError`` on its way out, so a Ctrl-C (or the command's SIGTERM)
    during a periodic checkpoint ended the run as a crash instead of with the Ctrl-C checkpoint. Held
    until the write is done, each signal is raised again, once, for the handler it was meant for.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    previous = {s: handler for s, handler in previous.items() if handler is not None}  # not set from Python
    received: list[int] = []
    for s in previous:
        signal.signal(s, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(received):
            signal.raise_signal(s)


@contextmanager
def _atomic_target(path: Path, suffix: str) -> Iterator[str]:
    """A temporary file beside ``path`` for the block to write; moved over ``path`` with
    ``os.replace`` (atomic on POSIX and Windows) when the block succeeds, removed in any case.
    Interrupts wait for the write (:func:`interrupts_deferred`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        with interrupts_deferred():
            yield tmp
            os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_atomic(model: BaseAlgorithm, path: str | Path) -> Path:
    """Save ``model`` to ``path`` so that a crash mid-write never replaces a good file.

    :param model: any SB3 algorithm.
    :param path: target file; ``.zip`` is appended when missing (as SB3 does).
    :return: the final path.
    """
    path = Path(path)
    if path.suffix != ".zip":
        path = path.with_name(path.name + ".zip")
    with _atomic_target(path, ".zip.tmp") as tmp:
        model.save(tmp)
    return path


def save_replay_buffer_atomic(model: OffPolicyAlgorithm, path: str | Path) -> Path:
    """Atomic counterpart of ``model.save_replay_buffer`` (a pickle file).

    The buffer is tagged with the model's ``num_timesteps`` (attribute :data:`REPLAY_BUFFER_STEP`)
    so that a resume can tell whether it belongs to the model it starts from.
    """
    path = Path(path)
    setattr(model.replay_buffer, REPLAY_BUFFER_STEP, int(model.num_timesteps))
    # the temporary name has a suffix, so SB3 writes to it as it is (it appends .pkl only to bare names)
    with _atomic_target(path, ".pkl.tmp") as tmp:
        model.save_replay_buffer(tmp)
    return path


def write_json_atomic(data: Any, path: str | Path) -> Path:
    """Write ``data`` as JSON to ``path`` so that a crash mid-write never replaces a good file."""
    path = Path(path)
    with _atomic_target(path, ".json.tmp") as tmp:
        Path(tmp).write_text(json.dumps(data, indent=1))
    return path


def is_loadable_zip(path: str | Path) -> bool:
    """Whether ``path`` is a complete zip archive (a cheap check before ``load``)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None and "data" in archive.namelist()
    except (OSError, zipfile.BadZipFile):
        return False


def read_model_timesteps(path: str | Path) -> int:
    """Read a saved SB3 model completely (archive, data, every tensor) and return its step count.

    A cheap archive check misses a file whose parts are complete but unreadable; this reads
    everything ``load`` reads, without building the model or needing the environment.

    :param path: a ``.zip`` written by ``model.save``.
    :return: the model's ``num_timesteps``.
    :raises ValueError: the file is missing, truncated or not an SB3 model; the message says how.
    """
    from stable_baselines3.common.save_util import load_from_zip_file

    try:
        data, _params, _variables = load_from_zip_file(path, device="cpu", print_system_info=False)
    except Exception as error:
        raise ValueError(f"{type(error).__name__}: {error}") from error
    if not isinstance(data, dict) or "num_timesteps" not in data:
        raise ValueError("not a Stable-Baselines3 model (its data has no num_timesteps)")
    return int(data["num_timesteps"])


def list_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """Checkpoints in ``directory`` as ``(timesteps, path)``, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        match = CHECKPOINT_PATTERN.match(entry.name)
        if match:
            found.append((int(match.group(1)), entry))
    return sorted(found)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest checkpoint in ``directory`` that is a complete archive, or ``None``."""
    for _, path in reversed(list_checkpoints(directory)):
        if is_loadable_zip(path):
            return path
    return None


class AtomicCheckpointCallback(BaseCallback):
    """Save a checkpoint every ``save_freq`` environment steps (summed over all slots).

    Files are ``checkpoint_<timesteps>_steps.zip``, written atomically; only the newest
    ``keep_last`` are kept, as ML-Agents' ``keep_checkpoints`` (0 keeps them all); files that
    belong to a checkpoint (``checkpoint_<timesteps>_steps.<anything>``, e.g. the curriculum
    state ``on_save`` writes) go with it. For off-policy algorithms the replay buffer is saved next
    to the newest checkpoint when ``save_replay_buffer`` is set (as ML-Agents'
    ``save_replay_buffer``).

    :param save_freq: environment steps (``model.num_timesteps``) between checkpoints.
    :param directory: where checkpoints go.
    :param keep_last: how many checkpoints to keep (>= 1), or 0 to keep every one.
    :param save_replay_buffer: also save the replay buffer of off-policy algorithms.
    :param on_save: called with the checkpoint's path after each save (periodic or ``save_now``),
        e.g. to write state that must match the checkpoint.
    """

    def __init__(
        self,
        save_freq: int,
        directory: str | Path,
        keep_last: int = 5,
        save_replay_buffer: bool = False,
        on_save: Callable[[Path], None] | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(verbose)
        if save_freq <= 0:
            raise ValueError(f"save_freq must be positive, got {save_freq}")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise ValueError(
                f"keep_last must be a whole number >= 0 (0 keeps every checkpoint), got {keep_last!r}"
            )
        self.save_freq = save_freq
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.save_replay_buffer = save_replay_buffer
        self.on_save = on_save
        self._next_save = save_freq

    def _on_training_start(self) -> None:
        self._next_save = (self.model.num_timesteps // self.save_freq + 1) * self.save_freq

    def _on_step(self) -> bool:
        if self.model.num_timesteps >= self._next_save:
            self.save_now()
            self._next_save = (self.model.num_timesteps // self.save_freq + 1) * self.save_freq
        return True

    def save_now(self) -> Path:
        """Write a checkpoint for the current timestep and prune old ones."""
        path = save_atomic(self.model, self.directory / f"checkpoint_{self.model.num_timesteps}_steps.zip")
        if self.save_replay_buffer and isinstance(self.model, OffPolicyAlgorithm):
            save_replay_buffer_atomic(self.model, self.directory / "replay_buffer.pkl")
        if self.keep_last > 0:
            for _, old in list_checkpoints(self.directory)[: -self.keep_last]:
                for companion in old.parent.glob(f"{old.stem}.*"):  # the .zip and its state files
                    companion.unlink(missing_ok=True)
        if self.on_save is not None:
            self.on_save(path)
        if self.verbose:
            print(f"Saved checkpoint {path}")
        return path


class SummaryCallback(BaseCallback):
    """ML-Agents' periodic training summary, every ``summary_freq`` steps (its ``summary_freq``).

    At each multiple of ``summary_freq`` (``model.num_timesteps``, summed over all slots, as
    ML-Agents counts a behavior's steps) it prints the line ``mlagents-learn`` prints::

        3DBall. Step: 12000. Time Elapsed: 35.120 s. Mean Reward: 1.234. Std of Reward: 0.567. Training.

    over the episodes finished since the previous summary, and writes their mean reward and
    length to TensorBoard under ML-Agents' tags (``Environment/Cumulative Reward``,
    ``Environment/Episode Length``) when the model logs to TensorBoard. SB3's own logging
    (once per rollout, or every ``log_interval`` episodes) is unchanged.

    :param summary_freq: steps between summaries (> 0).
    :param name: what the line starts with (ML-Agents prints the behavior name).
    :param elo: the self-play ELO of the period, ``None`` when no game ended (e.g.
        :meth:`~unity_sb3.callbacks.self_play.SelfPlayCallback.summary_elo`); ML-Agents then ends
        the line with ``ELO: 1234.567``.
    """

    def __init__(
        self,
        summary_freq: int,
        name: str = "",
        verbose: int = 0,
        elo: Callable[[], float | None] | None = None,
    ) -> None:
        super().__init__(verbose)
        if isinstance(summary_freq, bool) or not isinstance(summary_freq, int) or summary_freq <= 0:
            raise ValueError(f"summary_freq must be a whole number of steps > 0, got {summary_freq!r}")
        self.summary_freq = summary_freq
        self.name = name
        self.elo = elo
        self.rewards: list[float] = []
        self.lengths: list[int] = []
        self._next = summary_freq
        self._started = time.monotonic()

    def _on_training_start(self) -> None:
        self._next = (self.model.num_timesteps // self.summary_freq + 1) * self.summary_freq
        self._started = time.monotonic()

    def _on_step(self) -> bool:
        for info in self.locals.get("infos", ()):
            episode = info.get("episode") if isinstance(info, dict) else None
            if episode is not None:
                self.rewards.append(float(episode["r"]))
                self.lengths.append(int(episode["l"]))
        if self.model.num_timesteps >= self._next:
            self.write_summary(self._next)
            self._next = (self.model.num_timesteps // self.summary_freq + 1) * self.summary_freq
        return True

    def summary_line(self, step: int) -> str:
        """The summary of the episodes collected so far, worded as ``mlagents-learn`` words it."""
        parts = [self.name] if self.name else []
        parts += [f"Step: {step}", f"Time Elapsed: {time.monotonic() - self._started:0.3f} s"]
        elo = self.elo() if self.elo is not None else None
        if self.rewards:
            parts += [
                f"Mean Reward: {np.mean(self.rewards):0.3f}",
                f"Std of Reward: {np.std(self.rewards):0.3f}",
            ]
        else:
            parts.append("No episode was completed since last summary")
            elo = None  # ML-Agents shows the ELO only beside a mean reward
        tail = ["Training"] + ([f"ELO: {elo:0.3f}"] if elo is not None else [])
        return ". ".join([*parts, *tail]) + "."

    def write_summary(self, step: int) -> None:
        """Print the summary line, write the TensorBoard statistics, and start a new window."""
        from stable_baselines3.common.logger import TensorBoardOutputFormat
        from tqdm.auto import tqdm

        tqdm.write(self.summary_line(step))  # keeps a live progress bar intact
        if self.rewards:
            for output in self.logger.output_formats:
                if isinstance(output, TensorBoardOutputFormat):
                    output.writer.add_scalar("Environment/Cumulative Reward", np.mean(self.rewards), step)
                    output.writer.add_scalar("Environment/Episode Length", np.mean(self.lengths), step)
                    output.writer.flush()
        self.rewards.clear()
        self.lengths.clear()
