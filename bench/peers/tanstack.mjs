// bench/peers: TanStack AI (@tanstack/ai, @tanstack/ai-openai): chat() with
// one server tool on the Chat Completions adapter. Its agent loop always
// streams (stream: false only collects the text), so its requests ask for
// streams, which the mock serves from the same script.
import { chat, toolDefinition, maxIterations } from '@tanstack/ai';
import { createOpenaiChatCompletions } from '@tanstack/ai-openai';
import { z } from 'zod';
import { run, version, add, PROMPT, TURNS } from './harness.mjs';

const tools = [
  toolDefinition({
    name: 'add',
    description: 'Adds two integers',
    inputSchema: z.object({ a: z.number().int(), b: z.number().int() }),
    outputSchema: z.object({ sum: z.number().int() }),
  }).server(add),
];

let adapter;
async function ask(url) {
  adapter ??= createOpenaiChatCompletions('gpt-4.1', 'sk-bench', { baseURL: `${url}/v1` });
  return chat({
    adapter,
    messages: [{ role: 'user', content: PROMPT }],
    tools,
    agentLoopStrategy: maxIterations(TURNS + 2),
    stream: false,
  });
}

await run('TanStack AI chat', `@tanstack/ai ${version('@tanstack/ai')}, @tanstack/ai-openai ${version('@tanstack/ai-openai')}`, ask);
