// Ajv's side of spec/40-ajv-differential_spec.lua: node spec/support/ajv_check.js IN OUT
// IN is a JSON array of { schema: "<JSON Schema text>", values: ["<JSON text>", ...] }.
// OUT gets a JSON array with one array per entry of IN, one verdict per value:
// [code points, code units], each true when Ajv accepts the value, or the list
// of Ajv's errors [keyword, JSON pointer].
// Ajv 6 is Debian's node-ajv, with allErrors so that every reason is listed.
// Ajv 6 runs a pattern without the u flag, on UTF-16 code units; JSON Schema
// 2020-12, Ajv 8 and luma match code points. The first verdict is Ajv's with
// its patterns compiled with the u flag (code points), the second Ajv 6's own.
'use strict';

const fs = require('fs');

module.paths.push('/usr/share/nodejs');
const Ajv = require('/usr/share/nodejs/ajv');

const [input, output] = process.argv.slice(2);
const units = new Ajv({ allErrors: true, jsonPointers: true });
const points = new Ajv({ allErrors: true, jsonPointers: true });

// Ajv's generated code makes its patterns with the global RegExp when it is
// compiled: during the compilation of `points`, RegExp adds the u flag.
function compileWithCodePoints(schema) {
  const Native = global.RegExp;
  global.RegExp = function (source, flags) { return new Native(source, (flags || '') + 'u'); };
  try {
    return points.compile(schema);
  } finally {
    global.RegExp = Native;
  }
}

function verdict(validate, data) {
  if (validate(data)) return true;
  return validate.errors.map((e) => [e.keyword, e.dataPath]);
}

const verdicts = JSON.parse(fs.readFileSync(input, 'utf8')).map((entry) => {
  const schema = JSON.parse(entry.schema);
  const byUnits = units.compile(schema);
  const byPoints = compileWithCodePoints(schema);
  return entry.values.map((text) => {
    const data = JSON.parse(text);
    return [verdict(byPoints, data), verdict(byUnits, data)];
  });
});
fs.writeFileSync(output, JSON.stringify(verdicts));
