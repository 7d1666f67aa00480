/** Tidemark's public API. */
export { Broker, type BrokerOptions } from './core/broker.js';
export { loadConfig, type BrokerConfig, ConfigError } from './core/config.js';
export { ManualClock, systemClock, type Clock } from './core/clock.js';
export { TidemarkError, Conditions } from './core/errors.js';
export type { Extension } from './core/extensions.js';
export { builtinExtensions } from './ext/catalogue.js';
export { hashPassword } from './core/auth.js';

import { Broker, type BrokerOptions } from './core/broker.js';
import { builtinExtensions } from './ext/catalogue.js';

/** Starts a broker with the built-in extensions. */
export function startBroker(opts: Omit<BrokerOptions, 'catalogue'> & { catalogue?: BrokerOptions['catalogue'] } = {}): Promise<Broker> {
  return Broker.start({ ...opts, catalogue: opts.catalogue ?? builtinExtensions });
}
