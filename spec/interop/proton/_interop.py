"""Shared plumbing for the Tidemark Proton interop scripts.

Every script: parses -a/--address (amqp://host:port/node), -t/--timeout (seconds,
default 10), runs one Proton Container with a single MessagingHandler subclass, and
exits 0 only when the scenario completed. Any protocol error, refused link,
disconnect, unexpected outcome, Python exception or the time-out prints
`<script>: error: <why>` on stderr and exits 1. Nothing here retries or reconnects.
"""
import argparse
import os
import sys

sys.dont_write_bytecode = True  # keep the spec tree free of __pycache__

from proton import Url  # noqa: E402
from proton.handlers import MessagingHandler, TransactionHandler  # noqa: E402
from proton.reactor import Container  # noqa: E402

PROG = os.path.basename(sys.argv[0])
DEFAULT_ADDRESS = "localhost:5672/examples"


def parser(description, messages=None):
    """ArgumentParser with the options every script shares; messages=None leaves -m out."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("-a", "--address", default=DEFAULT_ADDRESS,
                   help="AMQP URL of the node, e.g. amqp://127.0.0.1:5672/queue (default %(default)s)")
    if messages is not None:
        p.add_argument("-m", "--messages", type=int, default=messages,
                       help="number of messages (default %(default)s)")
    p.add_argument("-t", "--timeout", type=float, default=10.0,
                   help="give up (exit 1) after this many seconds (default %(default)s)")
    return p


def split_address(address):
    """'amqp://[user[:pw]@]host:port/node' -> ('amqp://[user[:pw]@]host:port', 'node')."""
    url = Url(address)
    auth = ""
    if url.username:
        auth = url.username + (":" + url.password if url.password else "") + "@"
    host = url.host or "localhost"
    if ":" in host:
        host = "[%s]" % host
    return "%s://%s%s:%s" % (url.scheme or "amqp", auth, host, url.port), url.path or ""


def out(*parts):
    print(*parts, flush=True)


class _Deadline(object):
    """Timer-task handler: tells its owner that the time-out expired."""

    def __init__(self, owner):
        self.owner = owner

    def on_timer_task(self, event):
        self.owner.timed_out()


def condition_text(endpoint, what):
    cond = endpoint.remote_condition if endpoint is not None else None
    if cond is None:
        return "%s closed by peer" % what
    return "%s error %s: %s" % (what, cond.name, cond.description)


class Base(MessagingHandler, TransactionHandler):
    """MessagingHandler that turns every error into a recorded failure.

    Subclasses implement start(event) and call self.finish() when the scenario is
    complete (it closes the connection) or self.fail(reason).
    """

    def __init__(self, opts, **kwargs):
        super(Base, self).__init__(**kwargs)
        self.opts = opts
        self.server, self.node = split_address(opts.address)
        self.failure = None
        self.done = False
        self.container = None
        self.conn = None
        self._deadline = None

    # --- life cycle -------------------------------------------------------
    def on_start(self, event):
        self.container = event.container
        if self.opts.timeout and self.opts.timeout > 0:
            self._deadline = event.container.schedule(self.opts.timeout, _Deadline(self))
        self.conn = event.container.connect(self.server, reconnect=False)
        self.start(event)

    def start(self, event):
        raise NotImplementedError

    def _cancel_deadline(self):
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def finish(self):
        """The scenario succeeded: close politely and let the container run out."""
        if self.done or self.failure:
            return
        self.done = True
        self._cancel_deadline()
        if self.conn is not None:
            self.conn.close()

    def fail(self, reason):
        if self.failure is None and not self.done:
            self.failure = reason
        self._cancel_deadline()
        if self.conn is not None:
            self.conn.close()
        if self.container is not None:
            self.container.stop()

    def timed_out(self):
        """Called when -t expires; by default that is a failure."""
        self._deadline = None
        self.fail("timed out after %ss (%s)" % (self.opts.timeout, self.progress()))

    def progress(self):
        return "no progress information"

    # --- errors -----------------------------------------------------------
    def on_transport_error(self, event):
        cond = event.transport.condition
        self.fail("transport error %s: %s" % (cond.name, cond.description) if cond else "transport error")

    def on_connection_error(self, event):
        self.fail(condition_text(event.connection, "connection"))

    def on_session_error(self, event):
        self.fail(condition_text(event.session, "session"))

    def on_link_error(self, event):
        self.fail(condition_text(event.link, "link '%s'" % event.link.name))

    def on_link_closing(self, event):
        if not self.done:
            self.fail(condition_text(event.link, "link '%s'" % event.link.name))

    def on_session_closing(self, event):
        if not self.done:
            self.fail(condition_text(event.session, "session"))

    def on_connection_closing(self, event):
        if not self.done:
            self.fail(condition_text(event.connection, "connection"))

    def on_disconnected(self, event):
        if not self.done:
            self.fail("disconnected from %s" % self.server)

    def on_rejected(self, event):
        cond = event.delivery.remote.condition
        self.fail("message rejected%s" % (": %s %s" % (cond.name, cond.description) if cond else ""))

    def on_released(self, event):
        self.fail("message released (or modified) by the peer")

    def on_transaction_declare_failed(self, event):
        self.fail("transaction declare failed")

    def on_transaction_commit_failed(self, event):
        self.fail("transaction commit failed")

    def on_transaction_aborted(self, event):
        self.fail("transaction aborted by the peer")


class CreditWindow(object):
    """Grants a receiver at most `limit` credits in total (0 = no limit), `window` at a
    time, so a receiver asked for N messages never takes (and auto-accepts) more."""

    def __init__(self, limit, window=10):
        self.limit = limit
        self.window = window
        self.issued = 0

    def top_up(self, receiver, received):
        target = received + self.window
        if self.limit:
            target = min(target, self.limit)
        if target > self.issued:
            receiver.flow(target - self.issued)
            self.issued = target


def refused(link):
    """True when the peer answered the attach with a null terminus (= refused)."""
    terminus = link.remote_target if link.is_sender else link.remote_source
    return terminus is None or terminus.type == 0  # Terminus.UNSPECIFIED


def run(handler):
    """Run the handler's container; exit 1 with a message unless it succeeded."""
    try:
        Container(handler).run()
    except KeyboardInterrupt:
        handler.failure = handler.failure or "interrupted"
    except Exception as e:  # a bug in a handler, a bad URL, ...
        handler.failure = handler.failure or "%s: %s" % (type(e).__name__, e)
    if handler.failure is None and not handler.done:
        handler.failure = "stopped before completion (%s)" % handler.progress()
    if handler.failure is not None:
        sys.stderr.write("%s: error: %s\n" % (PROG, handler.failure))
        sys.stderr.flush()
        sys.exit(1)
    sys.exit(0)
