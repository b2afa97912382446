"""ML-Agents trainer YAML: one behavior's trainer section -> SB3 constructor arguments."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unity_sb3 import validation
from unity_sb3.config.mlagents_schema import (
    BC_KEYS,
    CADENCE,
    CONDITIONING_TYPES,
    KEEP_CHECKPOINTS_DEFAULT,
    MEMORY_DEFAULTS,
    SCHEDULE_FLOORS,
    SCHEDULE_TYPES,
    SIGNAL_NAMES,
    TIME_HORIZON_DEFAULT,
    VIS_ENCODE_TYPES,
    Mapper,
    MLAgentsConfigError,
    check_keys,
    choice,
    number,
    short_text,
)


def map_reward_signals(m: Mapper, signals: Any, where: str) -> float:
    """Extrinsic gamma -> ``gamma``; other signals (or a non-unit strength) -> ``reward_signals=``."""
    if signals is None:
        signals = {"extrinsic": {"gamma": 0.99, "strength": 1.0}}
    if not isinstance(signals, Mapping) or not signals:
        raise MLAgentsConfigError(
            f"{where} must map signal names ({', '.join(SIGNAL_NAMES)}) to their settings."
        )
    check_keys(signals, SIGNAL_NAMES, where)
    extrinsic = signals.get("extrinsic") or {}
    gamma = number(extrinsic.get("gamma", 0.99), f"{where}.extrinsic.gamma", 0.0)
    m.row("reward_signals.extrinsic.gamma", gamma, f"gamma={gamma}")
    m.run.hyperparams["gamma"] = gamma
    plain = set(signals) == {"extrinsic"} and float(extrinsic.get("strength", 1.0)) == 1.0
    if plain:
        m.row(
            "reward_signals.extrinsic.strength",
            extrinsic.get("strength", 1.0),
            "reward as is",
            "plain SB3 update",
        )
        return gamma
    converted = {key: dict(value or {}) for key, value in signals.items()}
    if m.run.trainer_type == "poca":
        m.ignore(
            "reward_signals",
            ", ".join(s for s in signals if s != "extrinsic") or "extrinsic.strength",
            "POCA has no reward signals in unity-sb3 (only the extrinsic reward, at strength 1)",
        )
        return gamma
    m.run.hyperparams["reward_signals"] = converted
    for signal in converted:
        m.row(
            f"reward_signals.{signal}",
            short_text(converted[signal]),
            f"reward_signals[{signal!r}]",
            "one value head per signal",
        )
    return gamma


def _schedule(value: float, kind: str, schedule: str) -> float | str:
    if schedule == "constant":
        return value
    return f"lin_{value!r}_{SCHEDULE_FLOORS[kind]!r}"


def map_on_policy(m: Mapper, hyper: dict[str, Any], gamma: float, where: str) -> None:
    """PPO's and POCA's hyperparameters -> their SB3 arguments (``n_steps`` from ``buffer_size`` per slot).

    :param m: the mapper of the behavior
    :param hyper: the ``hyperparameters`` section, defaults filled in
    :param gamma: the extrinsic signal's discount (from :func:`map_reward_signals`)
    :param where: the behavior's place in the file, for messages
    """
    h = f"{where}.hyperparameters"
    out = m.run.hyperparams
    batch = number(hyper["batch_size"], f"{h}.batch_size", 1, integer=True)
    buffer = number(hyper["buffer_size"], f"{h}.buffer_size", 1, integer=True)
    if batch > buffer:
        raise MLAgentsConfigError(f"{h}: batch_size ({batch}) must not exceed buffer_size ({buffer}).")
    lr = number(hyper["learning_rate"], f"{h}.learning_rate", 0.0)
    lr_schedule = choice(hyper["learning_rate_schedule"], SCHEDULE_TYPES, f"{h}.learning_rate_schedule")
    beta_schedule = choice(hyper["beta_schedule"] or lr_schedule, SCHEDULE_TYPES, f"{h}.beta_schedule")
    eps_schedule = choice(hyper["epsilon_schedule"] or lr_schedule, SCHEDULE_TYPES, f"{h}.epsilon_schedule")
    beta = number(hyper["beta"], f"{h}.beta", 0.0)
    epsilon = number(hyper["epsilon"], f"{h}.epsilon", 0.0)
    lambd = number(hyper["lambd"], f"{h}.lambd", 0.0)
    epochs = number(hyper["num_epoch"], f"{h}.num_epoch", 1, integer=True)

    out["batch_size"] = batch
    m.row("hyperparameters.batch_size", batch, f"batch_size={batch}")
    out["mlagents_per_slot"] = {"buffer_size": buffer}
    m.row(
        "hyperparameters.buffer_size",
        buffer,
        "n_steps=ceil(buffer_size / n_slots)",
        "SB3's n_steps counts steps per slot (one slot = one agent); resolved when Unity is open",
    )
    m.row("hyperparameters.beta", beta, f"ent_coef={beta}")
    m.row("hyperparameters.epsilon", epsilon, f"clip_range={epsilon}")
    m.row("hyperparameters.lambd", lambd, f"gae_lambda={lambd}")
    m.row("hyperparameters.num_epoch", epochs, f"n_epochs={epochs}")
    out.update(gae_lambda=lambd, n_epochs=epochs)
    if m.run.trainer_type == "poca":
        # POCA implements ML-Agents' schedules itself: one `schedule` for lr, clip range and entropy.
        out.update(learning_rate=lr, clip_range=epsilon, ent_coef=beta, schedule=lr_schedule)
        m.row("hyperparameters.learning_rate", lr, f"learning_rate={lr}")
        m.row(
            "hyperparameters.learning_rate_schedule",
            lr_schedule,
            f"schedule={lr_schedule!r}",
            "POCA decays lr, clip and entropy with ML-Agents' floors",
        )
        for key, kind, sched, value, target in (
            ("epsilon_schedule", "epsilon", eps_schedule, epsilon, "clip_range"),
            ("beta_schedule", "beta", beta_schedule, beta, "ent_coef"),
        ):
            if sched != lr_schedule:
                out[target] = _schedule(value, kind, sched)
                m.row(f"hyperparameters.{key}", sched, f"{target}={out[target]!r}")
        out["max_grad_norm"] = None
        m.row("(ML-Agents has no gradient clipping)", None, "max_grad_norm=None")
        return
    out["learning_rate"] = _schedule(lr, "learning_rate", lr_schedule)
    m.row("hyperparameters.learning_rate", lr, f"learning_rate={out['learning_rate']!r}")
    m.row(
        "hyperparameters.learning_rate_schedule",
        lr_schedule,
        "linear -> lin_<start>_<floor> schedule" if lr_schedule == "linear" else "constant",
    )
    out["clip_range"] = _schedule(epsilon, "epsilon", eps_schedule)
    m.row("hyperparameters.epsilon_schedule", eps_schedule, f"clip_range={out['clip_range']!r}")
    out["ent_coef"] = _schedule(beta, "beta", beta_schedule)
    m.row(
        "hyperparameters.beta_schedule",
        beta_schedule if hyper["beta_schedule"] else f"{beta_schedule} (follows learning_rate_schedule)",
        f"ent_coef={out['ent_coef']!r}",
        "unity_sb3.PPO decays ent_coef over max_steps to ML-Agents' floor"
        if beta_schedule == "linear"
        else "",
    )
    m.row(
        "(ML-Agents has no gradient clipping)",
        None,
        "max_grad_norm=0.5",
        "SB3's default kept (docs/DECISIONS.md); set max_grad_norm in an RL Zoo YAML to change it",
    )


def map_sac(m: Mapper, hyper: dict[str, Any], gamma: float, where: str) -> None:
    """SAC's hyperparameters -> its SB3 arguments.

    :param m: the mapper of the behavior
    :param hyper: the ``hyperparameters`` section, defaults filled in
    :param gamma: the extrinsic signal's discount (from :func:`map_reward_signals`)
    :param where: the behavior's place in the file, for messages
    """
    h = f"{where}.hyperparameters"
    out = m.run.hyperparams
    batch = number(hyper["batch_size"], f"{h}.batch_size", 1, integer=True)
    buffer = number(hyper["buffer_size"], f"{h}.buffer_size", 1, integer=True)
    lr = number(hyper["learning_rate"], f"{h}.learning_rate", 0.0)
    lr_schedule = choice(hyper["learning_rate_schedule"], SCHEDULE_TYPES, f"{h}.learning_rate_schedule")
    init_steps = number(hyper["buffer_init_steps"], f"{h}.buffer_init_steps", 0, integer=True)
    tau = number(hyper["tau"], f"{h}.tau", 0.0)
    per_update = number(hyper["steps_per_update"], f"{h}.steps_per_update", 0.0)
    if per_update <= 0:
        raise MLAgentsConfigError(f"{h}.steps_per_update must be > 0, got {per_update}.")
    entcoef = number(hyper["init_entcoef"], f"{h}.init_entcoef", 0.0)
    out.update(batch_size=batch, buffer_size=buffer, learning_starts=init_steps, tau=tau)
    out["learning_rate"] = _schedule(lr, "learning_rate", lr_schedule)
    out["ent_coef"] = f"auto_{entcoef!r}"
    out["mlagents_per_slot"] = {"steps_per_update": per_update}
    m.row("hyperparameters.batch_size", batch, f"batch_size={batch}")
    m.row("hyperparameters.buffer_size", buffer, f"buffer_size={buffer}", "both count agent transitions")
    m.row("hyperparameters.learning_rate", lr, f"learning_rate={out['learning_rate']!r}")
    m.row(
        "hyperparameters.learning_rate_schedule",
        lr_schedule,
        "linear -> lin_<start>_<floor> schedule" if lr_schedule == "linear" else "constant",
    )
    m.row(
        "hyperparameters.buffer_init_steps",
        init_steps,
        f"learning_starts={init_steps}",
        "agent steps in both",
    )
    m.row("hyperparameters.tau", tau, f"tau={tau}")
    m.row(
        "hyperparameters.steps_per_update",
        per_update,
        "train_freq / gradient_steps",
        "n_slots agent steps per VecEnv step -> n_slots/steps_per_update gradient steps; resolved when Unity is open",
    )
    m.row(
        "hyperparameters.init_entcoef",
        entcoef,
        f"ent_coef={out['ent_coef']!r}",
        "learned, starting at init_entcoef",
    )
    save_buffer = validation.flag(hyper["save_replay_buffer"], f"{h}.save_replay_buffer", MLAgentsConfigError)
    m.run.save_replay_buffer = save_buffer
    m.row(
        "hyperparameters.save_replay_buffer",
        save_buffer,
        f"unity-sb3 train {'--save-replay-buffer' if save_buffer else '(no replay buffer file)'}",
        "checkpoints/replay_buffer.pkl beside each checkpoint, loaded by --resume" if save_buffer else "",
    )
    rs = hyper["reward_signal_steps_per_update"]
    if rs is not None and float(rs) != per_update:
        m.ignore(
            "hyperparameters.reward_signal_steps_per_update",
            rs,
            "reward signals are updated once per SAC gradient step (rate of steps_per_update)",
        )


def map_network(m: Mapper, network: dict[str, Any], where: str, shared_critic: bool = False) -> None:
    """Network settings -> ``policy_kwargs`` (and ``ppo_memory`` for ``memory``), ``normalize``,
    ``mlagents_network`` (goal conditioning, resolved against the env).

    ML-Agents' network body (``num_layers`` x ``hidden_units``, Swish) is SB3's ``net_arch`` (which
    ``unity_sb3.RecurrentPPO`` runs before its LSTM, as ML-Agents), except where it must be shared by
    actor and critic: then it moves into
    :class:`~unity_sb3.networks.extractors.UnityMultiInputExtractor` (``hidden_layers``) and
    ``net_arch`` is ``dict(pi=[], vf=[])``.
    """
    n = f"{where}.network_settings"
    units = number(network["hidden_units"], f"{n}.hidden_units", 1, integer=True)
    layers = number(network["num_layers"], f"{n}.num_layers", 0, integer=True)
    arch = [units] * layers
    vis = choice(network["vis_encode_type"], VIS_ENCODE_TYPES, f"{n}.vis_encode_type")
    memory = network["memory"]
    size = 0
    if memory is not None:
        check_keys(memory, tuple(MEMORY_DEFAULTS), f"{n}.memory")
        mem = {**MEMORY_DEFAULTS, **memory}
        size = number(mem["memory_size"], f"{n}.memory.memory_size", 2, integer=True)
        number(mem["sequence_length"], f"{n}.memory.sequence_length", 1, integer=True)
        if size % 2:
            raise MLAgentsConfigError(
                f"{n}.memory.memory_size must be even (LSTM hidden + cell state), got {size}."
            )
    trainer = m.run.trainer_type
    recurrent = memory is not None and trainer == "ppo"
    shared = shared_critic and trainer == "ppo"
    # ML-Agents' visual encoders end in a dense layer of hidden_units (ModelUtils.create_input_processors)
    extractor = {"encoder": repr(vis), "cnn_output_dim": repr(units)}
    policy: dict[str, str] = {}
    if shared:
        policy["net_arch"] = "dict(pi=[], vf=[])"
        extractor["hidden_layers"] = repr(arch)
    else:
        policy["net_arch"] = repr(arch)
    policy["activation_fn"] = "nn.SiLU"
    if trainer == "poca":
        policy.update(critic_net_arch=repr(arch), critic_embed_dim=repr(units))
    policy["features_extractor_class"] = "UnityMultiInputExtractor"
    policy["features_extractor_kwargs"] = "dict(" + ", ".join(f"{k}={v}" for k, v in extractor.items()) + ")"
    if shared:
        policy["share_features_extractor"] = "True"
    elif trainer == "ppo" and not recurrent:
        # ML-Agents' ValueNetwork has its own NetworkBody, observation encoders included
        policy["share_features_extractor"] = "False"
    if trainer == "ppo":
        # SB3's orthogonal initialisation would overwrite the encoders' own (ML-Agents' layers)
        policy["ortho_init"] = "False"
    if memory is not None and trainer in ("sac", "poca"):
        policy.update(memory_size=repr(size), sequence_length=repr(int(mem["sequence_length"])))
    m.run.hyperparams["policy_kwargs"] = "dict(" + ", ".join(f"{k}={v}" for k, v in policy.items()) + ")"
    body_note = (
        "one body shared by actor and critic (shared_critic)"
        if shared
        else "separate actor and critic networks, observation encoders included, as ML-Agents"
    )
    m.row(
        "network_settings.hidden_units/num_layers",
        f"{units} x {layers}",
        f"policy_kwargs net_arch={policy['net_arch']}"
        + (f", hidden_layers={arch}" if shared else "")
        + (" before the LSTM" if recurrent else ""),
        body_note,
    )
    m.row("(ML-Agents uses Swish)", None, "activation_fn=nn.SiLU")
    if trainer == "ppo":
        m.row(
            "(ML-Agents' initialisation)",
            None,
            "ortho_init=False",
            "the encoders keep ML-Agents' initialisation (SB3's orthogonal one would replace it)",
        )
    normalize = validation.flag(network["normalize"], f"{n}.normalize", MLAgentsConfigError)
    if normalize:
        m.run.normalize = {"norm_obs": True, "norm_reward": False}
        m.row(
            "network_settings.normalize",
            True,
            "VecNormalize(norm_obs=True, norm_reward=False)",
            "running mean/std of observations",
        )
    else:
        m.row("network_settings.normalize", False, "no VecNormalize")
    m.row(
        "network_settings.vis_encode_type",
        vis,
        f"UnityMultiInputExtractor(encoder={vis!r}, cnn_output_dim={units})",
        "ML-Agents' encoder for every image observation, ending in hidden_units features; vectors are "
        "concatenated as they are",
    )
    if shared_critic:
        if shared:
            m.row(
                "hyperparameters.shared_critic",
                True,
                "net_arch=dict(pi=[], vf=[]), share_features_extractor=True",
                "policy and value heads on one network body, as ML-Agents' SharedActorCritic"
                + (
                    "; the actor and the critic keep their own LSTM (ML-Agents shares one)"
                    if recurrent
                    else ""
                ),
            )
        else:
            m.ignore("hyperparameters.shared_critic", True, f"{trainer.upper()}'s critic is its own network")
    if memory is not None:
        _map_memory(m, memory, size, recurrent)
    # a goal-conditioned body belongs in the features extractor (its last layer is the conditioned one)
    # where each of actor and critic has an extractor of its own and the body is all that follows it
    # (PPO, and POCA's actor; with memory the LSTM then reads the extractor, as ML-Agents' reads its body)
    movable = (trainer == "ppo" and not shared) or trainer == "poca"
    _map_goal_conditioning(m, network, units, n, arch if movable else None, actor_only=trainer == "poca")
    if network["deterministic"]:
        m.ignore("network_settings.deterministic", True, "use deterministic=True when predicting/evaluating")


def _map_memory(m: Mapper, memory: Mapping[str, Any], size: int, recurrent: bool) -> None:
    """``network_settings.memory`` -> ``unity_sb3.RecurrentPPO`` (``ppo_memory``) or ``unity_sb3.SAC``'s Lstm policy (SAC).

    Reward signals, the BC term, ``beta_schedule`` and ``time_horizon`` stay as PPO maps them: the
    recurrent PPO takes them all."""
    mem = {**MEMORY_DEFAULTS, **memory}
    if m.run.trainer_type == "sac":
        m.row(
            "network_settings.memory.memory_size",
            size,
            f"MlpLstmPolicy / CnnLstmPolicy / MultiInputLstmPolicy, policy_kwargs memory_size={size}",
            "an LSTM of memory_size/2 units in the actor and each Q network; ML-Agents' body layers "
            "follow the LSTM (the Q networks take the action there)",
        )
        m.row(
            "network_settings.memory.sequence_length",
            mem["sequence_length"],
            f"policy_kwargs sequence_length={mem['sequence_length']}",
            "replay batches of batch_size // sequence_length sequences, each from its stored actor memory",
        )
        return
    if m.run.trainer_type == "poca":
        m.run.algo = "poca_memory"
        m.row(
            "network_settings.memory.memory_size",
            size,
            f"poca_memory (unity_sb3.RecurrentPOCA, ...LstmPolicy), policy_kwargs memory_size={size}",
            "an LSTM of memory_size/2 units between the shared actor's layers and its actions, and "
            "one in the centralised critic after its attention (V and baseline memories per agent)",
        )
        m.row(
            "network_settings.memory.sequence_length",
            mem["sequence_length"],
            f"policy_kwargs sequence_length={mem['sequence_length']}",
            "each agent's decisions cut into sequences, each unrolled from the actor and critic memories "
            "stored at its first step",
        )
        return
    if not recurrent:
        m.ignore(
            "network_settings.memory",
            short_text(memory),
            f"no recurrent {m.run.trainer_type.upper()} in unity-sb3; the policy has no memory",
        )
        return
    m.run.algo = "ppo_memory"
    m.run.hyperparams.update(memory_size=size, sequence_length=int(mem["sequence_length"]))
    m.row(
        "network_settings.memory.memory_size",
        size,
        f"ppo_memory (unity_sb3.RecurrentPPO, ...LstmPolicy), memory_size={size}",
        "ML-Agents' memory: the LSTM's hidden and cell state; actor and critic have their own LSTM",
    )
    m.row(
        "network_settings.memory.sequence_length",
        mem["sequence_length"],
        f"sequence_length={mem['sequence_length']}",
        "each agent's steps cut into sequences, each unrolled from the memory stored while acting",
    )


def _map_goal_conditioning(
    m: Mapper,
    network: Mapping[str, Any],
    units: int,
    n: str,
    body_layers: list[int] | None,
    actor_only: bool = False,
) -> None:
    """``goal_conditioning_type`` -> ``hyperparams["mlagents_network"]``, resolved when Unity is open.

    :param body_layers: ``net_arch`` when the body can move into the features extractor if there are
        goals (PPO, with or without memory, without a shared critic; POCA's actor), else ``None``.
    :param actor_only: only the actor is conditioned (POCA: ML-Agents' centralised critic is not).
    """
    given = [key for key in ("goal_conditioning_type", "conditioning_type") if network[key] != "hyper"]
    key = given[0] if given else "goal_conditioning_type"
    value = choice(network[key], CONDITIONING_TYPES, f"{n}.{key}")
    m.run.hyperparams["mlagents_network"] = {"goal_conditioning_type": value, "hidden_units": units}
    if value == "hyper" and body_layers is not None:
        m.run.hyperparams["mlagents_network"]["body_layers"] = list(body_layers)
    if value == "hyper" and actor_only:
        m.run.hyperparams["mlagents_network"]["actor_only"] = True
    if value == "hyper":
        target = (
            f"UnityMultiInputExtractor(goal_keys=<the scene's goal signals>, goal_hidden_dim={units}, "
            "goal_features=True, goal_conditioning='hypernetwork')"
        )
        note = (
            "goal-signal observations are encoded with the others and generate the weights of the body's last "
            "layer (ML-Agents' ConditionalEncoder and HyperNetwork); resolved when Unity is open"
            + (
                "; the actor's only: POCA's centralised critic encodes them as ordinary observations (as ML-Agents)"
                if actor_only
                else ""
            )
        )
    else:
        target = "goal signals concatenated with the other observations"
        note = "as ML-Agents' none"
    m.row(f"network_settings.{key}", value, target, note)


def map_behavioral_cloning(m: Mapper, bc: Any, where: str) -> None:
    """The ``behavioral_cloning`` section -> ``behavioral_cloning=`` (ignored, and said so, for POCA).

    :param m: the mapper of the behavior
    :param bc: the section, or ``None`` when the behavior has none
    :param where: the behavior's place in the file, for messages
    """
    if bc is None:
        return
    check_keys(bc, BC_KEYS, f"{where}.behavioral_cloning")
    if "demo_path" not in bc:
        raise MLAgentsConfigError(f"{where}.behavioral_cloning needs demo_path (a .demo file or folder).")
    if m.run.trainer_type == "poca":
        m.ignore(
            "behavioral_cloning",
            short_text(bc),
            "POCA has no BC term in unity-sb3; pretrain with unity_sb3.pretrain_bc",
        )
        return
    m.run.hyperparams["behavioral_cloning"] = dict(bc)
    m.row("behavioral_cloning", short_text(bc), "behavioral_cloning=", "same keys and meaning")


def map_trainer_misc(m: Mapper, settings: Mapping[str, Any]) -> None:
    """The behavior's other settings: ``max_steps``, ``time_horizon``, checkpoint and summary cadence,
    self-play, ``output_path``, and the settings unity-sb3 does not honour.

    :param m: the mapper of the behavior
    :param settings: the behavior's whole section
    """
    max_steps = number(settings.get("max_steps", 500_000), "max_steps", 1)
    m.run.n_timesteps = int(max_steps)
    m.row("max_steps", int(max_steps), f"n_timesteps={int(max_steps)}", "agent steps in both")
    _map_time_horizon(m, settings)
    for key, target, minimum, note in CADENCE:
        value = settings.get(key)
        if value is None:
            continue
        value = max(number(value, key, minimum, integer=True), 0)  # ML-Agents: <= 0 keeps all
        m.run.cadence[target] = int(value)
        m.row(key, int(value), f"unity-sb3 train {target}={int(value)}", note)
    _map_even_checkpoints(m, settings)
    _map_self_play(m, settings.get("self_play"))
    output = settings.get("output_path")
    if output == "default":  # what ML-Agents' config upgrade writes: the run's own results folder
        m.row("output_path", output, "results/<run-id>/", "the run folder (--results-dir, --run-id)")
    elif output is not None:
        m.ignore("output_path", output, "unity-sb3 train writes under --results-dir/--run-id; pass those")
    ignored = {
        "threaded": "SB3 collects and updates in one thread",
        "init_path": "give unity-sb3 train --initialize-from RUN (a unity-sb3 run: ML-Agents' .pt checkpoints do "
        "not load into SB3 models)",
    }
    for key, why in ignored.items():
        if key in settings and settings[key] is not None:
            if key == "threaded" and not settings[key]:
                continue
            m.ignore(key, settings[key], why)


def _map_even_checkpoints(m: Mapper, settings: Mapping[str, Any]) -> None:
    """``even_checkpoints``: ML-Agents then checkpoints every ``max_steps / keep_checkpoints`` steps
    (``TrainerSettings._set_checkpoint_interval``), whatever ``checkpoint_interval`` says."""
    even = settings.get("even_checkpoints")
    if even is None or not validation.flag(even, "even_checkpoints", MLAgentsConfigError):
        return
    keep = int(settings.get("keep_checkpoints", KEEP_CHECKPOINTS_DEFAULT))
    if keep <= 0:
        raise MLAgentsConfigError(
            f"even_checkpoints spreads keep_checkpoints checkpoints over max_steps; keep_checkpoints is {keep}. "
            "Give keep_checkpoints > 0, or drop even_checkpoints and set checkpoint_interval."
        )
    every = max(int(m.run.n_timesteps / keep), 1)
    m.run.cadence["checkpoint_every"] = every
    m.run.cadence["keep_checkpoints"] = keep
    m.row(
        "even_checkpoints",
        True,
        f"unity-sb3 train checkpoint_every={every} keep_checkpoints={keep}",
        "max_steps / keep_checkpoints, as ML-Agents; replaces checkpoint_interval",
    )


_SELF_PLAY_NOTES = {
    "save_steps": "learner steps (num_timesteps) between snapshots, as the ghost trainer",
    "team_change": "learner steps between learning-team changes (agents change hands at episode ends)",
    "swap_steps": "ghost decisions between opponent draws, as the ghost trainer",
    "window": "snapshots kept, as the ghost trainer",
    "play_against_latest_model_ratio": "probability of facing the latest policy at a draw",
    "initial_elo": "starting ELO; Self-play/ELO logged as ML-Agents does",
}


def _map_self_play(m: Mapper, section: Any) -> None:
    """``self_play`` -> :class:`~unity_sb3.selfplay.settings.SelfPlaySettings` (ML-Agents' ghost trainer)."""
    if section is None:
        return
    from unity_sb3.selfplay.settings import SelfPlayConfigError, SelfPlaySettings

    try:
        settings = SelfPlaySettings.from_mapping(section, where=f"behaviors.{m.run.behavior}.self_play")
    except SelfPlayConfigError as error:
        raise MLAgentsConfigError(str(error)) from None
    m.run.self_play = settings
    for key, value in settings.as_dict().items():
        default = "" if key in section else " (ML-Agents' default)"
        m.row(f"self_play.{key}", value, f"SelfPlaySettings.{key}={value}", _SELF_PLAY_NOTES[key] + default)


def _map_time_horizon(m: Mapper, settings: Mapping[str, Any]) -> None:
    """``time_horizon`` (ML-Agents' default 64): where a trajectory is cut and bootstrapped."""
    given = "time_horizon" in settings
    horizon = int(number(settings.get("time_horizon", TIME_HORIZON_DEFAULT), "time_horizon", 1, integer=True))
    value = horizon if given else f"{horizon} (ML-Agents' default)"
    if m.run.algo == "sac":
        m.row(
            "time_horizon",
            value,
            "(no setting needed)",
            "SAC learns from whole transitions in both; ML-Agents only hands them over in chunks",
        )
        return
    m.run.hyperparams["time_horizon"] = horizon
    what = "PPO ends a GAE chunk" if m.run.algo.startswith("ppo") else "POCA ends its TD(lambda) returns"
    m.row(
        "time_horizon",
        value,
        f"time_horizon={horizon}",
        f"unity_sb3.{what} every time_horizon steps of an agent and bootstraps there",
    )
