#!/usr/bin/env python3
"""Send -m messages to the node named in -a, each with body {'sequence': i}, id i and
the application property colour = 'red' for odd i, 'green' for even i (i = 1..N).
Exits 0 once every message is accepted."""
import _interop
from proton import Message


class ColourSend(_interop.Base):
    def __init__(self, opts):
        super(ColourSend, self).__init__(opts)
        self.total = opts.messages
        self.sent = 0
        self.accepted = 0

    def start(self, event):
        self.sender = event.container.create_sender(self.conn, self.node)
        if self.total == 0:
            self.finish()

    def on_link_opened(self, event):
        if event.link == self.sender and _interop.refused(event.link):
            self.fail("sender to '%s' refused" % self.node)

    def on_sendable(self, event):
        while event.sender.credit and self.sent < self.total:
            self.sent += 1
            colour = 'red' if self.sent % 2 else 'green'
            event.sender.send(Message(id=self.sent, body={'sequence': self.sent},
                                      properties={'colour': colour}))

    def on_accepted(self, event):
        self.accepted += 1
        if self.accepted == self.total:
            _interop.out("all messages confirmed")
            self.finish()

    def progress(self):
        return "%d sent, %d of %d accepted" % (self.sent, self.accepted, self.total)


if __name__ == "__main__":
    _interop.run(ColourSend(_interop.parser(__doc__, messages=100).parse_args()))
