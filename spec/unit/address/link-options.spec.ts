import { expect } from 'chai';
import {
  AddressSyntaxError,
  addressToLinkOptions,
  parseAddress,
  LEGACY_DIRECT_FILTER_CODE,
  LEGACY_TOPIC_FILTER_CODE,
  SELECTOR_FILTER_CODE,
} from '../../../lib/address/index.js';

const rcv = (text: string) => addressToLinkOptions(parseAddress(text), 'receiver');
const snd = (text: string) => addressToLinkOptions(parseAddress(text), 'sender');

function refused(text: string, role: 'sender' | 'receiver', message: RegExp): void {
  try {
    addressToLinkOptions(parseAddress(text), role);
  } catch (e) {
    expect(e).to.be.instanceOf(AddressSyntaxError);
    expect((e as AddressSyntaxError).position).to.equal(-1);
    expect((e as Error).message).to.match(message);
    return;
  }
  expect.fail(`expected ${text} to be refused`);
}

describe('address: addressToLinkOptions', () => {
  describe('plain addresses', () => {
    it('receiver: just the source address', () => {
      expect(rcv('q')).to.deep.equal({ source: { address: 'q' } });
    });
    it('sender: just the target address', () => {
      expect(snd('q')).to.deep.equal({ target: { address: 'q' } });
    });
    it('sender: the subject does not reach the terminus (it is a message property)', () => {
      expect(snd('q/s')).to.deep.equal({ target: { address: 'q' } });
    });
    it('<null> gives a terminus with no address (anonymous relay)', () => {
      expect(snd('<null>')).to.deep.equal({ target: {} });
    });
    it('the example of wire.md 2.1, sender', () => {
      expect(snd("q; {create: always, node: {type: queue, durable: true, x-declare: {arguments: {'qpid.max_count': 10, sow.key: '/id', sow.history.window: 7d}}}}"))
        .to.deep.equal({
          target: {
            address: 'q',
            capabilities: ['create-on-demand', 'queue', 'durable'],
            dynamic_node_properties: {
              'supported-dist-modes': 'move',
              durable: true,
              'qpid.max_count': 10,
              'sow.key': '/id',
              'sow.history.window': '7d',
            },
          },
        });
    });
    it('the example of wire.md 2.1, receiver', () => {
      expect(rcv('q; {create: always, node: {type: queue, durable: true}}')).to.deep.equal({
        source: {
          address: 'q',
          capabilities: ['create-on-demand', 'queue', 'durable'],
          dynamic_node_properties: { 'supported-dist-modes': 'move', durable: true },
        },
      });
    });
  });

  describe('create policy', () => {
    const table: [string, 'sender' | 'receiver', boolean][] = [
      ['always', 'sender', true], ['always', 'receiver', true],
      ['sender', 'sender', true], ['sender', 'receiver', false],
      ['receiver', 'sender', false], ['receiver', 'receiver', true],
      ['never', 'sender', false], ['never', 'receiver', false],
    ];
    for (const [policy, role, creates] of table) {
      it(`create: ${policy} for a ${role} ${creates ? 'asks' : 'does not ask'} for create-on-demand`, () => {
        const out = addressToLinkOptions(parseAddress(`q; {create: ${policy}}`), role);
        const terminus = role === 'sender' ? out.target : out.source;
        if (creates) expect(terminus).to.deep.equal({ address: 'q', capabilities: ['create-on-demand'] });
        else expect(terminus).to.deep.equal({ address: 'q' });
      });
    }
    it('without create applying, node properties are not sent but capabilities are', () => {
      expect(snd('q; {create: receiver, node: {type: queue, durable: True, x-declare: {arguments: {a: 1}}}}'))
        .to.deep.equal({ target: { address: 'q', capabilities: ['queue', 'durable'] } });
    });
    it('assert sends node properties without create-on-demand', () => {
      expect(rcv('q; {assert: always, node: {type: topic, x-declare: {arguments: {a: 1}}}}')).to.deep.equal({
        source: {
          address: 'q',
          capabilities: ['topic'],
          dynamic_node_properties: { 'supported-dist-modes': 'copy', a: 1 },
        },
      });
    });
    it('assert: never sends nothing extra', () => {
      expect(rcv('q; {assert: never, node: {x-declare: {arguments: {a: 1}}}}')).to.deep.equal({ source: { address: 'q' } });
    });
  });

  describe('node', () => {
    it('type: queue adds capability queue and supported-dist-modes move', () => {
      expect(snd('q; {create: always, node: {type: queue}}').target).to.deep.equal({
        address: 'q',
        capabilities: ['create-on-demand', 'queue'],
        dynamic_node_properties: { 'supported-dist-modes': 'move' },
      });
    });
    it('type: topic adds capability topic and supported-dist-modes copy', () => {
      expect(snd('t; {create: always, node: {type: topic}}').target).to.deep.equal({
        address: 't',
        capabilities: ['create-on-demand', 'topic'],
        dynamic_node_properties: { 'supported-dist-modes': 'copy' },
      });
    });
    it('durable: true adds capability durable and durable: true, but leaves terminus durability alone', () => {
      const t = snd('q; {create: always, node: {durable: true}}').target!;
      expect(t).to.deep.equal({
        address: 'q',
        capabilities: ['create-on-demand', 'durable'],
        dynamic_node_properties: { durable: true },
      });
      expect(t).to.not.have.property('durable');
    });
    it('durable: False on a queue the link may create is sent as durable: false (a queue declared through an address is otherwise durable)', () => {
      expect(snd('q; {create: always, node: {durable: False}}').target).to.deep.equal({
        address: 'q',
        capabilities: ['create-on-demand'],
        dynamic_node_properties: { durable: false },
      });
      expect(rcv('q; {create: always, node: {type: queue, durable: false}}').source).to.deep.equal({
        address: 'q',
        capabilities: ['create-on-demand', 'queue'],
        dynamic_node_properties: { 'supported-dist-modes': 'move', durable: false },
      });
    });
    it('durable accepts lenient booleans ("yes", 1) and False', () => {
      expect(snd('q; {node: {durable: "yes"}}').target).to.deep.equal({ address: 'q', capabilities: ['durable'] });
      expect(snd('q; {node: {durable: 1}}').target).to.deep.equal({ address: 'q', capabilities: ['durable'] });
      expect(snd('q; {node: {durable: False}}').target).to.deep.equal({ address: 'q' });
    });
    it('x-declare is flattened: arguments spliced, type renamed exchange-type, other keys kept', () => {
      expect(snd("q; {create: always, node: {x-declare: {type: direct, auto-delete: True, exclusive: False, alternate-exchange: ae, arguments: {qpid.max_count: 5, 'qpid.policy_type': ring, sow.key: '/sym,/exchange'}}}}").target)
        .to.deep.equal({
          address: 'q',
          capabilities: ['create-on-demand'],
          dynamic_node_properties: {
            'exchange-type': 'direct',
            'auto-delete': true,
            exclusive: false,
            'alternate-exchange': 'ae',
            'qpid.max_count': 5,
            'qpid.policy_type': 'ring',
            'sow.key': '/sym,/exchange',
          },
        });
    });
    it('arguments win over same-named x-declare keys, x-declare over node.properties', () => {
      expect(snd('q; {create: always, node: {properties: {a: p, b: p}, x-declare: {a: x, c: x, arguments: {c: arg}}}}').target)
        .to.deep.equal({
          address: 'q',
          capabilities: ['create-on-demand'],
          dynamic_node_properties: { a: 'x', b: 'p', c: 'arg' },
        });
    });
    it('keeps the JS types of argument values', () => {
      const dnp = snd("q; {create: always, node: {x-declare: {arguments: {i: 10, n: -3, f: 1.5, b: True, s: '10', l: [1, a], m: {k: v}}}}}")
        .target!['dynamic_node_properties'];
      expect(dnp).to.deep.equal({ i: 10, n: -3, f: 1.5, b: true, s: '10', l: [1, 'a'], m: { k: 'v' } });
    });
    it('node.capabilities come first, a single one as a one-element list', () => {
      expect(snd('q; {create: always, node: {type: queue, capabilities: [shared, global]}}').target!['capabilities'])
        .to.deep.equal(['shared', 'global', 'create-on-demand', 'queue']);
      expect(snd('q; {node: {capabilities: shared}}').target).to.deep.equal({ address: 'q', capabilities: ['shared'] });
    });
    it('lifetime-policy is mapped to its AMQP descriptor, as a described empty list', () => {
      expect(snd('q; {create: always, node: {x-declare: {arguments: {lifetime-policy: delete-if-unused}}}}').target!['dynamic_node_properties'])
        .to.deep.equal({ 'lifetime-policy': { descriptor: 'amqp:delete-on-no-links:list', value: [] } });
    });
    it('a name starting with # is a temporary queue: dynamic, deleted on close', () => {
      expect(rcv('#')).to.deep.equal({
        source: {
          dynamic: true,
          dynamic_node_properties: { 'lifetime-policy': { descriptor: 'amqp:delete-on-close:list', value: [] } },
        },
      });
    });
    it('a temporary queue with auto-delete gets no default lifetime-policy', () => {
      expect(rcv('#tmp; {node: {type: queue, x-declare: {auto-delete: True}}}')).to.deep.equal({
        source: {
          dynamic: true,
          capabilities: ['queue'],
          dynamic_node_properties: { 'supported-dist-modes': 'move', 'auto-delete': true },
        },
      });
    });
  });

  describe('receiver mode', () => {
    it('mode: browse sets distribution_mode copy (and defaults to settled delivery)', () => {
      expect(rcv('q; {mode: browse}')).to.deep.equal({
        source: { address: 'q', distribution_mode: 'copy' },
        snd_settle_mode: 1,
      });
    });
    it('mode: browse with at-least-once stays unsettled', () => {
      expect(rcv('q; {mode: browse, link: {reliability: at-least-once}}')).to.deep.equal({
        source: { address: 'q', distribution_mode: 'copy' },
        snd_settle_mode: 0,
      });
    });
    it('mode: consume leaves distribution_mode absent (move is the default)', () => {
      expect(rcv('q; {mode: consume}')).to.deep.equal({ source: { address: 'q' } });
    });
    it('mode has no effect on a sender', () => {
      expect(snd('q; {mode: browse}')).to.deep.equal({ target: { address: 'q' } });
    });
  });

  describe('link', () => {
    it('name sets the link name', () => {
      expect(rcv('q; {link: {name: sub1}}')).to.deep.equal({ name: 'sub1', source: { address: 'q' } });
      expect(snd('q; {link: {name: "my link"}}')).to.deep.equal({ name: 'my link', target: { address: 'q' } });
    });
    it('durable: true makes the source durable 2 with expiry never', () => {
      expect(rcv('q; {link: {name: sub1, durable: True}}')).to.deep.equal({
        name: 'sub1',
        source: { address: 'q', durable: 2, expiry_policy: 'never' },
      });
    });
    it('durable: true on a sender makes the target durable', () => {
      expect(snd('q; {link: {durable: true}}')).to.deep.equal({
        target: { address: 'q', durable: 2, expiry_policy: 'never' },
      });
    });
    it('durable: false changes nothing', () => {
      expect(rcv('q; {link: {durable: False}}')).to.deep.equal({ source: { address: 'q' } });
    });
    it('timeout sets the terminus timeout in seconds', () => {
      expect(rcv('q; {link: {durable: True, timeout: 60}}')).to.deep.equal({
        source: { address: 'q', durable: 2, expiry_policy: 'never', timeout: 60 },
      });
    });
    it('selector adds the JMS selector filter (Qpid key and ulong descriptor)', () => {
      expect(rcv('q; {link: {selector: "colour = \'red\' AND size > 3"}}')).to.deep.equal({
        source: {
          address: 'q',
          filter: { selector: { descriptor: 0x468c00000004, value: "colour = 'red' AND size > 3" } },
        },
      });
      expect(SELECTOR_FILTER_CODE).to.equal(77567109365764);
    });
    it('a selector is not sent for a sender', () => {
      expect(snd('q; {link: {selector: "a = 1"}}')).to.deep.equal({ target: { address: 'q' } });
    });
    it('filter: one raw entry with a symbolic descriptor', () => {
      expect(rcv("q; {link: {filter: {name: cmd, descriptor: 'tidemark:command:symbol', value: sow}}}").source)
        .to.deep.equal({ address: 'q', filter: { cmd: { descriptor: 'tidemark:command:symbol', value: 'sow' } } });
    });
    it('filter: a list of raw entries; numeric, decimal-string and hex-string descriptors become codes', () => {
      expect(rcv("q; {link: {filter: [{name: a, descriptor: 77567109365764, value: 'x = 1'}, {name: b, descriptor: '77567109365760', value: k}, {name: c, descriptor: '0x468C00000001', value: 'k.*'}, {name: d, descriptor: 'tidemark:options:map', value: {top_n: 10, oof: True}}]}}").source!['filter'])
        .to.deep.equal({
          a: { descriptor: 0x468c00000004, value: 'x = 1' },
          b: { descriptor: 0x468c00000000, value: 'k' },
          c: { descriptor: 0x468c00000001, value: 'k.*' },
          d: { descriptor: 'tidemark:options:map', value: { top_n: 10, oof: true } },
        });
    });
    it('selector, subject and raw filters together, in that order', () => {
      const f = rcv("ex/news; {link: {selector: 'a = 1', filter: {name: bm, descriptor: 'tidemark:bookmark:string', value: now}}}").source!['filter'];
      expect(f).to.deep.equal({
        selector: { descriptor: SELECTOR_FILTER_CODE, value: 'a = 1' },
        'subject-filter': { descriptor: LEGACY_DIRECT_FILTER_CODE, value: 'news' },
        bm: { descriptor: 'tidemark:bookmark:string', value: 'now' },
      });
      expect(Object.keys(f as object)).to.deep.equal(['selector', 'subject-filter', 'bm']);
    });
    const reliability: [string, 0 | 1][] = [
      ['unreliable', 1], ['at-most-once', 1], ['at-least-once', 0], ['exactly-once', 0],
    ];
    for (const [r, mode] of reliability) {
      it(`reliability: ${r} gives snd_settle_mode ${mode} (receiver and sender)`, () => {
        expect(rcv(`q; {link: {reliability: ${r}}}`)).to.deep.equal({ source: { address: 'q' }, snd_settle_mode: mode });
        expect(snd(`q; {link: {reliability: ${r}}}`)).to.deep.equal({ target: { address: 'q' }, snd_settle_mode: mode });
      });
    }
    it('sender-source and receiver-target set the other terminus address', () => {
      expect(snd('q; {link: {sender-source: here}}')).to.deep.equal({ target: { address: 'q' }, source: { address: 'here' } });
      expect(rcv('q; {link: {receiver-target: there}}')).to.deep.equal({ source: { address: 'q' }, target: { address: 'there' } });
    });
  });

  describe('subject', () => {
    it('a receiver sends the subject as a legacy direct-binding filter', () => {
      expect(rcv('q/red')).to.deep.equal({
        source: { address: 'q', filter: { 'subject-filter': { descriptor: 0x468c00000000, value: 'red' } } },
      });
    });
    it('a subject with * or # becomes a topic-binding filter', () => {
      expect(rcv('amq.topic/stocks.*').source!['filter']).to.deep.equal({
        'subject-filter': { descriptor: LEGACY_TOPIC_FILTER_CODE, value: 'stocks.*' },
      });
      expect(rcv('amq.topic/stocks.#').source!['filter']).to.deep.equal({
        'subject-filter': { descriptor: 0x468c00000001, value: 'stocks.#' },
      });
    });
  });

  describe('everything at once', () => {
    it('a durable browsing subscription that creates its SOW queue', () => {
      expect(rcv("prices/us; {create: receiver, mode: browse, node: {type: queue, durable: True, x-declare: {arguments: {sow.key: /sym, log.retention: 7d}}}, link: {name: dash-1, durable: True, selector: 'px > 10', reliability: at-least-once}}"))
        .to.deep.equal({
          name: 'dash-1',
          source: {
            address: 'prices',
            capabilities: ['create-on-demand', 'queue', 'durable'],
            dynamic_node_properties: {
              'supported-dist-modes': 'move',
              durable: true,
              'sow.key': '/sym',
              'log.retention': '7d',
            },
            durable: 2,
            expiry_policy: 'never',
            distribution_mode: 'copy',
            filter: {
              selector: { descriptor: SELECTOR_FILTER_CODE, value: 'px > 10' },
              'subject-filter': { descriptor: LEGACY_DIRECT_FILTER_CODE, value: 'us' },
            },
          },
          snd_settle_mode: 0,
        });
    });
  });

  describe('refusals', () => {
    const cases: [string, string, RegExp][] = [
      ['delete', 'q; {delete: always}', /Delete policies are not supported over AMQP 1\.0/],
      ['top-level x-bindings', 'q; {x-bindings: []}', /x-bindings are not supported over AMQP 1\.0/],
      ['node x-bindings', 'q; {node: {x-bindings: [{exchange: amq.topic, key: k}]}}', /x-bindings are not supported over AMQP 1\.0 \(node scoped/],
      ['link x-bindings', 'q; {link: {x-bindings: []}}', /x-bindings are not supported over AMQP 1\.0 \(link scoped/],
      ['link x-subscribe', 'q; {link: {x-subscribe: {exclusive: True}}}', /x-subscribe is not supported over AMQP 1\.0/],
      ['link x-declare', 'q; {link: {x-declare: {}}}', /Link scoped x-declare is not supported/],
      ['unknown top-level key', 'q; {creat: always}', /^Unrecognised option: creat \(allowed: create, assert, mode, node, link\)$/],
      ['unknown node key', 'q; {node: {typ: queue}}', /^Unrecognised option: node\.typ \(allowed: type, durable, properties, capabilities, x-declare\)$/],
      ['unknown link key', 'q; {link: {nme: x}}', /Unrecognised option: link\.nme/],
      ['bad create value', 'q; {create: sometimes}', /Invalid value for create: "sometimes"/],
      ['bad assert value', 'q; {assert: 1}', /Invalid value for assert: 1/],
      ['bad mode', 'q; {mode: peek}', /Invalid value for mode: "peek"; must be 'browse' or 'consume'/],
      ['bad node type', 'q; {node: {type: exchange}}', /Invalid value for node\.type: "exchange"/],
      ['node not a map', 'q; {node: queue}', /Option node must be a map/],
      ['link not a map', 'q; {link: [a]}', /Option link must be a map/],
      ['x-declare not a map', 'q; {node: {x-declare: 1}}', /Option node\.x-declare must be a map/],
      ['arguments not a map', 'q; {node: {x-declare: {arguments: [1]}}}', /Option node\.x-declare\.arguments must be a map/],
      ['bad durable', 'q; {node: {durable: maybe}}', /node\.durable: expected a boolean/],
      ['bad link durable', 'q; {link: {durable: [1]}}', /link\.durable: expected a boolean/],
      ['bad reliability', 'q; {link: {reliability: sometimes}}', /Invalid value for link\.reliability: "sometimes"/],
      ['bad timeout', 'q; {link: {timeout: -1}}', /link\.timeout: expected an integer >= 0/],
      ['filter not a map', 'q; {link: {filter: abc}}', /Filter must be a map or a list of maps/],
      ['filter without name', "q; {link: {filter: {descriptor: 'x:y', value: 1}}}", /Filter entry must specify name/],
      ['filter without descriptor', 'q; {link: {filter: {name: a, value: 1}}}', /Filter entry must specify descriptor/],
      ['filter without value', "q; {link: {filter: {name: a, descriptor: 'x:y'}}}", /Filter entry must specify value/],
      ['filter with a bad descriptor', 'q; {link: {filter: {name: a, descriptor: -5, value: 1}}}', /Filter descriptor must be a symbol or a non-negative integer/],
      ['list of filters with a non-map', "q; {link: {filter: [{name: a, descriptor: 'x:y', value: 1}, 2]}}", /Filter must be a map/],
    ];
    for (const [what, text, message] of cases) {
      it(`refuses ${what}`, () => refused(text, 'receiver', message));
    }
    it('refuses x-bindings and delete for senders too', () => {
      refused('q; {node: {x-bindings: []}}', 'sender', /x-bindings are not supported/);
      refused('q; {delete: receiver}', 'sender', /Delete policies/);
    });
    it('refuses a bad role', () => {
      expect(() => addressToLinkOptions(parseAddress('q'), 'both' as 'sender')).to.throw(TypeError, /role/);
    });
  });
});

describe('address: filter entries wrapped with rhea', () => {
  it('a selector entry wraps to exactly what rhea.filter.selector builds', async () => {
    const rhea = (await import('rhea')).default as unknown as {
      types: { wrap_described(value: unknown, descriptor: unknown): unknown };
      filter: { selector(s: string): Record<string, unknown> };
    };
    const f = (rcv('q; {link: {selector: "a = 1"}}').source!['filter'] as Record<string, { descriptor: number; value: string }>)['selector']!;
    expect(rhea.types.wrap_described(f.value, f.descriptor)).to.deep.equal(rhea.filter.selector('a = 1')['jms-selector']);
  });
});
