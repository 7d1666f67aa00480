#!/usr/bin/env python3
"""Browse the queue named in -a without consuming it: the receiver asks for
distribution mode 'copy' (proton.reactor.Copy). Prints every message it is shown and
exits 0 once the queue is drained (a drain round ends with fewer messages than the
credit it granted). Exits 1 on the time-out or any error."""
import _interop
from proton.reactor import Copy

BATCH = 10


class Browse(_interop.Base):
    def __init__(self, opts):
        super(Browse, self).__init__(opts, prefetch=0)
        self.count = 0
        self.round = 0  # messages seen in the current drain round

    def start(self, event):
        self.receiver = event.container.create_receiver(self.conn, self.node, options=Copy())
        self.receiver.drain(BATCH)

    def on_link_opened(self, event):
        if event.link == self.receiver and _interop.refused(event.link):
            self.fail("browser on '%s' refused" % self.node)

    def on_message(self, event):
        _interop.out(event.message)
        self.count += 1
        self.round += 1
        self._check(event.receiver)

    def on_link_flow(self, event):
        if event.link == self.receiver:
            self._check(event.receiver)

    def _check(self, receiver):
        # A round is over when no credit is left and nothing is waiting to be read.
        if self.done or receiver.credit > 0 or receiver.queued > 0:
            return
        if self.round < BATCH:
            _interop.out("drained: %d message(s) browsed" % self.count)
            self.finish()
        else:
            self.round = 0
            receiver.drain(BATCH)

    def progress(self):
        return "%d message(s) browsed, queue not reported drained" % self.count


if __name__ == "__main__":
    _interop.run(Browse(_interop.parser(__doc__).parse_args()))
