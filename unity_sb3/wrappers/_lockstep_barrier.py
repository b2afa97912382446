"""One Unity instance shared by several lockstep views: who owns which agent, and the step barrier.

:class:`InstanceBarrier` holds the real ``BaseEnv`` of one instance;
:class:`~unity_sb3.wrappers._lockstep_proxy.LockstepProxy` is one view's ``BaseEnv`` on it (a
``UnityVecEnv`` view has one proxy per instance). The rules, all under one ``threading.Condition``
per instance:

- **Ownership** is per agent and fixed when its episode starts (the first time it asks, or ends,
  unseen): the policy names the view that owns it then (or none: its behavior's answerer, zeros
  by default, answers it). It keeps that owner until it appears in ``TerminalSteps``.
- **The barrier.** A view is *needed* while one of its agents asks in the current real step.
  The real ``env.step()`` runs, in the thread of the view that arrives last, once every needed
  view has called ``step()``; before it, every asking agent gets exactly one action: its owner's,
  else its behavior's answerer's, else zeros. A view that is not needed does not hold the
  barrier back; it is released by the next real step when it owns live agents (so its
  ``UnityVecEnv`` sees every step while an agent of its could end), and otherwise waits, without
  holding anyone back, until an agent of its starts (or ends) an episode.
- **Catching up.** A view that calls ``step()`` before it has read the current state (real steps
  happened without it because it was not needed, or another view reset) returns at once: from
  its point of view a step has happened. Episode ends it missed are kept in its inbox and
  delivered with its next ``get_steps``.
- **Parked.** A view none of whose behaviors may own agents now (its team is not learning) and
  that owns none waits in ``step()`` without driving Unity until that changes.
- **Reset.** The real ``env.reset()`` runs only when Unity stepped since the last real reset;
  otherwise a view's reset reads the current state. The other views' live agents end their
  episodes as interrupted (inbox), as they vanish from Unity.
- **Crashes.** The view whose thread ran the failing call raises Unity's error; every other view
  raises :class:`UnityLockstepCrash` (a ``UnityException``, so ``UnityVecEnv`` reports worker N's
  crash). A view with ``restart_on_crash`` re-opens the instance (:meth:`InstanceBarrier.restart`):
  the first one re-opens it, the others find it re-opened; every view's live agents end as
  interrupted. A view that learns of the crash only after the restart just catches up.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

from unity_sb3.unity import compat as _compat  # noqa: F401  (before mlagents_envs)
from unity_sb3.unity.errors import UnityConfigurationError
from unity_sb3.wrappers._lockstep_batches import (
    concat_decisions,
    concat_terminals,
    interrupted_terminals,
    put_actions,
    slice_actions,
    take_decisions,
    take_terminals,
)
from unity_sb3.wrappers._steps import StepReader

from mlagents_envs.base_env import (  # isort: skip
    ActionTuple,
    BaseEnv,
    BehaviorSpec,
    DecisionSteps,
    TerminalSteps,
)
from mlagents_envs.exception import UnityException  # isort: skip

Answerer = Callable[[str, DecisionSteps], ActionTuple | None]

#: real steps that one ``step()`` call of a view without agents in Unity runs itself while it waits
#: for one, before it returns to its ``UnityVecEnv`` (whose ``max_idle_steps`` then counts such calls)
MAX_WAIT_ROUNDS = 1000
_MISSING = object()


class UnityLockstepError(RuntimeError):
    """A lockstep view cannot go on: aborted, detached, timed out or closed."""


class UnityLockstepCrash(UnityException):
    """The Unity instance crashed in a step another view ran; a view with ``restart_on_crash`` restarts it."""


@dataclass(eq=False)
class ViewState:
    """One view as every instance sees it.

    :param name: the name the view was asked for and exposes (a real behavior or a base name).
    :param behaviors: the real behaviors whose agents it may own, in team order.
    :param spec: their (shared) ``BehaviorSpec``.
    :param by_base: named by its base name: owns agents of the learning team only.
    """

    name: str
    behaviors: tuple[str, ...]
    spec: BehaviorSpec
    by_base: bool
    detached: bool = False
    constructing: bool = False
    venv: Any = None  # its UnityVecEnv, once built: a proxy's close() detaches only when it closes


@dataclass(eq=False)
class ProxyState:
    """The barrier's bookkeeping of one view on one instance."""

    view: ViewState
    seen: int = -1  # the round of the state the view last read
    arrived: int = -1  # the round it waits in step() for, -1 = not waiting
    live: int = 0  # agents it owns that have not ended
    dec_rows: dict[str, np.ndarray] = field(default_factory=dict)  # its asking agents, rows per behavior
    inbox: dict[str, list[TerminalSteps]] = field(default_factory=dict)
    delivered: dict[str, list[TerminalSteps]] = field(default_factory=dict)
    cache: tuple[DecisionSteps, TerminalSteps] | None = None
    parts: list[tuple[str, int]] = field(default_factory=list)  # (behavior, agents) of the cached batch
    actions: dict[str, ActionTuple] = field(default_factory=dict)
    action_round: int = -1
    failed_generation: int = -1  # the instance generation whose crash this view was told about

    def needed(self) -> bool:
        return any(len(r) for r in self.dec_rows.values())


