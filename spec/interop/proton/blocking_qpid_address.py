#!/usr/bin/env python3
"""Proton's blocking API given a whole Qpid address string (docs/addresses.md 2.5).

Opens a sender on ADDRESS (a string with options, e.g. a SOW queue's declaration), sends
the JSON bodies given with -m, then a receiver on the same string, and prints one JSON line:
{"sent": n, "received": [bodies]}. Proton's BlockingSender/BlockingReceiver close a link
whose reply address differs from the one asked for, so this fails if the broker's reply
does not name the address as given.

Usage: blocking_qpid_address.py -u amqp://127.0.0.1:PORT -a ADDRESS -m BODY [-m BODY ...] [-t SECONDS]
"""
import argparse
import json

from proton import Message
from proton.utils import BlockingConnection

p = argparse.ArgumentParser()
p.add_argument("-u", "--url", required=True)
p.add_argument("-a", "--address", required=True)
p.add_argument("-m", "--message", action="append", default=[])
p.add_argument("-t", "--timeout", type=float, default=10)
args = p.parse_args()

conn = BlockingConnection(args.url, timeout=args.timeout)
try:
    sender = conn.create_sender(args.address)
    for body in args.message:
        sender.send(Message(body=body, content_type="application/json"))
    receiver = conn.create_receiver(args.address, credit=100)
    received = []
    while True:
        try:
            m = receiver.receive(timeout=1)
        except Exception:  # proton.utils raises Timeout once nothing more comes
            break
        received.append(m.body)
        receiver.accept()
    print(json.dumps({"sent": len(args.message), "received": received}))
finally:
    conn.close()
