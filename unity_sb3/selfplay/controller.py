"""ML-Agents' ghost trainer bookkeeping without its trainer: who learns, when to snapshot, when to swap.

Two classes after ``mlagents/trainers/ghost/``:

- :class:`GhostController` (its ``GhostController``): one per run. Team ids subscribe in order; the
  first is the learning team, the others wait in a queue; :meth:`~GhostController.change_training_team`
  puts the learning team at the back and takes the next. It computes the ELO change of a finished
  game against the rating of the opponent snapshot every other behavior is playing, and applies the
  opposite change to that snapshot.
- :class:`SelfPlayBehavior` (its ``GhostTrainer`` without the wrapped trainer): one per behavior
  (a symmetric behavior holds several teams, an asymmetric one a single team). Its
  :meth:`~SelfPlayBehavior.advance` runs the ghost trainer's rules, with ML-Agents' strict ``>``:

  * ``step - last_team_change > team_change``: the controller changes the learning team;
  * ``step - last_save > save_steps``: the latest weights become a snapshot;
  * the learning team changed, or ``ghost_step - last_swap > swap_steps``: every team of this
    behavior that does not learn gets an opponent drawn from the pool.

  ``step`` is the behavior's learner steps (its model's ``num_timesteps``); ``ghost_step`` counts
  the decisions its frozen copies answered (ML-Agents counts the ghost teams' trajectory steps).

Nothing here knows SB3 or Unity: the weights come from ``get_weights`` and go to the ghosts'
``load_weights``; :class:`unity_sb3.callbacks.self_play.SelfPlayCallback` connects them to a model
and the lockstep coordinator.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from unity_sb3.selfplay.elo import elo_change, result_from_reward
from unity_sb3.selfplay.settings import SelfPlaySettings
from unity_sb3.selfplay.snapshots import SnapshotPool, Weights

__all__ = ["Advance", "GhostController", "SelfPlayBehavior", "WeightsLoader"]


class WeightsLoader(Protocol):
    """What answers a team that does not learn (a :class:`~unity_sb3.selfplay.ghost.GhostPolicy`)."""

    decisions: int

    def load_weights(self, weights: Mapping[str, Any]) -> None: ...


@dataclass
class Advance:
    """What one :meth:`SelfPlayBehavior.advance` did.

    :param team_changed: the controller's learning team changed (this behavior triggered it).
    :param saved: a snapshot was saved (its ring slot), or ``None``.
    :param swapped: teams that got a new opponent, ``{team: opponent index}`` (-1 = latest).
    """

    team_changed: bool = False
    saved: int | None = None
    swapped: dict[int, int] | None = None


class GhostController:
    """The learning team of a run and the ELO bookkeeping between behaviors (ML-Agents' ``GhostController``).

    :param max_teams: the most team ids the queue holds (ML-Agents: 10).
    """

    def __init__(self, max_teams: int = 10) -> None:
        self._queue: deque[int] = deque(maxlen=max_teams)
        self._learning_team = -1
        self._behaviors: dict[int, SelfPlayBehavior] = {}
        #: held while a learner applies the rules (learner threads of an asymmetric game overlap)
        self.lock = threading.RLock()
        self.team_changes = 0

    @property
    def learning_team(self) -> int:
        """The team id that learns now (-1 before any team subscribed)."""
        return self._learning_team

    @property
    def behaviors(self) -> list[SelfPlayBehavior]:
        """The behaviors subscribed, each once, in order of subscription."""
        return list(dict.fromkeys(self._behaviors.values()))

    def behavior_of(self, team: int) -> SelfPlayBehavior:
        """The behavior that plays ``team``."""
        return self._behaviors[team]

    def subscribe(self, team: int, behavior: SelfPlayBehavior) -> None:
        """Add ``team`` (played by ``behavior``); the first team subscribed learns first."""
        if team in self._behaviors:
            if self._behaviors[team] is not behavior:
                raise ValueError(
                    f"team {team} is already played by behavior {self._behaviors[team].name!r}; "
                    f"behaviors trained against each other ({behavior.name!r}) need different team ids "
                    "(Unity's Behavior Parameters 'Team Id')"
                )
            return
        self._behaviors[team] = behavior
        if self._learning_team < 0:
            self._learning_team = team
        else:
            self._queue.append(team)

    def change_training_team(self, step: int = 0) -> int:
        """The learning team goes to the back of the queue and the next one learns.

        Teams of behaviors whose learner has finished are passed over while another behavior still
        trains (its learner would otherwise wait for a turn that never comes).

        :param step: the learner step that triggered the change (for the record).
        :return: the new learning team.
        """
        with self.lock:
            for _ in range(len(self._queue) + 1):
                self._queue.append(self._learning_team)
                self._learning_team = self._queue.popleft()
                if not self._behaviors[self._learning_team].finished:
                    break
            self.team_changes += 1
        return self._learning_team

    def opponent_elo(self) -> float:
        """The rating of the opponent snapshot the other teams play now (ML-Agents reads the last)."""
        rating = 0.0
        for team, behavior in self._behaviors.items():
            if team != self._learning_team:
                rating = behavior.pool.opponent_elo
        return rating

    def compute_elo_change(self, rating: float, result: float) -> float:
        """The learner's ELO change for ``result``; the opponent snapshots' ratings take the opposite.

        :param rating: the learning policy's rating.
        :param result: 1 win, 0.5 draw, 0 loss, from the learning team's side.
        """
        change = elo_change(rating, self.opponent_elo(), result)
        for team, behavior in self._behaviors.items():
            if team != self._learning_team:
                behavior.pool.change_opponent_elo(change)
        return change

    def state_dict(self) -> dict[str, Any]:
        """The learning team and the queue."""
        return {
            "learning_team": self._learning_team,
            "queue": list(self._queue),
            "team_changes": self.team_changes,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (the same teams must have subscribed)."""
        teams = {int(state["learning_team"]), *(int(t) for t in state["queue"])}
        if teams != set(self._behaviors):
            raise ValueError(
                f"the saved self-play state has teams {sorted(teams)} but this run has {sorted(self._behaviors)}"
            )
        with self.lock:
            self._learning_team = int(state["learning_team"])
            self._queue.clear()
            self._queue.extend(int(t) for t in state["queue"])
            self.team_changes = int(state.get("team_changes", 0))


class SelfPlayBehavior:
    """One behavior's ghost-trainer state: its snapshot pool, counters and the ghosts of its teams.

    :param name: the behavior (base name for a symmetric behavior, ``"Tennis"``).
    :param teams: the team ids it plays (``[0, 1]`` for a symmetric 2-team scene).
    :param settings: its ``self_play`` settings.
    :param controller: the run's controller; the teams subscribe to it in the order given.
    :param seed: seed of the opponent draws.
    """

    def __init__(
        self,
        name: str,
        teams: Sequence[int],
        settings: SelfPlaySettings,
        controller: GhostController,
        seed: int | None = None,
    ) -> None:
        if not teams:
            raise ValueError(f"behavior {name!r} plays no team; give at least one team id")
        self.name = name
        self.teams = [int(t) for t in teams]
        self.settings = settings
        self.controller = controller
        self.pool = SnapshotPool.from_settings(settings, seed)
        self.ghosts: dict[int, WeightsLoader] = {}
        self.get_step: Callable[[], int] | None = None
        self.get_weights: Callable[[], Mapping[str, Any]] | None = None
        self.learning_team: int | None = None
        self.last_save = self.last_swap = self.last_team_change = 0
        self.started = self.finished = False
        self._ghost_base = 0  # ghost steps counted before a restore
        for team in self.teams:
            controller.subscribe(team, self)

    @property
    def is_learning(self) -> bool:
        """Whether one of this behavior's teams is the controller's learning team."""
        return self.controller.learning_team in self.teams

    @property
    def elo(self) -> float:
        """The learning policy's ELO."""
        return self.pool.current_elo

    @property
    def ghost_step(self) -> int:
        """Decisions answered by this behavior's ghosts (restored runs included)."""
        return self._ghost_base + sum(int(g.decisions) for g in self.ghosts.values())

    def bind(self, get_step: Callable[[], int], get_weights: Callable[[], Mapping[str, Any]]) -> None:
        """Connect the learner: its step count and its live weights."""
        self.get_step, self.get_weights = get_step, get_weights

    def start(self) -> None:
        """First snapshot of the learner (ML-Agents snapshots the fresh policy) and every ghost on
        the latest weights; a restored behavior keeps its pool and only reloads its ghosts."""
        assert self.get_weights is not None, "bind() the learner first"
        if self.pool.current is None:
            self.pool.set_current(self.get_weights())
            self.pool.save_snapshot()
            self.learning_team = self.controller.learning_team
            for ghost in self.ghosts.values():
                ghost.load_weights(self.pool.current)
        else:
            for team, ghost in self.ghosts.items():
                use_latest = team == self.learning_team or self.pool.current_opponent == -1
                ghost.load_weights(
                    self.pool.current if use_latest else self.pool.snapshots[self.pool.current_opponent]
                )
        self.started = True

    def record_episode(self, final_reward: float, group_reward: float = 0.0) -> float:
        """Update the ELO with one finished episode of the learning team.

        :param final_reward: the learning agent's last reward of the episode.
        :param group_reward: its group reward at that step.
        :return: the learner's new ELO.
        """
        result = result_from_reward(final_reward, group_reward)
        self.pool.change_current_elo(self.controller.compute_elo_change(self.pool.current_elo, result))
        return self.pool.current_elo

    def advance(self) -> Advance:
        """Apply the ghost trainer's rules at the learner's current step (see the module doc)."""
        done = Advance()
        if not self.started or self.get_step is None or self.get_weights is None:
            return done
        step = int(self.get_step())
        if step - self.last_team_change > self.settings.team_change:
            self.controller.change_training_team(step)
            self.last_team_change = step
            done.team_changed = True
        next_team = self.controller.learning_team
        if step - self.last_save > self.settings.save_steps:
            self.pool.set_current(self.get_weights())
            done.saved = self.pool.save_snapshot()
            self.last_save = step
        if self.learning_team != next_team or self.ghost_step - self.last_swap > self.settings.swap_steps:
            self.learning_team = next_team
            done.swapped = self.swap()
            self.last_swap = self.ghost_step
        return done

    def swap(self) -> dict[int, int]:
        """Draw an opponent for every team of this behavior that does not learn and load it.

        :return: ``{team: opponent index}`` (-1 = the latest weights).
        """
        assert self.get_weights is not None, "bind() the learner first"
        self.pool.set_current(self.get_weights())
        drawn = {}
        for team in self.teams:
            if team == self.learning_team:
                continue
            weights: Weights = self.pool.draw_opponent()
            if team in self.ghosts:
                self.ghosts[team].load_weights(weights)
            drawn[team] = self.pool.current_opponent
        return drawn

    def state_dict(self) -> dict[str, Any]:
        """Pool, counters and the learning team as this behavior last saw it."""
        return {
            "name": self.name,
            "teams": list(self.teams),
            "pool": self.pool.state_dict(),
            "ghost_step": self.ghost_step,
            "last_save": self.last_save,
            "last_swap": self.last_swap,
            "last_team_change": self.last_team_change,
            "learning_team": self.learning_team,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (same teams and window)."""
        if [int(t) for t in state["teams"]] != self.teams:
            raise ValueError(
                f"the saved self-play state of {state['name']!r} plays teams {list(state['teams'])}, "
                f"but behavior {self.name!r} plays {self.teams}"
            )
        self.pool.load_state_dict(state["pool"])
        self._ghost_base = int(state["ghost_step"]) - sum(int(g.decisions) for g in self.ghosts.values())
        self.last_save = int(state["last_save"])
        self.last_swap = int(state["last_swap"])
        self.last_team_change = int(state["last_team_change"])
        team = state["learning_team"]
        self.learning_team = None if team is None else int(team)
