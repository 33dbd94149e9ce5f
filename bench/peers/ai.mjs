// bench/peers: Vercel's AI SDK (`ai`, @ai-sdk/openai): generateText with one
// tool on Chat Completions, as its documentation writes an agent loop.
import { generateText, tool, stepCountIs } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';
import { run, version, add, PROMPT, TURNS } from './harness.mjs';

const tools = {
  add: tool({
    description: 'Adds two integers',
    inputSchema: z.object({ a: z.number().int(), b: z.number().int() }),
    execute: add,
  }),
};

let model;
async function ask(url) {
  model ??= createOpenAI({ baseURL: `${url}/v1`, apiKey: 'sk-bench' }).chat('gpt-4.1');
  const result = await generateText({ model, tools, stopWhen: stepCountIs(TURNS + 2), prompt: PROMPT });
  return result.text;
}

await run('Vercel AI SDK generateText', `ai ${version('ai')}, @ai-sdk/openai ${version('@ai-sdk/openai')}`, ask);
