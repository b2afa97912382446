"""Whole episodes on a ``BaseEnv`` played by one answer per behavior, and each agent episode's return.

What ``mlagents-learn --inference`` reports, for any player: a trained model, an ONNX model, a
scripted one. Used by ``unity-sb3 eval`` (an ONNX model, or every behavior of a run) and
:func:`~unity_sb3.export.onnx_policy.onnx_episode_returns`. :func:`play`, the loop under it, also
plays :func:`~unity_sb3.selfplay.matches.play_matches`' games.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from mlagents_envs.base_env import ActionTuple, BaseEnv, DecisionSteps, TerminalSteps

__all__ = ["Answer", "episode_returns", "play"]

#: ``answer(behavior_name, decision_steps) -> ActionTuple``; one with ``end_episodes(agent_ids)`` is told
#: which of its agents' episodes ended (memories to drop)
Answer = Callable[[str, DecisionSteps], ActionTuple]
#: one behavior's batches of one Unity step: ``(behavior_name, decision_steps, terminal_steps)``
Batches = tuple[str, DecisionSteps, TerminalSteps]


def play(env: BaseEnv, answers: Mapping[str, Answer]) -> Iterator[list[Batches]]:
    """Play ``env`` one Unity step at a time, for as long as the caller reads.

    Each item is one Unity step's batches, one per behavior, yielded after the answers acted on them:
    an answer with ``end_episodes`` was told which of its agents ended, and every deciding agent has
    its actions set (zeros for behaviors without an answer). ``env.step()`` runs when the next item
    is asked for, so a caller that stops reading leaves the last actions set and not stepped.

    :param env: the environment, already reset; never reset or closed here.
    :param answers: behavior name -> its player.
    """
    while True:
        batches = []
        for name, spec in env.behavior_specs.items():
            decision, terminal = env.get_steps(name)
            answer = answers.get(name)
            end_episodes = getattr(answer, "end_episodes", None)
            if end_episodes is not None and len(terminal):
                end_episodes(terminal.agent_id)
            if len(decision):
                actions = (
                    spec.action_spec.empty_action(len(decision)) if answer is None else answer(name, decision)
                )
                env.set_actions(name, actions)
            batches.append((name, decision, terminal))
        yield batches
        env.step()


def episode_returns(
    env: BaseEnv,
    answers: Mapping[str, Answer],
    episodes: int,
    *,
    group: Callable[[str], str] = str,
    max_unity_steps: int | None = None,
    reset: bool = True,
) -> dict[str, list[float]]:
    """Play ``env`` until every group of behaviors has ``episodes`` agent episodes ended; their returns.

    A return is the sum of the agent's own rewards over its episode (ML-Agents' "Cumulative Reward";
    group rewards are not in it), counted from the first step it was seen after the reset.

    :param env: a build, the Editor or an embedded scene; never closed.
    :param answers: behavior name -> its player; agents of behaviors without one get zero actions.
    :param episodes: episodes to count per group (> 0).
    :param group: the group a behavior's episodes count in (default: each behavior its own; e.g.
        ``lambda name: "all"`` to count every behavior's together).
    :param max_unity_steps: give up with a ``RuntimeError`` after this many Unity steps.
    :param reset: reset ``env`` first (``False``: the caller just did).
    :return: group -> the first ``episodes`` returns, in the order the episodes ended.
    """
    if isinstance(episodes, bool) or not isinstance(episodes, int) or episodes <= 0:
        raise ValueError(f"episodes must be a whole number > 0, got {episodes!r}")
    if reset:
        env.reset()
    returns: dict[str, list[float]] = {group(name): [] for name in answers}
    running: dict[tuple[str, int], float] = {}
    for unity_steps, batches in enumerate(play(env, answers)):
        if max_unity_steps is not None and unity_steps >= max_unity_steps:
            short = {key: len(done) for key, done in returns.items() if len(done) < episodes}
            raise RuntimeError(
                f"episodes ended in {max_unity_steps} Unity steps: {short} of {episodes} each; raise "
                "max_unity_steps or check that the scene ends its episodes"
            )
        for name, decision, terminal in batches:
            if name not in answers:
                continue
            ended = returns[group(name)]
            for agent, reward in zip(terminal.agent_id.tolist(), terminal.reward.tolist()):
                ended.append(running.pop((name, agent), 0.0) + reward)
            for agent, reward in zip(decision.agent_id.tolist(), decision.reward.tolist()):
                running[(name, agent)] = running.get((name, agent), 0.0) + reward
        if all(len(done) >= episodes for done in returns.values()):
            break
    return {key: done[:episodes] for key, done in returns.items()}
