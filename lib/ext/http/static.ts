/**
 * The console's static files (lib/ext/http/console/: index.html, app.js, app.css), read once
 * at start. They are plain files, not compiled: found next to this module when run from
 * lib/ (tsx), or in the package's lib/ext/http/console when run from dist/.
 */
import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';

export interface StaticFile { type: string; body: Buffer }

const types: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
};

const here = path.dirname(fileURLToPath(import.meta.url));

export function consoleDir(): string {
  for (const p of [path.join(here, 'console'), path.resolve(here, '../../../../lib/ext/http/console')]) {
    if (existsSync(path.join(p, 'index.html'))) return p;
  }
  throw new Error(`console files not found (looked in ${path.join(here, 'console')} and the package's lib/ext/http/console)`);
}

/** URL path (`/app.js`) -> file. */
export function loadConsoleFiles(): Map<string, StaticFile> {
  const dir = consoleDir();
  const out = new Map<string, StaticFile>();
  for (const name of readdirSync(dir)) {
    const type = types[path.extname(name)];
    if (type) out.set('/' + name, { type, body: readFileSync(path.join(dir, name)) });
  }
  return out;
}
