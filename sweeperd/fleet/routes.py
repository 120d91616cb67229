"""Where each queue is swept: the primary that owns its slot under a layout, as a function of the
layout, the key root and the primaries there are members for."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from sweeperd.config.settings import QueueSettings
from sweeperd.keyspace import QueueKeys
from sweeperd.server.topology import Layout, slot_of


class Slots:
    """Each queue's cluster slot (its keys' hash tag's), computed once per queue."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._slots: dict[str, int] = {}

    def __call__(self, queue: str) -> int:
        found = self._slots.get(queue)
        if found is None:
            found = self._slots[queue] = slot_of(QueueKeys(queue, self._root).active)
        return found


@dataclass(frozen=True)
class Routes:
    """The queues' owners under one layout (None: none read yet), among `members`: the
    primaries the fleet sweeps with (a primary of the layout it has no member for owns none)."""

    layout: Layout | None
    slots: Slots
    members: Collection[str]

    def owner(self, queue: str) -> str | None:
        """Return the member that owns the queue's slot now; None when none does."""
        layout = self.layout
        if layout is None:
            return None
        # One primary owns every slot: no slot to compute (nor to keep, per queue).
        found = layout.owner(0 if layout.owners is None else self.slots(queue))
        return found if found in self.members else None

    def split(
        self, queues: Sequence[QueueSettings]
    ) -> tuple[dict[str, list[QueueSettings]], list[QueueSettings]]:
        """Split the queues by the member that owns their slot, in their order, and return those
        none owns apart."""
        layout = self.layout
        if queues and layout is not None and layout.owners is None:
            # One primary owns every slot: the batch is its whole (or nobody's), no queue looked up.
            owner = layout.owner(0)
            if owner is None or owner not in self.members:
                return {}, list(queues)
            return {owner: list(queues)}, []
        routed: dict[str, list[QueueSettings]] = {}
        unrouted: list[QueueSettings] = []
        for q in queues:
            owner = self.owner(q.name)
            if owner is None:
                unrouted.append(q)
            else:
                routed.setdefault(owner, []).append(q)
        return routed, unrouted

    def owners(self, queues: Collection[str]) -> set[str | None]:
        """Return the owners of the queues (None among them when one has none)."""
        return {self.owner(q) for q in queues}
