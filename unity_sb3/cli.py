"""The ``unity-sb3`` command.

``unity-sb3 train`` with no arguments trains PPO on the embedded Ball3D scene through the
stand-in Unity player (the same gRPC path a Unity build uses) and writes everything into
``results/<run-id>/``. ``unity-sb3 --help`` lists the other subcommands.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def _checked(key: str, value: int | float) -> int | float:
    """``value`` through the same check as the config file's ``key`` (unity_sb3.run.check_run_setting)."""
    from unity_sb3.run import check_run_setting

    try:
        return check_run_setting(key, value, "the value")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _setting(key: str) -> Callable[[str], int]:
    """An argparse type for the whole-number run setting ``key`` (checked as in the config file)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        return _checked(key, value)

    parse.__name__ = key
    return parse


def _restart_limit(text: str) -> int:
    """A restart count: a whole number >= 0, or -1 for no limit (ML-Agents' convention)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (-1 for no limit), got {text!r}") from None
    return _checked("max_restarts", value)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    return _checked("restarts_rate_limit_period_s", value)


#: mlagents-learn's engine-settings flags: flag, type, what it sets
ENGINE_FLAGS: tuple[tuple[str, type, str], ...] = (
    ("--width", int, "window width in pixels"),
    ("--height", int, "window height in pixels"),
    ("--quality-level", int, "quality settings index"),
    ("--target-frame-rate", int, "frames per second Unity aims at (-1: as fast as it can)"),
    ("--capture-frame-rate", int, "fixed game time between frames, 1/N s (0: off)"),
)


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train an agent (default: PPO on the embedded Ball3D scene)")
    p.add_argument(
        "--env",
        default=None,
        help="embedded scene name, a Unity build path, or 'editor' (default: Ball3D; with --resume, the run's)",
    )
    p.add_argument(
        "--algo",
        default=None,
        help=(
            "ppo, sac, poca, a2c, td3, ddpg, dqn, maskable_ppo, recurrent_ppo (sb3-contrib),"
            " ppo_memory / poca_memory (with ML-Agents' memory), tqc, trpo"
            " (default: ppo; with --resume, the run's)"
        ),
    )
    p.add_argument("--config", help="hyperparameters: an RL Zoo style YAML or an ML-Agents trainer YAML")
    p.add_argument(
        "trainer_config",
        nargs="?",
        default=None,
        metavar="CONFIG",
        help="the same as --config, where mlagents-learn takes its trainer YAML",
    )
    p.add_argument("--behavior", help="behavior name (when the scene has several)")
    p.add_argument(
        "--demo-path",
        help="a .demo file or folder that replaces every demo_path of the ML-Agents YAML (GAIL, behavioral_cloning)",
    )
    p.add_argument("--n-timesteps", type=int, help="agent-steps to train for (overrides the config)")
    p.add_argument("--seed", type=int, default=None, help="(default: 0; with --resume, the run's)")
    p.add_argument(
        "--num-envs",
        type=int,
        default=None,
        help="Unity instances to run in parallel (default: an ML-Agents config's env_settings.num_envs, else 1)",
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=None,
        help="Unity time scale, as mlagents-learn (default: 20; with --resume, the run's)",
    )
    p.add_argument(
        "--no-graphics", action="store_true", default=None, help="run Unity builds without rendering"
    )
    p.add_argument(
        "--no-graphics-monitor",
        action="store_true",
        default=None,
        help="worker 0 with graphics, the other instances without (as mlagents-learn)",
    )
    for flag, kind, what in ENGINE_FLAGS:
        p.add_argument(
            flag, type=kind, default=None, help=f"{what} (Unity's engine settings, as mlagents-learn)"
        )
    p.add_argument("--timeout-wait", type=float, default=None, help="seconds to wait for Unity (default 60)")
    p.add_argument("--run-id", default=None, help="name of the results folder (default: <env>_<algo>)")
    p.add_argument("--results-dir", default="results")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue from the run's newest checkpoint, with the run's own settings (config.yaml)",
    )
    p.add_argument("--force", action="store_true", help="overwrite an existing run folder")
    p.add_argument(
        "--initialize-from",
        default=None,
        metavar="RUN",
        help="start from another run's weights (and normalizer statistics), at step 0 with this run's settings: "
        "a run id under --results-dir, a run or behavior folder, or a model .zip (mlagents-learn's --initialize-from)",
    )
    p.add_argument(
        "--transport",
        choices=["player", "inprocess"],
        default=None,
        help="embedded scenes: through the stand-in player over gRPC (default; with --resume, the run's) "
        "or in-process",
    )
    p.add_argument(
        "--checkpoint-every",
        type=_setting("checkpoint_every"),
        default=None,
        help="agent-steps between checkpoints (default: the config's checkpoint_interval, else 50000)",
    )
    p.add_argument(
        "--keep-checkpoints",
        type=_setting("keep_checkpoints"),
        default=None,
        help="how many checkpoints to keep, 0 for all (default: the config's keep_checkpoints, else 5)",
    )
    p.add_argument(
        "--summary-freq",
        type=_setting("summary_freq"),
        default=None,
        help="print an ML-Agents-style summary (mean/std episode reward) every N agent-steps "
        "(default: the config's summary_freq, else none)",
    )
    p.add_argument(
        "--save-replay-buffer",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="off-policy algorithms: save the replay buffer with each checkpoint (checkpoints/"
        "replay_buffer.pkl) so --resume continues with it; an error for on-policy algorithms "
        "(default: the config's save_replay_buffer, else off)",
    )
    restarts = p.add_argument_group(
        "crash restarts", "as mlagents-learn; these override an ML-Agents config's env_settings"
    )
    restarts.add_argument(
        "--restart-on-crash",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="re-open a Unity instance that crashes or stops answering (default: off, unless the "
        "config or one of the limits below is given and the lifetime limit is not 0)",
    )
    restarts.add_argument(
        "--max-restarts",
        type=_restart_limit,
        default=None,
        metavar="N",
        help="restarts per Unity instance over its lifetime (ML-Agents' max_lifetime_restarts; "
        "-1: no limit; default 10)",
    )
    restarts.add_argument(
        "--restarts-rate-limit-n",
        type=_restart_limit,
        default=None,
        metavar="N",
        help="restarts per instance within --restarts-rate-limit-period-s (-1: no rate limit; default 1)",
    )
    restarts.add_argument(
        "--restarts-rate-limit-period-s",
        type=_positive_seconds,
        default=None,
        metavar="SECONDS",
        help="the window of --restarts-rate-limit-n (default 60)",
    )
    p.add_argument(
        "--num-areas",
        type=int,
        default=None,
        help="training areas per Unity instance (mlagents-learn's --num-areas; Unity's TrainingAreaReplicator); "
        "an embedded scene opens with num_agents times as many",
    )
    p.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="port of Unity worker 0 (builds; default 5005, as mlagents-learn); the instances take the next ones",
    )
    p.add_argument(
        "--device", "--torch-device", dest="device", default="auto", help="torch device (default: auto)"
    )
    p.add_argument(
        "--env-args",
        nargs=argparse.REMAINDER,
        default=None,
        help="everything after it goes to the Unity build's command line (as mlagents-learn's --env-args); "
        "give it last",
    )
    p.add_argument("--num-threads", type=int, default=1, help="torch CPU threads (0: torch's default)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("-v", "--verbose", type=int, default=0)


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a saved model")
    p.add_argument(
        "model",
        help="a saved model .zip, a run's behavior folder, or an ONNX model in Unity's format (Unity's own "
        "or exported; run as Unity's inference runs it, with --env)",
    )
    p.add_argument(
        "--env", default=None, help="scene / build (default: the one the run used; required for .onnx)"
    )
    p.add_argument("--algo", default=None, help="algorithm (default: the one the run used)")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--transport", choices=["player", "inprocess"], default="inprocess")
    p.add_argument("--stochastic", action="store_true", help="sample actions instead of the mode")
    p.add_argument("--gif", help="write a GIF of the first visual observation of slot 0 here")
    p.add_argument(
        "--opponent",
        default=None,
        help="competitive scenes: play games against 'random', 'expert' (the scene's scripted player), "
        "another model (.zip, checkpoint, behavior folder or .onnx) or a self-play snapshot (STATE.selfplay.pt#K) "
        "and report wins, draws, losses and the win rate",
    )
    p.add_argument(
        "--team", type=int, default=None, help="with --opponent: the model's team (default: its first)"
    )


def _add_record(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("record", help="record demonstrations as a Unity .demo file (for GAIL and BC)")
    p.add_argument(
        "player",
        help="'expert' (the embedded scene's scripted player), 'random', an ONNX model in Unity's format, or a "
        "trained model (.zip, checkpoint or behavior folder)",
    )
    p.add_argument("--env", required=True, help="embedded scene name, a Unity build path, or 'editor'")
    p.add_argument("--output", required=True, help="the .demo file to write (written whole, or not at all)")
    p.add_argument("--episodes", type=int, default=None, help="complete agent episodes to record")
    p.add_argument("--steps", type=int, default=None, help="agent steps to record (Unity's NumStepsToRecord)")
    p.add_argument("--behavior", default=None, help="the behavior to record (when the scene has several)")
    p.add_argument("--name", default=None, help="the demonstration's name in the file (default: the file's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--transport", choices=["player", "inprocess"], default="inprocess")
    p.add_argument(
        "--stochastic", action="store_true", help="models sample their actions instead of the mode"
    )


def _add_scenes(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("scenes", help="list the embedded scenes and their behaviors")


def _add_demo_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo-info", help="summarise a Unity .demo file")
    p.add_argument("path", nargs="+")


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="write a saved model as an ONNX file for Unity's inference engine")
    p.add_argument("model", help="path to a saved model .zip (or a run folder)")
    p.add_argument("--algo", default=None, help="algorithm (default: the one the run used)")
    p.add_argument("--output", default=None, help="ONNX file to write (default: the model path with .onnx)")
    p.add_argument("--env", default=None, help="embedded scene whose behavior spec to export for")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="unity-sb3",
        description="Train Unity ML-Agents scenes with Stable-Baselines3.",
    )
    sub = parser.add_subparsers(dest="command")
    for add in (_add_train, _add_eval, _add_record, _add_scenes, _add_demo_info, _add_export):
        add(sub)
    return parser


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's stop, ``kill``) ends training as Ctrl-C does: a checkpoint, then exit 0."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _reported(command: str, errors: tuple[type[BaseException], ...], run: Callable[[], int]) -> int:
    """``run()``, or exit code 2 with ``unity-sb3 COMMAND: error: ...`` for the ``errors`` that say what
    was wrong with the input and what to do (no traceback)."""
    try:
        return run()
    except errors as error:
        print(f"unity-sb3 {command}: error: {error}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``unity-sb3`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        argv = ["train"]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "train":
        if args.trainer_config is not None:
            if args.config is not None and args.config != args.trainer_config:
                parser.error(
                    f"two trainer configs: {args.trainer_config} and --config {args.config}; give one"
                )
            args.config = args.trainer_config
        from unity_sb3.run_behaviors import train_from_args  # several behaviors / self-play, else run.py
        from unity_sb3.run_state import RunStartError

        with _sigterm_as_interrupt():
            return _reported("train", (RunStartError,), lambda: train_from_args(args))
    # the model, scene or file given is wrong: said without a traceback
    from unity_sb3.unity.errors import UnityConfigurationError

    given_wrong = (UnityConfigurationError, FileNotFoundError)
    if args.command == "eval":
        from unity_sb3.run_eval import evaluate_from_args, evaluate_matches_from_args

        evaluate = evaluate_matches_from_args if args.opponent is not None else evaluate_from_args
        return _reported("eval", given_wrong, lambda: evaluate(args))
    if args.command == "record":
        from unity_sb3.run_record import record_from_args

        return _reported("record", given_wrong, lambda: record_from_args(args))
    if args.command == "scenes":
        from unity_sb3.scenes import describe_scene, list_scenes

        for name in list_scenes():
            print(describe_scene(name))
            print()
        return 0
    if args.command == "demo-info":
        from unity_sb3.demos.reader import describe_demo

        for path in args.path:
            print(describe_demo(path))
        return 0
    if args.command == "export":
        from unity_sb3.export import export_from_args

        return export_from_args(args)
    build_parser().print_help()
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
