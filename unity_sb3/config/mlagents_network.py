"""ML-Agents' network choices that depend on the scene, resolved once the environment is open.

An ML-Agents trainer config says *how* goal signals condition the network
(``network_settings.goal_conditioning_type``: ``hyper``, the default, or ``none``) but not
*which* observations are goals: Unity marks them in the behavior spec
(``ObservationType.GOAL_SIGNAL``, e.g. GridWorld's ``GoalSensor``). The mapping therefore leaves
``hyperparams["mlagents_network"]`` and :func:`resolve_mlagents_network` reads the open env:

- ``hyper`` and goal signals under their own keys of a ``Dict`` observation space ->
  :class:`~unity_sb3.networks.extractors.UnityMultiInputExtractor` with ``goal_keys``,
  ``goal_features=True`` and ``goal_conditioning="hypernetwork"`` (the goals are encoded with the
  other observations, and their encodings generate the weights of the network body's last layer, as
  ML-Agents' ``ConditionalEncoder``). For PPO the body moves from ``net_arch`` into the extractor
  (``hidden_layers``; the actor's and the critic's each have one, and with memory their LSTMs read
  them) so that this is exactly ML-Agents' body; a shared critic's body is there already. For POCA
  only the actor is conditioned, as ML-Agents' (a ``SimpleActor`` over a ``NetworkBody``): its body
  moves into the actor's extractor (``net_arch=[]``; with memory its LSTM reads it), while the
  centralised critic (ML-Agents' ``MultiAgentNetworkBody``, no conditioning) keeps the plain
  extractor settings (``critic_features_extractor_kwargs``: goals encoded and concatenated with the
  other observations, then attended over). SAC keeps a conditioned layer, of ``hidden_units``,
  before the body of its actor and Q networks (its Q networks take the action into ML-Agents' body,
  so that body cannot move into a features extractor);
- ``none``, or no goal signal -> goals stay ordinary observations, concatenated (ML-Agents' ``none``);
- a variable-length goal signal (rank 2) conditions nothing and stays an ordinary entity
  observation: ML-Agents gives its goal encoding size 0;
- goal signals the policy cannot see apart (flattened observations, another features extractor)
  -> concatenated, with an :class:`MLAgentsConfigWarning` saying so.

Variable-length observations (a ``BufferSensor``: rank 2, ``(max_entities, features)``) are
embedded per entity with attention by ML-Agents. When the policy's features extractor does that
too (:class:`~unity_sb3.networks.extractors.UnityMultiInputExtractor` with ``entities="attention"``,
where it has that option) a line says so; when they would be flattened (zero rows for absent
entities) an :class:`MLAgentsConfigWarning` says so, never silently.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from unity_sb3.config.mlagents_schema import MLAgentsConfigWarning

__all__ = ["goal_signal_keys", "resolve_mlagents_network", "variable_length_keys"]


def goal_signal_keys(env: Any) -> list[str]:
    """Observation keys of the env's goal-signal observations (``ObservationType.GOAL_SIGNAL``).

    :param env: a :class:`~unity_sb3.UnityVecEnv` (or a VecEnv wrapper around one: attribute
        look-ups reach it); any other env has no known goal signals.
    :return: keys in the observation space's order; ``[]`` when the env does not describe its
        Unity observations.
    """
    behavior_spaces = getattr(env, "spaces", None)
    specs = getattr(behavior_spaces, "obs_specs", None)
    keys = getattr(behavior_spaces, "keys", None)
    if not specs or not keys:
        return []
    from mlagents_envs.base_env import ObservationType

    return [key for key, spec in zip(keys, specs) if spec.observation_type == ObservationType.GOAL_SIGNAL]


def variable_length_keys(observation_space: Any) -> list[str]:
    """Keys (``""`` for a single ``Box``) of rank-2 observations: Unity's variable-length ones."""
    from gymnasium import spaces

    subspaces = (
        dict(observation_space.spaces)
        if isinstance(observation_space, spaces.Dict)
        else {"": observation_space}
    )
    return [
        key for key, space in subspaces.items() if isinstance(space, spaces.Box) and len(space.shape) == 2
    ]


