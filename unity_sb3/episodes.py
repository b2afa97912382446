"""Whole episodes on a ``BaseEnv`` played by one answer per behavior, and each agent episode's return.

What ``mlagents-learn --inference`` reports, for any player: a trained model, an ONNX model, a
scripted one. Used by ``unity-sb3 eval`` (an ONNX model, or every behavior of a run) and
:func:`~unity_sb3.export.onnx_policy.onnx_episode_returns`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from mlagents_envs.base_env import ActionTuple, BaseEnv, DecisionSteps

__all__ = ["Answer", "episode_returns"]

#: ``answer(behavior_name, decision_steps) -> ActionTuple``; one with ``end_episodes(agent_ids)`` is told
#: which of its agents' episodes ended (memories to drop)
Answer = Callable[[str, DecisionSteps], ActionTuple]


def episode_returns(
    env: BaseEnv,
    answers: Mapping[str, Answer],
    episodes: int,
    *,
    group: Callable[[str], str] = str,
    max_unity_steps: int | None = None,
) -> dict[str, list[float]]:
    """Play ``env`` until every group of behaviors has ``episodes`` agent episodes ended; their returns.

    A return is the sum of the agent's own rewards over its episode (ML-Agents' "Cumulative Reward";
    group rewards are not in it), counted from the first step it was seen after the reset.

    :param env: a build, the Editor or an embedded scene; reset once here, never closed.
    :param answers: behavior name -> its player; agents of behaviors without one get zero actions.
    :param episodes: episodes to count per group (> 0).
    :param group: the group a behavior's episodes count in (default: each behavior its own; e.g.
        ``lambda name: "all"`` to count every behavior's together).
    :param max_unity_steps: give up with a ``RuntimeError`` after this many Unity steps.
    :return: group -> the first ``episodes`` returns, in the order the episodes ended.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes <= 0:
        raise ValueError(f"episodes must be a whole number > 0, got {episodes!r}")
    env.reset()
    returns: dict[str, list[float]] = {group(name): [] for name in answers}
    running: dict[tuple[str, int], float] = {}
    steps = 0
    while any(len(done) < episodes for done in returns.values()):
        for name, spec in env.behavior_specs.items():
            decision, terminal = env.get_steps(name)
            answer = answers.get(name)
            if answer is None:
                if len(decision):
                    env.set_actions(name, spec.action_spec.empty_action(len(decision)))
                continue
            ended = returns[group(name)]
            for agent, reward in zip(terminal.agent_id.tolist(), terminal.reward.tolist()):
                ended.append(running.pop((name, agent), 0.0) + reward)
            end_episodes = getattr(answer, "end_episodes", None)
            if end_episodes is not None and len(terminal):
                end_episodes(terminal.agent_id)
            for agent, reward in zip(decision.agent_id.tolist(), decision.reward.tolist()):
                running[(name, agent)] = running.get((name, agent), 0.0) + reward
            if len(decision):
                env.set_actions(name, answer(name, decision))
        env.step()
        steps += 1
        if max_unity_steps is not None and steps >= max_unity_steps:
            short = {key: len(done) for key, done in returns.items() if len(done) < episodes}
            if short:
                raise RuntimeError(
                    f"episodes ended in {max_unity_steps} Unity steps: {short} of {episodes} each; raise "
                    "max_unity_steps or check that the scene ends its episodes"
                )
    return {key: done[:episodes] for key, done in returns.items()}
