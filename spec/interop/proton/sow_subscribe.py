#!/usr/bin/env python3
"""Tidemark sow_and_subscribe from Python Proton: attaches to the node named in -a with the
source filter tidemark:command:symbol = sow_and_subscribe (matched by descriptor), then
prints one JSON object per message: {"cmd", "scn", "key", "body"} from the x-opt-tm-*
annotations. Receives until the time-out (-t) and then exits 0; a refused link is an error."""
import json
import _interop
from proton import Described, symbol
from proton.reactor import Filter


class SowSubscribe(_interop.Base):
    def __init__(self, opts):
        super(SowSubscribe, self).__init__(opts, prefetch=500)
        self.count = 0

    def start(self, event):
        command = Filter({symbol("command"): Described(symbol("tidemark:command:symbol"), symbol("sow_and_subscribe"))})
        self.receiver = event.container.create_receiver(self.conn, self.node, options=command)

    def on_link_opened(self, event):
        if event.link == self.receiver and _interop.refused(event.link):
            self.fail("receiver from '%s' refused" % self.node)

    def on_message(self, event):
        ann = event.message.annotations or {}
        body = event.message.body
        _interop.out(json.dumps({
            "cmd": str(ann.get(symbol("x-opt-tm-cmd"), "")),
            "scn": int(ann.get(symbol("x-opt-tm-scn"), -1)),
            "key": ann.get(symbol("x-opt-tm-key")),
            "body": body if isinstance(body, (str, type(None))) else str(body),
        }))
        self.count += 1

    def timed_out(self):
        self.finish()

    def progress(self):
        return "%d received" % self.count


if __name__ == "__main__":
    _interop.run(SowSubscribe(_interop.parser(__doc__).parse_args()))
