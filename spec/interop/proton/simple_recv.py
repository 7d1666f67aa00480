#!/usr/bin/env python3
"""Receive -m messages from the node named in -a, printing each body on its own line;
exit 0 after the last (credit is capped at -m, so no extra message is taken). With
-m 0, receive until the time-out and then exit 0."""
import _interop


class Recv(_interop.Base):
    def __init__(self, opts):
        super(Recv, self).__init__(opts, prefetch=0)
        self.expected = opts.messages
        self.received = 0
        self.credit = _interop.CreditWindow(self.expected)

    def start(self, event):
        self.receiver = event.container.create_receiver(self.conn, self.node)
        self.credit.top_up(self.receiver, 0)

    def on_link_opened(self, event):
        if event.link == self.receiver and _interop.refused(event.link):
            self.fail("receiver from '%s' refused" % self.node)

    def on_message(self, event):
        _interop.out(event.message.body)
        self.received += 1
        if self.received == self.expected:
            self.finish()
        else:
            self.credit.top_up(self.receiver, self.received)

    def timed_out(self):
        if self.expected == 0:
            self.finish()  # -m 0: the time-out is the normal end
        else:
            super(Recv, self).timed_out()

    def progress(self):
        return "%d of %d received" % (self.received, self.expected)


if __name__ == "__main__":
    _interop.run(Recv(_interop.parser(__doc__, messages=100).parse_args()))