def resolve_mlagents_network(network: Mapping[str, Any], kwargs: dict[str, Any], env: Any) -> None:
    """Apply ML-Agents' goal conditioning to ``kwargs["policy_kwargs"]`` for ``env``; report what cannot be.

    :param network: ``{"goal_conditioning_type": "hyper" | "none", "hidden_units": int}`` as the
        mapping wrote it, with ``"body_layers"`` (the ``net_arch`` list) where the body may move into
        the features extractor, and ``"actor_only": True`` where only the actor is conditioned (POCA:
        ``net_arch`` is the actor's list, and ``critic_features_extractor_kwargs`` keep the plain settings).
    :param kwargs: the constructor arguments (``policy_kwargs`` already a dict); changed in place.
    :param env: the VecEnv the model will train on.
    """
    from gymnasium import spaces

    from unity_sb3.networks.extractors import UnityMultiInputExtractor

    conditioning = network.get("goal_conditioning_type", "hyper")
    hidden_units = int(network.get("hidden_units", 128))
    observation_space = env.observation_space
    policy_kwargs = kwargs.setdefault("policy_kwargs", {})
    extractor = policy_kwargs.get("features_extractor_class")
    goals = goal_signal_keys(env)
    # a single observation is a Box, keyed "" by variable_length_keys and by its name here
    single = not isinstance(observation_space, spaces.Dict)
    entity_goals = [
        key for key in goals if ("" if single else key) in variable_length_keys(observation_space)
    ]
    if entity_goals:
        # ML-Agents' goal encoding of an entity list has size 0: it conditions nothing and is
        # attended over as an ordinary observation (a mix with other goals is refused there)
        goals = [key for key in goals if key not in entity_goals]
        print(
            f"goal signals {', '.join(entity_goals)} are variable-length: encoded as ordinary entity "
            "observations, not used for goal conditioning (as ML-Agents)"
        )
    if goals and conditioning == "hyper":
        separate = isinstance(observation_space, spaces.Dict) and all(
            key in observation_space.spaces for key in goals
        )
        if separate and extractor is UnityMultiInputExtractor:
            plain = dict(policy_kwargs.get("features_extractor_kwargs") or {})
            extractor_kwargs = dict(
                plain,
                goal_keys=list(goals),
                goal_hidden_dim=hidden_units,
                goal_features=True,
                goal_conditioning="hypernetwork",
            )
            actor_only = bool(network.get("actor_only"))
            body = network.get("body_layers")
            if body and list(policy_kwargs.get("net_arch") or []) == list(body):
                # ML-Agents' ConditionalEncoder: the body's last layer is the conditioned one
                extractor_kwargs["hidden_layers"] = list(body)
                policy_kwargs["net_arch"] = [] if actor_only else dict(pi=[], vf=[])
            policy_kwargs["features_extractor_kwargs"] = extractor_kwargs
            if actor_only:  # POCA's centralised critic: goals encoded as ordinary observations
                policy_kwargs.setdefault("critic_features_extractor_kwargs", plain)
            layers = extractor_kwargs.get("hidden_layers") or []
            where = (
                f"the last of the body's {len(layers)} layers"
                if layers
                else f"a layer of {hidden_units} before the network body"
            )
            print(
                f"goal_conditioning_type hyper: goal signals {', '.join(goals)} generate the weights of {where}"
                + (" of the actor" if actor_only else "")
                + " (HyperNetwork, as ML-Agents)"
                + (
                    "; the centralised critic encodes them with the other observations, unconditioned (as ML-Agents)"
                    if actor_only
                    else ""
                )
            )
        else:
            why = (
                "the observations are flattened into one vector"
                if not separate
                else f"the features extractor is {getattr(extractor, '__name__', extractor)}"
            )
            warnings.warn(
                f"ML-Agents setting network_settings.goal_conditioning_type=hyper is not honored: {why}, so the "
                f"goal signals {', '.join(goals)} are concatenated with the other observations (ML-Agents' "
                "'none'). Keep a Dict observation space and UnityMultiInputExtractor to condition on them.",
                MLAgentsConfigWarning,
                stacklevel=3,
            )
    elif goals:
        print(f"goal_conditioning_type none: goal signals {', '.join(goals)} are concatenated, as ML-Agents")
    attends = extractor is UnityMultiInputExtractor and _extractor_attends(policy_kwargs)
    for key in variable_length_keys(observation_space):
        shape = tuple(observation_space[key].shape if key else observation_space.shape)
        name = f"observation {key!r}" if key else "the observation"
        if attends:
            print(f"{name} of shape {shape}: entity embedding and self-attention, as ML-Agents")
            continue
        warnings.warn(
            f"{name} of shape {shape} is a variable-length (entities, features) observation: ML-Agents "
            "embeds each entity and attends over them; unity-sb3's policy flattens it (absent entities are "
            "zero rows), so the entities' order matters to the policy.",
            MLAgentsConfigWarning,
            stacklevel=3,
        )


def _extractor_attends(policy_kwargs: Mapping[str, Any]) -> bool:
    """Whether UnityMultiInputExtractor, as configured, encodes 2-D observations with attention."""
    import inspect

    from unity_sb3.networks.extractors import UnityMultiInputExtractor

    parameter = inspect.signature(UnityMultiInputExtractor.__init__).parameters.get("entities")
    if parameter is None:  # an extractor without entity attention flattens them
        return False
    chosen = (policy_kwargs.get("features_extractor_kwargs") or {}).get("entities", parameter.default)
    return chosen == "attention"
