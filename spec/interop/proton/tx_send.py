#!/usr/bin/env python3
"""Send -m messages {'sequence': i} (id i) to the node named in -a inside local
transactions of -b messages each: declare, send a batch, commit, repeat. Exits 0 once
every batch is committed; a failed declare/commit or an abort exits 1."""
import _interop
from proton import Message


class TxSend(_interop.Base):
    def __init__(self, opts):
        super(TxSend, self).__init__(opts)
        self.total = opts.messages
        self.batch_size = opts.batch_size
        self.committed = 0
        self.in_batch = 0
        self.transaction = None

    def start(self, event):
        self.sender = event.container.create_sender(self.conn, self.node)
        if self.total == 0:
            self.finish()
            return
        event.container.declare_transaction(self.conn, handler=self)

    def on_link_opened(self, event):
        if _interop.refused(event.link):
            self.fail("link '%s' refused" % event.link.name)

    def on_transaction_declared(self, event):
        self.transaction = event.transaction
        self.in_batch = 0
        self.send()

    def on_sendable(self, event):
        self.send()

    def send(self):
        if self.transaction is None:
            return
        batch = min(self.batch_size, self.total - self.committed)
        while self.sender.credit and self.in_batch < batch:
            seq = self.committed + self.in_batch + 1
            self.transaction.send(self.sender, Message(id=seq, body={'sequence': seq}))
            self.in_batch += 1
        if self.in_batch == batch:
            self.transaction.commit()
            self.transaction = None

    def on_transaction_committed(self, event):
        self.committed += self.in_batch
        self.in_batch = 0
        _interop.out("committed %d" % self.committed)
        if self.committed == self.total:
            _interop.out("all messages committed")
            self.finish()
        else:
            event.container.declare_transaction(self.conn, handler=self)

    def progress(self):
        return "%d of %d committed, %d in the open batch" % (self.committed, self.total, self.in_batch)


if __name__ == "__main__":
    p = _interop.parser(__doc__, messages=100)
    p.add_argument("-b", "--batch-size", type=int, default=10, help="messages per transaction (default %(default)s)")
    _interop.run(TxSend(p.parse_args()))
