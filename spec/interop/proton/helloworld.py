#!/usr/bin/env python3
"""Send 'Hello World!' to a node and receive it back on the same connection (sender
and receiver on one session, Proton's default link names), print it, exit 0.
The server and node come from -a, or from the positional arguments."""
import _interop
from proton import Message


class HelloWorld(_interop.Base):
    def start(self, event):
        event.container.create_receiver(self.conn, self.node)
        event.container.create_sender(self.conn, self.node)

    def on_link_opened(self, event):
        if _interop.refused(event.link):
            self.fail("link '%s' refused" % event.link.name)

    def on_sendable(self, event):
        event.sender.send(Message(body="Hello World!"))
        event.sender.close()

    def on_message(self, event):
        _interop.out(event.message.body)
        self.finish()

    def progress(self):
        return "'Hello World!' not received back"


if __name__ == "__main__":
    p = _interop.parser(__doc__)
    p.add_argument("server", nargs="?", help="host:port, overrides the one in -a")
    p.add_argument("node", nargs="?", help="node address, overrides the one in -a")
    opts = p.parse_args()
    if opts.server or opts.node:
        server, node = _interop.split_address(opts.address)
        server = opts.server or server
        opts.address = "%s/%s" % (server.rstrip("/"), opts.node or node)
    _interop.run(HelloWorld(opts))
