// Node's side of bench/pipeline: node bench/pipeline/node.js DIR
// DIR holds input.json (the call's input), invalid.json (an input that breaks
// a @range), input.schema.json and output.schema.json (the JSON Schemas luma
// emits for the tool's input and its CalcResult), written by run.lua.
// The same pipeline is built twice, the way a Node tool runtime usually is:
// parse the input, `await` the async handler, parse its output; once with zod
// and once with Ajv's compiled validators. Prints one line per pipeline:
//   <zod|ajv>\trate\t<calls/s>   or   <zod|ajv>\tunavailable\t<reason>
// (after <zod|ajv>\tversion\t<its version>),
// and last, node\tcpushare\t<process CPU seconds per wall second of the loops>.
// zod comes from bench/node_modules (npm ci --prefix bench), and from nowhere
// else; Ajv is Debian's node-ajv, which needs /usr/share/nodejs on the module path.
'use strict';

const fs = require('fs');
const path = require('path');

module.paths.push('/usr/share/nodejs');
const common = require('../common');

const dir = common.dataDir('node.js');
const read = (file) => common.readJSON(dir, file);

class ToolError extends Error {
  constructor(code, message, retryable = false) {
    super(message);
    this.code = code;
    this.retryable = retryable;
  }
}

// The handler of SPEC.md §4, as a Node tool module would export it.
const tools = {
  async calculate(input, signal, needs) {
    if (input.operation === 'add') return { result: input.a + input.b };
    if (input.operation === 'multiply') return { result: input.a * input.b };
    throw new ToolError('UNSUPPORTED', 'Unsupported operation');
  },
};

// A direct call: registry lookup, input parse, the awaited handler, output parse.
function pipeline(registry) {
  return async function call(name, input) {
    const tool = registry.get(name);
    if (!tool) throw new ToolError('TOOL_NOT_FOUND', `Unknown tool '${name}'.`);
    const args = tool.parseInput(input);
    const result = await tool.handler(args, undefined, {});
    return tool.parseOutput(result);
  };
}

// The pipeline of the one tool, calculate, with parser(schema, code, where)
// making the parsers of its input and output.
function calculatePipeline(parser, input, output) {
  return pipeline(
    new Map([
      [
        'calculate',
        {
          handler: tools.calculate,
          parseInput: parser(input, 'TOOL_INPUT_INVALID', 'input'),
          parseOutput: parser(output, 'TOOL_OUTPUT_INVALID', 'output'),
        },
      ],
    ]),
  );
}

const ZOD = path.join(__dirname, '..', 'node_modules', 'zod');
const AJV = '/usr/share/nodejs/ajv';

function version(dir) {
  return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
}

function zodPipeline() {
  const { z } = require(ZOD);
  const input = z
    .object({
      a: z.number().min(0).max(1000000),
      b: z.number().min(0).max(1000000),
      operation: z.enum(['add', 'multiply']).describe('Operation to perform'),
    })
    .strict();
  const output = z.object({ result: z.number() }).strict();
  const parser = (schema, code, where) => (value) => {
    const r = schema.safeParse(value);
    if (!r.success) throw new ToolError(code, `calculate.${where}: ${r.error.issues[0].message}`);
    return r.data;
  };
  return calculatePipeline(parser, input, output);
}

function ajvPipeline() {
  const Ajv = require(AJV);
  const ajv = new Ajv();
  const input = ajv.compile(read('input.schema.json'));
  const output = ajv.compile(read('output.schema.json'));
  const parser = (validate, code, where) => (value) => {
    if (!validate(value)) throw new ToolError(code, `calculate.${where}: ${ajv.errorsText(validate.errors)}`);
    return value;
  };
  return calculatePipeline(parser, input, output);
}

// Makes n calls, each awaited; returns how many gave 5.
async function loop(call, input, n) {
  let passed = 0;
  for (let i = 0; i < n; i++) if ((await call('calculate', input)).result === 5) passed++;
  return passed;
}

// Calls per second (common.measure), every one of them returning 5.
function measure(call, input) {
  return common.measure(
    (n) => loop(call, input, n),
    (passed, n) => {
      if (passed !== n) throw new Error(`${passed} of ${n} calls returned 5`);
    },
  );
}

// The result must be { result: 5 } and the invalid input must be refused
// before the handler runs, or the pipeline is not measured.
async function check(call, input, invalid) {
  const out = await call('calculate', input);
  if (JSON.stringify(out) !== '{"result":5}') throw new Error('the call returned ' + JSON.stringify(out));
  let refused = null;
  try {
    await call('calculate', invalid);
  } catch (e) {
    refused = e;
  }
  if (!refused || refused.code !== 'TOOL_INPUT_INVALID') {
    throw new Error('the invalid input was not refused: ' + (refused ? refused.message : 'it passed'));
  }
}

function oneLine(e) {
  return String((e && e.message) || e).split('\n')[0];
}

async function main() {
  const input = read('input.json');
  const invalid = read('invalid.json');
  const out = [];
  for (const [name, build, dir] of [
    ['zod', zodPipeline, ZOD],
    ['ajv', ajvPipeline, AJV],
  ]) {
    let call;
    try {
      call = build();
    } catch (e) {
      out.push([name, 'unavailable', oneLine(e)]);
      continue;
    }
    try {
      await check(call, input, invalid);
    } catch (e) {
      console.error(`bench/pipeline/node.js: ${name}: ${oneLine(e)}`);
      process.exit(1);
    }
    out.push([name, 'version', version(dir)]);
    out.push([name, 'rate', await measure(call, input)]);
  }
  out.push(['node', 'cpushare', common.cpuShare()]);
  for (const row of out) console.log(row.join('\t'));
}

main().catch((e) => {
  console.error('bench/pipeline/node.js: ' + oneLine(e));
  process.exit(1);
});
