"""POCA's targets: which decision each step's outcome belongs to, and TD(lambda) returns with
group bootstrapping and posthumous credit, computed over a whole rollout at once.

Layout as :class:`~unity_sb3.algorithms.poca.buffers.POCARolloutBuffer`'s: arrays of shape
``(n_steps, n_envs)``, row ``t`` of slot ``i`` the transition that starts from observation ``t``.

Targets follow ML-Agents' ``poca`` trainer:

- reward of an agent at a step = its group reward + the individual rewards of the whole group
  (ML-Agents' extrinsic signal with ``add_groupmate_rewards``; ``share_rewards=False`` keeps
  only the agent's own individual reward);
- ``G_t = R_t + gamma * ((1 - lambda) * V_next + lambda * G_next)``, with ``V_next, G_next`` taken
  from the agent's own next decision while it lives;
- **posthumous credit**: when an agent's episode ends (dies, or is interrupted alone) while its
  group goes on, its trajectory ends there and its return bootstraps from the *group's* value at
  the group's next step, ``R_t + gamma * V_group``: the group rewards that come after it died reach
  it through the centralised critic, as ML-Agents' trainer bootstraps a dead agent's last step
  from the critic's value of its group (``value_next`` unless the whole group is done);
- only the end of the whole group episode zeroes the bootstrap; if that end is a truncation
  (``TimeLimit.truncated``) the target bootstraps from V of the group's terminal observations;
- at the end of the rollout, the bootstrap is V of the group at the next observation;
- with ``time_horizon`` (ML-Agents' trajectory length), a decision that ends a trajectory while its
  agent lives on (``chunk_ends``, :func:`~unity_sb3.algorithms.advantages.horizon_cuts`) takes
  ``G_next = V_next``: ``R_t + gamma * V_next``, as ML-Agents' ``lambda_return`` ends each trajectory
  it is handed;
- rewards that arrive on inactive steps (an agent between two decisions) belong to the agent's
  previous decision; the discount is applied per decision, as ML-Agents does.
"""

from __future__ import annotations

import numpy as np

from unity_sb3.algorithms.poca.group_steps import BEFORE_ROLLOUT

__all__ = ["compute_poca_returns", "transition_owners"]


def transition_owners(
    active: np.ndarray, dones: np.ndarray, alive_before: np.ndarray | None = None
) -> np.ndarray:
    """Which decision each step's outcome belongs to (= each slot's live agent's last decision).

    :param active: (n_steps, n_envs) bool, a real agent acted from observation t.
    :param dones: (n_steps, n_envs) bool, the slot's episode ended at step t.
    :param alive_before: (n_envs,) bool, the slot's agent is alive at the start of the rollout
        with its last decision in an earlier rollout; None: no such agent.
    :return: (n_steps, n_envs) int: the step of the decision (same slot) whose outcome row t
        is, or -1 when row t belongs to no live agent (a placeholder after a death), or
        ``BEFORE_ROLLOUT`` for a live agent whose last decision came before the rollout.
    """
    n_steps, n_envs = active.shape
    initial = np.full(n_envs, -1, dtype=np.int64)
    if alive_before is not None:
        initial[np.asarray(alive_before, dtype=bool)] = BEFORE_ROLLOUT
    if n_steps == 0:
        return np.zeros((0, n_envs), dtype=np.int64)
    steps = np.arange(n_steps, dtype=np.int64)[:, None]
    last_decision = np.maximum.accumulate(np.where(active, steps, -1), axis=0)  # at or before t
    last_end = np.full((n_steps, n_envs), -1, dtype=np.int64)  # last episode end before t
    last_end[1:] = np.maximum.accumulate(np.where(dones, steps, -1), axis=0)[:-1]
    # the last decision owns t unless an end came at or after it; with no decision yet, the agent
    # alive before the rollout does until its first end
    return np.where(
        last_decision > last_end, last_decision, np.where(last_end < 0, initial[None, :], -1)
    ).astype(np.int64)


