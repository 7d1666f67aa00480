#!/usr/bin/env python3
"""Probe used by the Tidemark specs.

  same-address-links: attach a sender and a receiver to the node named in -a on one
  session with Proton's default link names (both '<container>-<node>'), wait until the
  peer has answered both attaches with a terminus, print one JSON line
  {"sender": {...}, "receiver": {...}} and exit 0. Exits 1 (after printing the same
  JSON line with what did attach) on refusal, error or time-out.
"""
import json

import _interop


class SameAddressLinks(_interop.Base):
    def __init__(self, opts):
        super(SameAddressLinks, self).__init__(opts)
        self.report = {}

    def start(self, event):
        self.sender = event.container.create_sender(self.conn, self.node)
        self.receiver = event.container.create_receiver(self.conn, self.node)
        for role, link in (("sender", self.sender), ("receiver", self.receiver)):
            self.report[role] = {"name": link.name, "attached": False}
        self.report["same_session"] = self.sender.session == self.receiver.session

    def on_link_opened(self, event):
        role = "sender" if event.link.is_sender else "receiver"
        if _interop.refused(event.link):
            self.fail("%s '%s' refused" % (role, event.link.name))
            return
        self.report[role]["attached"] = True
        if all(self.report[r]["attached"] for r in ("sender", "receiver")):
            self.finish()

    def progress(self):
        attached = [r for r in ("sender", "receiver") if self.report.get(r, {}).get("attached")]
        return "attached: %s" % (", ".join(attached) or "none")

    def fail(self, reason):
        first = self.failure is None and not self.done
        super(SameAddressLinks, self).fail(reason)
        if first:
            _interop.out(json.dumps(self.report, sort_keys=True))

    def finish(self):
        if not self.done and self.failure is None:
            _interop.out(json.dumps(self.report, sort_keys=True))
        super(SameAddressLinks, self).finish()


PROBES = {"same-address-links": SameAddressLinks}

if __name__ == "__main__":
    p = _interop.parser(__doc__)
    p.add_argument("probe", choices=sorted(PROBES))
    opts = p.parse_args()
    _interop.run(PROBES[opts.probe](opts))
