"""Which turns of an agent session went to the memory writer: each goes once, and a new
conversation under an old session id starts anew."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import List, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_index_recency.records.nodes import Turn
from llama_index_recency.storage import Conversation


class SessionTurns:
    """Which turns of one session went to the writer, so each goes once.

    A turn is known by a hash of its role, text and occurrence in the session (a user who
    says "yes" twice said two turns); occurrences count on from the turns a flush took out
    of the history the block is shown. Each is kept with when the block first saw it, which
    a forget of the user is compared with.

    A session id names one conversation: a new ``Memory`` under an old id is taken for the
    same conversation, so what its user says again is not sent again.
    """

    def __init__(self) -> None:
        self.sent: set[bytes] = set()
        self.seen: dict[bytes, datetime] = {}
        self.flushed: Counter[tuple[str, str]] = Counter()
        self.held: Optional[Conversation] = None  # the outbox entry of the turns not sent yet
        self.held_turns: list[tuple[bytes, Turn]] = []
        self.flushed_last: Optional[tuple[bytes, Turn]] = None  # the turn a flush took last

    def keyed(self, turns: Sequence[Turn]) -> list[tuple[bytes, Turn]]:
        """``turns`` (the history after the flushed turns, in order), keyed."""
        seen: Counter[tuple[str, str]] = Counter()
        keyed = []
        now = datetime.now(timezone.utc)
        for turn in turns:
            said = (turn.role, turn.text)
            occurrence = self.flushed[said] + seen[said]
            seen[said] += 1
            key = hashlib.blake2b(f"{turn.role}\0{occurrence}\0{turn.text}".encode(),
                                  digest_size=16).digest()
            self.seen.setdefault(key, now)
            keyed.append((key, turn))
        return keyed

    def seen_at(self, keyed: Sequence[tuple[bytes, Turn]]) -> tuple[datetime, ...]:
        """When the block first saw each of ``keyed`` (as :meth:`keyed` gives them)."""
        return tuple(self.seen[key] for key, _ in keyed)

    def unsent(self, turns: Sequence[Turn], start: int = 0) -> list[tuple[bytes, Turn]]:
        """The not yet sent of ``turns[start:]`` (as :meth:`keyed` takes them), keyed, after
        the assistant turn sent just before the first of them: the question a user's turn
        may answer ("Are you allergic to nuts?" before "Yes"), which the writer is shown and
        takes no fact from (facts come from user turns only); before the history's first
        turn, the turn a flush took last, while nothing was sent since."""
        return self._after_question(self.keyed(turns), start, self.flushed_last)

    def unsent_of(self, keyed: Sequence[tuple[bytes, Turn]]) -> list[tuple[bytes, Turn]]:
        """Of ``keyed`` (as :meth:`unsent` gave them), the turns not sent since, after the
        assistant turn just before the first of them."""
        return self._after_question(keyed, 0, None)

    def _after_question(self, keyed: Sequence[tuple[bytes, Turn]], start: int,
                        before_all: Optional[tuple[bytes, Turn]]) -> list[tuple[bytes, Turn]]:
        first = next((i for i in range(start, len(keyed)) if keyed[i][0] not in self.sent),
                     len(keyed))
        before = keyed[first - 1] if first else before_all
        asked = [before] if before is not None and before[1].role == "assistant" \
            and before[0] in self.sent else []
        return asked + [(key, turn) for key, turn in keyed[first:] if key not in self.sent]

    def sent_now(self, keyed: Sequence[tuple[bytes, Turn]]) -> None:
        """Mark ``keyed`` sent: the turn a flush took last is no question for a later one."""
        self.sent.update(key for key, _ in keyed)
        self.flushed_last = None

    def flush(self, turns: Sequence[Turn]) -> None:
        """Count ``turns`` (the front of the history) as gone from it, all sent."""
        keyed = self.keyed(turns)
        self.sent.update(key for key, _ in keyed)
        self.flushed_last = keyed[-1] if keyed else self.flushed_last
        self.flushed.update((turn.role, turn.text) for turn in turns)


def chat_turns(messages: List[ChatMessage]) -> list[Turn]:
    """The user and assistant messages with text, as the writer's turns."""
    return [
        Turn(role=message.role.value, text=message.content.strip())  # type: ignore[arg-type]
        for message in messages
        if message.role in (MessageRole.USER, MessageRole.ASSISTANT)
        and message.content and message.content.strip()
    ]
