// Ajv's side of spec/40-ajv-differential_spec.lua: node spec/support/ajv_check.js IN OUT
// IN is a JSON array of { schema: "<JSON Schema text>", values: ["<JSON text>", ...] }.
// OUT gets a JSON array with one array per entry of IN, one verdict per value:
// true when Ajv accepts it, or the list of Ajv's errors [keyword, JSON pointer].
// Ajv 6 is Debian's node-ajv, with allErrors so that every reason is listed.
'use strict';

const fs = require('fs');

module.paths.push('/usr/share/nodejs');
const Ajv = require('/usr/share/nodejs/ajv');

const [input, output] = process.argv.slice(2);
const ajv = new Ajv({ allErrors: true, jsonPointers: true });
const verdicts = JSON.parse(fs.readFileSync(input, 'utf8')).map((entry) => {
  const validate = ajv.compile(JSON.parse(entry.schema));
  return entry.values.map((text) => {
    if (validate(JSON.parse(text))) return true;
    return validate.errors.map((e) => [e.keyword, e.dataPath]);
  });
});
fs.writeFileSync(output, JSON.stringify(verdicts));
