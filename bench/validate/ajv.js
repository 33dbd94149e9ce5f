// Ajv's side of bench/validate: node bench/validate/ajv.js DIR
// DIR holds <workload>.schema.json (luma's own JSON Schema), <workload>.valid.json
// and <workload>.invalid.json, written by run.lua. Prints one line per measurement:
//   <workload>\t<case>\t<default|allErrors>\t<validations/s>
// and, for each workload, <workload>\tinvalid\tpath\t<where Ajv found the violation>;
// last, ajv\tall\tcpushare\t<process CPU seconds per wall second over all loops>.
// Debian's node-ajv needs NODE_PATH=/usr/share/nodejs for its own dependencies.
'use strict';

const fs = require('fs');
const path = require('path');

module.paths.push('/usr/share/nodejs');
const Ajv = require('/usr/share/nodejs/ajv');

const RUNS = 7;
const RUN_SECONDS = 0.3;
const CALIBRATE_SECONDS = 0.05;

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node ajv.js DIR');
  process.exit(2);
}

function fail(msg) {
  console.error('bench/validate/ajv.js: ' + msg);
  process.exit(1);
}

function read(file) {
  return JSON.parse(fs.readFileSync(path.join(dir, file), 'utf8'));
}

// Wall time and process CPU time of all loops: a share well under 1
// means the machine was busy and the (wall-clock) rates are low.
let wallTotal = 0;
let cpuTotal = 0;

// Calls validate n times; returns the seconds taken and how many passed.
function loop(validate, data, n) {
  let passed = 0;
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) if (validate(data)) passed++;
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu = process.cpuUsage(c0);
  wallTotal += wall;
  cpuTotal += (cpu.user + cpu.system) / 1e6;
  return [wall, passed];
}

// Validations per second: the median of RUNS runs of about RUN_SECONDS each.
function measure(validate, data, expect) {
  let n = 1;
  let elapsed;
  for (;;) {
    elapsed = loop(validate, data, n)[0];
    if (elapsed >= CALIBRATE_SECONDS) break;
    n *= 2;
  }
  n = Math.max(1, Math.floor((n * RUN_SECONDS) / elapsed));
  const rates = [];
  for (let i = 0; i < RUNS; i++) {
    const [t, passed] = loop(validate, data, n);
    if (passed !== (expect ? n : 0)) fail(`${passed} of ${n} passed`);
    rates.push(n / t);
  }
  rates.sort((a, b) => a - b);
  return rates[(RUNS - 1) / 2];
}

const names = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.schema.json'))
  .map((f) => f.slice(0, -'.schema.json'.length))
  .sort();
if (names.length === 0) fail('no *.schema.json in ' + dir);

const out = [];
for (const name of names) {
  const schema = read(name + '.schema.json');
  const valid = read(name + '.valid.json');
  const invalid = read(name + '.invalid.json');
  const plain = new Ajv().compile(schema);
  const all = new Ajv({ allErrors: true }).compile(schema);

  // "$ref": "#/$defs/X" must resolve (Ajv 6 knows no "$defs" keyword, but
  // follows the JSON pointer): the valid value passes, and the invalid one
  // fails with exactly its one violation, found inside the referenced schemas.
  for (const [label, v] of [['default', plain], ['allErrors', all]]) {
    if (!v(valid)) fail(`${name}: the valid value fails under ${label}: ${JSON.stringify(v.errors)}`);
    if (v(invalid)) fail(`${name}: the invalid value passes under ${label}`);
    if (v.errors.length !== 1) fail(`${name}: ${v.errors.length} errors under ${label}: ${JSON.stringify(v.errors)}`);
  }
  out.push([name, 'invalid', 'path', all.errors[0].dataPath]);

  out.push([name, 'valid', 'default', measure(plain, valid, true)]);
  out.push([name, 'invalid', 'default', measure(plain, invalid, false)]);
  out.push([name, 'invalid', 'allErrors', measure(all, invalid, false)]);
}
out.push(['ajv', 'all', 'cpushare', (cpuTotal / wallTotal).toFixed(2)]);
for (const row of out) console.log(row.join('\t'));
