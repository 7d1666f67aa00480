/** lib/core/storage/committer.ts: group commit, batches bounded at group boundaries. */
import { expect } from 'chai';
import { Committer } from '../../../lib/core/storage/committer.js';
import type { BatchOp, Store } from '../../../lib/core/storage/store.js';

/** A store whose batch writes finish when the test says so. */
class FakeStore {
  readonly written: BatchOp[][] = [];
  readonly pending: Array<{ ops: BatchOp[]; resolve: () => void; reject: (e: Error) => void }> = [];
  batch(ops: BatchOp[], _sync: boolean): Promise<void> {
    return new Promise((resolve, reject) => this.pending.push({ ops, resolve: () => { this.written.push(ops); resolve(); }, reject }));
  }
}

const put = (k: string): BatchOp => ({ type: 'put', key: Buffer.from(k), value: Buffer.alloc(0) });
const names = (ops: BatchOp[]) => ops.map((o) => o.key.toString());
const tick = () => new Promise((r) => setImmediate(r));

/** Lets the committer start its next batch, then finishes the one in flight. */
async function finishNext(store: FakeStore, fail?: Error): Promise<BatchOp[]> {
  await tick();
  const b = store.pending.shift();
  if (!b) throw new Error('no batch in flight');
  if (fail) b.reject(fail); else b.resolve();
  await tick();
  return b.ops;
}

