/**
 * A request/response client for `$management` (wire.md 7): a sender to `$management`, a
 * dynamic receiver for the replies, requests matched by message-id / correlation-id.
 */
import { randomUUID } from 'node:crypto';
import { ToolError } from './cli.js';
import { openReceiver, openSender, describeError, type Connected } from './connection.js';

export interface ManagementResponse {
  statusCode: number;
  statusDescription: string;
  body: any;
}

export class ManagementClient {
  private pending = new Map<string, { resolve: (r: ManagementResponse) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  private constructor(private sender: any, private receiver: any, private replyTo: string, private timeoutMs: number) {}

  static async open(conn: Connected, timeoutMs = 10000): Promise<ManagementClient> {
    const receiver = await openReceiver(conn, { source: { dynamic: true }, credit_window: 0 }, timeoutMs);
    const replyTo = receiver.remote?.attach?.source?.address;
    if (!replyTo) throw new ToolError('the broker gave no address for the dynamic reply queue');
    const sender = await openSender(conn, { target: { address: '$management' } }, timeoutMs);
    const client = new ManagementClient(sender, receiver, replyTo, timeoutMs);
    ManagementClient.outcomeHandlers(sender);
    receiver.on('message', (ctx: any) => client.onReply(ctx));
    const failAll = (why: string) => { for (const [id, p] of client.pending) { clearTimeout(p.timer); client.pending.delete(id); p.reject(new ToolError(why)); } };
    receiver.on('receiver_close', () => failAll(`reply link closed: ${describeError(receiver.error)}`));
    sender.on('sender_close', () => failAll(`$management link closed: ${describeError(sender.error)}`));
    conn.connection.on('disconnected', () => failAll('disconnected from the broker'));
    receiver.add_credit(10);
    return client;
  }

  private onReply(ctx: any): void {
    ctx.delivery.accept();
    if (this.receiver.credit < 5) this.receiver.add_credit(10 - this.receiver.credit);
    const m = ctx.message;
    const id = m.correlation_id !== undefined && m.correlation_id !== null ? String(m.correlation_id) : '';
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    const ap = m.application_properties ?? {};
    p.resolve({ statusCode: Number(ap.statusCode), statusDescription: String(ap.statusDescription ?? ''), body: m.body });
  }

  /** Sends one request; resolves with the response whatever its status. */
  request(operation: string, name: string | undefined, body: Record<string, unknown> = {}): Promise<ManagementResponse> {
    const id = randomUUID();
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new ToolError(`no answer from $management to ${operation} within ${this.timeoutMs / 1000}s`));
      }, this.timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      const application_properties: Record<string, unknown> = { operation, type: 'queue' };
      if (name !== undefined) application_properties.name = name;
      const d = this.sender.send({ message_id: id, reply_to: this.replyTo, application_properties, body });
      d.__onOutcome = (state: string, err?: any) => {
        if (state === 'accepted') return;
        const p = this.pending.get(id);
        if (!p) return;
        this.pending.delete(id);
        clearTimeout(p.timer);
        reject(new ToolError(`$management ${state} the request${err ? ': ' + describeError(err) : ''}`));
      };
    });
  }

  /** Sends a request and returns the body; a non-2xx status is an error with its description. */
  async call(operation: string, name: string | undefined, body: Record<string, unknown> = {}): Promise<ManagementResponse> {
    const res = await this.request(operation, name, body);
    if (!(res.statusCode >= 200 && res.statusCode < 300)) {
      throw new ToolError(res.statusDescription || `status ${res.statusCode}`);
    }
    return res;
  }

  static outcomeHandlers(sender: any): void {
    for (const state of ['accepted', 'rejected', 'released', 'modified']) {
      sender.on(state, (ctx: any) => ctx.delivery.__onOutcome?.(state, ctx.delivery.remote_state?.error));
    }
  }
}