def compute_poca_returns(
    rewards: np.ndarray,
    group_rewards: np.ndarray,
    dones: np.ndarray,
    truncated: np.ndarray,
    active: np.ndarray,
    group_keys: np.ndarray,
    values: np.ndarray,
    terminal_values: np.ndarray,
    last_values: np.ndarray,
    last_active: np.ndarray,
    last_group_keys: np.ndarray,
    gamma: float,
    gae_lambda: float,
    share_rewards: bool = True,
    chunk_ends: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """TD(lambda) returns with group bootstrapping and posthumous credit (module docstring).

    All ``(n_steps, n_envs)`` arrays follow the buffer layout; entries of inactive rows are ignored.

    :param rewards: individual rewards returned by ``env.step``.
    :param group_rewards: group rewards returned with them (``infos[i]["group_reward"]``).
    :param dones: episode of the slot's agent ended at this step.
    :param truncated: that end was a truncation (``TimeLimit.truncated``).
    :param active: a real agent acted from this row's observation.
    :param group_keys: int group code of the row's agent (every agent of a group at one step
        shares it; an agent without a group has a code no other slot uses).
    :param values: V of the row's group at its observation.
    :param terminal_values: for rows whose step ends a truncated group: V of that group's
        terminal observations (other entries unused).
    :param last_values: (n_envs,) V of each slot's group at the observation after the rollout.
    :param last_active: (n_envs,) that observation is a real agent's.
    :param last_group_keys: (n_envs,) group codes at that observation.
    :param gamma: discount per decision.
    :param gae_lambda: lambda of TD(lambda).
    :param share_rewards: add groupmates' individual rewards (ML-Agents' POCA does).
    :param chunk_ends: True at the decisions that end a ``time_horizon`` trajectory: their return
        bootstraps from V at the agent's next decision without looking past it. None: no cuts.
    :return: ``(returns, team_rewards)``, both (n_steps, n_envs); ``team_rewards[t, i]`` is
        the reward credited to the decision at row t (0 on inactive rows).
    """
    n_steps, n_envs = rewards.shape
    active = active.astype(bool)
    dones = dones.astype(bool)
    truncated = truncated.astype(bool) & dones
    owner = transition_owners(active, dones)
    owned = owner >= 0
    slots = np.broadcast_to(np.arange(n_envs), (n_steps, n_envs))
    owner_keys = np.where(owned, group_keys[np.maximum(owner, 0), slots], 0)

    # Reward of each step, credited to the decision that owns it.
    step_rewards = np.where(owned, rewards, 0.0).astype(np.float64)
    if share_rewards:  # each (step, group) sum, added in slot order as a per-step bincount would
        shared = np.zeros_like(step_rewards)
        rows, cols = np.nonzero(owned)  # step-major, slots ascending within a step
        if rows.size:
            keys, ranks = np.unique(owner_keys[rows, cols], return_inverse=True)
            pairs = rows * keys.size + ranks.reshape(-1)
            sums = np.bincount(pairs, weights=step_rewards[rows, cols], minlength=n_steps * keys.size)
            shared[rows, cols] = sums[pairs]
        step_rewards = shared
    step_rewards += np.where(owned, group_rewards, 0.0)
    team_rewards = np.zeros((n_steps, n_envs), dtype=np.float64)
    rows, cols = np.nonzero(owned)
    np.add.at(team_rewards, (owner[rows, cols], cols), step_rewards[rows, cols])

    # Last step owned by each decision; for every active row (row-major order) whether its agent
    # lived on, and V at its next decision or at the bootstrap.
    last_step = np.full((n_steps, n_envs), -1, dtype=np.int64)
    np.maximum.at(last_step, (owner[rows, cols], cols), rows)
    act_rows, act_cols = np.nonzero(active)
    act_ends = last_step[act_rows, act_cols]
    died = dones[act_ends, act_cols]
    act_living = ~died
    act_next = act_ends + 1
    act_inside = act_living & (act_next < n_steps)  # the agent's own next decision
    act_v_next = np.zeros(act_rows.size, dtype=np.float64)
    act_v_next[act_inside] = values[act_next[act_inside], act_cols[act_inside]]
    bootstrap = act_living & ~act_inside  # the rollout ended while the agent lived
    waiting = bootstrap & ~last_active[act_cols]  # ... between two of its decisions
    act_v_next[bootstrap] = np.where(
        waiting[bootstrap], values[act_rows[bootstrap], act_cols[bootstrap]], last_values[act_cols[bootstrap]]
    )
    # A decision whose agent's episode ended at step u: while its group goes on (posthumous credit),
    # V of the group at the group's next row (its first member's: they share it); after the rollout,
    # V at the next observation; none, V at the decision itself. A truncated group end: V of its
    # terminal observations. The whole group's end: 0.
    last_group_value: dict[int, float] = {}
    for i in np.flatnonzero(last_active):
        last_group_value.setdefault(int(last_group_keys[i]), float(last_values[i]))
    act_keys = group_keys[act_rows, act_cols]
    group_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # key -> the steps of its rows, and V
    for k in np.flatnonzero(died):
        t, i, u, key = int(act_rows[k]), int(act_cols[k]), int(act_ends[k]), int(act_keys[k])
        if key in owner_keys[u, owned[u] & ~dones[u]]:
            if key not in group_rows:
                member = np.flatnonzero(act_keys == key)  # row-major: steps ascending
                group_rows[key] = act_rows[member], values[act_rows[member], act_cols[member]]
            steps, group_values = group_rows[key]
            j = np.searchsorted(steps, u, side="right")
            act_v_next[k] = group_values[j] if j < steps.size else last_group_value.get(key, values[t, i])
        elif key in owner_keys[u, owned[u] & truncated[u]]:
            act_v_next[k] = terminal_values[u, i]
    act_g_next = act_v_next.copy()  # inside rows take G of the next decision in the loop ...
    if chunk_ends is not None:  # ... unless a trajectory ends there: then G_next stays V_next
        act_inside &= ~np.asarray(chunk_ends, dtype=bool)[act_rows, act_cols]
    returns = np.zeros((n_steps, n_envs), dtype=np.float64)
    row_start = np.searchsorted(act_rows, np.arange(n_steps + 1))
    for t in reversed(range(n_steps)):
        a, b = row_start[t], row_start[t + 1]
        cols, inside, g_next = act_cols[a:b], act_inside[a:b], act_g_next[a:b]
        g_next[inside] = returns[act_next[a:b][inside], cols[inside]]
        returns[t, cols] = team_rewards[t, cols] + gamma * (
            (1.0 - gae_lambda) * act_v_next[a:b] + gae_lambda * g_next
        )
    return returns.astype(np.float32), team_rewards.astype(np.float32)
