#!/usr/bin/env python3
"""proxy.py LISTEN_PORT TARGET_HOST TARGET_PORT: a TCP proxy on 127.0.0.1 whose link
can be cut and healed, for the fault soak's "a node's connection to PostgreSQL cut".

Commands on stdin, one per line, each answered on stdout:
  cut    from now on nothing is read or forwarded either way, and new connections are
         accepted but not connected onwards: to both ends the link goes silent, as in
         a network partition (TCP keeps the connections; what was sent waits);
  heal   everything held is forwarded and new connections go through again;
  reset  every connection is closed at once (a RST-like failure, not a silence).
End of stdin stops the proxy. One thread, one selector.
"""

import selectors
import socket
import sys
import threading

BUFFER = 1 << 16


class Pair:
    def __init__(self, client):
        self.client = client
        self.server = None
        self.to_server = bytearray()
        self.to_client = bytearray()
        self.ended = False


def main():
    listen_port, target_host, target_port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", listen_port))
    listener.listen(256)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, None)
    wake_r, wake_w = socket.socketpair()
    selector.register(wake_r, selectors.EVENT_READ, "wake")
    state = {"cut": False, "reset": False, "stop": False}
    lock = threading.Lock()
    pairs = []

    def commands():
        for line in sys.stdin:
            word = line.strip()
            with lock:
                if word == "cut":
                    state["cut"] = True
                elif word == "heal":
                    state["cut"] = False
                elif word == "reset":
                    state["reset"] = True
            wake_w.send(b"x")
            print(word, flush=True)
        with lock:
            state["stop"] = True
        wake_w.send(b"x")

    threading.Thread(target=commands, daemon=True).start()
    print("ready", flush=True)

    def close(pair):
        for sock in (pair.client, pair.server):
            if sock is not None:
                if sock in registered:
                    selector.unregister(sock)
                    registered.discard(sock)
                sock.close()
        if pair in pairs:
            pairs.remove(pair)

    def connect(pair):
        try:
            pair.server = socket.create_connection((target_host, target_port), timeout=3)
            pair.server.setblocking(False)
        except OSError:
            close(pair)

    registered = set()

    def interest(sock, events, data):
        if events == 0:
            if sock in registered:
                selector.unregister(sock)
                registered.discard(sock)
        elif sock in registered:
            selector.modify(sock, events, data)
        else:
            selector.register(sock, events, data)
            registered.add(sock)

    while True:
        with lock:
            cut, stop = state["cut"], state["stop"]
            reset, state["reset"] = state["reset"], False
        if stop:
            break
        if reset:
            for pair in list(pairs):
                close(pair)
        for pair in list(pairs):
            if not cut and pair.server is None:
                connect(pair)
                if pair not in pairs:
                    continue
            if pair.ended and not pair.to_client and not pair.to_server and not cut:
                close(pair)
                continue
            # While cut nothing is read or written: to both ends the link is silent,
            # as in a partition (what they sent waits in their buffers, and an end of
            # either side is seen once healed).
            for sock, side, pending in ((pair.client, "client", pair.to_client),
                                        (pair.server, "server", pair.to_server)):
                if sock is None:
                    continue
                events = 0
                if not cut:
                    if not pair.ended:
                        events |= selectors.EVENT_READ
                    if pending:
                        events |= selectors.EVENT_WRITE
                interest(sock, events, (pair, side))
        for key, events in selector.select(timeout=0.2):
            if key.data is None:
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                client.setblocking(False)
                pairs.append(Pair(client))
                continue
            if key.data == "wake":
                wake_r.recv(64)
                continue
            pair, side = key.data
            if pair not in pairs:
                continue
            sock = key.fileobj
            if events & selectors.EVENT_READ:
                try:
                    data = sock.recv(BUFFER)
                except (BlockingIOError, InterruptedError):
                    data = None
                except OSError:
                    data = b""
                if data == b"":
                    pair.ended = True  # closed once what is held has gone out
                elif data:
                    (pair.to_server if side == "client" else pair.to_client).extend(data)
            if events & selectors.EVENT_WRITE:
                pending = pair.to_client if side == "client" else pair.to_server
                try:
                    sent = sock.send(pending)
                    del pending[:sent]
                except (BlockingIOError, InterruptedError):
                    pass
                except OSError:
                    close(pair)
    for pair in list(pairs):
        close(pair)


if __name__ == "__main__":
    main()
