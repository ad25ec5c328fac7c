// The `openai` npm client against a moestream server: a plain chat, a chat
// with tools (message.tool_calls), and the same streamed, assembled both by
// hand from delta.tool_calls pieces and by the client's own stream helper.
// Usage: node client_test.mjs BASE_URL MODULE_DIR (MODULE_DIR holds
// node_modules/openai). Prints "ok: ..." lines; exits 1 on the first failure.
import { createRequire } from 'node:module';
import path from 'node:path';

const [baseURL, moduleDir] = process.argv.slice(2);
const require = createRequire(path.join(moduleDir, 'package.json'));
const OpenAI = require('openai');
const client = new OpenAI({ baseURL, apiKey: 'unused' });

function check(cond, what, got) {
  if (!cond) {
    console.error(`FAIL: ${what}: ${JSON.stringify(got)}`);
    process.exit(1);
  }
  console.log(`ok: ${what}`);
}

const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const ask = { model: 'moestream', temperature: 0, max_tokens: 200 };

const plain = await client.chat.completions.create({ ...ask, messages: [{ role: 'user', content: 'Hi' }] });
check(plain.choices[0].message.content === 'Hello!', 'plain chat content', plain.choices[0]);
check(plain.choices[0].finish_reason === 'stop', 'plain chat finish_reason', plain.choices[0]);

const messages = [{ role: 'user', content: 'Weather in Paris?' }];
const called = await client.chat.completions.create({ ...ask, messages, tools });
const msg = called.choices[0].message;
check(called.choices[0].finish_reason === 'tool_calls', 'tools: finish_reason tool_calls', called.choices[0]);
check(msg.content === null, 'tools: content null', msg);
check(msg.tool_calls?.length === 1 && msg.tool_calls[0].type === 'function', 'tools: one function call', msg);
check(msg.tool_calls[0].function.name === 'get_weather', 'tools: name', msg.tool_calls[0]);
check(JSON.parse(msg.tool_calls[0].function.arguments).city === 'Paris', 'tools: arguments', msg.tool_calls[0]);

// Streamed, assembled by hand as agents do (by index, arguments appended).
const stream = await client.chat.completions.create({ ...ask, messages, tools, stream: true });
const calls = [];
let content = '', finish = null;
for await (const chunk of stream) {
  const choice = chunk.choices[0];
  if (!choice) continue;
  if (choice.delta?.content) content += choice.delta.content;
  for (const tc of choice.delta?.tool_calls ?? []) {
    const c = (calls[tc.index] ??= { id: '', name: '', arguments: '' });
    if (tc.id) c.id = tc.id;
    if (tc.function?.name) c.name += tc.function.name;
    if (tc.function?.arguments) c.arguments += tc.function.arguments;
  }
  if (choice.finish_reason) finish = choice.finish_reason;
}
check(finish === 'tool_calls' && content === '', 'stream: finish_reason tool_calls, no content', { finish, content });
check(calls.length === 1 && calls[0].name === 'get_weather' && calls[0].id !== '', 'stream: the call', calls);
check(JSON.parse(calls[0].arguments).city === 'Paris', 'stream: arguments', calls);

// The client's own assembly of a stream (beta helper, where this version has it).
if (client.beta?.chat?.completions?.stream) {
  const runner = client.beta.chat.completions.stream({ ...ask, messages, tools });
  const final = await runner.finalChatCompletion();
  const fc = final.choices[0].message.tool_calls;
  check(fc?.length === 1 && fc[0].function.name === 'get_weather', 'stream helper: tool_calls', final.choices[0]);
}

// The call's result sent back: the history with tool_calls (arguments as a
// string) and a tool message renders and is answered.
const back = await client.chat.completions.create({
  ...ask, tools,
  messages: [...messages, msg, { role: 'tool', tool_call_id: msg.tool_calls[0].id, content: '21 C, sunny' }],
});
check(typeof back.choices[0].message.content === 'string', 'tool result round trip', back.choices[0]);
console.log('all ok');
