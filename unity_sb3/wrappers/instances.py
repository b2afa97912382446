"""UnityVecEnv's per-instance bookkeeping: one Unity instance, its slots, stepping and binding agents."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers._slots import assign_free_slots, match_ids, unassigned_rows
from unity_sb3.wrappers._steps import normalize_steps
from unity_sb3.wrappers._terminals import (
    absorb_terminals,
    all_true,
    any_true,
    put_placeholders,
    put_rows,
    put_slice,
    take_rows,
)

from mlagents_envs.base_env import BaseEnv, DecisionSteps, TerminalSteps  # isort: skip
from mlagents_envs.exception import UnityTimeOutException  # isort: skip


@dataclass
class Instance:
    """One Unity instance and the bookkeeping of its slots (local indices ``0..n-1``)."""

    worker_id: int
    source: str | Callable[[], BaseEnv] | None
    env: BaseEnv
    start: int = 0
    n: int = 0
    # the agent id each slot has (``bound``) or last had (``had_agent``): a free slot takes it back first
    agent: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bound: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    had_agent: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # row in `dec`, -1 = inactive
    group_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    dec: DecisionSteps | None = None
    restarts: int = 0
    restart_times: list[float] = field(default_factory=list)  # time.monotonic() of recent restarts
    arange: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    all_bound: bool = False  # every slot has an agent
    identity: bool = False  # slot i's agent is row i of ``dec`` for every slot
    slot_of: dict[int, int] = field(default_factory=dict)  # agent id -> local slot, bound agents only
    # ``dec.agent_id`` of the last batch in which every slot's agent asked, at rows ``steady_rows``;
    # kept while agents only end episodes, so their slots re-bind without a search (``_rebind_steady``)
    steady_ids: np.ndarray | None = None
    steady_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    steady_identity: bool = False  # ``steady_rows`` is ``arange``
    slots: slice = field(default_factory=lambda: slice(0, 0))
    # shared constants, never written: ``rows`` when nobody asks, no slot, every slot active
    none_asking: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    no_slots: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    everyone: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def allocate(self, n: int) -> None:
        self.n = n
        self.slots = slice(self.start, self.start + n)
        self.arange = np.arange(n, dtype=np.int64)
        self.agent = np.zeros(n, np.int64)
        self.bound = np.zeros(n, bool)
        self.had_agent = np.zeros(n, bool)
        self.rows = np.full(n, -1, np.int64)
        self.none_asking = np.full(n, -1, np.int64)
        self.everyone = np.ones(n, bool)
        self.group_id = np.zeros(n, np.int64)

    def unbind_all(self) -> None:
        self.bound[:] = False
        self.had_agent[:] = False
        self.rows = np.full(self.n, -1, np.int64)
        self.slot_of.clear()
        self.all_bound = self.identity = False
        self.steady_ids = None


@dataclass
class StepResult:
    """What one instance's step produced (observations are written into the shared buffer)."""

    reward: np.ndarray
    group_reward: np.ndarray
    done: np.ndarray
    truncated: np.ndarray
    terminal_obs: dict[int, Any]
    active: np.ndarray  # the slots whose agent asked (``rows >= 0``)
    restarted: bool = False


# ---------------------------------------------------------------------- helpers
def str_or_none(value: Any) -> str | None:
    """``str(value)``, or ``None`` for ``None``.

    :param value: any value, or ``None``
    """
    return None if value is None else str(value)


def kill_if_hung(env: BaseEnv, exc: BaseException) -> None:
    """Kill the process of an instance that stopped answering: it cannot read a polite goodbye,
    and ``close()`` would otherwise wait for it before terminating it."""
    if not isinstance(exc, TimeoutError | UnityTimeOutException):
        return
    process = getattr(env, "process", None)
    if process is not None and process.poll() is None:
        with contextlib.suppress(OSError):
            process.kill()


def _call(fn: Callable[[], Any], collect_errors: bool) -> Any:
    if not collect_errors:
        return fn()
    try:
        return fn()
    except Exception as exc:
        return exc


