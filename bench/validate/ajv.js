// Ajv's side of bench/validate: node bench/validate/ajv.js DIR
// DIR holds <workload>.schema.json (luma's own JSON Schema), <workload>.valid.json
// and <workload>.invalid.json, written by run.lua. Prints one line per measurement:
//   <workload>\t<case>\t<default|allErrors>\t<validations/s>
// and, for each workload, <workload>\tinvalid\tpath\t<where Ajv found the violation>;
// last, ajv\tall\tcpushare\t<process CPU seconds per wall second over all loops>.
// Debian's node-ajv needs NODE_PATH=/usr/share/nodejs for its own dependencies.
'use strict';

const fs = require('fs');

module.paths.push('/usr/share/nodejs');
const Ajv = require('/usr/share/nodejs/ajv');
const common = require('../common');

const dir = common.dataDir('ajv.js');
const read = (file) => common.readJSON(dir, file);

function fail(msg) {
  console.error('bench/validate/ajv.js: ' + msg);
  process.exit(1);
}

// Calls validate n times; returns how many passed.
function loop(validate, data, n) {
  let passed = 0;
  for (let i = 0; i < n; i++) if (validate(data)) passed++;
  return passed;
}

// Validations per second (common.measure); all of them pass if expect, none if not.
function measure(validate, data, expect) {
  return common.measure(
    (n) => loop(validate, data, n),
    (passed, n) => {
      if (passed !== (expect ? n : 0)) fail(`${passed} of ${n} passed`);
    },
  );
}

const names = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.schema.json'))
  .map((f) => f.slice(0, -'.schema.json'.length))
  .sort();
if (names.length === 0) fail('no *.schema.json in ' + dir);

async function main() {
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

    out.push([name, 'valid', 'default', await measure(plain, valid, true)]);
    out.push([name, 'invalid', 'default', await measure(plain, invalid, false)]);
    out.push([name, 'invalid', 'allErrors', await measure(all, invalid, false)]);
  }
  out.push(['ajv', 'all', 'cpushare', common.cpuShare()]);
  for (const row of out) console.log(row.join('\t'));
}

main().catch((e) => {
  console.error('bench/validate/ajv.js: ' + ((e && e.stack) || e));
  process.exit(1);
});
