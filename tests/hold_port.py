#!/usr/bin/python3
"""hold_port.py [N] - print N free TCP ports (default 1), one per line, and hold them until
the reader of stdout goes away (tests/hold_port.sh runs it).

A port found by binding port 0 and closing the socket at once is back in the pool: anyone's
bind to port 0 or outgoing connection can take it before the test's rank 0 listens on it, and
rank 0 then fails with "port ... is in use". Here each port stays bound with SO_REUSEADDR and
not listening, as `ddptrain launch` holds its own: the kernel gives it to no one else, while
the rendezvous, which sets SO_REUSEADDR too, can still listen on it.
"""
import select
import socket
import sys

held = []
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("", 0))
    held.append(s)
sys.stdout.write("".join(f"{s.getsockname()[1]}\n" for s in held))
sys.stdout.flush()
# a pipe's write end polls as POLLERR once no reader is left: the test has ended
p = select.poll()
p.register(sys.stdout.fileno(), 0)
p.poll()
