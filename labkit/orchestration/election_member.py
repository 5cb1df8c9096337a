"""One election member, a process of its own on one simulated node: it heartbeats its peers over
UDP, applies the leader rule every tick and records what it saw and decided as JSON lines.

``python -m labkit.orchestration.election_member --node N --addresses A,B,C --rule R --out F``
(started by ``election.election_experiment``).
"""

from __future__ import annotations

import argparse
import json
import select
import signal
import socket
import sys
import time
from pathlib import Path

from labkit.orchestration.election import ALIVE_S, HEARTBEAT_PORT, INTERVAL_S, RULES, decide


def run_member(node: int, addresses: list[str], rule: str, out: Path, lifetime_s: float,
               port: int = HEARTBEAT_PORT, interval_s: float = INTERVAL_S,
               alive_s: float = ALIVE_S) -> None:
    """The member loop (run inside node's namespace): every ``interval_s`` send a heartbeat to
    every peer, take in what arrived, decide by ``rule`` and append one JSON line to ``out``:
    ``{"t": wall time, "node", "leader", "working", "visible": [...]}``. Ends after
    ``lifetime_s`` (a safety net: the experiment ends it long before). ``"late"`` in each
    line: how late the tick ran on a busy machine (a peer drops a member whose ticks are late
    by more than ``alive_s - interval_s``, network or not)."""
    nodes = len(addresses)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((addresses[node], port))
    sock.setblocking(False)
    heard: dict[int, float] = {}
    message = json.dumps({"node": node}).encode()
    end = time.monotonic() + lifetime_s
    next_tick = time.monotonic()
    with out.open("a", buffering=1) as log:
        while time.monotonic() < end:
            for peer, address in enumerate(addresses):
                if peer != node:
                    try:
                        sock.sendto(message, (address, port))
                    except OSError:
                        pass  # cut off: no route, no carrier; the peer will miss us
            next_tick += interval_s
            while (wait := next_tick - time.monotonic()) > 0:
                ready, _, _ = select.select([sock], [], [], wait)
                while ready:
                    try:
                        data = sock.recv(512)
                    except BlockingIOError:
                        break
                    except OSError:
                        continue  # an ICMP error from an earlier send: ignore
                    try:
                        peer = int(json.loads(data)["node"])
                    except (ValueError, KeyError, TypeError):
                        continue
                    if 0 <= peer < nodes and peer != node:
                        heard[peer] = time.monotonic()
            now = time.monotonic()
            visible = {node} | {p for p, t in heard.items() if now - t <= alive_s}
            leader, working = decide(node, visible, nodes, rule)
            log.write(json.dumps({"t": time.time(), "node": node, "leader": leader,
                                  "working": working, "visible": sorted(visible),
                                  "late": round(max(0.0, now - next_tick), 4)}) + "\n")
            if next_tick < time.monotonic():  # fell behind (a busy machine): don't burst
                next_tick = time.monotonic()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m labkit.orchestration.election_member",
                                     description="one election member (started by the experiment)")
    parser.add_argument("--node", type=int, required=True)
    parser.add_argument("--addresses", required=True, help="every node's address, comma-separated")
    parser.add_argument("--rule", choices=RULES, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--lifetime", type=float, default=60.0)
    parser.add_argument("--port", type=int, default=HEARTBEAT_PORT)
    parser.add_argument("--interval", type=float, default=INTERVAL_S)
    parser.add_argument("--alive", type=float, default=ALIVE_S)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # flush the log on the way out
    run_member(args.node, args.addresses.split(","), args.rule, args.out, args.lifetime,
               args.port, args.interval, args.alive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
