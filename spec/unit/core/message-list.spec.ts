import { expect } from 'chai';
import { MessageList } from '../../../lib/core/queue/message-list.js';
import { Entry } from '../../../lib/core/queue/entry.js';

const entry = (scn: number) => new Entry(scn, Buffer.alloc(1), 0);
function filled(n: number): { list: MessageList; entries: Entry[] } {
  const list = new MessageList();
  const entries = Array.from({ length: n }, (_, i) => entry(i + 1));
  for (const e of entries) list.append(e);
  return { list, entries };
}

describe('MessageList', () => {
  it('compacts and renumbers once holes dominate (> 4096 entries): the epoch says so', () => {
    const { list, entries } = filled(5000);
    for (let i = 1; i < 5000; i += 2) list.remove(entries[i]); // every second one: no removed front
    for (let i = 2; i < 5000; i += 4) list.remove(entries[i]);
    expect(list.epoch).to.equal(1);
    expect(entries[4].pos).to.equal(1); // the fifth entry is now the second
    expect(list.at(entries[4].pos)).to.equal(entries[4]);
  });

  it('holdPositions: removals inside keep every position readable; the trim runs when the hold ends', () => {
    const { list, entries } = filled(5000);
    for (let i = 1; i < 5000; i += 2) list.remove(entries[i]);
    const seen: number[] = [];
    list.holdPositions(() => {
      for (let pos = list.start; pos < list.end; pos++) {
        const e = list.at(pos);
        expect(e, `position ${pos}`).to.not.equal(undefined);
        if (!e!.removed) { seen.push(e!.scn); if (e!.scn % 4 === 1) list.remove(e!); }
      }
      expect(list.epoch, 'no compaction while held').to.equal(0);
    });
    expect(seen.length).to.equal(2500);
    expect(list.epoch, 'compacted once the hold ended').to.equal(1);
    expect([...list.live()].map((e) => e.scn).slice(0, 3)).to.deep.equal([3, 7, 11]);
  });

  it('holdPositions: a removed front is not trimmed under a scan either', () => {
    const { list, entries } = filled(10);
    list.holdPositions(() => {
      for (const e of entries) list.remove(e);
      expect(list.start).to.equal(0);
      expect(list.at(9)).to.equal(entries[9]);
    });
    expect(list.start).to.equal(10);
  });

  it('dropLast takes a removed last entry off (its SCN may be reused); anything else stays', () => {
    const { list, entries } = filled(3);
    expect(list.dropLast(entries[2]), 'not removed').to.equal(false);
    list.remove(entries[1]);
    expect(list.dropLast(entries[1]), 'not last').to.equal(false);
    list.remove(entries[2]);
    expect(list.dropLast(entries[2])).to.equal(true);
    expect(list.end).to.equal(2);
    const again = entry(3);
    list.append(again);
    expect(again.pos).to.equal(2);
    expect(list.positionAfter(2)).to.equal(2);
    expect(list.at(list.positionAfter(2))).to.equal(again);
  });
});
