"""``unity-sb3 export``: a saved model (or run folder) -> an ONNX file for Unity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlagents_envs.base_env import BehaviorSpec

from unity_sb3.export.runtime import inspect_onnx
from unity_sb3.export.writer import to_onnx

#: the ONNX file a training run writes beside its ``model.zip``
ONNX_FILE = "model.onnx"


def export_beside(
    model: Any, folder: Path, behavior_spec: BehaviorSpec | None, vec_normalize: Any, name: str
) -> Path | None:
    """Write ``folder/model.onnx`` at the end of a training run, as mlagents-learn writes its ``.onnx``.

    :param model: the trained model.
    :param folder: the run's (or behavior's) folder.
    :param behavior_spec: the spec of the behavior the model was trained on (``None``: rebuilt from the
        model's spaces).
    :param vec_normalize: the run's ``VecNormalize`` (statistics baked in), or ``None``.
    :param name: the run or behavior, for the warning.
    :return: the file, or ``None`` (with a warning) when the export does not support the model: the
        trained ``model.zip`` is what must not be lost.
    """
    import warnings

    path = folder / ONNX_FILE
    try:
        return to_onnx(model, path, behavior_spec=behavior_spec, vec_normalize=vec_normalize)
    except Exception as error:  # an unsupported algorithm or policy must not lose the trained model
        path.unlink(missing_ok=True)  # an earlier segment's export no longer matches model.zip
        warnings.warn(
            f"{name}: no ONNX export ({type(error).__name__}: {error}); model.zip is saved", stacklevel=2
        )
        return None


def export_from_args(args: Any) -> int:
    """``unity-sb3 export MODEL_ZIP [--algo ALGO] [--output PATH] [--env SCENE]``."""
    import yaml

    from unity_sb3.algorithms.registry import algorithm_class

    model_path = Path(args.model)
    if model_path.is_dir():
        from unity_sb3.run_state import behaviors_of_run

        behaviors = behaviors_of_run(model_path)
        if behaviors:
            raise SystemExit(
                f"unity-sb3 export: {model_path} is a run of several behaviors ({', '.join(behaviors)}); each "
                f"behavior's folder holds its model.onnx already, or export one: unity-sb3 export {model_path}/<behavior>"
            )
        model_path = model_path / "model.zip"
    if not model_path.is_file():
        raise SystemExit(f"unity-sb3 export: no model at {model_path}")
    run_dir = model_path.parent
    config: dict[str, Any] = {}
    for folder in (run_dir, run_dir.parent):  # model.zip, or checkpoints/<name>.zip
        if (folder / "config.yaml").is_file():
            config = yaml.safe_load((folder / "config.yaml").read_text()) or {}
            run_dir = folder
            break
    algo = args.algo or config.get("algo")
    if not algo:
        raise SystemExit("unity-sb3 export: cannot tell the algorithm; pass --algo (e.g. --algo ppo)")
    model = algorithm_class(algo).load(str(model_path), device="cpu")
    spec = None
    scene = args.env or config.get("env")
    if scene:
        spec = _scene_spec(str(scene), config.get("behavior"), explicit=bool(args.env))
    stats = run_dir / "vecnormalize.pkl"
    vec_normalize = stats if config.get("normalize") and stats.is_file() else None
    output = Path(args.output) if args.output else model_path.with_suffix(".onnx")
    try:
        import onnxruntime  # noqa: F401

        verify = True
    except ImportError:  # pragma: no cover - depends on the install
        verify = False
    to_onnx(model, output, behavior_spec=spec, vec_normalize=vec_normalize, verify=verify)
    info = inspect_onnx(output)
    print(f"wrote {output}" + (" (checked against model.predict with onnxruntime)" if verify else ""))
    print("  inputs:  " + ", ".join(f"{k} {list(v)}" for k, v in info.inputs.items()))
    print("  outputs: " + ", ".join(info.outputs))
    print(
        f"  version {info.version}, memory_size {info.memory_size}, continuous {info.continuous_size}, "
        f"discrete branches {list(info.discrete_branches)}"
    )
    return 0


def _scene_spec(scene: str, behavior: str | None, explicit: bool) -> BehaviorSpec | None:
    """The behavior spec of an embedded scene; None for a Unity build (unless named with --env)."""
    from unity_sb3.scenes import list_scenes, make_scene

    if scene.lower() not in {s.lower() for s in list_scenes()}:
        if explicit:
            raise SystemExit(
                f"unity-sb3 export: --env takes an embedded scene ({', '.join(list_scenes())}); for a Unity "
                "build leave it out and the spec is rebuilt from the model's spaces"
            )
        return None
    env = make_scene(scene)
    try:
        specs = dict(env.behavior_specs)
    finally:
        env.close()
    if behavior:
        matches = [k for k in specs if k == behavior or k.split("?")[0] == behavior.split("?")[0]]
        if not matches:
            raise SystemExit(
                f"unity-sb3 export: scene {scene} has no behavior {behavior!r}; it has {list(specs)}"
            )
        return specs[matches[0]]
    if len(specs) != 1:
        raise SystemExit(
            f"unity-sb3 export: scene {scene} has behaviors {list(specs)}; the run must name one"
        )
    return next(iter(specs.values()))
