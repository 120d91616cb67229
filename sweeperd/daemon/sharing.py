"""A replica's share of the queues: its heartbeat, the members it sees, the queues it owns."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis
import structlog

from sweeperd.config.settings import QueueSettings, Settings
from sweeperd.constants import DEFAULT_PREFIX_ROOT, Shard
from sweeperd.daemon.membership import MembershipStore, View
from sweeperd.fleet.primary import Primary
from sweeperd.logs import cap_ids
from sweeperd.ownership import owner
from sweeperd.reasons import Reason, reason_of
from sweeperd.server.connection import UNREACHABLE

log = structlog.get_logger("sweeperd.sharing")

# A member heartbeats BEATS_PER_TTL times within its time to live. `members` is EVERY_QUEUE when
# sharing is off or refused: every queue is this replica's.
BEATS_PER_TTL = 3
EVERY_QUEUE = None
# The members key is served elsewhere now (its slot moved, its primary was failed over): the
# layout is read again and the heartbeat sent there. MovedError is an AskError: tested first.
ELSEWHERE = (redis.exceptions.MovedError, redis.exceptions.ReadOnlyError)
# The server cannot serve the key now, and will: no answer, as if unreachable, not a refusal.
NOT_NOW = (
    redis.exceptions.ClusterDownError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
)
# What a refusal means, and what to do, by its reason; every other one is said as it is.
REFUSAL_HINTS = {
    Reason.NOPERM: "grant the sweeperd user the <root>:sweeperd:* keys and EVALSHA "
    "(docs/security.md#the-acl-user), or run with --shard off",
    Reason.OOM: "the server is at its maxmemory and refuses writes: free memory or raise "
    "maxmemory, or run with --shard off",
    Reason.WRONGTYPE: "the members key holds another type (something else wrote it): delete "
    "it, or give sweeperd a --prefix-root of its own",
}
SWEPT_MEANWHILE = "meanwhile every queue is swept"


@dataclass
class Sharing:
    """What this replica owns follows from `members`: None = every queue (sharing off, or
    refused by the server), an empty set = none (no heartbeat answered yet), else the queues
    rendezvous hashing gives it among the members it saw last. A member whose entry expired
    unrenewed (no view left) keeps that share: the others take it over too, and an overlap is
    harmless where a gap is not (in a Cluster the members key's primary may be the only one
    out of reach).

    `node` is the server holding the members key (in a cluster: its slot's primary) and
    `store` the heartbeat on it, None until a node is known; `home` says where the key lives
    now if it moves, `relocate` reads the layout again now (a MOVED). Off (--shard off), every
    queue is this replica's and no heartbeat is sent. `changes` counts the times the queues it
    owns changed with the members it sees; `_view` is the last heartbeat's answer. Once it
    `_left` (SIGTERM) no heartbeat brings it back; while `_lost` (membership_lost said) the
    next answer says membership_restored.
    """

    node: Primary | None
    member_id: str
    ttl_s: float
    store: MembershipStore | None
    on: bool = True
    home: Callable[[], Primary | None] | None = None
    relocate: Callable[[], object] | None = None
    root: str = DEFAULT_PREFIX_ROOT
    members: frozenset[str] | None = frozenset()
    changes: int = 0
    _view: View | None = field(default=None, init=False)
    # monotonic: this member's entry outlives no answer past it
    _alive_until: float | None = field(default=None, init=False)
    # the server's refusal of the heartbeat, while it lasts
    _refused: str | None = field(default=None, init=False)
    # why the server cannot serve the heartbeat now, said once
    _unanswered: str | None = field(default=None, init=False)
    _left: bool = field(default=False, init=False)
    _lost: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @classmethod
    def of(
        cls,
        settings: Settings,
        home: Callable[[], Primary | None],
        relocate: Callable[[], object] | None = None,
    ) -> Sharing:
        """The replica's sharing; its heartbeat goes to whatever node `home` names at the time
        (a failover or a migrated slot moves the members key), after `relocate` read the
        layout again when the node it went to sent it elsewhere."""
        d = settings.daemon
        on = d.shard is Shard.ON
        return cls(
            None,
            d.instance_id,
            d.heartbeat,
            None,
            on=on,
            home=home,
            relocate=relocate,
            root=settings.prefix_root,
            members=frozenset() if on else EVERY_QUEUE,
        )

    def located(self) -> MembershipStore | None:
        """The heartbeat on the node that holds the members key now; None while none is known."""
        node = self.home() if self.home is not None else self.node
        if node is None:
            return None
        if self.store is None or node is not self.node:
            self.node = node
            self.store = MembershipStore(node.client, self.root, self.member_id, self.ttl_s)
        return self.store

    @property
    def period_s(self) -> float:
        return self.ttl_s / BEATS_PER_TTL

    def refresh(self, now: float) -> bool:
        """Send one heartbeat at monotonic `now` (a lapse while no primary is known yet, or
        mid-failover); return True when what this replica owns may change. Under the lock: a
        heartbeat in flight never lands after the leave."""
        with self._lock:
            if not self.on or self._left:
                return False
            before = self.members
            store, node = self.located(), self.node
            if store is None or node is None:
                self.lapse(now)
            else:
                self.beat(store, node, now)
            return self.members != before

    def beat(
        self, store: MembershipStore, node: Primary, now: float, *, again: bool = True
    ) -> None:
        """Send the heartbeat to `store` on `node`: sent again where the key lives now when its
        primary failed over or its slot moved; refused for an ACL without the key or a key of
        the wrong type."""
        try:
            view = store.beat()
        except ELSEWHERE as exc:
            moved = self.moved_to(store, again)
            if moved is None:
                self.not_now(exc, now)
            else:
                self.beat(*moved, now, again=False)
        except UNREACHABLE as exc:
            node.unreachable(exc)
            self.lapse(now)
        except NOT_NOW as exc:
            self.not_now(exc, now)
        except redis.RedisError as exc:
            self.refuse(exc)
        else:
            node.answered(now)
            self.joined(view, now)

    def moved_to(
        self, store: MembershipStore, again: bool
    ) -> tuple[MembershipStore, Primary] | None:
        """The heartbeat's new place, once the layout is read again; None when it is not known
        yet (or this beat was already sent on)."""
        if not again or self.relocate is None:
            return None
        self.relocate()
        moved, node = self.located(), self.node
        if moved is None or node is None or moved is store:
            return None
        return moved, node

    def not_now(self, exc: redis.RedisError, now: float) -> None:
        """The server cannot serve the heartbeat now (the Cluster is down, the key's slot
        migrates or moved): no answer, not a refusal; it keeps its share meanwhile."""
        error = str(exc)
        if self._unanswered != error:
            log.warning(
                "membership_unanswered",
                member=self.member_id,
                reason=str(reason_of(exc)),
                error=error,
                hint="the heartbeat is sent again at the next beat; this replica keeps "
                "sweeping its share meanwhile, and the others take it over too if it stays "
                "unanswered past its heartbeat's time to live",
            )
        self._unanswered = error
        self.lapse(now)

    def joined(self, view: View, now: float) -> None:
        """A heartbeat answered: a refusal, an unanswered beat or a lost membership said
        before ends with membership_restored; the members seen now."""
        if self._refused is not None or self._unanswered is not None or self._lost:
            log.info("membership_restored", member=self.member_id, after=self._ended())
            self._refused = self._unanswered = None
            self._lost = False
        self._view, self._alive_until = view, now + self.ttl_s
        old = self.members or frozenset()
        if view.members != old:
            joined, left = sorted(view.members - old), sorted(old - view.members)
            log.info(
                "members_changed",
                member=self.member_id,
                members=len(view.members),
                joined=len(joined),
                left=len(left),
                joined_ids=cap_ids(joined),
                left_ids=cap_ids(left),
            )
        self.members = view.members

    def lapse(self, now: float) -> None:
        """No answer: once this member's own deadline passed it is no member for the others,
        who take its queues; it goes on sweeping its last share where the server answers."""
        view = self._view
        if view is not None and self._alive_until is not None and now >= self._alive_until:
            others = sorted(view.members - {self.member_id})
            log.warning(
                "membership_lost",
                member=self.member_id,
                others=others,
                hint="its heartbeat expired unrenewed: "
                + (
                    f"{', '.join(others)} take its queues too"
                    if others
                    else "no other member was live"
                )
                + "; it keeps sweeping its share where the server answers",
            )
            self._view, self._lost = None, True

    def _ended(self) -> str:
        """What the restored membership ends: its loss, a refusal, or an unanswered beat."""
        if self._lost:
            return "lost"
        return "refused" if self._refused is not None else "unanswered"

    def refuse(self, exc: redis.RedisError) -> None:
        """A heartbeat refused: sweep every queue rather than leave any unswept."""
        error, reason = str(exc), reason_of(exc)
        if self._refused != error:
            hint = REFUSAL_HINTS.get(reason)
            log.warning(
                "membership_refused",
                member=self.member_id,
                reason=str(reason),
                error=error,
                hint=f"{hint}; {SWEPT_MEANWHILE}"
                if hint
                else f"the server refused the heartbeat; {SWEPT_MEANWHILE}",
            )
        self._refused, self.members, self._view = error, EVERY_QUEUE, None

    def owns(self, queue: str) -> bool:
        members = self.members
        return members is EVERY_QUEUE or owner(queue, members) == self.member_id

    def owned(self, queues: Sequence[QueueSettings]) -> list[QueueSettings]:
        """The queues this replica sweeps now, in their order."""
        return [q for q in queues if self.owns(q.name)]

    def moved(self, gained: int, lost: int, owned: int) -> None:
        """Queues that changed hands at this replica: counted and logged (counts, not names)."""
        if gained or lost:
            self.changes += 1
            log.info("queues_moved", gained=gained, lost=lost, owned=owned)

    def seen(self) -> int:
        """The live members this replica sees, itself included; 0 when it is not one."""
        view = self._view
        return len(view.members) if view is not None else 0

    def leave(self) -> None:
        """SIGTERM: the entry removed now, so the others take the queues without waiting."""
        with self._lock:
            if not self.on or self._left:
                return
            self._left = True
            if self._alive_until is None or (self.node is not None and self.node.up is False):
                # Never joined, or its node is down: its entry (if any) expires alone.
                return
            store = self.located()
            if store is None:
                return
            try:
                store.leave()
            except redis.RedisError as exc:
                log.warning("leave_failed", member=self.member_id, error=str(exc))
                return
            log.info("left", member=self.member_id)

    def describe(self) -> str:
        """The member list, for the landing page."""
        if not self.on:
            return "sharing off: this replica sweeps every queue"
        if self._refused is not None:
            return f"sharing refused ({self._refused}): this replica sweeps every queue"
        view = self._view
        if view is None and self.members:
            return (
                f"{self.member_id} is not a member now (its heartbeat expired unanswered): "
                "it sweeps its last share where the server answers"
            )
        if view is None or not self.members:
            return f"{self.member_id} is not a member now: it sweeps no queue"
        lines = [f"members ({len(view.members)}), this replica is {self.member_id}:"]
        for member, deadline in sorted(view.deadlines_ms.items()):
            lines.append(f"  {member}  expires in {(deadline - view.now_ms) / 1000:.1f} s")
        return "\n".join(lines)
