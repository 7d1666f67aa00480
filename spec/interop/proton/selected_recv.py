#!/usr/bin/env python3
"""Receive from the node named in -a through a JMS selector filter
(proton.reactor.Selector, default "colour = 'green'"), printing each body. Exits 0
after -m messages (credit is capped at -m); with -m 0 (default) it receives until the
time-out and then exits 0. A message that does not match the selector is an error."""
import _interop
from proton.reactor import Selector

DEFAULT_SELECTOR = "colour = 'green'"


class SelectedRecv(_interop.Base):
    def __init__(self, opts):
        super(SelectedRecv, self).__init__(opts, prefetch=0)
        self.expected = opts.messages
        self.received = 0
        self.credit = _interop.CreditWindow(self.expected)

    def start(self, event):
        self.receiver = event.container.create_receiver(self.conn, self.node,
                                                        options=Selector(self.opts.selector))
        self.credit.top_up(self.receiver, 0)

    def on_link_opened(self, event):
        if event.link == self.receiver and _interop.refused(event.link):
            self.fail("receiver from '%s' refused" % self.node)

    def on_message(self, event):
        props = event.message.properties or {}
        if self.opts.check and self.opts.selector == DEFAULT_SELECTOR and props.get('colour') != 'green':
            self.fail("selector not applied: got colour=%r" % (props.get('colour'),))
            return
        _interop.out(event.message.body)
        self.received += 1
        if self.received == self.expected:
            self.finish()
        else:
            self.credit.top_up(self.receiver, self.received)

    def timed_out(self):
        if self.expected == 0:
            self.finish()
        else:
            super(SelectedRecv, self).timed_out()

    def progress(self):
        return "%d of %d received" % (self.received, self.expected)


if __name__ == "__main__":
    p = _interop.parser(__doc__, messages=0)
    p.add_argument("-s", "--selector", default=DEFAULT_SELECTOR, help="JMS selector (default %(default)s)")
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="do not fail on messages whose colour is not green")
    _interop.run(SelectedRecv(p.parse_args()))
