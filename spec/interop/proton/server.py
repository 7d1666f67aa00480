#!/usr/bin/env python3
"""Request/response server: consume requests from the node named in -a and answer
each with its body upper-cased, sent through an anonymous sender to the request's
reply-to address (correlation id copied from the request id). Prints each request.
Exits 0 after -m requests; with -m 0 (default) it serves until the time-out and then
exits 0. Errors exit 1."""
import _interop
from proton import Message


class Server(_interop.Base):
    def __init__(self, opts):
        super(Server, self).__init__(opts)
        self.limit = opts.messages
        self.served = 0
        self.settled = 0

    def start(self, event):
        self.receiver = event.container.create_receiver(self.conn, self.node)
        self.replies = event.container.create_sender(self.conn, None)  # anonymous relay

    def on_link_opened(self, event):
        if _interop.refused(event.link):
            self.fail("link '%s' refused" % event.link.name)

    def on_message(self, event):
        request = event.message
        _interop.out("Received", request.body)
        if not request.reply_to:
            self.fail("request without reply-to: %r" % (request.body,))
            return
        self.replies.send(Message(address=request.reply_to, body=str(request.body).upper(),
                                  correlation_id=request.id))
        self.served += 1

    def on_settled(self, event):
        # done once every reply has been settled by the peer (counted here: the link's
        # unsettled count still includes this delivery while the event is handled)
        if event.link == self.replies:
            self.settled += 1
        if self.limit and self.served >= self.limit and self.settled >= self.limit:
            self.finish()

    def timed_out(self):
        if self.limit == 0:
            self.finish()
        else:
            super(Server, self).timed_out()

    def progress(self):
        return "%d of %d request(s) served" % (self.served, self.limit)


if __name__ == "__main__":
    _interop.run(Server(_interop.parser(__doc__, messages=0).parse_args()))
