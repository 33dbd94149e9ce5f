// What the three Node clients of bench/peers share: the ask's prompt and
// expected answer, the timing of each ask in the process's CPU time, and the
// one JSON line run.lua reads. A client calls run(name, version, ask), where
// ask(url) makes one ask against the mock at url and resolves to its answer
// text; the environment gives MOCK_URL, WARM (asks before timing) and ASKS.
import { readFileSync } from 'node:fs';

export const PROMPT = 'Add the numbers the tools give you.';
export const TURNS = Number(process.env.TURNS || 10);
export const CALLS = 3;

// The version of an installed package, from its package.json.
export function version(name) {
  const url = new URL(`./node_modules/${name}/package.json`, import.meta.url);
  return JSON.parse(readFileSync(url, 'utf8')).version;
}

// The handler of the tool `add`, as each peer gets it.
export const add = async ({ a, b }) => ({ sum: a + b });

function check(text) {
  const total = JSON.parse(text).total;
  if (total !== TURNS * CALLS) throw new Error(`the ask answered ${text}, not a total of ${TURNS * CALLS}`);
}

// CPU time of this process (getrusage: user + system, every thread) in µs.
function cpu() {
  const u = process.cpuUsage();
  return u.user + u.system;
}

export async function run(name, versionText, ask) {
  const url = process.env.MOCK_URL;
  const warm = Number(process.env.WARM || 3);
  const asks = Number(process.env.ASKS || 10);
  for (let i = 0; i < warm; i++) check(await ask(url));
  const cpu_us = [];
  for (let i = 0; i < asks; i++) {
    const c0 = cpu();
    const text = await ask(url);
    cpu_us.push(cpu() - c0);
    check(text);
  }
  const rss_kb = process.resourceUsage().maxRSS;
  process.stdout.write(JSON.stringify({ name, version: versionText, cpu_us, rss_kb }) + '\n');
}
