"""What writing during the session adds to a turn of RecencyMemoryBlock, as a same-run ratio.

Each turn is ``Memory.aput(user) + Memory.aget() + Memory.aput(assistant)`` with the block
over the same temporary Edge store (50 memories, MockEmbedding), (a) read-only (no llm) and
(b) writing, its extraction LLM a loopback OpenAI-compatible server that answers after a
fixed delay. The extraction runs off the turn, in the block's writer thread: a turn of (b)
only adds handing the finished exchange over (hashing it, an fsynced outbox line), which
overlaps the retrieval. Rounds alternate (a) and (b) in fresh sessions.

Run: .venv/bin/python benchmarks/block_latency.py [--turns 20] [--delay-ms 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

from llama_index.core import MockEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.llms import LLM
from llama_index.core.memory import Memory

from llama_index_recency import RecencyMemoryBlock, memory_node, open_memory_index, openai_like_llm

MEMORIES = 50


class SlowExtractionServer:
    """A loopback ``/v1/chat/completions`` that waits ``delay`` seconds, then calls
    record_memories with no memory (so both stores keep the same 50)."""

    def __init__(self, delay: float) -> None:
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests += 1
                time.sleep(delay)
                call = {"id": "call-1", "type": "function", "function": {
                    "name": "record_memories", "arguments": json.dumps({"memories": []})}}
                answer = json.dumps({
                    "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                        "role": "assistant", "content": None, "tool_calls": [call]}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


async def session(block: RecencyMemoryBlock, turns: int, name: str) -> list[float]:
    """Seconds per turn of a fresh ``Memory`` session with ``block``."""
    memory = Memory.from_defaults(session_id=name, memory_blocks=[block])
    seconds = []
    for turn in range(turns):
        start = time.perf_counter()
        await memory.aput(ChatMessage(role="user", content=f"Turn {turn}: I walked {turn} km."))
        await memory.aget()
        await memory.aput(ChatMessage(role="assistant", content=f"Nice walk number {turn}!"))
        seconds.append(time.perf_counter() - start)
    return seconds


async def run(turns: int, delay: float, rounds: int) -> None:
    server = SlowExtractionServer(delay)
    index = open_memory_index(MockEmbedding(embed_dim=64))
    today = date.today()
    index.insert_nodes([memory_node(f"The user did thing number {i}.", today - timedelta(days=i))
                        for i in range(MEMORIES)])
    llm = openai_like_llm(model="bench", api_base=server.base_url, api_key="k", max_retries=0)
    blocks: dict[str, tuple[Optional[LLM], list[float]]] = {
        "(a) read-only, no llm": (None, []), f"(b) writing, {delay * 1e3:.0f} ms LLM": (llm, [])}
    for block_llm, _ in blocks.values():  # first retrieval's and first LLM client's set-up
        warm = RecencyMemoryBlock(index=index, llm=block_llm)
        await session(warm, 3, "warm-up")
        await warm.await_writes()
    server.requests = 0
    drains = []
    for round_ in range(rounds):
        for label, (block_llm, seconds) in blocks.items():
            block = RecencyMemoryBlock(index=index, llm=block_llm)
            seconds += await session(block, turns, f"{label}-{round_}")
            start = time.perf_counter()  # untimed for the turns: no writes overlap the next round
            await block.await_writes()
            if block_llm is not None:
                drains.append(time.perf_counter() - start)

    print(f"{turns} turns x {rounds} rounds, {MEMORIES} memories, outbox at {block.outbox_path}")
    print(f"{'block':32s} {'median ms/turn':>15s} {'p90 ms/turn':>12s}")
    medians = []
    for label, (_, seconds) in blocks.items():
        ms = sorted(s * 1e3 for s in seconds)
        medians.append(statistics.median(ms))
        print(f"{label:32s} {medians[-1]:15.2f} {ms[int(0.9 * (len(ms) - 1))]:12.2f}")
    print(f"ratio b/a (median): {medians[1] / medians[0]:.2f}")
    print(f"extraction requests: {server.requests} (one per finished exchange), each answered "
          f"after {delay * 1e3:.0f} ms in the writer thread, off the turn: the writes went on "
          f"for a median {statistics.median(drains):.2f} s after a session's last turn")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--delay-ms", type=float, default=200.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(run(args.turns, args.delay_ms / 1e3, args.rounds))


if __name__ == "__main__":
    main()