class InstanceBarrier:
    """The real ``BaseEnv`` of one instance, stepped in lockstep by the views' proxies.

    :param env: the real env.
    :param worker_id: the instance's index (in messages).
    :param specs: every behavior's spec.
    :param owner_for: ``owner_for(behavior)``: the view that owns an agent of ``behavior`` starting
        an episode now, or ``None``.
    :param parked: ``parked(view)``: whether none of the view's behaviors may own agents now.
    :param answerers: behavior -> answerer for agents no view answers (read at every step).
    :param step_timeout: seconds a view waits at the barrier before raising.
    :param reopen: opens the instance again after a crash (``None``: it cannot be restarted).
    """

    def __init__(
        self,
        env: BaseEnv,
        worker_id: int,
        specs: Mapping[str, BehaviorSpec],
        owner_for: Callable[[str], ViewState | None],
        parked: Callable[[ViewState], bool],
        answerers: Mapping[str, Answerer],
        step_timeout: float,
        reopen: Callable[[], BaseEnv] | None = None,
    ) -> None:
        self.env = env
        self.worker_id = worker_id
        self.specs = dict(specs)
        self.cond = threading.Condition()
        self.round = 0  # +1 at every real step and real reset
        self.unity_steps = 0
        self.generation = 0  # +1 at every restart of the instance
        self.reopen = reopen
        self._owner_for = owner_for
        self._parked = parked
        self._answerers = answerers
        self._timeout = float(step_timeout)
        self._readers = {name: StepReader(name, spec) for name, spec in self.specs.items()}
        self._steps = {n: (DecisionSteps.empty(s), TerminalSteps.empty(s)) for n, s in self.specs.items()}
        self._owner: dict[str, dict[int, ViewState | None]] = {name: {} for name in self.specs}
        #: behavior -> live agent -> (the latest batch it asked in, its row): for interrupted ends
        self._last: dict[str, dict[int, tuple[DecisionSteps, int]]] = {name: {} for name in self.specs}
        #: behavior -> (ids that asked, rows per owner, live agents per owner) of the last assignment;
        #: dropped whenever owners change other than by a step (claim, detach, reset, restart)
        self._known: dict[str, tuple[list[int], dict[ViewState, np.ndarray], dict[ViewState, int]]] = {}
        self._proxies: dict[ViewState, ProxyState] = {}
        self._stepped = True  # Unity stepped since the last real reset (or was never reset)
        self._busy = False
        self._error: BaseException | None = None
        self._failure: tuple[BaseException, str] | None = None  # a crash nobody restarted yet
        self._seed: int | None = None  # for the next real reset

    # ------------------------------------------------------------------ views
    def add_view(self, view: ViewState) -> ProxyState:
        """Register ``view``; agents of its behaviors that nobody owns now become its, when eligible."""
        with self.cond:
            self._wait_idle()
            state = self._proxies[view] = ProxyState(view)
            self._claim(view)
            return state

    def remove_view(self, view: ViewState) -> None:
        """Forget ``view`` (its construction failed)."""
        with self.cond:
            self._wait_idle()
            self._release_agents(view, keep_terminals=False)
            self._proxies.pop(view, None)
            self.cond.notify_all()

    def detach(self, view: ViewState) -> None:
        """Stop waiting for ``view``; its live agents go to their answerers (episode ends kept for a re-attach)."""
        with self.cond:
            self._wait_idle()
            self._release_agents(view, keep_terminals=True)
            self.cond.notify_all()

    def reseed(self, seed: int) -> None:
        """Seed the real env just before its next real reset (a shared reset does not reset it)."""
        with self.cond:
            self._seed = int(seed)

    def notify(self) -> None:
        """Wake every waiting view to look again (the ownership policy changed)."""
        with self.cond:
            self.cond.notify_all()

    def abort(self, error: BaseException) -> None:
        """Every waiting and later call of every view raises :class:`UnityLockstepError` from ``error``."""
        with self.cond:
            if self._error is None:
                self._error = error
            self.cond.notify_all()

    def _claim(self, view: ViewState) -> None:
        changed = False
        for name in view.behaviors:
            owners = self._owner[name]
            if self._owner_for(name) is not view:
                continue
            for agent, owner in owners.items():
                if owner is None:
                    owners[agent] = view
                    changed = True
        if changed:
            self._known.clear()
            self._assign(deliver_terminals=False)

    def _release_agents(self, view: ViewState, keep_terminals: bool) -> None:
        self._known.clear()
        state = self._proxies.get(view)
        for name in view.behaviors:
            owners = self._owner[name]
            mine = [a for a, o in owners.items() if o is view]
            for a in mine:
                owners[a] = None
            if mine and keep_terminals and state is not None:
                ended = interrupted_terminals(mine, self._last[name], self.specs[name])
                state.inbox.setdefault(name, []).append(ended)
        if state is not None:
            state.live = 0
            state.dec_rows = {}
            state.arrived = -1

    # ------------------------------------------------------------------ proxy calls
    def get_steps(self, state: ProxyState, name: str) -> tuple[DecisionSteps, TerminalSteps]:
        with self.cond:
            self._wait_idle()
            self._check(state, detached_ok=True)
            if name != state.view.name:
                raise KeyError(f"this lockstep view sees behavior {state.view.name!r} only, not {name!r}")
            if state.seen != self.round or state.cache is None:
                if state.seen != self.round:
                    state.seen = self.round
                    state.delivered, state.inbox = state.inbox, {}
                state.cache = self._view_steps(state)
            return state.cache

    def set_actions(self, state: ProxyState, name: str, action: ActionTuple) -> None:
        with self.cond:
            self._wait_idle()
            self._check(state)
            if name != state.view.name:
                raise KeyError(f"this lockstep view sees behavior {state.view.name!r} only, not {name!r}")
            total = sum(n for _, n in state.parts)
            action = state.view.spec.action_spec._validate_action(action, total, name)
            start = 0
            state.actions = {}
            for real, n in state.parts:
                state.actions[real] = slice_actions(action, start, start + n)
                start += n
            state.action_round = state.seen

    def step(self, state: ProxyState) -> None:
        with self.cond:
            self._check(state)
            if state.seen != self.round:
                return  # the view has not read the current state: for it, a step has happened
            state.arrived = self.round
            try:
                self._await_step(state)
            finally:
                state.arrived = -1

    def reset(self, state: ProxyState) -> None:
        with self.cond:
            self._check(state)
            self._wait_idle()
            state.inbox, state.delivered, state.cache = {}, {}, None
            if not self._stepped:  # shared: nobody stepped since the last real reset
                state.seen = -1
                return
            self._busy = True
            self.cond.release()
            try:
                self._real_reset(state.view)
            except BaseException as exc:
                self.cond.acquire()
                self._fail(exc, state.view)
                raise
            self.cond.acquire()
            self._busy = False
            self._stepped = False
            self.round += 1
            self.cond.notify_all()

    def restart(self, state: ProxyState) -> None:
        """Re-open the crashed instance for the view of ``state`` (``UnityVecEnv``'s restart reaches
        this through its factory); nothing to do when another view has re-opened it since the crash
        this view saw. Every view's live agents end as interrupted."""
        with self.cond:
            self._wait_idle()
            if self.generation > state.failed_generation or self._failure is None:
                return
            if self.reopen is None:
                raise UnityConfigurationError(
                    f"Unity worker {self.worker_id} was given as a BaseEnv object and cannot be re-opened; give "
                    "LockstepUnity a target string or a factory to restart crashed instances"
                )
            self._busy = True
            self.cond.release()
            try:
                with contextlib.suppress(Exception):  # the crashed instance may not close cleanly
                    self.env.close()
                env = self.reopen()
                specs = {name: env.behavior_specs[name] for name in env.behavior_specs}
                if specs != self.specs:
                    raise UnityConfigurationError(
                        f"Unity worker {self.worker_id} came back with behaviors {sorted(specs)} and other specs "
                        f"than before ({sorted(self.specs)})"
                    )
            except BaseException:
                self.cond.acquire()
                self._busy = False
                self.cond.notify_all()
                raise
            self.cond.acquire()
            for view, p in self._proxies.items():
                if not view.detached:
                    self._end_live_agents(view, p)
            for owners, last in zip(self._owner.values(), self._last.values()):
                owners.clear()
                last.clear()
            self._known.clear()
            self.env = env
            self._steps = {n: (DecisionSteps.empty(s), TerminalSteps.empty(s)) for n, s in self.specs.items()}
            for p in self._proxies.values():
                p.dec_rows, p.live, p.cache, p.actions = {}, 0, None, {}
            self._failure = None
            self.generation += 1
            self._stepped = True  # the next reset is a real one
            self.round += 1
            self._busy = False
            self.cond.notify_all()

    # ------------------------------------------------------------------ the barrier
    def _await_step(self, state: ProxyState) -> None:
        deadline = time.monotonic() + self._timeout
        waited = 0
        while True:
            self._check(state)
            if self.round != state.arrived:  # a real step (or reset) happened
                if state.live or state.inbox or state.needed() or waited >= MAX_WAIT_ROUNDS:
                    return
                # nothing of this view in Unity: wait on for an agent of its, holding nobody back
                state.seen = state.arrived = self.round
                deadline = time.monotonic() + self._timeout
            if not state.live and not state.inbox and self._parked(state.view):
                if state.view.constructing:
                    raise UnityLockstepError(
                        f"lockstep view {state.view.name!r} cannot own any agent now: its team is not the "
                        "learning team (set_learning_team); build the views before changing the learning team"
                    )
                if not any(
                    not p.view.detached and p is not state and not self._parked(p.view)
                    for p in self._proxies.values()
                ):
                    raise UnityLockstepError(
                        f"lockstep view {state.view.name!r} waits for its team to learn again, but no other "
                        "view steps Unity; call set_learning_team() so one of its teams learns, or detach it"
                    )
                self.cond.wait(0.5)
                deadline = time.monotonic() + self._timeout
                continue
            if not self._busy and self._ready(state):
                self._fire(state)
                waited += 1
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = [p.view.name for p in self._missing(state)]
                raise UnityLockstepError(
                    f"Unity worker {self.worker_id}: lockstep view {state.view.name!r} waited {self._timeout:g} s "
                    f"for view(s) {missing} to step; they never arrived. Each view must be stepped by its "
                    "own thread (a learner that stopped must be detached, a crashed one should abort())"
                )
            self.cond.wait(remaining)

    def _missing(self, state: ProxyState) -> list[ProxyState]:
        return [
            p
            for p in self._proxies.values()
            if p is not state and not p.view.detached and p.needed() and p.arrived != self.round
        ]

    def _ready(self, state: ProxyState) -> bool:
        return state.view.constructing or not self._missing(state)

    def _fire(self, state: ProxyState) -> None:
        """Run the real step with the lock released (the barrier is ``_busy`` meanwhile)."""
        self._busy = True
        self.cond.release()
        try:
            self._real_step()
        except BaseException as exc:
            self.cond.acquire()
            self._fail(exc, state.view)
            raise
        self.cond.acquire()
        self._busy = False
        self._stepped = True
        self.unity_steps += 1
        self.round += 1
        self.cond.notify_all()

    def _fail(self, exc: BaseException, view: ViewState) -> None:
        self._busy = False
        self._failure = (exc, view.name)
        state = self._proxies.get(view)
        if state is not None:  # this view raises ``exc`` itself
            state.failed_generation = self.generation
        self.cond.notify_all()

    def _wait_idle(self) -> None:
        while self._busy:
            self.cond.wait()

    def _check(self, state: ProxyState, detached_ok: bool = False) -> None:
        if self._error is not None:
            raise UnityLockstepError(
                f"lockstep view {state.view.name!r} stopped: {type(self._error).__name__}: {self._error}"
            ) from self._error
        if self._failure is not None:
            exc, who = self._failure
            state.failed_generation = self.generation
            raise UnityLockstepCrash(
                f"Unity worker {self.worker_id}: the Unity step run by lockstep view {who!r} failed "
                f"({type(exc).__name__}: {exc}); view {state.view.name!r} cannot go on unless it restarts "
                "the instance (restart_on_crash=True)"
            ) from exc
        if state.view.detached and not detached_ok:
            raise UnityLockstepError(
                f"lockstep view {state.view.name!r} is detached; LockstepUnity.attach() it before stepping it again"
            )

    # ------------------------------------------------------------------ real calls (lock released)
    def _real_step(self) -> None:
        proxies = [p for p in self._proxies.values() if not p.view.detached]
        for name, (dec, _) in self._steps.items():
            n = len(dec)
            if n == 0:
                continue
            action_spec = self.specs[name].action_spec
            full = action_spec.empty_action(n)
            covered = np.zeros(n, bool)
            for p in proxies:
                rows = p.dec_rows.get(name)
                part = p.actions.get(name)
                if rows is None or not len(rows) or part is None or p.action_round != self.round:
                    continue
                put_actions(full, rows, part)
                covered[rows] = True
            if not covered.all():
                missing = np.flatnonzero(~covered)
                answerer = self._answerers.get(name)
                answer = answerer(name, take_decisions(dec, missing)) if answerer is not None else None
                if answer is not None:
                    put_actions(full, missing, action_spec._validate_action(answer, len(missing), name))
            self.env.set_actions(name, full)
        for p in proxies:
            p.actions = {}
        self.env.step()
        self._read_steps()
        self._assign(deliver_terminals=True)

    def _end_live_agents(self, view: ViewState, p: ProxyState) -> None:
        """The view's live agents vanish from Unity: their episodes end, interrupted, in its inbox."""
        for name in view.behaviors:
            mine = [a for a, o in self._owner[name].items() if o is view]
            if mine:
                ended = interrupted_terminals(mine, self._last[name], self.specs[name])
                p.inbox.setdefault(name, []).append(ended)

    def _real_reset(self, resetter: ViewState) -> None:
        for view, p in self._proxies.items():
            if view is not resetter and not view.detached:
                self._end_live_agents(view, p)
        for owners, last in zip(self._owner.values(), self._last.values()):
            owners.clear()
            last.clear()
        self._known.clear()
        seed, self._seed = self._seed, None
        if seed is not None and hasattr(self.env, "reseed"):
            self.env.reseed(seed)
        self.env.reset()
        self._read_steps()
        self._assign(deliver_terminals=True)

    def _read_steps(self) -> None:
        for name, reader in self._readers.items():
            try:
                self._steps[name] = reader.read(self.env)
            except KeyError:  # a behavior registered but without agents yet
                spec = self.specs[name]
                self._steps[name] = (DecisionSteps.empty(spec), TerminalSteps.empty(spec))

    def _assign(self, deliver_terminals: bool) -> None:
        """Owners of ended and new agents, and each view's asking rows, from ``self._steps``."""
        proxies = self._proxies
        rows: dict[ProxyState, dict[str, np.ndarray]] = {p: {} for p in proxies.values()}
        live = dict.fromkeys(proxies.values(), 0)
        for name, (dec, term) in self._steps.items():
            asking, alive = self._assign_behavior(name, dec, term, deliver_terminals)
            for owner, view_rows in asking.items():
                p = proxies.get(owner)
                if p is not None:
                    rows[p][name] = view_rows
            for owner, count in alive.items():
                p = proxies.get(owner)
                if p is not None:
                    live[p] += count
        for p in proxies.values():
            p.dec_rows = rows[p]
            p.live = live[p]
            p.cache = None

    def _assign_behavior(
        self, name: str, dec: DecisionSteps, term: TerminalSteps, deliver_terminals: bool
    ) -> tuple[dict[ViewState, np.ndarray], dict[ViewState, int]]:
        """One behavior's asking rows and live agents per owner (views only; ``None`` left out)."""
        owners, last = self._owner[name], self._last[name]
        ids = dec.agent_id.tolist()
        if deliver_terminals:
            last.update(zip(ids, zip(repeat(dec), range(len(ids)))))
        known = self._known.get(name)
        if deliver_terminals and not len(term) and known is not None and known[0] == ids:
            return known[1], known[2]  # the same agents ask as last time, nobody ended: same owners
        if deliver_terminals and len(term):
            by_owner: dict[ViewState, list[int]] = {}
            for j, agent in enumerate(term.agent_id.tolist()):
                last.pop(agent, None)
                owner = owners.pop(agent, _MISSING)
                if owner is _MISSING:  # ended without ever asking
                    owner = self._owner_for(name)
                if owner is not None:
                    by_owner.setdefault(owner, []).append(j)  # type: ignore[arg-type]
            for owner, js in by_owner.items():
                p = self._proxies.get(owner)
                if p is not None:
                    p.inbox.setdefault(name, []).append(take_terminals(term, np.asarray(js)))
        asking_lists: dict[ViewState, list[int]] = {}
        for j, agent in enumerate(ids):
            owner = owners.get(agent, _MISSING)
            if owner is _MISSING:  # its episode starts: the policy names its owner
                owner = owners[agent] = self._owner_for(name)
            if owner is not None:
                asking_lists.setdefault(owner, []).append(j)  # type: ignore[arg-type]
        asking = {owner: np.asarray(js, dtype=np.int64) for owner, js in asking_lists.items()}
        alive: dict[ViewState, int] = {}
        for owner in owners.values():
            if owner is not None:
                alive[owner] = alive.get(owner, 0) + 1
        self._known[name] = (ids, asking, alive)
        return asking, alive

    def _view_steps(self, state: ProxyState) -> tuple[DecisionSteps, TerminalSteps]:
        view = state.view
        empty = np.zeros(0, np.int64)
        decs = [take_decisions(self._steps[n][0], state.dec_rows.get(n, empty)) for n in view.behaviors]
        terms = [t for n in view.behaviors for t in state.delivered.get(n, [])]
        state.parts = [(n, len(d)) for n, d in zip(view.behaviors, decs)]
        dec = concat_decisions(decs, view.spec)
        if sum(1 for d in decs if len(d)) > 1 and len(np.unique(dec.agent_id)) != len(dec):
            raise UnityConfigurationError(
                f"lockstep view {view.name!r}: agents of its teams {list(view.behaviors)} share ids "
                f"{dec.agent_id.tolist()}; Unity gives every agent of a scene its own id, so this BaseEnv "
                "must too (or make one view per team)"
            )
        return dec, concat_terminals(terms, view.spec)