def same_values(a: np.ndarray, b: np.ndarray, skip: int = -1) -> bool:
    """Whether two 1-d arrays of one length hold the same values (except at index ``skip``, if given);
    equal bytes of one integer dtype say so in ~0.1 us at any length (an elementwise comparison and
    its reduction take ~1 us)."""
    if a.dtype == b.dtype and a.dtype.kind in "iu":
        x, y = a.tobytes(), b.tobytes()
        if skip < 0:
            return x == y
        cut = skip * a.itemsize
        return x[:cut] == y[:cut] and x[cut + a.itemsize :] == y[cut + a.itemsize :]
    same = a == b
    if skip >= 0:
        same[skip] = True
    return bool(all_true(same))


def _add_decision_rewards(
    reward: np.ndarray, group_reward: np.ndarray, dec: DecisionSteps, at: Any, rebound: np.ndarray
) -> None:
    """Add the rewards and group rewards of rows ``at`` of ``dec`` (one row per slot), except at the slots
    in ``rebound``: their new agent's first decision brings no reward (the values there are put back,
    bit for bit)."""
    if len(rebound):
        kept = reward[rebound], group_reward[rebound]
        reward += dec.reward[at]
        group_reward += dec.group_reward[at]
        reward[rebound], group_reward[rebound] = kept
    else:
        reward += dec.reward[at]
        group_reward += dec.group_reward[at]


def slice_actions(actions: Any, sl: slice) -> Any:
    """The rows ``sl`` of a batch of actions (an array, or a dict or tuple of arrays): one instance's slots.

    :param actions: the actions of every slot, one row per slot
    :param sl: the slots of one instance
    """
    if isinstance(actions, dict):
        return {k: np.asarray(v)[sl] for k, v in actions.items()}
    if isinstance(actions, tuple):
        return tuple(np.asarray(v)[sl] for v in actions)
    return np.asarray(actions)[sl]


EnvSource = BaseEnv | str | Callable[[], BaseEnv]


class UnityNoDecisionError(RuntimeError):
    """Unity stepped ``max_idle_steps`` times without any slot's agent asking for a decision."""


def open_source(
    source: EnvSource, worker_id: int, open_kwargs: dict[str, Any], restart: bool = False
) -> BaseEnv:
    """The ``BaseEnv`` of one Unity instance: ``source`` itself, ``open_unity(source)`` or ``source()``.

    :param worker_id: the instance's index; a target string opens with ``worker_id`` shifted by
        ``open_kwargs["worker_id"]`` (default 0).
    :param open_kwargs: keyword arguments for ``open_unity`` (target strings only).
    :param restart: re-opening a crashed instance: look for a free port (another program may have
        taken the crashed instance's port meanwhile).
    """
    if isinstance(source, BaseEnv):
        return source
    if isinstance(source, str):
        from unity_sb3.open import open_unity

        kwargs = {**open_kwargs, "worker_id": open_kwargs.get("worker_id", 0) + worker_id}
        if restart:
            kwargs["find_free_port"] = True
        return open_unity(source, **kwargs)
    if callable(source):
        env = source()
        if not isinstance(env, BaseEnv):
            raise UnityConfigurationError(
                f"the factory for Unity worker {worker_id} returned {type(env).__name__}, not a BaseEnv"
            )
        return env
    raise UnityConfigurationError(
        f"cannot open {source!r}: pass a BaseEnv, a target string for open_unity, or a factory"
    )