describe('Committer', () => {
  it('writes at most maxBatch groups per batch, split at group boundaries, quiet ops in place', async () => {
    const store = new FakeStore();
    const c = new Committer(store as unknown as Store, 3);
    const done: string[] = [];
    // g1 is written alone (the first batch starts on the next tick), the rest queue behind it.
    c.add([put('g1a'), put('g1b')], () => done.push('g1'));
    await tick();
    c.add([put('g2a')], () => done.push('g2'));
    c.addQuiet([put('q1')]);
    c.add([put('g3a'), put('g3b'), put('g3c')], () => done.push('g3'));
    c.add([put('g4a')], () => done.push('g4'));
    c.add([], () => done.push('g5'));
    c.add([put('g6a'), put('g6b')], () => done.push('g6'));
    c.add([put('g7a')], () => done.push('g7'));
    c.addQuiet([put('q2')]);
    c.add([put('g8a'), put('g8b')], () => done.push('g8'));
    c.add([put('g9a')], () => done.push('g9'));
    c.addQuiet([put('q3')]);

    expect(names(await finishNext(store))).to.deep.equal(['g1a', 'g1b']);
    expect(done).to.deep.equal(['g1']);
    expect(names(await finishNext(store))).to.deep.equal(['g2a', 'q1', 'g3a', 'g3b', 'g3c', 'g4a']);
    expect(done).to.deep.equal(['g1', 'g2', 'g3', 'g4']);
    expect(names(await finishNext(store))).to.deep.equal(['g6a', 'g6b', 'g7a']);
    expect(done).to.deep.equal(['g1', 'g2', 'g3', 'g4', 'g5', 'g6', 'g7']);
    expect(names(await finishNext(store))).to.deep.equal(['q2', 'g8a', 'g8b', 'g9a', 'q3']);
    expect(done).to.deep.equal(['g1', 'g2', 'g3', 'g4', 'g5', 'g6', 'g7', 'g8', 'g9']);
    await tick();
    expect(store.pending).to.have.length(0);
    expect(c.stats.maxGroups).to.equal(3);
  });

  it('whenWritten runs once everything queued before it is written: with the batch taking it, not one before; at once when nothing is pending', async () => {
    const store = new FakeStore();
    const c = new Committer(store as unknown as Store, 2);
    const done: string[] = [];
    c.add([put('g1')], () => done.push('g1'));
    await tick(); // g1 in flight
    c.addQuiet([put('q1')]); // (an acknowledged message's removal: queued behind g1)
    c.whenWritten(() => done.push('w1'));
    c.add([put('g2')], () => done.push('g2'));
    c.add([put('g3')], () => done.push('g3'));
    c.add([put('g4')], () => done.push('g4'));
    c.addQuiet([put('q2')]);
    c.whenWritten(() => done.push('w2')); // waits for q2, past the split after g3
    expect(names(await finishNext(store))).to.deep.equal(['g1']);
    expect(done, 'g1 is not what w1 waits for').to.deep.equal(['g1']);
    expect(names(await finishNext(store))).to.deep.equal(['q1', 'g2', 'g3']);
    expect(done).to.deep.equal(['g1', 'g2', 'g3', 'w1']);
    expect(names(await finishNext(store))).to.deep.equal(['g4', 'q2']);
    expect(done).to.deep.equal(['g1', 'g2', 'g3', 'w1', 'g4', 'w2']);
    c.whenWritten(() => done.push('w3')); // nothing pending: on the next turn, no batch
    await tick(); await tick();
    expect(done.at(-1)).to.equal('w3');
    expect(store.pending).to.have.length(0);
  });

  it('without more than maxBatch groups waiting, everything goes in one batch', async () => {
    const store = new FakeStore();
    const c = new Committer(store as unknown as Store, 300);
    let n = 0;
    for (let i = 0; i < 250; i++) c.add([put(`k${i}`)], () => n++);
    expect(await finishNext(store)).to.have.length(250);
    expect(n).to.equal(250);
  });

  it('a failed batch refuses its groups and every group queued behind it (prepared on what it would have stored); quiet ops go again', async () => {
    const store = new FakeStore();
    const c = new Committer(store as unknown as Store, 2);
    const seen: Array<[string, boolean]> = [];
    const written: string[] = [];
    c.add([put('a')], (e) => seen.push(['a', !!e]));
    c.addQuiet([put('qa')]);
    c.add([put('b')], (e) => seen.push(['b', !!e]));
    c.add([put('c')], (e) => seen.push(['c', !!e]));
    c.add([put('d')], (e) => seen.push(['d', !!e]));
    c.addQuiet([put('qd')]);
    c.whenWritten(() => written.push('after qd'));
    expect(names(await finishNext(store, new Error('disk full')))).to.deep.equal(['a', 'qa', 'b']);
    expect(seen, 'undone newest first').to.deep.equal([['d', true], ['c', true], ['b', true], ['a', true]]);
    c.add([put('e')], (e) => seen.push(['e', !!e])); // prepared after the failure: written
    expect(names(await finishNext(store))).to.deep.equal(['qa', 'qd']);
    expect(written, 'the waiter rides on the quiet op it waited for').to.deep.equal(['after qd']);
    expect(names(await finishNext(store))).to.deep.equal(['e']);
    expect(seen.at(-1)).to.deep.equal(['e', false]);
  });

  it('quiet ops kept from a failed batch and re-queued by idle() keep the group boundaries right', async () => {
    const store = new FakeStore();
    const c = new Committer(store as unknown as Store, 1);
    c.add([put('a')], () => {});
    c.addQuiet([put('qa')]);
    expect(names(await finishNext(store, new Error('disk full')))).to.deep.equal(['a', 'qa']);
    c.add([put('b1'), put('b2')], () => {});
    c.add([put('c')], () => {});
    const idle = c.idle(); // re-queues qa ahead of b and c
    expect(names(await finishNext(store))).to.deep.equal(['qa', 'b1', 'b2']);
    expect(names(await finishNext(store))).to.deep.equal(['c']);
    await idle;
  });

  it('whenWritten after idle() re-queued failed quiet ops waits for them too: not answered by a batch without the ops queued before it', async () => {
    const store = new FakeStore();
    const c = new Committer(store as unknown as Store, 2);
    c.addQuiet([put('q1')]);
    expect(names(await finishNext(store, new Error('disk full')))).to.deep.equal(['q1']); // kept for a retry
    c.add([put('a')], () => {});
    c.add([put('b')], () => {});
    c.addQuiet([put('ack')]); // the removal a rcv-settle-mode-second receiver waits for
    let answered = false;
    c.whenWritten(() => { answered = true; });
    c.add([put('c')], () => {});
    void c.idle(); // (stop, a management wait): q1 goes to the front
    expect(names(await finishNext(store))).to.deep.equal(['q1', 'a', 'b']);
    expect(answered, 'ack is not written yet').to.equal(false);
    expect(names(await finishNext(store))).to.deep.equal(['ack', 'c']);
    expect(answered).to.equal(true);
  });

  it('a maxBatch below 1 still writes one group per batch', async () => {
    const store = new FakeStore();
    const c = new Committer(store as unknown as Store, 0);
    c.add([put('a')], () => {});
    c.add([put('b')], () => {});
    expect(names(await finishNext(store))).to.deep.equal(['a']);
    expect(names(await finishNext(store))).to.deep.equal(['b']);
  });
});
