#!/usr/bin/env python3
"""Receive -m messages from the node named in -a inside local transactions of -b
messages each: declare, grant credit for one batch, accept each message in the
transaction, commit, repeat. Prints each body; exits 0 once all batches are committed."""
import _interop


class TxRecv(_interop.Base):
    def __init__(self, opts):
        super(TxRecv, self).__init__(opts, prefetch=0, auto_accept=False)
        self.expected = opts.messages
        self.batch_size = opts.batch_size
        self.received = 0  # committed
        self.in_batch = 0
        self.batch = 0
        self.transaction = None

    def start(self, event):
        self.receiver = event.container.create_receiver(self.conn, self.node)
        if self.expected == 0:
            self.finish()
            return
        event.container.declare_transaction(self.conn, handler=self)

    def on_link_opened(self, event):
        if _interop.refused(event.link):
            self.fail("link '%s' refused" % event.link.name)

    def on_transaction_declared(self, event):
        self.transaction = event.transaction
        self.in_batch = 0
        self.batch = min(self.batch_size, self.expected - self.received)
        self.receiver.flow(self.batch)

    def on_message(self, event):
        if self.transaction is None:
            self.fail("message outside a transaction (more than the credit granted?)")
            return
        _interop.out(event.message.body)
        self.transaction.accept(event.delivery)
        self.in_batch += 1
        if self.in_batch == self.batch:
            self.transaction.commit()
            self.transaction = None

    def on_transaction_committed(self, event):
        self.received += self.in_batch
        self.in_batch = 0
        if self.received == self.expected:
            _interop.out("all messages received")
            self.finish()
        else:
            event.container.declare_transaction(self.conn, handler=self)

    def progress(self):
        return "%d of %d committed, %d in the open batch" % (self.received, self.expected, self.in_batch)


if __name__ == "__main__":
    p = _interop.parser(__doc__, messages=100)
    p.add_argument("-b", "--batch-size", type=int, default=10, help="messages per transaction (default %(default)s)")
    _interop.run(TxRecv(p.parse_args()))
