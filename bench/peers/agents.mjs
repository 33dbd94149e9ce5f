// bench/peers: OpenAI Agents JS (@openai/agents): an Agent with one function
// tool, run() on the Chat Completions model. Tracing is off: its exporter
// would send every run to api.openai.com.
import { Agent, run as runAgent, tool, setTracingDisabled, OpenAIChatCompletionsModel } from '@openai/agents';
import OpenAI from 'openai';
import { z } from 'zod';
import { run, version, add, PROMPT, TURNS } from './harness.mjs';

setTracingDisabled(true);

let agent;
async function ask(url) {
  agent ??= new Agent({
    name: 'A',
    instructions: 'Use the tools.',
    model: new OpenAIChatCompletionsModel(new OpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-bench' }), 'gpt-4.1'),
    tools: [tool({
      name: 'add',
      description: 'Adds two integers',
      parameters: z.object({ a: z.number().int(), b: z.number().int() }),
      execute: add,
    })],
  });
  const result = await runAgent(agent, PROMPT, { maxTurns: TURNS + 2 });
  return result.finalOutput;
}

await run('OpenAI Agents JS run', `@openai/agents ${version('@openai/agents')}`, ask);
