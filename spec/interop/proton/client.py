#!/usr/bin/env python3
"""Request/response client: open a dynamic receiver (the peer names its address), then
send each request line to the node named in -a with reply-to set to that address, one
at a time, printing 'request => reply'. Exits 0 after the last reply."""
import _interop
from proton import Message

REQUESTS = [
    "Twas brillig, and the slithy toves",
    "Did gyre and gimble in the wabe:",
    "All mimsy were the borogoves,",
    "And the mome raths outgrabe.",
]


class Client(_interop.Base):
    def __init__(self, opts):
        super(Client, self).__init__(opts)
        self.pending = list(REQUESTS)
        self.next_id = 0

    def start(self, event):
        self.sender = event.container.create_sender(self.conn, self.node)
        self.receiver = event.container.create_receiver(self.conn, None, dynamic=True)

    def on_link_opened(self, event):
        if _interop.refused(event.link):
            self.fail("link '%s' refused" % event.link.name)
        elif event.receiver == self.receiver:
            if not self.receiver.remote_source.address:
                self.fail("dynamic receiver attached without an address")
            else:
                self.request()

    def request(self):
        self.next_id += 1
        self.sender.send(Message(id=self.next_id, reply_to=self.receiver.remote_source.address,
                                 body=self.pending[0]))

    def on_message(self, event):
        _interop.out("%s => %s" % (self.pending.pop(0), event.message.body))
        if self.pending:
            self.request()
        else:
            self.finish()

    def progress(self):
        return "%d of %d repl(ies) received" % (len(REQUESTS) - len(self.pending), len(REQUESTS))


if __name__ == "__main__":
    _interop.run(Client(_interop.parser(__doc__).parse_args()))