class InstancesMixin:
    """UnityVecEnv's work on each Unity instance: opening, resetting, stepping, binding agents to slots."""

    # ------------------------------------------------------------------ opening
    def _open(self, source: EnvSource, worker_id: int, restart: bool = False) -> BaseEnv:
        return open_source(source, worker_id, self.open_kwargs, restart=restart)

    def _open_all(self, sources: list[EnvSource]) -> None:
        for i, source in enumerate(sources):
            if self.restart_on_crash and isinstance(source, BaseEnv):
                raise UnityConfigurationError(
                    "restart_on_crash=True needs a target string or a factory for every instance, so a "
                    f"crashed one can be re-opened; instance {i} is a {type(source).__name__} object"
                )
        if len(sources) > 1:
            self._pool = ThreadPoolExecutor(max_workers=len(sources), thread_name_prefix="unity-vec-env")
        envs = self._map(lambda i: self._open(sources[i], i), range(len(sources)), collect_errors=True)
        for i, (source, env) in enumerate(zip(sources, envs)):
            self._instances.append(
                Instance(worker_id=i, source=None if isinstance(source, BaseEnv) else source, env=env)
            )
        errors = [e for e in envs if isinstance(e, BaseException)]
        if errors:
            self._instances = [inst for inst in self._instances if not isinstance(inst.env, BaseException)]
            raise errors[0]

    def _map(self, fn: Callable[[Any], Any], items: Sequence[Any], collect_errors: bool = False) -> list[Any]:
        """``fn`` over ``items``, in the thread pool when there are several instances."""
        if self._pool is None or len(items) <= 1:
            calls = [lambda item=item: fn(item) for item in items]
            return [_call(c, collect_errors) for c in calls]
        futures = [self._pool.submit(fn, item) for item in items]
        return [_call(f.result, collect_errors) for f in futures]

    def _reset_and_count(self, num_slots: int | Sequence[int] | None) -> tuple[list[int], bool]:
        """Slots per instance; resets the instances when it has to count their agents."""
        n_inst = len(self._instances)
        if num_slots is None:

            def count(inst: Instance) -> int:
                self._call_reset(inst)
                dec = self._wait_for_request(inst, lambda d: len(d) > 0)
                return len(dec)

            counts = self._map(count, self._instances)
            return counts, True
        if isinstance(num_slots, (int, np.integer)):
            if num_slots < 1 or num_slots % n_inst:
                raise UnityConfigurationError(
                    f"num_slots={num_slots} must be a positive multiple of the number of instances "
                    f"({n_inst}); or pass one count per instance"
                )
            return [int(num_slots) // n_inst] * n_inst, False
        counts = [int(c) for c in num_slots]
        if len(counts) != n_inst or any(c < 1 for c in counts):
            raise UnityConfigurationError(
                f"num_slots={list(num_slots)} needs one positive count per instance ({n_inst} instances)"
            )
        return counts, False

    # ------------------------------------------------------------------ Unity calls
    def _call_reset(self, inst: Instance) -> None:
        inst.env.reset()

    def _answer_others(self, inst: Instance) -> None:
        specs = inst.env.behavior_specs
        if len(specs) == 1:
            return
        for name in list(specs):
            if name == self.behavior_name:
                continue
            try:
                dec, term = inst.env.get_steps(name)
            except KeyError:  # a behavior registered but without agents yet
                continue
            if len(dec) == 0:
                continue
            dec, _ = normalize_steps(dec, term, inst.env.behavior_specs[name], name)
            action = self.other_behaviors(name, dec) if self.other_behaviors is not None else None
            if action is None:
                action = inst.env.behavior_specs[name].action_spec.empty_action(len(dec))
            inst.env.set_actions(name, action)

    def _answer_idle(self, inst: Instance, dec: DecisionSteps) -> None:
        """Answer every requesting agent with a zero action (no slot takes part)."""
        if len(dec):
            inst.env.set_actions(self.behavior_name, self.behavior_spec.action_spec.empty_action(len(dec)))
        self._answer_others(inst)

    def _get_steps(self, inst: Instance) -> tuple[DecisionSteps, TerminalSteps]:
        """This behavior's steps of ``inst``, normalised to arrays (any ``BaseEnv``, DESIGN 4.2)."""
        return self._reader.read(inst.env)

    def _wait_for_request(self, inst: Instance, ready: Callable[[DecisionSteps], bool]) -> DecisionSteps:
        dec, _ = self._get_steps(inst)
        for _ in range(self.max_idle_steps):
            if ready(dec):
                return dec
            self._answer_idle(inst, dec)
            inst.env.step()
            dec, _ = self._get_steps(inst)
        if ready(dec):
            return dec
        raise UnityNoDecisionError(
            f"Unity worker {inst.worker_id}: no agent of behavior {self.behavior_name!r} that a slot could "
            f"take asked for a decision in {self.max_idle_steps} Unity steps. Do the agents have a "
            "DecisionRequester (or call RequestDecision)? Raise max_idle_steps if they decide that rarely."
        )

    # ------------------------------------------------------------------ reset
    def _reset_instance(self, inst: Instance) -> None:
        if self._seed is not None and hasattr(inst.env, "reseed"):
            inst.env.reseed(self._seed + inst.worker_id)
        self._call_reset(inst)
        self._wait_for_request(inst, lambda d: len(d) > 0)
        self._bind_current(inst)

    def _bind_current(self, inst: Instance) -> None:
        """Bind slots afresh to the agents asking right now (after a reset)."""
        inst.unbind_all()
        dec, _ = self._get_steps(inst)
        inst.dec = dec
        self._bind(inst, dec, np.full(inst.n, -1, np.int64))
        self._write_obs(inst, dec, np.flatnonzero(inst.rows >= 0))

    def _send(self, inst: Instance, actions: Any) -> None:
        """Answer every agent that asked: slot actions for bound agents, zeros for the others."""
        dec = inst.dec
        assert dec is not None
        n_dec = len(dec.agent_id)
        if n_dec:
            unity_actions = self.spaces.to_unity_actions(actions, inst.n)
            if inst.identity and n_dec == inst.n:
                full = unity_actions
            else:
                full = self.behavior_spec.action_spec.empty_action(n_dec)
                active = inst.rows >= 0
                targets = inst.rows[active]
                if self.spaces.continuous_size:
                    full.continuous[targets] = unity_actions.continuous[active]
                if self.spaces.branches:
                    full.discrete[targets] = unity_actions.discrete[active]
            inst.env.set_actions(self.behavior_name, full)
        self._answer_others(inst)

    def _step_instance(self, inst: Instance, actions: Any) -> StepResult:
        self._send(inst, actions)
        n = inst.n
        reward = np.zeros(n, np.float32)
        group_reward = np.zeros(n, np.float32)
        done = np.zeros(n, bool)
        truncated = np.zeros(n, bool)
        terminal_obs: dict[int, Any] = {}
        ended = (reward, group_reward, done, truncated, terminal_obs)
        env, read = inst.env, self._reader.read
        # terminal batches of the Unity steps in which nobody of this behavior asked: nothing reads
        # the slots between them, so they are absorbed together before the next decision batch is
        # matched (or when the loop ends, or a crash ends it), in the order they came
        pending: list[TerminalSteps] = []
        try:
            for _ in range(self.max_idle_steps):
                env.step()
                dec, term = read(env)
                if len(term.agent_id):  # (a read batch's fields are arrays)
                    pending.append(term)
                inst.dec = dec
                ids = dec.agent_id
                if len(ids) == 0:  # nobody of this behavior asks (between decisions): step on
                    inst.rows = inst.none_asking
                    inst.identity = False
                    self._answer_others(inst)
                    continue
                if pending:
                    batches, pending = pending, []
                    absorb_terminals(inst, batches, self.spaces, *ended)
                # (never steady on an empty batch: steady_ids are not)
                rebound = self._steady_match(inst, ids)
                if rebound is not None:
                    # steady state: every slot's agent (or its successor) asks at the same row as last time;
                    # every slot is active, so no ended slot needs its placeholder
                    rows = inst.steady_rows
                    # slot i at row i: slices instead of row selections
                    at = slice(0, n) if inst.steady_identity else rows
                    _add_decision_rewards(reward, group_reward, dec, at, rebound)
                    inst.rows, inst.identity = rows, inst.steady_identity
                    inst.group_id[:] = dec.group_id[at]
                    converted = self.spaces.observations(dec.obs)
                    if inst.identity:
                        put_slice(self._obs_buf, inst.slots, converted, n)
                    else:
                        put_rows(self._obs_buf, inst.slots, take_rows(converted, rows))
                    # (every slot active: a copy of the shared mask is cheaper than ``rows >= 0``)
                    return StepResult(
                        reward, group_reward, done, truncated, terminal_obs, inst.everyone.copy()
                    )
                rows = match_ids(inst.agent, inst.bound, ids)
                found = rows >= 0
                if found.any():
                    reward[found] += dec.reward[rows[found]]
                    group_reward[found] += dec.group_reward[rows[found]]
                    inst.group_id[found] = dec.group_id[rows[found]]
                self._bind(inst, dec, rows)
                if inst.all_bound and (inst.rows >= 0).all():
                    inst.steady_ids = np.array(ids, copy=True)
                    inst.steady_rows = inst.rows
                    inst.identity = inst.steady_identity = len(ids) >= n and bool(
                        (inst.rows == inst.arange).all()
                    )
                # a slot whose agent ended its episode waits with the others for the next request, so
                # a death between two decisions does not make a step where every slot is inactive
                if (inst.rows >= 0).any():
                    break
                self._answer_idle(inst, dec)
            else:
                if pending:
                    batches, pending = pending, []
                    absorb_terminals(inst, batches, self.spaces, *ended)
                if not done.any():
                    raise UnityNoDecisionError(
                        f"Unity worker {inst.worker_id}: none of its {n} slots' agents of behavior "
                        f"{self.behavior_name!r} asked for a decision or ended an episode in {self.max_idle_steps} "
                        "Unity steps. Raise max_idle_steps if the agents decide that rarely."
                    )
                # nobody asks any more, but episodes ended: report them
        except BaseException:
            # a crash (or an error): the slots whose agents ended end as they would have Unity step by
            # Unity step; their placeholders are the terminal observations a restart reports
            if pending:
                absorb_terminals(inst, pending, self.spaces, *ended)
            put_placeholders(inst, self._obs_buf, terminal_obs, terminal_obs)
            raise
        active = inst.rows >= 0
        self._write_obs(inst, inst.dec, np.flatnonzero(active))
        if terminal_obs:  # slots that ended and took no new agent show their terminal observation
            put_placeholders(inst, self._obs_buf, terminal_obs, [s for s in terminal_obs if not active[s]])
        return StepResult(reward, group_reward, done, truncated, terminal_obs, active)

    def _steady_match(self, inst: Instance, ids: np.ndarray) -> np.ndarray | None:
        """Whether the decision batch ``ids`` keeps every slot at its ``steady_rows`` row: ``None`` if
        not, else the slots re-bound just now (``inst.no_slots`` when every slot kept its agent)."""
        steady = inst.steady_ids
        if steady is None or len(ids) != len(steady):
            return None
        if inst.all_bound:
            return inst.no_slots if same_values(ids, steady) else None
        return self._rebind_steady(inst, ids)

    def _rebind_steady(self, inst: Instance, ids: np.ndarray) -> np.ndarray | None:
        """Re-bind the slots whose agent ended its episode, each to the agent now asking at the row its
        old agent had, when that is what :meth:`_bind` would choose; ``None`` (nothing changed) if not.

        It is when ``ids`` differ from ``steady_ids`` only at those rows, and each agent there is either
        the slot's old agent asking again (taken back first) or a new agent (a new episode gets a new id
        in Unity) while every agent has a slot, no free slot's old agent asks elsewhere and the free
        slots' rows are in the slots' order (free slots take the remaining agents in batch order).

        :param ids: ``(n_agents,)`` the agent ids of the decision batch, as long as ``steady_ids``.
        :return: the slots re-bound, ascending.
        """
        bound = inst.bound
        free = (~bound).nonzero()[0]
        if len(free) == 1:  # one slot ended (the usual case with few agents): the same, in scalar steps
            return self._rebind_one(inst, ids, free)
        free_rows = free if inst.steady_identity else inst.steady_rows[free]
        moved = ids != inst.steady_ids
        moved[free_rows] = False
        if any_true(moved):  # a bound slot's agent is not at its row any more
            return None
        new_ids = ids[free_rows]
        old_ids = inst.agent[free]
        renewed = new_ids != old_ids  # free slots whose row holds a new agent
        if any_true(renewed):
            # free slots take the new agents in batch order: their rows must rise with the slots (slot i
            # at row i always does)
            if len(ids) != inst.n:
                return None
            if not inst.steady_identity:
                renewed_rows = free_rows[renewed]
                if any_true(renewed_rows[1:] <= renewed_rows[:-1]):
                    return None
            # few agents end at once: a set beats np.isin's sorting
            if not set(old_ids.tolist()).isdisjoint(new_ids[renewed].tolist()):
                return None  # a free slot's old agent asks at another free slot's row: _bind's case
            inst.steady_ids = np.array(ids, copy=True)
        # (every slot had an agent since ``steady_ids`` were set: ``had_agent`` is True already)
        inst.agent[free] = new_ids
        bound[free] = True
        slot_of = inst.slot_of
        for slot, agent_id in zip(free.tolist(), new_ids.tolist()):
            slot_of[agent_id] = slot
        inst.all_bound = True
        return free

    def _rebind_one(self, inst: Instance, ids: np.ndarray, free: np.ndarray) -> np.ndarray | None:
        """:meth:`_rebind_steady` when the one slot in ``free`` is the only free slot. With one renewed
        row the order check holds trivially, and the old agent differs from the new one by definition."""
        slot = int(free[0])
        row = int(inst.steady_rows[slot])
        if not same_values(ids, inst.steady_ids, row):  # a bound slot's agent is not at its row any more
            return None
        new_id = int(ids[row])
        if new_id != inst.agent[slot]:  # a new agent at the row
            if len(ids) != inst.n:
                return None
            inst.steady_ids = np.array(ids, copy=True)
        inst.agent[slot] = new_id
        inst.bound[slot] = True
        inst.slot_of[new_id] = slot
        inst.all_bound = True
        return free

    def _bind(self, inst: Instance, dec: DecisionSteps, rows: np.ndarray) -> None:
        """Give free slots to unassigned requesting agents; ``rows`` maps bound slots into ``dec``."""
        inst.rows = rows
        inst.identity = False
        inst.steady_ids = None
        free = np.flatnonzero(~inst.bound)
        if len(free) == 0 or len(dec) == 0:
            inst.all_bound = len(free) == 0
            return
        candidates = unassigned_rows(rows, len(dec))
        pairs = assign_free_slots(free, inst.agent, inst.had_agent, dec.agent_id[candidates].astype(np.int64))
        for slot, j in pairs:
            row = int(candidates[j])
            agent_id = int(dec.agent_id[row])
            inst.agent[slot] = agent_id
            inst.slot_of[agent_id] = slot
            inst.bound[slot] = True
            inst.had_agent[slot] = True
            inst.rows[slot] = row
            inst.group_id[slot] = int(dec.group_id[row])
        inst.all_bound = bool(inst.bound.all())

    def _write_obs(self, inst: Instance, dec: DecisionSteps, local: np.ndarray) -> None:
        if len(local) == 0:
            return
        converted = self.spaces.observations(dec.obs)
        rows = inst.rows[local]
        if len(local) == inst.n and len(dec) >= inst.n and np.array_equal(rows, np.arange(inst.n)):
            put_slice(self._obs_buf, inst.slots, converted, inst.n)
        else:
            put_rows(self._obs_buf, inst.start + local, take_rows(converted, rows))
